"""Whether a restricted MQAR budget shows its end: a budget curve's level stretches, held against the longest one a
layer still broke out of (``arena.mqar-zoology``'s ``accuracy-levelled-off``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

TOLERANCE = 0.02  # accuracy: what a level stretch may move within
ROUNDING = 1e-9  # so that a band of exactly TOLERANCE (0.26 - 0.24 in floats) counts as within it


def _level_start(done: list[float], tolerance: float) -> int:
    """The index of the first evaluation of ``done``'s trailing level run: the longest tail whose accuracies lie
    within a band ``tolerance`` wide. A band, not steps between neighbours: a slow climb (Mamba's 0.952 to 0.973
    over 1,000 steps, GRU's ≈ 0.01 per evaluation past its plateau) moves less than ``tolerance`` per evaluation
    and is still no level."""
    first = len(done) - 1
    while first > 0 and max(done[first - 1:]) - min(done[first - 1:]) <= tolerance + ROUNDING:
        first -= 1
    return first


def level_stretch(curve: list[float], every: int, tolerance: float = TOLERANCE) -> tuple[int, int]:
    """The last level stretch of a budget curve (evaluations every ``every`` steps, NaN after it stopped): the steps
    (first, last) of the trailing run of evaluations within a band ``tolerance`` wide."""
    done = [a for a in curve if np.isfinite(a)]
    return every * (_level_start(done, tolerance) + 1), every * len(done)


def rose_out_of(curve: list[float], every: int, tolerance: float = TOLERANCE) -> tuple[int, int] | None:
    """The longest level stretch (steps, as :func:`level_stretch`) that the curve later rose above by more than
    ``tolerance`` (None if it never did): a layer that sat level and then learned, whether or not it went on to pass
    the stop (gated DeltaNet did; GRU on Zoology's whole budget left its ≈ 0.24 without). Later, not at the next
    evaluation: GRU's first step out of its level (0.242 to 0.264) was still inside the band's reach."""
    done, longest = [a for a in curve if np.isfinite(a)], None
    for j in range(1, len(done)):
        first = _level_start(done[:j], tolerance)
        stretch = (every * (first + 1), every * j)
        if max(done[j:]) > max(done[first:j]) + tolerance + ROUNDING and (
                longest is None or stretch[1] - stretch[0] > longest[1] - longest[0]):
            longest = stretch
    return longest


def span(stretch: tuple[int, int]) -> str:
    """A stretch of steps as the summary and the docs write it: '400–1,400'."""
    return f"{stretch[0]:,}–{stretch[1]:,}"


def band(curve: list[float], stretch: tuple[int, int], every: int) -> str:
    """The accuracies of ``curve`` (evaluated every ``every`` steps) over ``stretch`` (steps, as
    :func:`level_stretch` gives them), as the summary and the docs write them: '0.227–0.245'."""
    level = [a for a in curve if np.isfinite(a)][stretch[0] // every - 1: stretch[1] // every]
    return f"{min(level):.3f}–{max(level):.3f}"


class Levels(NamedTuple):
    """Each unsolved layer's last level stretch (steps, at its best rate), and the longest level stretch a layer
    rose out of (``broke``: that layer and its stretch, None if none did)."""

    unsolved: dict[str, tuple[int, int]]
    broke: tuple[str, tuple[int, int]] | None

    @property
    def outlasted(self) -> dict[str, bool]:
        """Whether each unsolved layer stayed level for longer than the stretch that broke."""
        wait = 0 if self.broke is None else self.broke[1][1] - self.broke[1][0]
        return {m: last - first > wait for m, (first, last) in self.unsolved.items()}


def levels(result: dict[str, Any], every: int, stop_at: float) -> Levels:
    """A level curve is not a finished one: a layer can sit level and then learn (gated DeltaNet at 1e-2 did, and
    GRU on Zoology's whole budget). So the run measures, for each layer, the longest level stretch it rose out of,
    and for each that did not pass ``stop_at``, the level stretch it ended on. ``result``: each layer's
    ``mqar_zoology.LayerAccuracy`` (its ``accuracy`` per rate and ``curve`` at its best), evaluated every ``every``
    steps."""
    unsolved = {m: level_stretch(r.curve, every) for m, r in result.items() if max(r.accuracy) <= stop_at}
    broken = {m: stretch for m, r in result.items() if (stretch := rose_out_of(r.curve, every)) is not None}
    longest = max(broken.items(), key=lambda kv: kv[1][1] - kv[1][0], default=None)
    return Levels(unsolved, longest)

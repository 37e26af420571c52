"""Whether a restricted MQAR budget shows its end: a budget curve's level stretches, held against the longest one a
layer still broke out of (``arena.mqar-zoology``'s ``accuracy-levelled-off``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


def level_stretch(curve: list[float], every: int, tolerance: float = 0.02) -> tuple[int, int]:
    """The last level stretch of a budget curve (evaluations every ``every`` steps, NaN after it stopped): the steps
    (first, last) of the trailing run of evaluations each within ``tolerance`` of the one before."""
    done = [a for a in curve if np.isfinite(a)]
    first = len(done) - 1
    while first > 0 and abs(done[first] - done[first - 1]) <= tolerance:
        first -= 1
    return every * (first + 1), every * len(done)


def span(stretch: tuple[int, int]) -> str:
    """A stretch of steps as the summary and the docs write it: '400–1,400'."""
    return f"{stretch[0]:,}–{stretch[1]:,}"


class Levels(NamedTuple):
    """Each unsolved layer's last level stretch (steps, at its best rate), and the longest level stretch after which
    a layer still passed ``stop_at`` (``broke``: that layer and its stretch, None if none did)."""

    unsolved: dict[str, tuple[int, int]]
    broke: tuple[str, tuple[int, int]] | None

    @property
    def outlasted(self) -> dict[str, bool]:
        """Whether each unsolved layer stayed level for longer than the stretch that broke."""
        wait = 0 if self.broke is None else self.broke[1][1] - self.broke[1][0]
        return {m: last - first > wait for m, (first, last) in self.unsolved.items()}


def levels(result: dict[str, Any], every: int, stop_at: float) -> Levels:
    """A level curve is not a finished one: a layer can sit level and then learn (gated DeltaNet at 1e-2 did). So
    the run measures, for each layer that solved the task, the level stretch before its last evaluation, and for each
    that did not, the level stretch it ended on. ``result``: each layer's ``mqar_zoology.LayerAccuracy`` (its
    ``accuracy`` per rate and ``curve`` at its best), evaluated every ``every`` steps."""
    unsolved, broken = {}, {}
    for m, r in result.items():
        solved = max(r.accuracy) > stop_at
        done = [a for a in r.curve if np.isfinite(a)]
        if not solved:
            unsolved[m] = level_stretch(r.curve, every)
        elif len(done) > 1:
            broken[m] = level_stretch(done[:-1], every)
    longest = max(broken.items(), key=lambda kv: kv[1][1] - kv[1][0], default=None)
    return Levels(unsolved, longest)

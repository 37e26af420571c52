"""``arena.scaling`` -- the normalised gap g against the recurrent state a layer carries per step, as the model's
width grows: every layer at every width of a list, on the arena's tasks (g against state size / width;
g against test length is ``arena.leaderboard``'s ``longer``, here also per width where the profile asks for it).

Each point is the leaderboard's own cell (``experiments.train_and_score``) of the leaderboard config at that width,
so a width, training run and held-out batch the leaderboard also asks for is one cell of the cell store, computed
once for both. Choices:

* The x axis is the state carried from step to step at the training length T, over all blocks (the layer's
  ``state_size`` x depth; attention's is its key-value cache, 2 x width x T per block): the iso-state axis on which
  the field compares layers. The parameter count also grows with the width; the table has both.
* The seeds' keys name no width (they are the leaderboard's), so every width of a layer trains on the same batches
  and is scored on the same held-out sequences; only the initialisation differs with the shapes.
"""

from __future__ import annotations

import dataclasses
import itertools
from functools import partial

import matplotlib.ticker
import numpy as np

from memlab import plots
from memlab.arena.experiments import leaderboard
from memlab.arena.experiments.leaderboard import (
    ALL_LAYERS,
    PAPER_CORE_LAYERS,
    LeaderboardConfig,
    claim_no_layer_beats_the_reference,
    task_notes,
)
from memlab.arena.experiments.leaderboard_analysis import GapStats
from memlab.arena.experiments.leaderboard_figures import FLOOR
from memlab.arena.experiments.train_and_score import ScoredSeeds
from memlab.arena.task import reference_is_exact
from memlab.arena.tasks import make_task
from memlab.arena.train import TrainConfig
from memlab.checks import check_increasing_ints
from memlab.files import summary_text
from memlab.runner import Experiment, Run

NEAR = 0.05  # "close to the optimum": the gap the leaderboard asks of attention on MQAR

SUMMARY = summary_text(__package__, "scaling")


@dataclasses.dataclass(frozen=True)
class ScalingConfig:
    """The leaderboard's fields (``LeaderboardConfig``) with a list of ``widths`` in place of its one width."""

    seed: int = 0
    tasks: tuple[str, ...] = ("hmm-mess3", "lgssm")
    layers: tuple[str, ...] = ALL_LAYERS
    widths: tuple[int, ...] = (8, 16, 32, 64, 128)
    depth: int = 1
    seeds: int = 3
    train: TrainConfig = TrainConfig()
    test_batch: int = 1024
    longer: tuple[int, ...] = ()  # also score on sequences this many times the training length

    def board(self, width: int) -> LeaderboardConfig:
        """The leaderboard config whose cells are this experiment's cells at ``width``."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "widths"}
        return LeaderboardConfig(width=width, **fields)

    def validate(self) -> None:
        widths = check_increasing_ints("widths", self.widths)
        if len(widths) < 2:
            raise ValueError(f"widths must hold at least two widths (a curve), got {self.widths!r}")
        for width in widths:  # a registered layer's state size is checked at every width
            self.board(width).validate()


def _profile(board: LeaderboardConfig, widths: tuple[int, ...], **changes) -> ScalingConfig:
    """The leaderboard profile ``board`` (its training run, seeds, held-out batch and depth) at ``widths``: the cells
    at its own width, if ``widths`` holds it, are the leaderboard's."""
    fields = {f.name: getattr(board, f.name) for f in dataclasses.fields(ScalingConfig) if f.name != "widths"}
    return ScalingConfig(**{**fields, "widths": widths, **changes})


@dataclasses.dataclass(frozen=True)
class Scaling:
    """``stats[task][layer]``: one :class:`GapStats` per width of ``widths``
    (its ``state``: the x axis); ``closest[task]``: the layer with the smallest mean gap at each width;
    ``smallest_near[task]``: (layer, width, state) of the smallest state at which a layer's mean gap is at most
    ``NEAR``, None if none gets there."""

    widths: list[int]
    stats: dict[str, dict[str, list[GapStats]]]
    closest: dict[str, list[str]]
    smallest_near: dict[str, tuple[str, int, int] | None]


def _name(task: str, layer: str, width: int) -> str:
    return f"{task}.{layer}.width={width}"


def sweep_cells(cfg: ScalingConfig, run: Run) -> dict[str, partial]:
    """Cell '<task>.<layer>.width=<w>': the leaderboard's cell '<task>.<layer>' of ``cfg.board(w)`` (the same
    function, arguments and keys: ``leaderboard.sweep_cells``)."""
    boards = {w: leaderboard.sweep_cells(cfg.board(w), run) for w in cfg.widths}
    return {_name(t, m, w): boards[w][f"{t}.{m}"] for w in cfg.widths for t in cfg.tasks for m in cfg.layers}


def analyse(cfg: ScalingConfig, cells: dict[str, ScoredSeeds]) -> Scaling:
    boards = [leaderboard.analyse(cfg.board(w), {f"{t}.{m}": cells[_name(t, m, w)]
                                                 for t in cfg.tasks for m in cfg.layers}) for w in cfg.widths]
    stats = {t: {m: [b.stats[t][m] for b in boards] for m in cfg.layers} for t in cfg.tasks}
    closest = {t: [b.closest[t] for b in boards] for t in cfg.tasks}
    smallest_near = {}
    for t in cfg.tasks:
        near = sorted((s.state, w, m) for m in cfg.layers for w, s in zip(cfg.widths, stats[t][m], strict=True)
                      if s.gap <= NEAR)
        smallest_near[t] = (near[0][2], near[0][1], near[0][0]) if near else None
    return Scaling(list(cfg.widths), stats, closest, smallest_near)


def _figure(cfg: ScalingConfig, result: Scaling, run: Run) -> None:
    """One panel per task (columns) and test length (rows: T, then each ``cfg.longer`` multiple)."""
    multiples = (1, *cfg.longer)
    fig, axes = plots.figure(len(multiples), len(cfg.tasks), width=3.6 * len(cfg.tasks) + 1.9,
                             height=1.0 + 2.9 * len(multiples), squeeze=False)
    for row, k in enumerate(multiples):
        for ax, t in zip(axes[row], cfg.tasks, strict=True):
            lowest = -FLOOR
            for m, marker in zip(cfg.layers, itertools.cycle("osD^v<>ph"), strict=False):  # 9 layers, 9 markers
                s = result.stats[t][m]
                gap = np.array([x.gap if k == 1 else x.longer[row - 1] for x in s])
                se = np.array([x.se if k == 1 else x.longer_se[row - 1] for x in s])
                ax.errorbar([x.state for x in s], gap, yerr=se, marker=marker, ms=3.5, capsize=2, label=m)
                lowest = np.nanmin([lowest, *(gap - np.nan_to_num(se))])
            ax.axhline(0.0, color="black", lw=0.8)
            ax.axhline(1.0, color="0.5", lw=0.8, ls=":")
            ax.set_xscale("log")
            for axis in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):  # 4, 8, 16: not 4 x 10^0
                axis(matplotlib.ticker.LogFormatter(labelOnlyBase=False))
            ax.set_yscale("symlog", linthresh=FLOOR)  # log above FLOOR, linear through 0 (a gap may dip below it)
            ax.set_ylim(bottom=2 * lowest if lowest < -FLOOR else -FLOOR)  # 0 in view, no empty negative decades
            ax.set_title(t if k == 1 else f"{t}, tested at {k}T")
        axes[row][0].set_ylabel("held-out gap g (symlog)" if k == 1 else f"gap at {k}T (symlog)")
    for ax in axes[-1]:
        ax.set_xlabel(f"state carried per step at T = {cfg.train.length}")
    handles = [*axes[0][0].get_legend_handles_labels()[0], plots.key("reference (g = 0)", color="black", lw=0.8),
               plots.key("no memory (g = 1)", ls=":", lw=0.8)]
    plots.legend_outside(axes[0][-1], handles=handles, fontsize=7)
    fig.suptitle(f"normalised gap against state size: widths {', '.join(map(str, cfg.widths))} "
                 f"(mean ± s.e. over {cfg.seeds} seeds)", fontsize=9)
    run.save_figure(fig, "scaling.png")


def _no_worse(wide: GapStats, narrow: GapStats) -> bool:
    """``wide``'s gap is at most ``narrow``'s, within 2 standard errors of their difference (0 without them)."""
    return bool(wide.gap <= narrow.gap + 2 * np.nan_to_num(np.hypot(wide.se, narrow.se)))


def _claims(cfg: ScalingConfig, result: Scaling, exact: list[str], run: Run) -> None:
    """``exact``: the tasks whose reference is the exact optimum (an approximate reference may be beaten)."""
    claim_no_layer_beats_the_reference(run, {f"{m} (width {w}) on {t}": s for t in exact for m in cfg.layers
                                             for w, s in zip(cfg.widths, result.stats[t][m], strict=True)})
    pairs = [(t, m) for t in cfg.tasks for m in cfg.layers]
    worse = [(t, m) for t, m in pairs if not _no_worse(result.stats[t][m][-1], result.stats[t][m][0])]
    narrowest, widest = cfg.widths[0], cfg.widths[-1]
    ours = f"{len(pairs) - len(worse)} of {len(pairs)}" + ("" if not worse else "; not: " + ", ".join(
        f"{m} on {t} ({result.stats[t][m][0].gap:.3g} -> {result.stats[t][m][-1].gap:.3g})" for t, m in worse))
    run.claim("wider-is-no-worse", f"for most layers (more than half of the task x layer pairs) the gap at the "
              f"largest width ({widest}) is at most the gap at the smallest ({narrowest}), within 2 standard errors",
              "arena (more state, no larger gap)", ours, len(pairs) - len(worse) > len(pairs) / 2, by="memlab")


def _table(cfg: ScalingConfig, result: Scaling, exact: list[str], run: Run) -> str:
    longer = [f"gap at {k}T" for k in cfg.longer]
    names = {t: t if t in exact else f"{t} (≈ reference)" for t in cfg.tasks}
    rows = [(names[t], m, w, s.state, s.parameters, s.gap, s.se, *s.longer) for t in cfg.tasks for m in cfg.layers
            for w, s in zip(cfg.widths, result.stats[t][m], strict=True)]
    return run.save_table("scaling.csv", ["task", "layer", "width", "state", "parameters", "gap", "se", *longer],
                          rows, {"gap": ".3g", "se": ".2g", **dict.fromkeys(longer, ".3g")})


def run_scaling(cfg: ScalingConfig, run: Run) -> Scaling:
    result = analyse(cfg, run.sweep(sweep_cells(cfg, run), "train layers at every width"))
    _figure(cfg, result, run)
    exact = [t for t in cfg.tasks if reference_is_exact(make_task(t))]
    _claims(cfg, result, exact, run)
    closest = "Closest to the optimum at each width: " + "; ".join(
        f"{t}: " + ", ".join(f"{w} {m} ({result.stats[t][m][i].gap:.3g})"
                             for i, (w, m) in enumerate(zip(cfg.widths, result.closest[t], strict=True)))
        for t in cfg.tasks) + "."
    near = f"Smallest state with a gap of at most {NEAR:g}: " + "; ".join(
        f"{t}: " + ("none" if result.smallest_near[t] is None else "{} at width {} ({} numbers)".format(
            *result.smallest_near[t])) for t in cfg.tasks) + "."
    tc = cfg.train
    run.write_summary(SUMMARY.format(widths=", ".join(map(str, cfg.widths)), length=tc.length, depth=cfg.depth,
                                     steps=tc.steps, batch=tc.batch, lr=tc.learning_rate, seeds=cfg.seeds,
                                     test_batch=cfg.test_batch, closest=closest, near=near,
                                     table=_table(cfg, result, exact, run), tasks=task_notes(cfg.tasks)))
    return result


PAPER = _profile(leaderboard.PAPER, (8, 16, 32, 64, 128), tasks=("hmm-mess3", "lgssm"))

EXPERIMENTS = [
    Experiment(
        "arena.scaling", "arena", "arena", "every layer's gap to the optimal predictor against its state size",
        # every profile holds its leaderboard profile's width, whose cells are the leaderboard's
        {"tiny": _profile(leaderboard.TINY, (4, 8), tasks=("lgssm",)),
         # quick: 3 layers x 2 widths on hmm-mess3; the width-32 cells are the leaderboard quick's
         "quick": _profile(leaderboard.QUICK, (8, 32), tasks=("hmm-mess3",), layers=("lru", "gru", "attention")),
         "paper": PAPER,
         # without width 128, about half of the paper profile's compute (an Adam step costs two to three times
         # more at width 128 than at 64: docs/cluster.md), the leaderboard paper-core's nine layers; the same
         # cells as the paper profile's
         "paper-core": dataclasses.replace(PAPER, widths=(8, 16, 32, 64), layers=PAPER_CORE_LAYERS)},
        run_scaling),
]

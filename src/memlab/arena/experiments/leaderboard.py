"""``arena.leaderboard`` -- every layer trained on every task, scored by its normalised gap to the optimal
predictor: g = (L_model - L_ref) / (L_trivial - L_ref) on held-out sequences (0 = optimal, 1 = no memory).

One cell per (task, layer) trains its seeds one after the other with one compiled program and scores them on the
same held-out batch. Outputs: a tasks x layers heat map, the budget curves (gap against training steps), the table.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import numpy as np

from memlab.arena.experiments import leaderboard_figures
from memlab.arena.experiments.leaderboard_analysis import (
    BOUNDED,
    MARGIN_FLOOR,
    POSTERIOR,
    GapStats,
    Leaderboard,
    gap_stats,
    noise_note,
    thin_margins,
)
from memlab.arena.experiments.posterior_bound import PredictorScore, bound_note, score_posterior_predictor
from memlab.arena.experiments.train_and_score import ScoredSeeds, train_and_score
from memlab.arena.layers import LAYERS, check_state_sizes
from memlab.arena.task import reference_is_exact
from memlab.arena.tasks import TASKS, make_task
from memlab.arena.train import TrainConfig
from memlab.checks import check_choices, check_int
from memlab.files import summary_text
from memlab.runner import Experiment, Run
from memlab.store import CHECKPOINT

# the nine layers of the paper-core run (pinned below: a layer added to ALL_LAYERS must not add cells to a run in
# progress), then the ones added since
PAPER_CORE_LAYERS = ("lru", "s5", "mamba", "gru", "lstm", "attention", "linear-attention", "gated-deltanet", "lof")
ALL_LAYERS = (*PAPER_CORE_LAYERS, "alf")

SUMMARY = summary_text(__package__, "leaderboard")


@dataclasses.dataclass(frozen=True)
class LeaderboardConfig:
    """Which tasks and layers, the model's size, the training run and the held-out batch."""

    seed: int = 0
    tasks: tuple[str, ...] = tuple(TASKS)
    layers: tuple[str, ...] = ALL_LAYERS
    width: int = 32
    depth: int = 1
    seeds: int = 3
    train: TrainConfig = TrainConfig()
    test_batch: int = 1024
    longer: tuple[int, ...] = ()  # also score on sequences this many times the training length (length generalisation)
    # save every cell's training after each eval_every steps (resumable across sessions); a short cell has nothing
    # to gain from it and would write a file after every chunk
    checkpoints: bool = True
    # the tasks every-layer-uses-memory is claimed on (None: all): a profile whose training budget is known to be too
    # short for a task family leaves it out and says so (quick's 200 steps and the recall tasks: see the
    # quick-recall-budget profile)
    memory_claim_tasks: tuple[str, ...] | None = None
    # with policy-eval among the tasks (ignored without it), also score memlab.arena.posterior_predictor with this
    # many particles per sequence on the same held-out batch (0: not): a bound where the task's reference, the TD
    # fixed point, is beaten
    posterior_particles: int = 0

    def validate(self) -> None:
        check_choices("tasks", self.tasks, TASKS)
        check_choices("layers", self.layers, LAYERS)
        for name in ("width", "depth", "seeds", "test_batch"):
            check_int(name, getattr(self, name))
        if self.posterior_particles != 0 and not (
                isinstance(self.posterior_particles, int) and self.posterior_particles >= 2):
            raise ValueError("posterior_particles must be 0 (no bound) or an int >= 2, got "
                             f"{self.posterior_particles!r}")
        check_state_sizes(self.layers, self.width)
        if self.memory_claim_tasks is not None:
            check_choices("memory_claim_tasks", self.memory_claim_tasks, TASKS)
        for multiple in self.longer:
            check_int("longer", multiple, low=2)
        self.train.validate()


def sweep_cells(cfg: LeaderboardConfig, run: Run) -> dict[str, partial]:
    """Cell '<task>.<layer>': all seeds of one layer on one task (keys from ('train', task, layer)); every cell of
    a task is scored on the same held-out batch (key ('test', task)). A user's layer or task adds its file's
    fingerprint to the cell's arguments, so editing it recomputes the cells. With ``posterior_particles``, cell
    'policy-eval.posterior-predictor' scores the posterior predictor on policy-eval's held-out batch."""
    def cell(t, m):
        code = "+".join(filter(None, (TASKS[t].source, LAYERS[m].source)))  # "" for memlab's own: keys unchanged
        return partial(train_and_score, t, m, cfg.width, cfg.depth, cfg.train,
                       jax.random.split(run.key_for("train", t, m), cfg.seeds), run.key_for("test", t), cfg.test_batch,
                       *((cfg.longer,) if cfg.longer else ()), **({"code": code} if code else {}),
                       **({"checkpoint": CHECKPOINT} if cfg.checkpoints else {}))

    cells = {f"{t}.{m}": cell(t, m) for t in cfg.tasks for m in cfg.layers}
    if cfg.posterior_particles and BOUNDED in cfg.tasks:
        cells[f"{BOUNDED}.{POSTERIOR}"] = partial(
            score_posterior_predictor, BOUNDED, run.key_for("test", BOUNDED), cfg.test_batch, cfg.train.length,
            run.key_for(POSTERIOR, BOUNDED), cfg.posterior_particles)
    return cells


def analyse(cfg: LeaderboardConfig, cells: dict[str, ScoredSeeds | PredictorScore]) -> Leaderboard:
    stats = {t: {m: gap_stats(cells[f"{t}.{m}"], len(cfg.longer)) for m in cfg.layers} for t in cfg.tasks}
    steps = [cfg.train.eval_every * (i + 1) for i in range(cfg.train.steps // cfg.train.eval_every)]
    closest = {t: min(stats[t], key=lambda m: stats[t][m].gap) for t in cfg.tasks}
    bounds = {t: cells[f"{t}.{POSTERIOR}"] for t in cfg.tasks if f"{t}.{POSTERIOR}" in cells}
    return Leaderboard(stats, steps, closest, bounds)


def claim_no_layer_beats_the_reference(run: Run, stats: dict[str, GapStats], note: str = "") -> None:
    """The check that no trained model (``stats``: label -> its :class:`GapStats`, on tasks whose reference is the
    exact optimum) has a gap below 0 by more than 3 standard errors (at least 0.02); no claim if there is none.
    ``note``: said beside the numbers (a task whose g is noise)."""
    if not stats:
        return
    label = min(stats, key=lambda k: stats[k].gap)
    s = stats[label]
    tolerance = max(3 * s.se, 0.02) if np.isfinite(s.se) else 0.02
    run.claim("no-layer-beats-the-reference", "no trained layer beats the optimal predictor (a check of the "
              "references and the harness)", "arena", f"lowest gap: {label} {s.gap:.3g} ± {s.se:.2g}{note}",
              bool(s.gap > -tolerance), by="memlab")


def claims(cfg: LeaderboardConfig, board: Leaderboard, exact: list[str], run: Run) -> None:
    """The leaderboard's claims on ``board`` into ``run``. ``exact``: the tasks whose reference is the exact optimum
    (an approximate reference may be beaten)."""
    thin = thin_margins(board)
    claim_no_layer_beats_the_reference(run, {f"{m} on {t}": board.stats[t][m] for t in exact for m in cfg.layers},
                                       noise_note([t for t in thin if t in exact]))
    # Zoology (Arora et al. 2023, Fig. 2): two-layer attention solves MQAR at every model width it tried, gated
    # convolutions need more. One block cannot: its attention must match the queried key against the token *before*
    # each stored value, a previous-token step a first layer makes
    if "mqar" in cfg.tasks and "attention" in cfg.layers and cfg.depth >= 2:
        s = board.stats["mqar"]["attention"]
        run.claim("attention-solves-mqar", f"softmax attention solves MQAR at width {cfg.width}: gap <= 0.05",
                  "Zoology (Arora et al. 2023), Fig. 2: attention solves MQAR at the smallest width",
                  f"gap {s.gap:.3g} ± {s.se:.2g}", bool(s.gap <= 0.05))
    claimed = [t for t in cfg.tasks if cfg.memory_claim_tasks is None or t in cfg.memory_claim_tasks]
    if not claimed:
        return
    unclaimed = [t for t in cfg.tasks if t not in claimed]
    memoryless = [(t, m) for t in claimed for m in cfg.layers if board.stats[t][m].gap >= 1.0]
    run.claim("every-layer-uses-memory", "every layer beats the best predictor without memory on every task"
              + (f" of {', '.join(claimed)} (not claimed on {', '.join(unclaimed)}: {cfg.train.steps} training "
                 "steps are too few there)" if unclaimed else ""),
              "arena", ("all below 1" if not memoryless else "not below 1: " + ", ".join(
                  f"{m} on {t}" for t, m in memoryless)) + noise_note([t for t in thin if t in claimed]),
              not memoryless, by="memlab")


def _table(cfg: LeaderboardConfig, board: Leaderboard, exact: list[str], run: Run) -> str:
    thin = thin_margins(board)
    names = {t: t + ("" if t in exact else " (≈ reference)")
             + (f" (g is noise: margin < {MARGIN_FLOOR:g})" if t in thin else "") for t in cfg.tasks}
    fmt = {"gap": ".3g", "se": ".2g", "gap above the bound": ".2g", **{f"gap at {k}T": ".3g" for k in cfg.longer},
           "L_trivial − L_ref": ".3g",
           "distance to reference": ".3g", "distance to compiled": ".3g", "input-gradient cosine": ".2f"}
    # with a bound (policy-eval's posterior predictor): each layer's gap above the bound's on the same batch, and
    # the bound's own row (its se: sampling error over the batch's sequences, not over seeds)
    rows = [{"task": names[t], "layer": m, "gap": s.gap, "se": s.se,
             **({"gap above the bound": s.gap - board.bounds[t].gap} if t in board.bounds else {}),
             **{f"gap at {k}T": g for k, g in zip(cfg.longer, s.longer, strict=True)}, "L_trivial − L_ref": s.margin,
             "distance to reference": s.reference_distance, "parameters": s.parameters, "state": s.state,
             "distance to compiled": s.compiled_distance, "input-gradient cosine": s.gradient_cosine}
            for t in cfg.tasks for m, s in board.stats[t].items()]
    rows += [{"task": names[t], "layer": f"{POSTERIOR} (bound; se over the batch)", "gap": b.gap, "se": b.gap_se,
              "L_trivial − L_ref": b.trivial_loss - b.reference_loss} for t, b in board.bounds.items()]
    header = ["task", "layer", "gap", "se", *(["gap above the bound"] if board.bounds else []),
              *(f"gap at {k}T" for k in cfg.longer), "L_trivial − L_ref", "distance to reference", "parameters",
              "state", "distance to compiled", "input-gradient cosine"]
    return run.save_table("leaderboard.csv", header, [[row.get(h, "") for h in header] for row in rows], fmt)


def task_notes(tasks: tuple[str, ...]) -> str:
    """The summary's line on ``tasks``: each one's description and the paper whose optimum it is."""
    return "; ".join(f"`{t}` {TASKS[t].description}" + (f" (its optimum is the subject of `{TASKS[t].paper}`)"
                                                        if TASKS[t].paper else "") for t in tasks)


def run_leaderboard(cfg: LeaderboardConfig, run: Run) -> Leaderboard:
    board = analyse(cfg, run.sweep(sweep_cells(cfg, run), "train layers"))
    exact = [t for t in cfg.tasks if reference_is_exact(make_task(t))]
    leaderboard_figures.draw(cfg, board, exact, run)
    claims(cfg, board, exact, run)
    closest = "Lowest gap (the closest to the optimum; below 0 beats a ≈ task's approximate reference): " + "; ".join(
        f"{t}: {m} ({board.stats[t][m].gap:.3g})" for t, m in board.closest.items()) + "." + noise_note(
        thin_margins(board)) + "".join(bound_note(t, b, board.closest[t], board.stats[t][board.closest[t]].gap)
                                       for t, b in board.bounds.items())
    tc = cfg.train
    run.write_summary(SUMMARY.format(depth=cfg.depth, width=cfg.width, steps=tc.steps, batch=tc.batch, seeds=cfg.seeds,
                                     length=tc.length, lr=tc.learning_rate, test_batch=cfg.test_batch, closest=closest,
                                     warmup="" if tc.warmup is None else f" after {tc.warmup} steps of warm-up",
                                     table=_table(cfg, board, exact, run), tasks=task_notes(cfg.tasks)))
    return board


TINY = LeaderboardConfig(tasks=("hmm-mess3", "lgssm"), layers=("gru", "lru"), width=8, seeds=2,
                         train=TrainConfig(steps=20, batch=8, length=16, eval_every=10), test_batch=64, longer=(2,))

# every task family, by its canonical task: hmm, linear-Gaussian (and its switching model), policy evaluation, recall
FAMILIES = ("hmm-mess3", "lgssm", "switching", "policy-eval", "recall-predict", "mqar")

# quick: every family, the nine layers of paper-core (alf is in the paper profile), 200 steps, 2 seeds. A cell is an
# XLA compile of its training program plus the training run (the compile the larger part); at 400 steps the cells
# were the largest share of `make reproduce` (benchmarks/reproduce_costs.py times each experiment), and 200 steps
# halve the run part while every layer still ends below the trivial predictor on hmm-mess3 and lgssm (not on the recall
# tasks: lof, and s5 and mamba on mqar, need more, docs/studies/arena.md). `memlab reproduce` spreads the cells over
# a free core (memlab.reproduce: a helper run sharing the cell store)
QUICK = LeaderboardConfig(tasks=FAMILIES, layers=PAPER_CORE_LAYERS, seeds=2, test_batch=512,
                          train=TrainConfig(steps=200, batch=32, length=64, learning_rate=3e-3, eval_every=50),
                          checkpoints=False, memory_claim_tasks=FAMILIES[:4])

# why quick claims memory use only outside the recall family: the quick run on the recall tasks trained five times as
# long (each layer's held-out gap every 100 steps)
RECALL_BUDGET = dataclasses.replace(QUICK, tasks=FAMILIES[4:], memory_claim_tasks=None,
                                    train=dataclasses.replace(QUICK.train, steps=1000, eval_every=100))

PAPER = LeaderboardConfig(seeds=3, train=TrainConfig(steps=5000, eval_every=250), width=64, depth=2, longer=(2, 4),
                          posterior_particles=4096)

# why linear attention stays at g = 0.43 where gated DeltaNet reaches 0.003 (paper-core): the members of the gated
# DeltaNet family between them, each without one part, and two steps from linear attention to the family (its
# normaliser dropped, then beta added), at paper-core's sizes (its linear attention and gated DeltaNet cells are
# paper-core's, computed once)
LINEAR_ATTENTION_ABLATION = dataclasses.replace(
    PAPER, tasks=("hmm-mess3", "lgssm"),
    layers=("linear-attention", "unnormalised-linear-attention", "beta-linear-attention", "l2-linear-attention",
            "gated-linear-attention", "deltanet", "gated-deltanet"))

# why LRU lags S5 on policy-eval (paper-core-families): the LRU started with S5's slow modes instead of its own ring,
# at paper-core's sizes (its lru and s5 cells are paper-core-families', computed once)
LRU_INIT_ABLATION = dataclasses.replace(PAPER, tasks=("policy-eval",), layers=("lru", "lru-slow-modes", "s5"))

# why softmax attention ends at the 1/K level on mqar at paper-core's budget (5,000 steps of 32 sequences) where,
# with Zoology's recipe (batch 512), it passed 0.99 accuracy in 800 steps (arena.mqar-zoology): paper-core's cell
# trained four times as long (the schedule's shape stretched over 20,000 steps); then paper-core's cell (its keys,
# so its initialisations and batches) with only the warm-up changed to the 20,000-step run's 2,000 steps
MQAR_BUDGET = dataclasses.replace(PAPER, tasks=("mqar",), layers=("attention",),
                                  train=dataclasses.replace(PAPER.train, steps=20000))
MQAR_WARMUP = dataclasses.replace(MQAR_BUDGET, train=dataclasses.replace(PAPER.train, warmup=2000))
# ... or its warm-up kept and its peak rate halved: by step 1,500 about as much rate summed as mqar-budget's (whether
# the ramp's length or the rate's size frees the seeds that mqar-warmup frees)
MQAR_LOW_PEAK = dataclasses.replace(MQAR_BUDGET, train=dataclasses.replace(PAPER.train, learning_rate=1.5e-3))
# gated DeltaNet with and without a short causal convolution (with silu; Mamba has one too) at the same budget
MQAR_SHORT_CONV = dataclasses.replace(PAPER, tasks=("mqar",), layers=("gated-deltanet", "gated-deltanet-conv"))

EXPERIMENTS = [
    Experiment(
        "arena.leaderboard", "arena", "arena", "every layer against the optimal predictor on every task",
        {"tiny": TINY, "quick": QUICK, "paper": PAPER,
         # the paper profile restricted to the canonical task of each family and the layers it started with (the
         # same cells: a later paper run adopts them)
         "paper-core": dataclasses.replace(PAPER, tasks=("hmm-mess3", "lgssm"), layers=PAPER_CORE_LAYERS),
         # paper-core's layers on the other families' canonical tasks (the paper profile's cells, as paper-core's)
         "paper-core-families": dataclasses.replace(PAPER, tasks=FAMILIES[2:], layers=PAPER_CORE_LAYERS),
         "linear-attention-ablation": LINEAR_ATTENTION_ABLATION, "quick-recall-budget": RECALL_BUDGET,
         "lru-init-ablation": LRU_INIT_ABLATION, "mqar-budget": MQAR_BUDGET, "mqar-warmup": MQAR_WARMUP,
         "mqar-low-peak": MQAR_LOW_PEAK,
         "mqar-short-conv": MQAR_SHORT_CONV},
        run_leaderboard,
        # a quick cell keeps one core busy (an XLA compile, then a small program): one process per core
        pool_profiles=("quick",)),
]

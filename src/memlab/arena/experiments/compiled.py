"""``arena.compiled`` -- compiled solutions (weights set by theory, ``memlab.arena.compiled``) scored by the same
harness as trained models: their gap to the optimal predictor at several test lengths (the prefixes of one batch of
the longest length: one compiled program a task) and their per-step distance from it. Trained models' distances to
these compiled ones are in ``arena.leaderboard``'s table.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab import plots
from memlab.arena.compiled import THETA_STAR_MAX_LENGTH, Compiled, compiled_model
from memlab.arena.hmm import HMMTask
from memlab.arena.task import Batch, Task, normalised_gap, per_step_mean
from memlab.arena.tasks import TASKS, make_task
from memlab.arena.train import apply, baselines
from memlab.checks import check_choices, check_int
from memlab.files import summary_text
from memlab.runner import Experiment, Run
from memlab.store import cell

SUMMARY = summary_text(__package__, "compiled")


DISTANCE_FLOOR = 1e-14


@dataclasses.dataclass(frozen=True)
class CompiledConfig:
    seed: int = 0
    tasks: tuple[str, ...] = ("lgssm", "hmm-cycle", "hmm-two-state", "hmm-mess3", "hmm-ringworld", "policy-eval",
                              "mqar")
    lengths: tuple[int, ...] = (64, 256, 1024)
    batch: int = 512

    def validate(self) -> None:
        check_choices("tasks", self.tasks, TASKS)
        for length in self.lengths:
            check_int("lengths", length)
        check_int("batch", self.batch)
        models = {t: compiled_model(make_task(t)) for t in self.tasks}
        missing = [t for t, model in models.items() if model is None]
        if missing:
            raise ValueError(f"no compiled solution for {', '.join(missing)}")
        for model in models.values():
            scored_lengths(model, self.lengths)


@dataclasses.dataclass(frozen=True)
class CompiledStats:
    """One task's compiled model: ``gaps`` (one per test length), ``distance`` (longest length,) the mean
    per-step distance from the reference's predictions, ``transient`` (steps), ``exact``, ``description``."""

    description: str
    exact: bool
    transient: int
    gaps: list[float]
    distance: list[float]


@eqx.filter_jit
def prefix_gaps(task: Task, model, batch: Batch, lengths: tuple[int, ...], transient: int) -> tuple[Array, Array]:
    """The normalised gap over each prefix of ``lengths`` steps after the first ``transient`` (a prefix of a causal
    model's outputs on a sampled sequence is its output on a sample of that length), and (L,) the per-step mean
    distance from the reference's predictions."""
    base = baselines(task, batch)
    outputs = apply(model, batch.inputs)
    losses = (task.loss(outputs, batch), base.reference, base.trivial)
    steps = jnp.arange(batch.mask.shape[1])
    gaps = jnp.stack([normalised_gap(*losses, batch.mask & (steps >= transient) & (steps < n)) for n in lengths])
    return gaps, per_step_mean(task.distance(outputs, base.reference_outputs), batch.mask)


def scored_lengths(compiled: Compiled, lengths: tuple[int, ...]) -> tuple[int, ...]:
    """The test ``lengths`` a compiled model is scored at: those up to its ``max_length``."""
    usable = tuple(n for n in lengths if compiled.max_length is None or n <= compiled.max_length)
    if not usable:
        raise ValueError(f"{compiled.description}: scored only up to length {compiled.max_length}; got lengths "
                         f"{', '.join(map(str, lengths))}")
    return usable


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompiledScores:
    """A task's compiled model scored on one batch of the longest test length (the result of
    :func:`score_compiled`; arrays are stored, and read back, as lists).

    gaps: (lengths,) the normalised gap over each test length's prefix, after the transient.
    distance: (longest length,) the per-step mean distance from the reference's predictions.
    description, exact, transient: the compiled model's (``memlab.arena.compiled``).
    """

    gaps: list[float]
    distance: list[float]
    description: str
    exact: bool
    transient: int


@cell("arena.score-compiled", version=2, result=CompiledScores)
def score_compiled(task: str, lengths: tuple[int, ...], batch: int, key) -> CompiledScores:
    """One batch of the longest length, scored once (one compiled program); the gap at a shorter length n is the
    gap over its first n steps, after the compiled model's transient. A model with a ``max_length`` is scored only
    at the lengths up to it (``gaps`` is then shorter than ``lengths``)."""
    spec = make_task(task)
    compiled = compiled_model(spec)
    lengths = scored_lengths(compiled, lengths)
    gaps, distance = prefix_gaps(spec, compiled.model, spec.sample(key, batch, max(lengths)), lengths,
                                 compiled.transient)
    return CompiledScores(gaps=np.asarray(gaps).tolist(), distance=np.asarray(distance),
                          description=compiled.description, exact=compiled.exact, transient=compiled.transient)


def analyse(cfg: CompiledConfig, cells: dict[str, CompiledScores]) -> dict[str, CompiledStats]:
    stats = {}
    for t in cfg.tasks:
        c = cells[t]
        gaps = [float(g) for g in c.gaps] + [float("nan")] * (len(cfg.lengths) - len(c.gaps))  # past max_length
        stats[t] = CompiledStats(c.description, bool(c.exact), int(c.transient), gaps, np.asarray(c.distance).tolist())
    return stats


def _figure(cfg: CompiledConfig, stats: dict[str, CompiledStats], run: Run) -> None:
    fig, ax = plots.figure(width=10.0, height=4.6)
    for t, s in stats.items():
        # only the steps a task scores (MQAR its queries, policy-eval one step of each pair: NaN at the others); a
        # distance of exactly 0 (the exact filters, to float32) is drawn at the floor of the log axis
        distance = np.asarray(s.distance, float)
        scored = np.flatnonzero(np.isfinite(distance))
        line, = ax.plot(scored + 1, np.maximum(distance[scored], DISTANCE_FLOOR), label=f"{t}: {s.description}")
        if s.transient:
            ax.axvline(s.transient, color=line.get_color(), ls=":", lw=1.0, label=f"{t}: transient ({s.transient})")
    ax.set(xscale="log", yscale="log", xlabel="step t",
           ylabel=f"distance from the optimum\n(KL or squared error; 0 drawn at {DISTANCE_FLOOR:g})",
           title="compiled solutions against the task's optimal predictor")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    run.save_figure(fig, "distance.png")


def run_compiled(cfg: CompiledConfig, run: Run) -> dict[str, CompiledStats]:
    cells = run.sweep({t: partial(score_compiled, t, cfg.lengths, cfg.batch, run.key_for("test", t))
                       for t in cfg.tasks}, "score compiled models")
    stats = analyse(cfg, cells)
    _figure(cfg, stats, run)
    exact = {t: s for t, s in stats.items() if s.exact}
    worst = max(exact, key=lambda t: max(exact[t].gaps)) if exact else None
    run.claim("exact-compiled-reach-the-optimum", "every exact compiled model's gap is at most 1e-3 after its stated "
              "transient, at every test length", "arena",
              f"largest: {worst} {max(exact[worst].gaps):.1e}" if worst else "no exact compiled model",
              bool(worst is None or max(exact[worst].gaps) <= 1e-3), by="memlab")
    # the approximations, each at the longest length it is scored at: (length, gap)
    approximate = {t: max((n, g) for n, g in zip(cfg.lengths, s.gaps, strict=True) if np.isfinite(g))
                   for t, s in stats.items() if not s.exact}
    alf = {t: g for t, (_, g) in approximate.items() if isinstance(make_task(t), HMMTask)}
    if alf:
        run.claim("alf-uses-memory", "the ALF predicts better than having no memory (gap below 1)",
                  "linear-recurrent-memory-pomdp", ", ".join(f"{t} {g:.3f}" for t, g in alf.items()),
                  bool(all(g < 1.0 for g in alf.values())), by="memlab")
    if "policy-eval" in approximate:
        length, gap = approximate["policy-eval"]
        run.claim("theta-star-uses-memory", "theta* (eq. 15, 3 layers of weighted softmax TD in context) predicts the "
                  "query's value better than having no memory (gap below 1)", "softmax-transformers-in-context-td",
                  f"gap {gap:.3f} at L = {length}", bool(gap < 1.0), by="memlab")
    rows = [(t, s.description, "yes" if s.exact else "no", s.transient, *s.gaps) for t, s in stats.items()]
    table = run.save_table("compiled.csv", ["task", "compiled model", "exact", "transient",
                                            *(f"gap at L = {n}" for n in cfg.lengths)], rows, ".3g")
    run.write_summary(SUMMARY.format(batch=cfg.batch, table=table, theta_star_max_length=THETA_STAR_MAX_LENGTH))
    return stats


EXPERIMENTS = [
    Experiment(
        "arena.compiled", "arena", "arena", "compiled solutions (Kalman as an LRU, logit filters) against the optimum",
        {"tiny": CompiledConfig(tasks=("lgssm", "hmm-cycle", "hmm-two-state", "policy-eval", "mqar"), lengths=(16, 32),
                                batch=32),
         "quick": CompiledConfig(),
         "paper": CompiledConfig(lengths=(64, 256, 1024, 4096), batch=2048)},
        run_compiled),
]

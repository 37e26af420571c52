"""``arena.leaderboard``'s analysis: a (task, layer) cell's gap statistics over seeds, the leaderboard they make,
and the tasks whose memory margin is too thin for the gap to mean much."""

from __future__ import annotations

import dataclasses

import numpy as np

from memlab.arena.experiments.posterior_bound import PredictorScore
from memlab.arena.experiments.train_and_score import ScoredSeeds

# a task whose memory margin L_trivial - L_ref is below this (nats on the symbol tasks) leaves g = excess / margin
# mostly sampling noise (hmm-random and Mess3 at x = 0.15, alpha = 0.6 are such tasks; each run's table prints the
# margins); the trivial predictor sees the current symbol, so only what memory adds beyond an order-1 Markov
# predictor counts
MARGIN_FLOOR = 0.01

# the task whose reference trained layers beat, and the name of the predictor scored beside them as its bound
BOUNDED, POSTERIOR = "policy-eval", "posterior-predictor"


@dataclasses.dataclass(frozen=True)
class GapStats:
    """One (task, layer): ``gap`` mean and ``se`` (standard error over seeds) of the held-out normalised gap,
    ``per_seed`` (seeds,), ``budget`` (evaluations,) the mean gap after every ``eval_every`` steps (``seed_budgets``
    (seeds, evaluations): each seed's), ``parameters`` and ``state`` (numbers carried per step at the training
    length); ``compiled_distance`` and ``gradient_cosine``: the mean over seeds of
    :func:`memlab.arena.train.compare` with the task's compiled model (NaN without one); ``longer``, ``longer_se``:
    the mean gap and its standard error on sequences ``cfg.longer`` times the training length;
    ``reference_distance``: the mean per-step distance of the model's predictions from the reference's (KL(reference
    || model) for symbols, squared error for vectors); ``margin``: the task's memory margin L_trivial - L_ref on the
    held-out batch (the gap's denominator; NaN where the cell does not record it)."""

    gap: float
    se: float
    per_seed: list[float]
    budget: list[float]
    parameters: int
    state: int
    compiled_distance: float
    gradient_cosine: float
    longer: list[float]
    reference_distance: float
    longer_se: list[float]
    margin: float = float("nan")
    seed_budgets: list[list[float]] = dataclasses.field(default_factory=list)  # (seeds, evaluations)


@dataclasses.dataclass(frozen=True)
class Leaderboard:
    """``stats[task][layer]``: :class:`GapStats`; ``steps`` (evaluations,): training steps of the budget curves;
    ``closest[task]``: the layer with the smallest mean gap; ``bounds[task]``: a predictor scored beside the layers
    where the task's reference is beaten (its gap bounds the optimum's from above), for the tasks that have one."""

    stats: dict[str, dict[str, GapStats]]
    steps: list[int]
    closest: dict[str, str]
    bounds: dict[str, PredictorScore] = dataclasses.field(default_factory=dict)


def mean_and_se(values, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error (NaN from one value) of ``values`` along ``axis`` (seeds)."""
    values = np.asarray(values, float)
    n = values.shape[axis]
    se = values.std(axis, ddof=1) / np.sqrt(n) if n > 1 else np.full(np.delete(values.shape, axis), np.nan)
    return values.mean(axis), se


def gap_stats(c: ScoredSeeds, multiples: int) -> GapStats:
    """The :class:`GapStats` of one :func:`train_and_score` cell ``c`` scored at ``multiples`` longer lengths."""
    gaps = np.asarray(c.gap, float)
    # (multiples, seeds); the store gives an empty one back as [] (shape lost)
    longer = np.asarray(c.longer_gap, float).reshape(multiples, len(gaps))
    (gap, se), (longer_gap, longer_se) = mean_and_se(gaps), mean_and_se(longer)
    return GapStats(float(gap), float(se), gaps.tolist(), np.asarray(c.eval_gap).mean(0).tolist(),
                    int(c.parameters), int(c.state), float(np.mean(c.compiled_distance)),
                    float(np.mean(c.gradient_cosine)), longer_gap.tolist(), float(np.mean(c.distance_loss)),
                    longer_se.tolist(), float(np.mean(np.subtract(c.trivial_loss, c.reference_loss))),
                    np.asarray(c.eval_gap, float).tolist())


def thin_margins(board: Leaderboard) -> list[str]:
    """The tasks whose memory margin L_trivial - L_ref is below :data:`MARGIN_FLOOR` (their g is mostly noise)."""
    return [t for t, layers in board.stats.items() if next(iter(layers.values())).margin < MARGIN_FLOOR]


def noise_note(tasks: list[str]) -> str:
    """What a claim or the summary says beside numbers on the ``tasks`` of :func:`thin_margins` ("" for none)."""
    return f" (g is noise on {', '.join(tasks)}: L_trivial − L_ref < {MARGIN_FLOOR:g})" if tasks else ""

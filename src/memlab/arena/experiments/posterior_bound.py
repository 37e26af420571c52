"""The leaderboard's bound on policy-eval: :func:`memlab.arena.posterior_predictor` on the layers' held-out batch.

policy-eval's reference, the TD fixed point, is not the optimum, and trained layers beat it (their gap is below 0), so
the gap alone cannot say how far a layer stays from the optimum. The posterior predictor is computed from the context
alone, so its expected loss is at least the Bayes-optimal loss: a layer whose gap stays above the predictor's is, in
expectation, at least that far from the optimum. Measured on one batch, the difference is an estimate: ``gap_se`` is
the predictor's own sampling error over the batch; the difference's is smaller as far as the two losses move together
from sequence to sequence, which the layers' cells (no per-sequence losses kept) cannot tell.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from memlab.arena.experiments.train_and_score import task_side
from memlab.arena.policy_posterior import posterior_predictor
from memlab.arena.task import per_step_mean
from memlab.arena.tasks import make_task
from memlab.store import cell

__all__ = ["PredictorScore", "bound_note", "gap_and_standard_error", "score_posterior_predictor"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PredictorScore:
    """A predictor that does not train, scored on a task's held-out batch as a leaderboard cell scores a layer:
    ``gap`` its normalised gap, ``gap_se`` that gap's sampling error over the batch's sequences
    (:func:`gap_and_standard_error`); ``loss``, ``reference_loss``, ``trivial_loss``: the mean per-step losses of the
    predictor, the task's reference and its trivial predictor (as :class:`ScoredSeeds` keeps them)."""

    gap: float
    gap_se: float
    loss: float
    reference_loss: float
    trivial_loss: float


def gap_and_standard_error(loss, reference, trivial, mask) -> tuple[float, float]:
    """g = sum(loss - reference) / sum(trivial - reference), the sums over a batch's scored steps ((B, L) each;
    ``mask`` True where scored), and its standard error over sequences by the delta method: sd_i(e_i - g m_i)
    sqrt(B) / sum_i m_i, e_i and m_i sequence i's sums of the excess and the margin."""
    mask = np.asarray(mask, bool)
    excess = np.where(mask, np.asarray(loss, float) - np.asarray(reference, float), 0.0).sum(1)
    margin = np.where(mask, np.asarray(trivial, float) - np.asarray(reference, float), 0.0).sum(1)
    g = excess.sum() / margin.sum()
    return float(g), float(np.std(excess - g * margin, ddof=1) * np.sqrt(len(excess)) / margin.sum())


@cell("arena.posterior-predictor", result=PredictorScore)
def score_posterior_predictor(task: str, test_key, test_batch: int, length: int, key, particles: int
                              ) -> PredictorScore:
    """The posterior predictor (``particles`` particles per sequence, random stream ``key``) on the held-out batch
    that every layer's cell of ``task`` draws from ``test_key`` (:func:`train_and_score`)."""
    spec = make_task(task)
    # the layers' batch (a task side without their longer batches: the next layer's cell computes its own again,
    # about a CPU-second)
    side = task_side(task, "", test_key, test_batch, length, ())
    test, base = side.test, side.base
    loss = spec.loss(posterior_predictor(spec, test, key, particles), test)
    gap, gap_se = gap_and_standard_error(loss, base.reference, base.trivial, test.mask)
    return PredictorScore(gap=gap, gap_se=gap_se, loss=_mean_loss(loss, test.mask),
                          reference_loss=_mean_loss(base.reference, test.mask),
                          trivial_loss=_mean_loss(base.trivial, test.mask))


def _mean_loss(loss, mask) -> float:
    """The mean over steps of each step's mean loss, as :class:`ScoredSeeds` keeps a layer's."""
    return float(jnp.nanmean(per_step_mean(loss, mask)))


def bound_note(task: str, bound: PredictorScore, closest: str, closest_gap: float) -> str:
    """The leaderboard summary's sentence on ``task``'s bound beside its ``closest`` layer's mean gap."""
    above = closest_gap - bound.gap
    where = (f"stays {above:.2g} above it: in expectation at least about that far from the optimum" if above > 0 else
             f"is {-above:.2g} below it: the predictor's approximations cost at least about that much")
    return (f" On {task} the posterior predictor (`memlab.arena.posterior_predictor`, computed from the context alone: "
            f"its expected loss bounds the optimal loss from above) scores a gap of {bound.gap:.3g} ± "
            f"{bound.gap_se:.2g} (its own sampling error over the batch) on the same held-out batch; the closest "
            f"layer, {closest}, {where} (column 'gap above the bound'; one batch, the error of the difference not "
            "computed: the layers' cells keep no per-sequence losses).")

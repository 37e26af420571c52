"""The leaderboard's bound on policy-eval: :func:`memlab.arena.posterior_predictor` on the layers' held-out batch.

policy-eval's reference, the TD fixed point, is not the optimum, and trained layers beat it (their gap is below 0), so
the gap alone cannot say how far a layer stays from the optimum. The posterior predictor is computed from the context
alone, so its expected loss is at least the Bayes-optimal loss: a layer whose gap stays above the predictor's, on the
same batch, is at least that far from the optimum (up to the batch's sampling error, ``gap_se``).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from memlab.arena.experiments.train_and_score import task_side
from memlab.arena.policy_posterior import posterior_predictor
from memlab.arena.task import normalised_gap, per_step_mean
from memlab.arena.tasks import make_task
from memlab.store import cell

__all__ = ["PredictorScore", "bound_note", "ratio_standard_error", "score_posterior_predictor"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PredictorScore:
    """A predictor that does not train, scored on a task's held-out batch as a leaderboard cell scores a layer:
    ``gap`` its normalised gap, ``gap_se`` that gap's sampling error over the batch's sequences
    (:func:`ratio_standard_error`); ``loss``, ``reference_loss``, ``trivial_loss``: the mean per-step losses of the
    predictor, the task's reference and its trivial predictor (as :class:`ScoredSeeds` keeps them)."""

    gap: float
    gap_se: float
    loss: float
    reference_loss: float
    trivial_loss: float


def ratio_standard_error(loss, reference, trivial, mask) -> float:
    """The standard error over sequences of g = sum(loss - reference) / sum(trivial - reference), the sums over a
    batch's scored steps ((B, L) each; ``mask`` True where scored): the delta method's sd_i(e_i - g m_i) sqrt(B) /
    sum_i m_i, e_i and m_i sequence i's sums of the excess and the margin."""
    mask = np.asarray(mask, bool)
    excess = np.where(mask, np.asarray(loss, float) - np.asarray(reference, float), 0.0).sum(1)
    margin = np.where(mask, np.asarray(trivial, float) - np.asarray(reference, float), 0.0).sum(1)
    g = excess.sum() / margin.sum()
    return float(np.std(excess - g * margin, ddof=1) * np.sqrt(len(excess)) / margin.sum())


@cell("arena.posterior-predictor", result=PredictorScore)
def score_posterior_predictor(task: str, test_key, test_batch: int, length: int, key, particles: int
                              ) -> PredictorScore:
    """The posterior predictor (``particles`` particles per sequence, random stream ``key``) on the held-out batch
    that every layer's cell of ``task`` draws from ``test_key`` (:func:`train_and_score`)."""
    spec = make_task(task)
    side = task_side(task, "", test_key, test_batch, length, ())
    test, base = side.test, side.base
    loss = spec.loss(posterior_predictor(spec, test, key, particles), test)
    mean = {name: float(jnp.nanmean(per_step_mean(x, test.mask)))
            for name, x in (("loss", loss), ("reference_loss", base.reference), ("trivial_loss", base.trivial))}
    return PredictorScore(gap=float(normalised_gap(loss, base.reference, base.trivial, test.mask)),
                          gap_se=ratio_standard_error(loss, base.reference, base.trivial, test.mask), **mean)


def bound_note(task: str, bound: PredictorScore, gaps: dict[str, float]) -> str:
    """The leaderboard summary's sentence on ``task``'s bound beside the layers' mean ``gaps`` (layer -> gap)."""
    closest = min(gaps, key=gaps.get)
    above = gaps[closest] - bound.gap
    where = (f"stays {above:.2g} above it: at least that far from the optimum" if above > 0 else
             f"is {-above:.2g} below it: the predictor's approximations cost at least that much")
    return (f" On {task} the posterior predictor (`memlab.arena.posterior_predictor`, computed from the context alone: "
            f"its expected loss bounds the optimal loss from above) scores a gap of {bound.gap:.3g} ± "
            f"{bound.gap_se:.2g} (the batch's sampling error) on the same held-out batch; the closest layer, "
            f"{closest}, {where} (column 'gap above the bound').")

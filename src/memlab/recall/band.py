"""The achievable band of a recall curve: what recall can be worth, from no recall to the most a measure can tell.

A student's risk is read against four float64 references, each including the label noise sigma^2: ``tag_only``
(E[Y | q], no recall), ``context`` (a predictor that sees the empirical content pmf a context of length T reveals),
``measure`` (the same predictor seeing the recalled pmf itself) and ``floor`` (``task.scale_floor_mse``). Each
predictor is a least-squares regression of the recalled value on features of the pmf it sees (a truncated-SVD
reconstruction of the direction for A.1), fitted on ``num_fit`` draws and scored on ``num_eval`` fresh ones: an
achievable risk, so an upper bound on the Bayes risk of that information.

The reduction to a regression and the features: docs/studies/recall.md, "The achievable band".
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from memlab.checks import check_int
from memlab.recall.task import (
    RecallTask,
    baseline_mse,
    content_pmf,
    linear_weights,
    query_factor_moments,
    sample_coeffs64,
    scale_floor_mse,
)

__all__ = ["RCONDS", "AchievableBand", "achievable_band", "excess_risk", "fit_predictor", "pmf_features",
           "predictor_risk", "recallable_value", "seen_pmf"]

RCONDS = (1e-12, 1e-9, 1e-6, 1e-4, 1e-3, 1e-2, 3e-2, 0.1, 0.3)  # truncations tried by ``_fit``


def recallable_value(Z: np.ndarray, task: RecallTask) -> np.ndarray:
    """r (N,) from coefficients Z (N, M): s(u) = sum_j lambda_j Z_j^2 / |Z|^2 (A.1) or L(mu) = int h dmu."""
    if task.target == "linear":
        return content_pmf(Z, task) @ linear_weights(task)
    Z2 = Z[:, 1:] ** 2
    return Z2 @ task.eigenvalues[1:] / Z2.sum(1)


def excess_risk(task: RecallTask) -> float:
    """The factor c of risk = floor + c E[(r - m)^2]: E[g^2] k^2 (A.1) or E[g^2] (``linear``)."""
    g2 = query_factor_moments(task)[1]
    return g2 * (task.num_coeffs - 1) ** 2 if task.target == "a1" else g2


def seen_pmf(Z: np.ndarray, task: RecallTask, context_length: int | None, rng: np.random.Generator) -> np.ndarray:
    """(N, G): the recalled pmf (``context_length`` None) or the empirical pmf of the queried tag's tokens in a
    context of that length (all zeros when none was drawn)."""
    p = content_pmf(Z, task)
    if context_length is None:
        return p
    num_tags = task.tag_array.shape[0]
    count = rng.binomial(check_int("context_length", context_length), 1.0 / num_tags, size=len(Z))
    counts = rng.multinomial(count, p / p.sum(1, keepdims=True))
    return counts / np.maximum(count, 1)[:, None]


def pmf_features(p: np.ndarray, task: RecallTask) -> tuple[np.ndarray, tuple]:
    """(group (N,) int in 0..3, the SVD (U, S, Vt) of each masked system (masked A) z = p) for pmfs p (N, G)."""
    k = task.num_coeffs - 1
    A = (task.basis[1:] * task.eigenvalues[1:, None]).T  # (G, k): A[i, j] = lambda_j e_j(x_i)
    mask = p > 0
    svd = np.linalg.svd(mask[..., None] * A, full_matrices=False)  # (N, G, k), (N, k), (N, k, k)
    support = mask.sum(1)
    group = np.select([support == 0, mask[:, 0] | mask[:, -1], support >= k], [0, 1, 2], default=3)
    return group, svd


def _reconstruct(p: np.ndarray, svd, rcond: float) -> np.ndarray:
    """z (N, k) solving (masked A) z = p by the SVD truncated below rcond * (largest singular value)."""
    U, S, Vt = svd
    inv = np.where(S > rcond * S[:, :1], 1.0 / np.where(S > 0, S, 1.0), 0.0)
    return np.einsum("nkj,nk->nj", Vt, inv * np.einsum("ngk,ng->nk", U, p))


def _features(p: np.ndarray, svd, rcond: float) -> np.ndarray:
    """(N, 2 + G + k): 1, support fraction, p, t = z^2 / |z|^2 (s(t) and int h dp are linear in t and p)."""
    z2 = _reconstruct(p, svd, rcond) ** 2
    t = z2 / np.where(z2.sum(1, keepdims=True) > 0, z2.sum(1, keepdims=True), 1.0)
    return np.concatenate([np.ones((len(p), 1)), (p > 0).mean(1, keepdims=True), p, t], axis=1)


def _fit(X: np.ndarray, group: np.ndarray, r: np.ndarray) -> dict[int, np.ndarray]:
    """Least-squares coefficients per group, by the normal equations (minimum-norm where features are collinear, as
    in the degenerate group whose pmf is constant); a group too small to fit gets the overall mean of r."""
    fallback = np.zeros(X.shape[1])
    fallback[0] = r.mean()
    out = {}
    for g in range(4):
        Xg, rg = X[group == g], r[group == g]
        out[g] = np.linalg.lstsq(Xg.T @ Xg, Xg.T @ rg, rcond=1e-13)[0] if len(rg) > 2 * X.shape[1] else fallback
    return out


def _predict(X: np.ndarray, group: np.ndarray, beta: dict[int, np.ndarray]) -> np.ndarray:
    out = np.empty(len(X))
    for g, b in beta.items():
        out[group == g] = X[group == g] @ b
    return out


def _draws(task: RecallTask, num: int, context_length: int | None, seed: int):
    rng = np.random.default_rng(seed)
    Z = sample_coeffs64(num, task, int(rng.integers(2**31)))
    return seen_pmf(Z, task, context_length, rng), recallable_value(Z, task)


def fit_predictor(task: RecallTask, context_length: int | None, num_fit: int = 20_000, seed: int = 0):
    """m: pmfs (N, G) -> predictions (N,) of r = s(u) (A.1) or L(mu), least squares on ``num_fit`` draws of what a
    context of ``context_length`` (None: the recalled pmf) shows; Y is predicted by g(q) k m (A.1) or g(q) m."""
    p, r = _draws(task, num_fit, context_length, seed)
    group, svd = pmf_features(p, task)
    half = num_fit // 2

    def held_out(rcond):  # fit on the first half of the fit draws, score on the second
        X = _features(p, svd, rcond)
        beta = _fit(X[:half], group[:half], r[:half])
        return np.mean((r[half:] - _predict(X[half:], group[half:], beta)) ** 2)

    rcond = min(RCONDS, key=held_out) if task.target == "a1" else RCONDS[0]
    beta = _fit(_features(p, svd, rcond), group, r)

    def m(pmf: np.ndarray) -> np.ndarray:
        group, svd = pmf_features(pmf, task)
        return _predict(_features(pmf, svd, rcond), group, beta)

    return m


def predictor_risk(task: RecallTask, context_length: int | None, num_fit: int = 20_000, num_eval: int = 20_000,
                   seed: int = 0) -> tuple[float, float]:
    """(risk, standard error) of ``fit_predictor`` on ``num_eval`` fresh draws: floor + c E[(r - m)^2]."""
    m = fit_predictor(task, context_length, num_fit, seed)
    p, r = _draws(task, num_eval, context_length, seed + 1)
    err = (r - m(p)) ** 2 * excess_risk(task)
    return float(scale_floor_mse(task) + err.mean()), float(err.std(ddof=1) / np.sqrt(num_eval))


@dataclasses.dataclass(frozen=True)
class AchievableBand:
    """The four references of one task at its context length T, each a risk (MSE, label noise included):

    tag_only: E[Y | q], no recall (``task.baseline_mse``), exact.
    context, context_stderr: the predictor that sees a length-T context's empirical pmf; its Monte-Carlo s.e.
    measure, measure_stderr: the same predictor seeing the recalled pmf itself (T = infinity); its s.e.
    floor: no predictor of the pmf goes lower (``task.scale_floor_mse``).
    """

    tag_only: float
    context: float
    context_stderr: float
    measure: float
    measure_stderr: float
    floor: float


@functools.cache
def achievable_band(task: RecallTask, num_fit: int = 20_000, num_eval: int = 20_000, seed: int = 0) -> AchievableBand:
    """The achievable band of ``task`` at its context length T."""
    context, context_se = predictor_risk(task, task.context_length, num_fit, num_eval, seed)
    measure, measure_se = predictor_risk(task, None, num_fit, num_eval, seed)
    return AchievableBand(baseline_mse(task)["tag_only"], context, context_se, measure, measure_se,
                          scale_floor_mse(task))

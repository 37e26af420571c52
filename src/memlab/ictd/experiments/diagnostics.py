"""Plain NumPy diagnostics read from a trained :class:`~.setting.Setting` (the numbers behind the figures): the
sign-agnostic diagonal share of A_feat, the value row and its sign pattern, trailing and truncated seed means, the
d_t bins of Fig. 3(b) and the numbers behind its claims."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from memlab.ictd.experiments.setting import View

__all__ = ["AlongDt", "Binned", "SignMajority", "binned_by_dt", "diagonal_share", "emergence_along_dt",
           "majority_pattern", "sign_pattern", "trailing_mean", "truncated_mean_sem", "value_row"]


def diagonal_share(A: np.ndarray) -> np.ndarray:
    """A_diag of App. F.4.2 (sign-agnostic): share of the column-normalised |A_feat| on the diagonal.

    A: (..., d+3, d+3) -> (...). Zero columns count as zero (as in eq. (111)); an all-zero A_feat gives 0.
    """
    d = A.shape[-1] - 3
    feat = np.abs(A[..., :d, :d])
    norms = np.linalg.norm(feat, axis=-2, keepdims=True)
    hat = np.divide(feat, norms, out=np.zeros_like(feat, dtype=float), where=norms > 0)
    total = hat.sum(axis=(-2, -1))
    return np.divide(np.trace(hat, axis1=-2, axis2=-1), total, out=np.zeros_like(total), where=total > 0)


def value_row(V: np.ndarray) -> np.ndarray:
    """(p_r, p_gamma v', p_v) = V[d+2, d:d+3] (the paper's (V)_{d+3, d:d+3}); V (..., d+3, d+3) -> (..., 3)."""
    d = V.shape[-1] - 3
    return V[..., d + 2, d : d + 3]


def sign_pattern(row: np.ndarray) -> str:
    """'(+, +, -)' style string of the signs of a (3,) row (0 shows as 0)."""
    return "(" + ", ".join({1.0: "+", -1.0: "−", 0.0: "0"}[float(np.sign(x))] for x in row) + ")"


class SignMajority(NamedTuple):
    """The most common sign pattern of the seeds' value rows and how many seeds have it."""

    pattern: str
    seeds: int


def majority_pattern(rows: np.ndarray) -> SignMajority:
    """The most common sign pattern of (S, 3) value rows and how many seeds have it."""
    patterns = sorted(sign_pattern(r) for r in rows)
    top = max(patterns, key=patterns.count)
    return SignMajority(top, patterns.count(top))


def trailing_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing average over the last ``window`` steps (fewer at the start) along the last axis."""
    c = np.cumsum(np.asarray(x, float), axis=-1)
    shifted = np.concatenate([np.zeros(c.shape[:-1] + (window,)), c], axis=-1)[..., : c.shape[-1]]  # c[t - window]
    count = np.minimum(np.arange(1, c.shape[-1] + 1), window)
    return (c - shifted) / count


def truncated_mean_sem(x: np.ndarray, stop: np.ndarray):
    """Mean and s.e.m. over seeds of x (S, T) truncated at each seed's ``stop`` (inclusive).

    Returns (mean, sem, count), each (max(stop) + 1,): at step t only seeds with stop >= t count; sem = 0 for one seed.
    """
    T = int(np.max(stop)) + 1
    alive = np.arange(T)[None, :] <= np.asarray(stop)[:, None]  # (S, T)
    vals = np.where(alive, x[:, :T], np.nan)
    count = alive.sum(0)
    mean = np.nanmean(vals, 0)
    sd = np.sqrt(np.nanmean((vals - mean) ** 2, 0) * count / np.maximum(count - 1, 1))
    return mean, np.where(count > 1, sd / np.sqrt(count), 0.0), count


@dataclasses.dataclass(frozen=True)
class Binned:
    """One score (S, T) in B equal-width d_t bins over all (S, T) points: edges (B+1,), centers (B,), count (B,)
    points per bin; mean (B,) the pooled mean of the score; q25, q75 (B,) the quartiles of the per-seed bin means.
    NaN in empty bins."""

    edges: np.ndarray
    centers: np.ndarray
    count: np.ndarray
    mean: np.ndarray
    q25: np.ndarray
    q75: np.ndarray


def binned_by_dt(d_t: np.ndarray, score: np.ndarray, num_bins: int) -> Binned:
    """Fig. 3(b): ``score`` (S, T) in ``num_bins`` equal-width bins of d_t (S, T), the last edge inclusive."""
    lo, hi = float(np.min(d_t)), float(np.max(d_t))
    hi = hi if hi > lo else lo + 1e-6
    edges = np.linspace(lo, hi, num_bins + 1)
    idx = np.clip(np.searchsorted(edges, d_t, side="right") - 1, 0, num_bins - 1)  # (S, T), last edge inclusive
    onehot = idx[..., None] == np.arange(num_bins)  # (S, T, B)
    count_seed = onehot.sum(1)  # (S, B)
    count = count_seed.sum(0)
    total_seed = np.einsum("st,stb->sb", np.asarray(score, float), onehot)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total_seed.sum(0) / count
        per_seed = np.where(count_seed > 0, total_seed / np.maximum(count_seed, 1), np.nan)
    occupied = count > 0
    q = np.full((2, num_bins), np.nan)
    q[:, occupied] = np.nanpercentile(per_seed[:, occupied], [25, 75], axis=0)
    return Binned(edges, 0.5 * (edges[1:] + edges[:-1]), count, mean, *q)


@dataclasses.dataclass(frozen=True)
class AlongDt:
    """The numbers behind the Fig. 3(b) claims, with the occupied d_t bins ordered from the start-of-training d_t
    toward its end: A_high_fraction, the fraction of bins with mean A_em >= ``high``; V_first_third, the pooled V_em
    over the first third of the bins; V_last_third_max, the largest binned V_em over the last third; direction +1 / -1,
    the way d_t moved."""

    A_high_fraction: float
    V_first_third: float
    V_last_third_max: float
    direction: float


def emergence_along_dt(view: View, num_bins: int, d_start: float, d_end: float, high: float = 0.5) -> AlongDt:
    """``AlongDt`` of ``view`` in ``num_bins`` bins, d_t moving from ``d_start`` to ``d_end``."""
    V, A = binned_by_dt(view.d_t, view.V_em, num_bins), binned_by_dt(view.d_t, view.A_em, num_bins)
    occupied = V.count > 0
    direction = 1.0 if d_end >= d_start else -1.0
    order = [int(i) for i in np.argsort(direction * V.centers) if occupied[i]]
    third = max(1, len(order) // 3)
    first, last = order[:third], order[-third:]
    return AlongDt(A_high_fraction=float(np.mean(A.mean[occupied] >= high)),
                   V_first_third=float(np.sum((V.mean * V.count)[first]) / np.sum(V.count[first])),
                   V_last_third_max=float(np.max(V.mean[last])), direction=direction)

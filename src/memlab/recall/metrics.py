"""What the recall experiments measure, from numbers alone (no model): learning curves with the rate fit of eq. (1),
the monotonicity rule, and the coupling rate of Prop. 4.2's proof. Measurements that need a trained model
(F^(T) by Monte Carlo, the coupling distance, the per-step contraction bound) are in ``limit.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from memlab.recall.rate import RateFit, fit_rate
from memlab.recall.runs import TrainingRecord

__all__ = ["LearningCurve", "TagOnlyComparison", "coupling_rate", "curve_label", "is_monotone", "learning_curves",
           "tag_only_comparison"]


class LearningCurve(NamedTuple):
    """Risk vs n of one (student, alpha, T): sizes n (k,), best validation MSE (k,), the eq. (1) fit, and the two
    exact reference risks of ``task.baseline_mse`` (mean predictor, tag-only predictor)."""

    n: np.ndarray
    mse: np.ndarray
    fit: RateFit
    baseline_mean: float
    baseline_tag_only: float


def curve_label(student: str, step_budget: int | None = None) -> str:
    """The name of a curve: the student, with ``/steps=B`` when it was trained on an equal budget of B Adam steps."""
    return student if step_budget is None else f"{student}/steps={step_budget}"


def _by_curve(records: Iterable[TrainingRecord]) -> dict[tuple[str, float, int], list[TrainingRecord]]:
    """Training records grouped by (curve label, alpha, T), in first-seen order."""
    groups: dict[tuple, list[TrainingRecord]] = {}
    for r in records:
        key = (curve_label(r.student, r.step_budget), float(r.alpha), int(r.T))
        groups.setdefault(key, []).append(r)
    return groups


def learning_curves(records: Iterable[TrainingRecord]) -> dict[tuple[str, float, int], LearningCurve]:
    """Group training records (``runs.train_students``) by (``curve_label``, alpha, T), in first-seen order, and fit
    eq. (1) to each group's (n, mse) in record order."""
    curves = {}
    for key, rs in _by_curve(records).items():
        n = np.array([r.n for r in rs], float)
        mse = np.array([r.mse for r in rs], float)
        curves[key] = LearningCurve(n, mse, fit_rate(n, mse, key[1]), float(rs[0].baseline_mean),
                                    float(rs[0].baseline_tag_only))
    return curves


class TagOnlyComparison(NamedTuple):
    """A learning curve against the tag-only predictor scored on the same validation set, per n: sizes n (k,), the
    ratio MSE / tag-only risk (k,), whether the student is below it by more than 2 standard errors over seeds (by
    any margin with one seed) (k,), the first n where it is (None: never), and the mean MSE over seeds, its standard
    error (nan with one seed) and the tag-only risk on the validation set (k,) each."""

    n: np.ndarray
    ratio: np.ndarray
    below: np.ndarray
    first_n: int | None
    mse: np.ndarray
    stderr: np.ndarray
    tag_only: np.ndarray


def tag_only_comparison(records: Iterable[TrainingRecord]) -> dict[tuple[str, float, int], TagOnlyComparison]:
    """Per (curve label, alpha, T) as in ``learning_curves``: does the student beat E[Y | q], i.e. recall content?

    Uses each record's ``val_baseline_tag_only`` (the tag-only risk on the cell's own validation set, so the
    comparison is paired); records written before memlab scored it raise a ValueError.
    """
    records = list(records)
    if any(r.val_baseline_tag_only is None for r in records):
        raise ValueError("cell records without val_baseline_tag_only come from an older memlab (before the literal "
                         "A.1 student); delete the output folder and run again")
    out = {}
    for key, rs in _by_curve(records).items():
        n = np.array([r.n for r in rs], float)
        mse, tag_only = (np.array([getattr(r, name) for r in rs], float) for name in ("mse", "val_baseline_tag_only"))
        stderr = np.array([r.mse_stderr for r in rs], float)  # nan with one seed
        below = mse + 2 * np.nan_to_num(stderr) < tag_only
        out[key] = TagOnlyComparison(n, mse / tag_only, below, int(n[below.argmax()]) if below.any() else None, mse,
                                     stderr, tag_only)
    return out


def is_monotone(values, slack: float = 0.05) -> bool:
    """Non-increasing up to ``slack``: each step may rise by at most a fraction ``slack`` (default 5 %)."""
    values = np.asarray(values, float)
    return bool(np.all(values[1:] <= (1 + slack) * values[:-1]))


def coupling_rate(distance, floor: float = 1e-5, min_points: int = 10) -> tuple[float, float]:
    """(r_eff, intercept) of the least-squares fit log d_t = intercept + t log r_eff, t = 1, 2, ..., over the steps
    where d_t > ``floor`` * d_1 (above float32 noise); (nan, nan) when fewer than ``min_points`` steps are usable.

    distance (t,): the mean distance of two coupled chains after t shared tokens (``limit.coupling_distance``).
    """
    distance = np.asarray(distance, float)
    t = np.arange(1, len(distance) + 1)
    usable = distance > floor * distance[0]
    if usable.sum() < min_points:
        return float("nan"), float("nan")
    slope, intercept = np.polyfit(t[usable], np.log(distance[usable]), 1)
    return float(np.exp(slope)), float(intercept)

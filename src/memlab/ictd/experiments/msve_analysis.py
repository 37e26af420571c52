"""The analysis of ``ictd.msve-vs-context``: what it needs of the tasks (:class:`TaskNumbers`) and ``analyse`` ->
:class:`MsveStats`, the MSVE per method, task, discount and context length with its means and standard errors, the
per-task log-log slopes (:class:`SlopeTrend`), the best context-free constant predictor and the margins
(:class:`MarginRange`)."""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import stats as scipy_stats

from memlab.ictd.experiments.msve_cells import MsveConfig
from memlab.ictd.policy_eval import METHODS, TaskSet

__all__ = ["MarginRange", "MsveStats", "SlopeTrend", "TaskNumbers", "analyse"]


@dataclasses.dataclass(frozen=True)
class TaskNumbers:
    """What the analysis needs of the N tasks (G discounts, M padded states) as NumPy arrays: m (N,) states per task;
    v (G, N, M) v_pi; mu (N, M) stationary distribution; margin, floor (G, N) the Assumption 5.1 margin and the
    depth-L floor MSVE; dtype of the features ("float32" / "float64")."""

    m: np.ndarray
    v: np.ndarray
    mu: np.ndarray
    margin: np.ndarray
    floor: np.ndarray
    dtype: str

    @classmethod
    def of(cls, tasks: TaskSet) -> TaskNumbers:
        return cls(tasks.m, np.asarray(tasks.v), np.asarray(tasks.mu), tasks.margin, tasks.floor,
                   str(tasks.features.dtype))


@dataclasses.dataclass(frozen=True)
class MarginRange:
    """The Assumption 5.1 margin (eq. 28) over the tasks at one discount: min, median, max."""

    min: float
    median: float
    max: float


@dataclasses.dataclass(frozen=True)
class SlopeTrend:
    """The per-task least-squares slope of log MSVE on log t: its mean over tasks and the one-sample t-statistic."""

    mean: float
    t: float


@dataclasses.dataclass(frozen=True)
class MsveStats:
    """The analysis of ``ictd.msve-vs-context``; G discounts, T context lengths, N tasks; ``method`` keys are
    ``policy_eval.METHODS``, ``gamma`` keys f"{gamma:g}".

    contexts (T,), gammas (G,), num_tasks N; msve method -> (G, T, N) per task; mean_msve, stderr_msve method ->
    (G, T) mean and standard error over tasks; depth_floor_msve (G,) mean depth-L floor; max_abs_diff_tf_wstd,
    max_rel_diff_tf_wstd: max |TF - WSTD| absolute and / max(1, |WSTD|) over every cell, max_abs_value the largest
    |WSTD|; dtype of the tasks and tol the relative tolerance of the Theorem 1 claim there; depth_limit_change: the
    largest change of the depth limit from L_inf to 2 L_inf iterations, at context limit_t; margin gamma ->
    ``MarginRange``; loglog_slope gamma -> ``SlopeTrend``; slope_se (G,) standard error of the mean slope;
    const_msve (G,) MSVE of the best context-free constant predictor; improved (G,) fraction of tasks with
    MSVE(t_max) < MSVE(t_min); margins, floors (G, N) per task; m (N,) states per task.
    """

    contexts: list[int]
    gammas: list[float]
    num_tasks: int
    msve: dict[str, np.ndarray]
    mean_msve: dict[str, np.ndarray]
    stderr_msve: dict[str, np.ndarray]
    depth_floor_msve: np.ndarray
    max_abs_diff_tf_wstd: float
    max_rel_diff_tf_wstd: float
    max_abs_value: float
    dtype: str
    tol: float
    depth_limit_change: float
    limit_t: int
    margin: dict[str, MarginRange]
    loglog_slope: dict[str, SlopeTrend]
    slope_se: list[float]
    const_msve: list[float]
    improved: list[float]
    margins: np.ndarray
    floors: np.ndarray
    m: np.ndarray


def _slope_t(log_t, log_msve) -> tuple[np.ndarray, float]:
    """Per-task least-squares slope of log MSVE (N, T) on log t (T,), and the one-sample t-statistic of their mean."""
    x = log_t - log_t.mean()
    slopes = (log_msve - log_msve.mean(axis=1, keepdims=True)) @ x / (x @ x)
    return slopes, scipy_stats.ttest_1samp(slopes, 0.0).statistic


def analyse(cfg: MsveConfig, tasks: TaskNumbers, cells: dict) -> MsveStats:
    """Task numbers and cells -> MSVE (G, T, N) per method, means, s.e., slopes, the constant predictor, margins."""
    contexts, gammas, N = cfg.contexts(), cfg.gammas, len(tasks.m)
    grid = [[cells[f"gamma={gamma:g},t={t}"] for t in contexts] for gamma in gammas]
    msve = {name: np.array([[c.msve[name] for c in row] for row in grid], float) for name in METHODS}
    max_diff = np.array([[c.max_abs_diff for c in row] for row in grid])
    max_value = np.array([[c.max_abs_value for c in row] for row in grid])
    limit_change = np.array([[c.depth_limit_change for c in row] for row in grid])
    log_t = np.log(np.asarray(contexts, float))
    trend, slope_se, const_msve, improved = {}, [], [], []
    for g, gamma in enumerate(gammas):
        tf = msve["transformer"][g]  # (T, N)
        slopes, t_stat = _slope_t(log_t, np.log(tf.T))
        trend[f"{gamma:g}"] = SlopeTrend(float(slopes.mean()), float(t_stat))
        slope_se.append(slopes.std(ddof=1) / np.sqrt(N))
        v_all, mu = tasks.v[g], tasks.mu
        const = np.sum(mu * v_all) / np.sum(mu)  # the best context-free constant prediction over all tasks
        const_msve.append(np.mean(np.sum(mu * (v_all - const) ** 2, axis=1)))
        improved.append(float(np.mean(tf[-1] < tf[0])))
    margin = tasks.margin
    return MsveStats(
        contexts=list(contexts), gammas=list(gammas), num_tasks=N, msve=msve,
        mean_msve={k: a.mean(axis=2) for k, a in msve.items()},
        stderr_msve={k: a.std(axis=2, ddof=1) / np.sqrt(N) for k, a in msve.items()},
        depth_floor_msve=tasks.floor.mean(axis=1), max_abs_diff_tf_wstd=float(max_diff.max()),
        max_rel_diff_tf_wstd=float((max_diff / np.maximum(1.0, max_value)).max()), max_abs_value=max_value.max(),
        dtype=tasks.dtype, tol=1e-10 if tasks.dtype == "float64" else 1e-5,
        depth_limit_change=float(limit_change.max()), limit_t=contexts[int(np.argmax(limit_change.max(axis=0)))],
        margin={f"{g:g}": MarginRange(float(margin[i].min()), float(np.median(margin[i])), float(margin[i].max()))
                for i, g in enumerate(gammas)},
        loglog_slope=trend, slope_se=slope_se, const_msve=const_msve, improved=improved,
        margins=margin, floors=tasks.floor, m=tasks.m)

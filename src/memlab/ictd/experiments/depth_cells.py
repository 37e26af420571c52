"""The config and the sweep cells of ``ictd.depth-convergence`` (Theorem 2): :class:`DepthConfig`, the random tasks
every cell draws from ``tasks_key`` (``make_tasks``), the tasks' margins, the operator-form cross-check and the
Theorem 2 numbers at one context length n."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import numpy as np

from memlab.checks import check_gamma, check_increasing_ints, check_int, check_real
from memlab.ictd import depth
from memlab.ictd.depth import Crosscheck, Theorem2Numbers
from memlab.ictd.random_tasks import random_task_batch
from memlab.store import cell

__all__ = ["DepthConfig", "DepthTasks", "TaskMargins", "context_cell", "crosscheck_cell", "make_tasks", "tasks_cell"]


@dataclasses.dataclass(frozen=True)
class DepthConfig:
    """Theorem 2 on ``random_task`` tasks; the paper states no task sizes for it (chosen here, see summary)."""

    seed: int = 0
    context_lengths: tuple[int, ...] = (50, 100, 200, 500, 1000, 2000, 5000)
    num_layers: int = 60
    state_counts: tuple[int, ...] = (5, 6, 7, 8, 9, 10)  # m varies across tasks
    tasks_per_m: int = 50
    d: int = 10
    gamma: float = 0.9
    feature_scale: float = 3.0  # c: x(s) = c q_s, q orthonormal
    num_actions: int = 2
    max_resamples: int = 20
    slope_band: tuple[float, float] = (-0.65, -0.35)  # accepted log-log slope of the floor (theory: -1/2)

    def validate(self):
        for name, least in (("num_layers", 2), ("tasks_per_m", 1), ("num_actions", 1), ("max_resamples", 1)):
            check_int(name, getattr(self, name), least)
        ns = check_increasing_ints("context_lengths", self.context_lengths, low=2)
        if len(ns) < 2:
            raise ValueError(f"context_lengths needs at least 2 lengths (a slope), got {ns}")
        if not self.state_counts or any(not isinstance(m, int) or m < 2 or m > self.d for m in self.state_counts):
            raise ValueError(f"state_counts must be ints in [2, d = {self.d}], got {self.state_counts}")
        if min(ns) < max(self.state_counts):
            raise ValueError(f"the shortest context ({min(ns)}) cannot visit all {max(self.state_counts)} states")
        check_gamma(self.gamma)
        check_real("feature_scale", self.feature_scale, 0.0, open_low=True)
        lo, hi = self.slope_band
        if not lo < -0.5 < hi:
            raise ValueError(f"slope_band must contain -1/2, got {self.slope_band}")


# ---------------------------------------------------------------- cells (each draws its tasks from tasks_key)


class DepthTasks(NamedTuple):
    """What the cells' tasks are drawn as (``make_tasks``): ``tasks_per_m`` ``random_task`` tasks for every m in
    ``state_counts``."""

    state_counts: tuple[int, ...]
    tasks_per_m: int
    d: int
    gamma: float
    num_actions: int
    feature_scale: float

    @classmethod
    def of(cls, cfg: DepthConfig) -> DepthTasks:
        return cls(cfg.state_counts, cfg.tasks_per_m, cfg.d, cfg.gamma, cfg.num_actions, cfg.feature_scale)


def make_tasks(tasks: DepthTasks, key) -> dict:
    """{m: batched Task} for every m in ``tasks.state_counts``, keys fold_in(key, m)."""
    return {m: random_task_batch(jax.random.fold_in(key, m), tasks.tasks_per_m, m, tasks.d, tasks.gamma,
                                 tasks.num_actions, tasks.feature_scale) for m in tasks.state_counts}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskMargins:
    """Per task (N,), in ``make_tasks`` order: margin, the population margin C of eq. (28); err0, ||v_0 - v_pi||_inf
    (v_0 = 0). Arrays, or lists as a stored record gives them back."""

    margin: np.ndarray
    err0: np.ndarray


@cell("ictd.depth-tasks", result=TaskMargins)
def tasks_cell(tasks: DepthTasks, tasks_key) -> TaskMargins:
    margin, err0 = depth.margins_and_err0(make_tasks(tasks, tasks_key))
    return TaskMargins(margin=margin, err0=err0)


@cell("ictd.depth-crosscheck", result=Crosscheck)
def crosscheck_cell(tasks: DepthTasks, tasks_key, key, n: int, num_layers: int, max_resamples: int,
                    longest: int) -> Crosscheck:
    """Theorem 1 + eq. (24)-(26) on the first task (smallest m) with a covering context at n (the shortest);
    ``longest``: the longest context of the sweep (``depth.covering_crosscheck``)."""
    first = make_tasks(tasks, tasks_key)[tasks.state_counts[0]]
    return depth.covering_crosscheck(first, key, n, num_layers, max_resamples, longest)


@cell("ictd.depth-context", result=Theorem2Numbers)
def context_cell(tasks: DepthTasks, n: int, tasks_key, key, num_layers: int, max_resamples: int,
                 longest: int) -> Theorem2Numbers:
    """Theorem 2 numbers of every task at context length n (``depth.theorem2_at``)."""
    return depth.theorem2_at(make_tasks(tasks, tasks_key), key, n, num_layers, max_resamples, longest)

"""The config and the sweep cell of ``ictd.msve-vs-context`` (Fig. 1): :class:`MsveConfig`, :class:`TaskDraw` (what
the task set is drawn from, in the driver and again in each cell) and ``msve_cell``, the MSVE of every method for
every task at one (gamma, t)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, NamedTuple

import numpy as np

from memlab.checks import check_int, check_real
from memlab.ictd.policy_eval import ContextMSVE, TaskSet, context_msve, make_task_set
from memlab.kept import KeptLast
from memlab.store import cell, describe_value

__all__ = ["MsveConfig", "TaskDraw", "msve_cell"]


@dataclasses.dataclass(frozen=True)
class MsveConfig:
    """Fig. 1 sizes (paper defaults; the paper states only 15 layers and 300 tasks)."""

    seed: int = 0
    m_values: tuple[int, ...] = (5, 6, 7, 8, 9, 10)  # state-space sizes; tasks_per_m tasks each
    tasks_per_m: int = 50
    d: int = 10  # feature dimension, shared by all tasks (one theta*)
    gammas: tuple[float, ...] = (0.9, 0.5)
    feature_scale: float = 3.0  # c in x(s) = c q_s
    num_actions: int = 2
    num_layers: int = 15
    t_max: int = 500
    num_contexts: int = 15  # log-spaced t in [1, t_max] (duplicates after rounding removed)
    depth_limit_layers: int = 500

    def contexts(self) -> tuple[int, ...]:
        return tuple(int(t) for t in np.unique(np.round(np.geomspace(1, self.t_max, self.num_contexts))))

    def validate(self):
        if not self.m_values or any(not isinstance(m, int) or m < 2 for m in self.m_values):
            raise ValueError(f"m_values must be non-empty ints >= 2, got {self.m_values}")
        if len(set(self.m_values)) != len(self.m_values):
            raise ValueError(f"m_values must be distinct, got {self.m_values}")
        check_int("d", self.d, max(self.m_values))  # orthonormal features need d >= every m
        check_int("tasks_per_m", self.tasks_per_m, 2)  # standard errors
        if not self.gammas or any(not 0.0 <= g < 1.0 for g in self.gammas) or len(set(self.gammas)) != len(self.gammas):
            raise ValueError(f"gammas must be distinct values in [0, 1), got {self.gammas}")
        check_real("feature_scale", self.feature_scale, 0.0, open_low=True)
        check_int("num_actions", self.num_actions)
        check_int("num_layers", self.num_layers)
        check_int("t_max", self.t_max, 2)
        if self.num_contexts < 3 or len(self.contexts()) < 3:
            raise ValueError(f"need at least 3 distinct context lengths, got num_contexts = {self.num_contexts}")
        check_int("depth_limit_layers", self.depth_limit_layers, self.num_layers)


class TaskDraw(NamedTuple):
    """What the task set is drawn from (``make_task_set``'s arguments). A cell takes these values, not the drawn
    arrays: their round-off differs between CPUs (an AVX2 machine drew other last bits than the AVX-512 one the
    committed cells came from), and a cell's digest holds its arguments' values, so the arrays would orphan them."""

    tasks_key: Any
    trajectories_key: Any
    m_values: tuple[int, ...]
    tasks_per_m: int
    d: int
    gammas: tuple[float, ...]
    feature_scale: float
    num_actions: int
    t_max: int
    num_layers: int

    @classmethod
    def of(cls, cfg: MsveConfig, tasks_key, trajectories_key) -> TaskDraw:
        return cls(tasks_key, trajectories_key, cfg.m_values, cfg.tasks_per_m, cfg.d, cfg.gammas, cfg.feature_scale,
                   cfg.num_actions, cfg.t_max, cfg.num_layers)

    def tasks(self) -> TaskSet:
        """The drawn task set, built once per process: the driver and every cell of a run take the same draw, and
        building it (solving every task at every gamma) would otherwise be repeated by each of the run's cells."""
        return _DRAWN.get(json.dumps(describe_value(self)), lambda: make_task_set(*self))


_DRAWN: KeptLast[TaskSet] = KeptLast()  # by the draw's description: its values, as a cell's digest holds them


@cell("ictd.msve", result=ContextMSVE)
def msve_cell(draw: TaskDraw, g: int, gamma: float, t: int, num_layers: int, depth_limit_layers: int) -> ContextMSVE:
    """MSVE of every method for every task of ``draw`` at discount ``gamma`` (the task set's g-th) and context
    length t."""
    return context_msve(draw.tasks(), g, gamma, t, num_layers, depth_limit_layers)

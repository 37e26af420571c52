"""TaskDraw: a cell takes what draws the task set, and the set is built once per process per draw."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from memlab.ictd.experiments import msve_cells
from memlab.ictd.experiments.msve_cells import MsveConfig, TaskDraw
from memlab.ictd.policy_eval import make_task_set

TINY = MsveConfig(m_values=(3, 4), tasks_per_m=3, d=4, t_max=20, num_contexts=4, depth_limit_layers=100)


def draw(seed: int, cfg: MsveConfig = TINY) -> TaskDraw:
    return TaskDraw.of(cfg, jax.random.key(seed), jax.random.key(seed + 100))


def test_equal_draws_share_one_build_and_it_is_the_drawn_set(monkeypatch):
    built = []
    monkeypatch.setattr(msve_cells, "make_task_set", lambda *a: built.append(a) or make_task_set(*a))
    monkeypatch.setattr(msve_cells, "_DRAWN", {})
    first = draw(0).tasks()
    assert draw(0).tasks() is first  # another TaskDraw object with the same values: no second build
    assert len(built) == 1
    np.testing.assert_array_equal(first.features, make_task_set(*draw(0)).features)


def test_a_different_draw_is_built_anew(monkeypatch):
    built = []
    monkeypatch.setattr(msve_cells, "make_task_set", lambda *a: built.append(a) or make_task_set(*a))
    monkeypatch.setattr(msve_cells, "_DRAWN", {})
    a, b = draw(0).tasks(), draw(1).tasks()
    c = draw(0, dataclasses.replace(TINY, feature_scale=2.0)).tasks()
    assert len(built) == 3
    assert not np.array_equal(a.features, b.features)
    assert not np.array_equal(a.features, c.features)

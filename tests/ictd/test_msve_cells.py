"""TaskDraw: a cell takes what draws the task set, and the set is built once per process per draw."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from memlab.ictd.experiments import msve_cells
from memlab.ictd.experiments.msve_cells import MsveConfig, TaskDraw
from memlab.ictd.policy_eval import make_task_set
from memlab.kept import KeptLast

TINY = MsveConfig(m_values=(3, 4), tasks_per_m=3, d=4, t_max=20, num_contexts=4, depth_limit_layers=100)


def draw(seed: int, cfg: MsveConfig = TINY) -> TaskDraw:
    return TaskDraw.of(cfg, jax.random.key(seed), jax.random.key(seed + 100))


@pytest.fixture
def built(monkeypatch) -> list:
    """The arguments of every task set built from here on (none kept from before)."""
    calls = []
    monkeypatch.setattr(msve_cells, "make_task_set", lambda *a: calls.append(a) or make_task_set(*a))
    monkeypatch.setattr(msve_cells, "_DRAWN", KeptLast())
    return calls


def test_equal_draws_share_one_build_and_it_is_the_drawn_set(built):
    first = draw(0).tasks()
    assert draw(0).tasks() is first  # another TaskDraw object with the same values: no second build
    assert len(built) == 1
    np.testing.assert_array_equal(first.features, make_task_set(*draw(0)).features)


def test_a_different_draw_is_built_anew(built):
    a, b = draw(0).tasks(), draw(1).tasks()
    c = draw(0, dataclasses.replace(TINY, feature_scale=2.0)).tasks()
    assert len(built) == 3
    assert not np.array_equal(a.features, b.features)
    assert not np.array_equal(a.features, c.features)

"""Pong generator: the physics of an elastic point ball in the unit box, its modes and its splits.

Independent reference: the unfolded motion u(t) = p_0 + t v_0 folded into [0, 1] by the triangle wave
tri(u) = 1 - |(u mod 2) - 1| (a mirror image per wall hit), evaluated in float64 NumPy.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from memlab.pissm.data.pong import NOISE_STD, SPEED_RANGE, generate_pong, simulate_pong, step_maps
from memlab.pissm.data.splits import SplitLayout

B, T = 512, 80


@pytest.fixture(scope="module")
def balls():
    s = simulate_pong(jax.random.key(3), B, T)
    return {k: np.asarray(v) for k, v in s._asdict().items()}


def test_shapes_and_dtypes(balls):
    assert balls["t"].shape == (B, T) and balls["y"].shape == (B, T, 2) and balls["x"].shape == (B, T, 4)
    assert balls["z"].shape == (B, T) and balls["z"].dtype == np.int32
    assert balls["events"].shape == (B, T, 4) and balls["events"].dtype == bool
    np.testing.assert_array_equal(balls["t"][0], np.arange(T))
    assert not balls["events"][:, 0].any()


def test_many_collisions_happen(balls):
    hits = balls["events"].sum(axis=(1, 2))
    assert hits.mean() > 3  # ~4 box widths travelled in 80 steps
    assert (hits > 0).mean() > 0.9


def test_speed_is_conserved_exactly_across_collisions(balls):
    v = balls["x"][..., [1, 3]]
    speed_sq = v[..., 0] ** 2 + v[..., 1] ** 2
    np.testing.assert_array_equal(speed_sq, np.broadcast_to(speed_sq[:, :1], speed_sq.shape))
    speed = np.sqrt(speed_sq[:, 0])
    assert speed.min() >= SPEED_RANGE[0] * (1 - 1e-6) and speed.max() <= SPEED_RANGE[1] * (1 + 1e-6)


def test_positions_stay_inside_the_box(balls):
    p = balls["x"][..., [0, 2]]
    assert p.min() >= 0.0 and p.max() <= 1.0


def test_reflection_reverses_exactly_the_normal_component(balls):
    v = balls["x"][..., [1, 3]]
    ev = balls["events"]
    for axis, walls in ((0, [0, 1]), (1, [2, 3])):  # x: left, right; y: bottom, top
        hit = ev[:, 1:, walls].any(-1)
        before, after = v[:, :-1, axis], v[:, 1:, axis]
        np.testing.assert_array_equal(after[hit], -before[hit])
        np.testing.assert_array_equal(after[~hit], before[~hit])
        assert hit.sum() > 100
    # a wall is hit only when the ball moves towards it
    assert np.all(v[:, :-1, 0][ev[:, 1:, 0]] < 0) and np.all(v[:, :-1, 0][ev[:, 1:, 1]] > 0)
    assert np.all(v[:, :-1, 1][ev[:, 1:, 2]] < 0) and np.all(v[:, :-1, 1][ev[:, 1:, 3]] > 0)


def test_modes_change_exactly_at_collisions(balls):
    z, ev, v = balls["z"], balls["events"], balls["x"][..., [1, 3]]
    np.testing.assert_array_equal(z[:, 1:] != z[:, :-1], ev[:, 1:].any(-1))
    np.testing.assert_array_equal(z, 2 * (v[..., 0] < 0) + (v[..., 1] < 0))
    assert set(np.unique(z)) == {0, 1, 2, 3}


def test_trajectory_matches_the_folded_straight_line(balls):
    x = balls["x"].astype(np.float64)
    p0, v0 = x[:, 0, [0, 2]], x[:, 0, [1, 3]]
    u = p0[:, None] + np.arange(T)[None, :, None] * v0[:, None]  # (B, T, 2) unfolded motion
    tri = 1 - np.abs(np.mod(u, 2) - 1)
    np.testing.assert_allclose(x[..., [0, 2]], tri, atol=1e-4)
    # wall hits: the unfolded line crosses an integer; skip steps that land within rounding of a wall
    crossed = np.floor(u[:, 1:]) != np.floor(u[:, :-1])
    clear = np.abs(u - np.round(u)) > 1e-4
    ok = clear[:, 1:] & clear[:, :-1]
    hits = np.stack([balls["events"][:, 1:, :2].any(-1), balls["events"][:, 1:, 2:].any(-1)], axis=-1)
    np.testing.assert_array_equal(hits[ok], crossed[ok])
    assert ok.mean() > 0.99


def test_observation_noise_has_the_stated_covariance(balls):
    r = (balls["y"] - balls["x"][..., [0, 2]]).reshape(-1, 2).astype(np.float64)
    cov = np.cov(r, rowvar=False)
    n = r.shape[0]
    assert np.all(np.abs(r.mean(0)) < 5 * NOISE_STD / np.sqrt(n))
    np.testing.assert_allclose(np.diag(cov), NOISE_STD**2, rtol=5 * np.sqrt(2 / n))
    assert abs(cov[0, 1]) < 5 * NOISE_STD**2 / np.sqrt(n)


# one shape for every split, and the fixture's shape for the resized one: each new shape costs a compilation
LAYOUT = SplitLayout(train=(32, 30), validation=(32, 30), test=(32, 30))


def test_splits_sizes_disjoint_and_reproducible():
    d = generate_pong(jax.random.key(0), LAYOUT)
    for split, (n, length) in zip(d[:3], LAYOUT):
        assert split.y.shape == (n, length, 2) and split.x.shape == (n, length, 4) and split.z.shape == (n, length)
    starts = np.concatenate([np.asarray(s.x[:, 0]) for s in d[:3]])
    assert np.unique(starts, axis=0).shape[0] == starts.shape[0]  # no sequence appears twice
    np.testing.assert_array_equal(np.asarray(d.C) @ np.asarray(d.train.x[0, 0]), np.asarray(d.train.x[0, 0, [0, 2]]))
    np.testing.assert_allclose(np.asarray(d.R), NOISE_STD**2 * np.eye(2), rtol=1e-6)

    same = generate_pong(jax.random.key(0), LAYOUT)
    for a, b in zip(jax.tree.leaves(d), jax.tree.leaves(same)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    other = generate_pong(jax.random.key(1), LAYOUT)
    for a, b in zip(d[:3], other[:3]):
        assert not np.allclose(np.asarray(a.y), np.asarray(b.y))
    # each split has its own key: a bigger training set leaves validation and test unchanged
    bigger = generate_pong(jax.random.key(0), LAYOUT._replace(train=(B, T)))
    np.testing.assert_array_equal(np.asarray(bigger.test.y), np.asarray(d.test.y))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"speed_range": (0.0, 0.1)}, "speed_range"),
        ({"speed_range": (0.5, 1.0)}, "speed_range"),
        ({"noise_std": -0.1}, "noise_std"),
        ({"num_steps": 0}, "num_steps"),
        ({"num_sequences": 2.0}, "num_sequences"),
    ],
)
def test_bad_input_is_rejected(kwargs, match):
    args = {"num_sequences": 4, "num_steps": 10} | kwargs
    with pytest.raises(ValueError, match=match):
        simulate_pong(jax.random.key(0), **args)


def test_bad_layout_is_rejected():
    with pytest.raises(ValueError, match="layout.test"):
        generate_pong(jax.random.key(0), SplitLayout((2, 5), (1, 5), (0, 5)))


def test_step_maps_reproduce_every_single_wall_step(balls):
    """x_t = A_w x_{t-1} + b_w with w the wall hit between t-1 and t (0: none), for every step of the sample
    that hits at most one wall."""
    A, b = step_maps()
    x, hits = balls["x"].astype(np.float64), balls["events"]
    single = hits[:, 1:].sum(-1) <= 1
    w = np.where(hits[:, 1:].any(-1), 1 + np.argmax(hits[:, 1:], -1), 0)[single]
    predicted = np.einsum("nij,nj->ni", A[w], x[:, :-1][single]) + b[w]
    assert {0, 1, 2, 3, 4} <= set(w.tolist())
    np.testing.assert_allclose(predicted, x[:, 1:][single], atol=1e-5)

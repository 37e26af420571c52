"""Randomised Boyan chain generator, Algorithm 2 of App. F.3 (0-based states here; paper state i is index i-1).

The sparsity pattern is written out from the algorithm's lines 10-18; ergodicity is checked by a positive power of
P (primitive matrix); r = (I - gamma P) v* is checked in NumPy float64 and through value_function (v_pi = v*);
the uniform draws are checked with Kolmogorov-Smirnov tests pooled over a batch of tasks (fail when p < P_MIN).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from memlab.ictd.boyan import boyan_chain, chain_statistics, uniform_open
from memlab.ictd.mrp import MRP, Task, sample_trajectory, stationary_distribution, value_function

P_MIN = 1e-4


def algorithm2_pattern(m: int) -> np.ndarray:
    """Boolean (m, m): the transitions Algorithm 2 makes nonzero, translated to 0-based indices."""
    mask = np.zeros((m, m), bool)
    for i in range(1, m - 1):  # paper rows i = 1..m-2: i -> i+1, i -> i+2
        mask[i - 1, i] = mask[i - 1, i + 1] = True
    mask[m - 2, m - 1] = True  # paper m-1 -> m
    mask[m - 1, :] = True  # paper m -> z, z > 0 everywhere
    return mask


M, D, GAMMA = 8, 4, 0.9  # one shape for most tests: each (m, d) compiles once (~1 s)
SHAPES = [(2, D), (3, D), (M, D), (64, D)]


@pytest.fixture(scope="module")
def keys() -> jax.Array:
    return jax.random.split(jax.random.key(3), 200)


@pytest.fixture(scope="module")
def tasks(keys) -> Task:
    """200 tasks of m = M states, d = D, batched with vmap over keys."""
    return jax.vmap(lambda k: boyan_chain(k, M, D, GAMMA))(keys)


def leaves_equal(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.parametrize("m, d", SHAPES)
def test_transition_matrix_row_stochastic_with_algorithm2_pattern(m, d):
    P = np.asarray(boyan_chain(jax.random.key(m), m, d, 0.9).mrp.P, np.float64)
    assert P.shape == (m, m)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(P > 0, algorithm2_pattern(m))
    assert P.min() >= 0 and P.max() <= 1
    if m >= 3:  # line 12-13: one eps per row, split between i+1 and i+2
        rows = np.arange(m - 2)
        np.testing.assert_allclose(P[rows, rows + 1] + P[rows, rows + 2], 1.0, atol=1e-6)


@pytest.mark.parametrize("m, d", SHAPES)
def test_chain_is_ergodic(m, d):
    # irreducible and aperiodic <=> primitive: P^k > 0 entrywise for some k <= (m-1)^2 + 1 (Wielandt)
    positive = np.asarray(boyan_chain(jax.random.key(10 + m), m, d, GAMMA).mrp.P) > 0
    reach = np.eye(m, dtype=bool)
    for _ in range((m - 1) ** 2 + 1):
        reach = (reach.astype(int) @ positive.astype(int)) > 0
        if reach.all():
            return
    pytest.fail("no power of P is entrywise positive")


@pytest.mark.parametrize("m, d, gamma", [(M, D, 0.0), (30, 2, 0.99)])
def test_rewards_make_v_star_the_value_function(x64, m, d, gamma):
    task = boyan_chain(jax.random.key(1), m, d, gamma)
    assert task.mrp.P.dtype == jnp.float64
    X, w, v, P = (np.asarray(a) for a in (task.features, task.w_star, task.v_star, task.mrp.P))
    np.testing.assert_allclose(v, X @ w, rtol=0, atol=1e-14)  # line 5: v*(s) = <w*, x(s)>
    np.testing.assert_allclose(np.asarray(task.mrp.r), (np.eye(m) - gamma * P) @ v, rtol=0, atol=1e-13)  # line 19
    np.testing.assert_allclose(np.asarray(value_function(task.mrp)), v, rtol=0, atol=1e-10)
    assert float(task.mrp.gamma) == gamma


def test_p0_features_and_w_star_ranges(tasks):
    p0 = np.asarray(tasks.mrp.p0)
    assert p0.min() > 0
    np.testing.assert_allclose(p0.sum(axis=1), 1.0, atol=1e-6)
    for a in (tasks.features, tasks.w_star):
        assert np.all(np.abs(np.asarray(a)) < 1)


def test_uniform_draws_follow_algorithm2(tasks):
    m = M
    uniform_pm1 = stats.uniform(loc=-1, scale=2).cdf
    assert stats.kstest(np.asarray(tasks.features).ravel(), uniform_pm1).pvalue >= P_MIN
    assert stats.kstest(np.asarray(tasks.w_star).ravel(), uniform_pm1).pvalue >= P_MIN
    rows = np.arange(m - 2)
    eps = np.asarray(tasks.mrp.P)[:, rows, rows + 1].ravel()  # lines 11-12
    assert stats.kstest(eps, "uniform").pvalue >= P_MIN
    # z and p0 are normalised U(0, 1)^m: every entry has mean 1/m, and the two are independent draws
    np.testing.assert_allclose(np.asarray(tasks.mrp.P)[:, m - 1].mean(axis=0), 1 / m, atol=0.01)
    np.testing.assert_allclose(np.asarray(tasks.mrp.p0).mean(axis=0), 1 / m, atol=0.01)
    assert not np.allclose(np.asarray(tasks.mrp.P)[:, m - 1], np.asarray(tasks.mrp.p0))


def test_uniform_open_excludes_the_lower_end(monkeypatch):
    # jax.random.uniform may return minval exactly; Algorithm 2 draws from open intervals
    monkeypatch.setattr(jax.random, "uniform", lambda key, shape, dtype, lo, hi: jnp.full(shape, lo, dtype))
    for lo, hi in ((-1.0, 1.0), (0.0, 1.0)):
        u = np.asarray(uniform_open(jax.random.key(0), (3,), lo, hi))
        assert np.all(u > lo) and np.all(u < lo + 1e-6)


def test_generated_task_passes_mrp_validation():
    task = boyan_chain(jax.random.key(4), M, D, GAMMA)
    mrp = task.mrp
    MRP(mrp.P, mrp.r, mrp.gamma, mrp.p0)  # re-running the concrete checks raises nothing


def test_batched_generation_shapes_and_consistency(keys, tasks):
    B = keys.shape[0]
    assert tasks.mrp.P.shape == (B, M, M) and tasks.mrp.r.shape == (B, M) and tasks.mrp.p0.shape == (B, M)
    assert tasks.mrp.gamma.shape == (B,)
    assert tasks.features.shape == (B, M, D) and tasks.w_star.shape == (B, D) and tasks.v_star.shape == (B, M)
    one = boyan_chain(keys[3], M, D, GAMMA)
    for a, b in zip(jax.tree.leaves(jax.tree.map(lambda x: x[3], tasks)), jax.tree.leaves(one)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_same_key_same_task_distinct_keys_distinct_tasks(tasks):
    a, b = boyan_chain(jax.random.key(6), M, D, GAMMA), boyan_chain(jax.random.key(6), M, D, GAMMA)
    assert leaves_equal(a, b)
    c = boyan_chain(jax.random.key(7), M, D, GAMMA)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(c)):
        if x.ndim:  # every random field differs (gamma is the input)
            assert not np.allclose(x, y)
    for field in (tasks.features, tasks.w_star, tasks.mrp.P, tasks.mrp.p0):
        flat = np.asarray(field).reshape(field.shape[0], -1)
        assert len(np.unique(flat, axis=0)) == field.shape[0]


def test_jit_with_traced_gamma_and_raw_keys():
    key = jax.random.PRNGKey(9)
    jitted = jax.jit(lambda k, g: boyan_chain(k, M, D, g))(key, 0.7)
    eager = boyan_chain(key, M, D, 0.7)
    for x, y in zip(jax.tree.leaves(jitted), jax.tree.leaves(eager)):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kwargs, match", [
    ({"m": 1}, r"m must be an int >= 2"),
    ({"m": 4.0}, r"m must be an int >= 2"),
    ({"d": 0}, r"d must be an int >= 1"),
    ({"gamma": 1.0}, r"gamma must be a scalar in \[0, 1\)"),
    ({"gamma": -0.5}, r"gamma must be a scalar in \[0, 1\)"),
    ({"gamma": float("nan")}, r"gamma must be a scalar in \[0, 1\)"),
])
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        boyan_chain(jax.random.key(0), **{"m": 5, "d": 2, "gamma": 0.9, **kwargs})


def test_chain_statistics_against_a_long_trajectory_and_the_kernel_formula():
    """Lag-1 reward correlation against a 200k-step stationary trajectory; min_s M_pi(s, s) against eq. (27) by hand."""
    key, m, d, gamma = jax.random.key(7), 12, 3, 0.9
    got = chain_statistics(key, 1, m, d, gamma)
    task = boyan_chain(jax.random.split(key, 1)[0], m, d, gamma)
    states, rewards = sample_trajectory(task.mrp, jax.random.key(8), 200_000, stationary=True)
    r = np.asarray(rewards, float)
    assert got["reward_lag1_mean"] == pytest.approx(np.corrcoef(r[:-1], r[1:])[0, 1], abs=0.02)
    assert got["reward_lag1_mean"] < 0  # Bellman-consistent rewards of these chains alternate
    X, mu = np.asarray(task.features, float), np.asarray(stationary_distribution(task.mrp), float)
    E = mu[None, :] * np.exp(X @ X.T)
    assert got["self_weight_mean"] == pytest.approx((np.diagonal(E) / E.sum(1)).min(), rel=1e-4)
    assert got["margin_needed"] == pytest.approx(0.95) and got["assumption_holds"] == 0.0

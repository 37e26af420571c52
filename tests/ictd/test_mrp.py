"""MRP container, value function, stationary distribution, MSVE and trajectory sampling (paper 2, section 2.2).

ROW convention: P[s, s'] = p(s' | s). References are NumPy float64: the value function by iterating the Bellman
operator of eq. (7) to convergence, the stationary distribution from numpy.linalg.eig. Sampled frequencies are
checked with chi-square goodness-of-fit tests at fixed seeds (fail when p < P_MIN; zero-probability cells must be
empty) and long-run state frequencies with a binomial tolerance widened by the chain's autocorrelation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from memlab.ictd.mrp import MRP, msve, sample_trajectory, stationary_distribution, value_function

P_MIN = 1e-4  # chi-square p-value below which sampled frequencies are rejected


def random_mrp(seed: int, m: int = 5, gamma: float = 0.9, zeros=()) -> MRP:
    """Random ergodic MRP (dense rows except the given (s, s') entries, which are exactly 0)."""
    rng = np.random.default_rng(seed)
    P = rng.uniform(0.2, 1.0, size=(m, m))
    for s, s_next in zeros:
        P[s, s_next] = 0.0
    P /= P.sum(axis=1, keepdims=True)
    p0 = rng.uniform(0.2, 1.0, size=m)
    return MRP(P, rng.normal(size=m), gamma, p0 / p0.sum())


def bellman_iteration_ref(P, r, gamma, tol=1e-14) -> np.ndarray:
    """v <- r + gamma P v (eq. 7) in float64 until the update is below tol."""
    P, r = np.asarray(P, np.float64), np.asarray(r, np.float64)
    v = np.zeros_like(r)
    for _ in range(100_000):
        v_new = r + gamma * P @ v
        if np.max(np.abs(v_new - v)) < tol:
            return v_new
        v = v_new
    raise AssertionError("Bellman iteration did not converge")


def stationary_ref(P) -> np.ndarray:
    """Left eigenvector of P for eigenvalue 1, normalised to sum 1 (float64)."""
    w, V = np.linalg.eig(np.asarray(P, np.float64).T)
    mu = np.real(V[:, np.argmin(np.abs(w - 1.0))])
    return mu / mu.sum()


def assert_fits(counts, probs):
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    assert np.all(counts[probs == 0] == 0), (counts, probs)
    pos = probs > 0
    expected = counts.sum() * probs[pos] / probs[pos].sum()
    assert stats.chisquare(counts[pos], expected).pvalue >= P_MIN, (counts, expected)


# ---------------------------------------------------------------- container and validation

def test_fields_are_arrays_and_accept_numpy_and_lists():
    mrp = MRP([[0.5, 0.5], [1.0, 0.0]], [1.0, -1.0], 0.5, [1.0, 0.0])
    assert all(isinstance(a, jax.Array) for a in (mrp.P, mrp.r, mrp.gamma, mrp.p0))
    assert mrp.num_states == 2 and mrp.gamma.shape == ()


GOOD = {"P": np.array([[0.5, 0.5, 0.0], [0.0, 0.2, 0.8], [1.0, 0.0, 0.0]]),
        "r": np.array([1.0, 0.0, -1.0]), "gamma": 0.9, "p0": np.array([0.2, 0.3, 0.5])}


@pytest.mark.parametrize("field, value, match", [
    ("P", np.ones((2, 3)) / 3, r"P must be a non-empty square matrix"),
    ("P", np.ones(3) / 3, r"P must be a non-empty square matrix"),
    ("P", np.zeros((0, 0)), r"P must be a non-empty square matrix"),
    ("P", np.array([[1.2, -0.2, 0.0], [0.0, 0.2, 0.8], [1.0, 0.0, 0.0]]), r"row 0 of P .*negative"),
    ("P", np.array([[0.5, 0.5, 0.0], [0.0, 0.2, 0.7], [1.0, 0.0, 0.0]]), r"row 1 of P .*must sum to 1, sums to 0\.9"),
    # column-stochastic but not row-stochastic: the belief study's convention is rejected here
    ("P", np.array([[0.5, 0.0, 1.0], [0.5, 0.2, 0.0], [0.0, 0.8, 0.0]]), r"row 0 of P .*rows of P must sum to 1"),
    ("P", np.array([[np.nan, 0.5, 0.5], [0.0, 0.2, 0.8], [1.0, 0.0, 0.0]]), r"row 0 of P .*NaN"),
    ("r", np.zeros(2), r"r must have shape \(m,\) = \(3,\)"),
    ("r", np.array([0.0, np.nan, 1.0]), r"r contains NaN"),
    ("gamma", 1.0, r"gamma must lie in \[0, 1\)"),
    ("gamma", -0.1, r"gamma must lie in \[0, 1\)"),
    ("gamma", np.nan, r"gamma contains NaN"),
    ("gamma", np.array([0.5, 0.5]), r"gamma must be a scalar"),
    ("p0", np.ones(2) / 2, r"p0 must have shape \(m,\) = \(3,\)"),
    ("p0", np.array([0.2, 0.3, 0.4]), r"p0 must sum to 1"),
    ("p0", np.array([1.2, -0.2, 0.0]), r"p0 has negative entries"),
    ("p0", np.array([np.nan, 0.5, 0.5]), r"p0 contains NaN"),
])
def test_bad_input_raises(field, value, match):
    with pytest.raises(ValueError, match=match):
        MRP(**{**GOOD, field: value})


def test_good_input_and_gamma_zero_accepted():
    MRP(**GOOD)
    MRP(**{**GOOD, "gamma": 0.0})


def test_checks_skipped_on_tracers_and_mrp_is_a_pytree():
    bad_P = jnp.ones((3, 3))  # not stochastic; only concrete arrays are checked
    out = jax.jit(lambda P: MRP(P, GOOD["r"], GOOD["gamma"], GOOD["p0"]).P.sum())(bad_P)
    assert float(out) == 9.0
    batch = jax.tree.map(lambda *a: jnp.stack(a), random_mrp(0), random_mrp(1))
    v = jax.vmap(value_function)(batch)
    np.testing.assert_allclose(v[1], value_function(random_mrp(1)), rtol=1e-5)


# ---------------------------------------------------------------- value function, eq. (7)

@pytest.mark.parametrize("seed, m, gamma", [(0, 1, 0.5), (1, 4, 0.0), (2, 7, 0.9), (3, 12, 0.99)])
def test_value_function_matches_bellman_iteration(x64, seed, m, gamma):
    mrp = random_mrp(seed, m, gamma)
    ref = bellman_iteration_ref(mrp.P, mrp.r, gamma)
    np.testing.assert_allclose(np.asarray(value_function(mrp)), ref, rtol=0, atol=1e-10)


def test_value_function_is_bellman_fixed_point(x64):
    mrp = random_mrp(4, 6, 0.95, zeros=[(0, 1), (2, 2), (5, 0)])
    v = np.asarray(value_function(mrp))
    T_v = np.asarray(mrp.r) + 0.95 * np.asarray(mrp.P) @ v  # (T^pi v)(s) = r(s) + gamma sum_s' p(s'|s) v(s')
    np.testing.assert_allclose(T_v, v, rtol=0, atol=1e-12)


def test_value_function_float32_and_jit():
    mrp = random_mrp(5, 6, 0.9)
    v = jax.jit(value_function)(mrp)
    assert v.dtype == jnp.float32
    np.testing.assert_allclose(v, bellman_iteration_ref(mrp.P, mrp.r, 0.9), atol=1e-4)


# ---------------------------------------------------------------- stationary distribution and MSVE

@pytest.mark.parametrize("seed, m, zeros", [(0, 1, ()), (1, 2, [(0, 0)]), (2, 6, ()), (3, 9, [(0, 0), (1, 2), (8, 3)])])
def test_stationary_distribution(x64, seed, m, zeros):
    mrp = random_mrp(seed, m, zeros=zeros)
    mu = np.asarray(jax.jit(stationary_distribution)(mrp))
    np.testing.assert_allclose(mu @ np.asarray(mrp.P), mu, rtol=0, atol=1e-12)
    assert abs(mu.sum() - 1.0) < 1e-12 and mu.min() > 0
    np.testing.assert_allclose(mu, stationary_ref(mrp.P), rtol=0, atol=1e-10)


def test_stationary_distribution_of_sparse_cycle_with_self_loop(x64):
    # 0 -> 1 -> 2 -> {0, 2}: an ergodic chain with many zero transitions; mu solves mu P = mu by hand
    P = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.5, 0.0, 0.5]])
    mu = np.asarray(stationary_distribution(MRP(P, np.zeros(3), 0.5, np.ones(3) / 3)))
    np.testing.assert_allclose(mu, np.array([1.0, 1.0, 2.0]) / 4, rtol=0, atol=1e-12)


def test_msve(x64):
    mrp = random_mrp(6, 5)
    v, mu = np.asarray(value_function(mrp)), stationary_ref(mrp.P)
    assert abs(float(msve(mrp, v))) < 1e-20
    assert abs(float(msve(mrp, v + 0.3)) - 0.09) < 1e-12  # mu sums to 1
    v_hat = np.random.default_rng(0).normal(size=5)
    assert abs(float(msve(mrp, v_hat)) - np.sum(mu * (v_hat - v) ** 2)) < 1e-12
    with pytest.raises(ValueError, match=r"v_hat must have shape \(m,\) = \(5,\)"):
        msve(mrp, np.zeros(4))


# ---------------------------------------------------------------- sampling, section 2.2

def test_trajectory_shapes_rewards_and_determinism():
    mrp = random_mrp(7, 5)
    states, rewards = sample_trajectory(mrp, jax.random.key(0), 50)
    assert states.shape == (51,) and states.dtype == jnp.int32 and rewards.shape == (50,)
    assert states.min() >= 0 and states.max() < 5
    np.testing.assert_array_equal(rewards, np.asarray(mrp.r)[np.asarray(states[:-1])])  # R_{t+1} = r(S_t)
    again = sample_trajectory(mrp, jax.random.key(0), 50)
    np.testing.assert_array_equal(again[0], states)
    assert not np.array_equal(sample_trajectory(mrp, jax.random.key(1), 50)[0], states)


def test_trajectory_length_zero_and_bad_length():
    states, rewards = sample_trajectory(random_mrp(0, 3), jax.random.key(0), 0)
    assert states.shape == (1,) and rewards.shape == (0,)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="length must be an int >= 0"):
            sample_trajectory(random_mrp(0, 3), jax.random.key(0), bad)


def test_trajectory_under_jit_and_vmap_over_keys():
    mrp = random_mrp(8, 4)
    keys = jax.random.split(jax.random.key(3), 6)
    states, rewards = jax.jit(jax.vmap(lambda k: sample_trajectory(mrp, k, 9, stationary=True)))(keys)
    assert states.shape == (6, 10) and rewards.shape == (6, 9)
    np.testing.assert_array_equal(states[2], sample_trajectory(mrp, keys[2], 9, stationary=True)[0])
    np.testing.assert_array_equal(rewards, np.asarray(mrp.r)[np.asarray(states[:, :-1])])


def test_transitions_follow_rows_of_P():
    zeros = [(0, 1), (1, 1), (2, 0), (2, 3), (3, 2)]
    mrp = random_mrp(9, 4, zeros=zeros)
    states = np.asarray(sample_trajectory(mrp, jax.random.key(4), 20_000)[0])
    counts = np.zeros((4, 4))
    np.add.at(counts, (states[:-1], states[1:]), 1)
    P = np.asarray(mrp.P, np.float64)
    for s in range(4):  # next-state counts out of s are draws from row s = p(. | s)
        assert_fits(counts[s], P[s])


def test_long_run_frequencies_match_stationary_distribution():
    mrp = random_mrp(10, 5)
    n = 20_000
    states = np.asarray(sample_trajectory(mrp, jax.random.key(5), n)[0][1:])
    freq = np.bincount(states, minlength=5) / n
    mu = stationary_ref(mrp.P)
    lam = np.sort(np.abs(np.linalg.eigvals(np.asarray(mrp.P, np.float64))))[-2]  # second eigenvalue modulus
    inflation = (1 + lam) / (1 - lam)  # variance factor of an ergodic average under autocorrelation lam^k
    tol = 5 * np.sqrt(mu * (1 - mu) / n * inflation)
    assert np.all(np.abs(freq - mu) < tol), (freq, mu, tol)


@pytest.mark.parametrize("stationary", [False, True])
def test_initial_state_distribution(stationary):
    mrp = random_mrp(11, 4)
    keys = jax.random.split(jax.random.key(6), 4000)
    s0 = jax.vmap(lambda k: sample_trajectory(mrp, k, 1, stationary=stationary)[0][0])(keys)
    probs = stationary_ref(mrp.P) if stationary else np.asarray(mrp.p0, np.float64)
    assert_fits(np.bincount(np.asarray(s0), minlength=4), probs)
    assert not np.allclose(stationary_ref(mrp.P), np.asarray(mrp.p0), atol=0.05)  # the two cases differ

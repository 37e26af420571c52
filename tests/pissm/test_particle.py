"""Bootstrap particle filter: systematic resampling keeps floor/ceil(P w_i) copies; on a linear-Gaussian model
the filter converges to the Kalman filter (means and covariances within Monte-Carlo error estimated from
independent repeats, log-likelihood unbiased), also with missing observations and ``observe_initial``; on Pong
with the true reflections its position error is near the information limit of the deterministic motion, far
below the observation noise; vmap over sequences; bad inputs raise ValueError."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.kalman import kalman_filter, sample_lgssm
from memlab.pissm.data.pong import NOISE_STD, SPEED_RANGE, reflect_step, simulate_pong
from memlab.pissm.particle import bootstrap_particle_filter, systematic_resample

A = np.array([[0.9, 0.2], [-0.1, 0.95]], np.float32)
C = np.array([[1.0, 0.5]], np.float32)
Q = np.array([[0.1, 0.02], [0.02, 0.05]], np.float32)
R = np.array([[0.2]], np.float32)
M0, P0 = np.array([0.5, -0.5], np.float32), np.eye(2, dtype=np.float32)
Q_CHOL, P0_CHOL = np.linalg.cholesky(Q), np.linalg.cholesky(P0)


def lg_initial(key, num):
    return M0 + jax.random.normal(key, (num, 2)) @ P0_CHOL.T


def lg_transition(key, x):
    return A @ x + Q_CHOL @ jax.random.normal(key, (2,))


def lg_log_density(y, x):
    e = y - C @ x
    return -0.5 * (np.log(2 * np.pi) + np.log(R[0, 0]) + e @ e / R[0, 0])


def test_systematic_resampling_keeps_floor_or_ceil_copies():
    for seed in range(5):
        k_w, k_r = jax.random.split(jax.random.key(seed))
        weights = jax.nn.softmax(3 * jax.random.normal(k_w, (257,)))
        idx = np.asarray(systematic_resample(k_r, weights))
        assert np.all(np.diff(idx) >= 0) and idx.min() >= 0 and idx.max() < 257
        counts = np.bincount(idx, minlength=257)
        expected = 257 * np.asarray(weights, np.float64)
        assert np.all(counts >= np.floor(expected) - 1e-3) and np.all(counts <= np.ceil(expected) + 1e-3)
        assert counts.sum() == 257


def repeated_filter(y, mask, observe_initial, repeats=16, num_particles=5000, seed=0):
    run = jax.jit(jax.vmap(lambda k: bootstrap_particle_filter(
        k, y, lg_initial, lg_transition, lg_log_density, num_particles, mask, observe_initial)))
    return run(jax.random.split(jax.random.key(seed), repeats))


@pytest.mark.parametrize("with_missing", [False, True])
def test_converges_to_the_kalman_filter_on_a_linear_gaussian_model(with_missing):
    T = 20
    _, y = sample_lgssm(jax.random.key(1), A, C, Q, R, M0, P0, T)
    mask = np.asarray(jax.random.bernoulli(jax.random.key(2), 0.6, (T,))) if with_missing else None
    observe_initial = with_missing  # cover both conventions
    kf = kalman_filter(y, A, C, Q, R, M0, P0, mask, observe_initial)
    prior = kalman_filter(y, A, C, Q, R, M0, P0, np.zeros(T, bool), observe_initial)
    assert np.abs(np.asarray(kf.means) - np.asarray(prior.means)).max() > 0.5  # the data matter: not vacuous
    pf = repeated_filter(y, mask, observe_initial)
    R_ = pf.means.shape[0]
    # means: the error of the pooled estimate against its Monte-Carlo standard error from the 16 repeats
    err = np.asarray(pf.means) - np.asarray(kf.means)[None]
    z = err.mean(0) / (err.std(0, ddof=1) / np.sqrt(R_))
    assert np.sqrt(np.mean(z**2)) < 2.0 and np.abs(z).max() < 5.0, z
    # and the single-run error is small in absolute terms (posterior std ~0.3-1): no run lost track
    assert np.abs(err).max() < 0.1
    cov_err = np.asarray(pf.covariances).mean(0) - np.asarray(kf.covariances)
    assert np.abs(cov_err).max() < 0.01
    # log-likelihood: exp(estimate) is unbiased, the log is close with P = 5000
    ll_err = np.asarray(pf.log_likelihoods).sum(1) - float(np.sum(kf.log_likelihoods))
    assert abs(ll_err.mean()) < 4 * ll_err.std(ddof=1) / np.sqrt(R_) + 0.01 and np.abs(ll_err).max() < 0.3
    if with_missing:
        missing = ~np.asarray(mask)
        assert np.all(np.asarray(pf.log_likelihoods)[:, missing] == 0)
        assert np.all(np.asarray(pf.ess)[:, missing] == pytest.approx(5000, rel=1e-3))


def pong_initial(key, num):
    """The generator's prior: uniform position, uniform heading, speed uniform in SPEED_RANGE."""
    k_p, k_h, k_s = jax.random.split(key, 3)
    p = jax.random.uniform(k_p, (num, 2))
    heading = jax.random.uniform(k_h, (num,), maxval=2 * jnp.pi)
    speed = jax.random.uniform(k_s, (num,), minval=SPEED_RANGE[0], maxval=SPEED_RANGE[1])
    v = speed[:, None] * jnp.stack([jnp.cos(heading), jnp.sin(heading)], -1)
    return jnp.stack([p[:, 0], v[:, 0], p[:, 1], v[:, 1]], -1)


def pong_transition(key, x):
    """True reflection step plus small jitter (5e-3 on position, 1e-3 on velocity) against particle collapse."""
    p, v, _, _ = reflect_step(x[jnp.array([0, 2])], x[jnp.array([1, 3])])
    k_p, k_v = jax.random.split(key)
    p = p + 5e-3 * jax.random.normal(k_p, (2,))
    v = v + 1e-3 * jax.random.normal(k_v, (2,))
    return jnp.stack([p[0], v[0], p[1], v[1]])


def pong_log_density(y, x):
    return -0.5 * jnp.sum((y - x[jnp.array([0, 2])]) ** 2) / NOISE_STD**2


def test_pong_position_error_is_far_below_the_observation_noise():
    num_steps, start = 60, 20
    split = simulate_pong(jax.random.key(0), 8, num_steps)
    run = jax.jit(jax.vmap(lambda k, y: bootstrap_particle_filter(
        k, y, pong_initial, pong_transition, pong_log_density, 5000, observe_initial=True)))
    out = run(jax.random.split(jax.random.key(1), 8), split.y)
    position = np.asarray(out.means)[:, start:][..., [0, 2]]
    truth = np.asarray(split.x)[:, start:][..., [0, 2]]
    rmse = np.sqrt(np.mean((position - truth) ** 2))
    observation_rmse = np.sqrt(np.mean((np.asarray(split.y)[:, start:] - truth) ** 2))
    # information limit: the unfolded motion is a straight line, so after t + 1 observations the position at t is
    # known no better than the least-squares line fit, variance NOISE_STD^2 [1 t] (X^T X)^-1 [1 t]^T per axis
    limit = []
    for t in range(start, num_steps):
        X = np.stack([np.ones(t + 1), np.arange(t + 1)], 1)
        e = np.array([1.0, t])
        limit.append(NOISE_STD**2 * e @ np.linalg.solve(X.T @ X, e))
    limit_rmse = np.sqrt(np.mean(limit))  # ~0.32 NOISE_STD
    assert rmse < 0.5 * NOISE_STD and rmse < 0.5 * observation_rmse, (rmse, observation_rmse)
    assert rmse < 1.5 * limit_rmse, (rmse, limit_rmse)


def test_vmap_over_sequences_equals_one_call_per_sequence():
    ys = jax.jit(jax.vmap(lambda k: sample_lgssm(k, A, C, Q, R, M0, P0, 10)[1]))(jax.random.split(jax.random.key(4), 3))
    keys = jax.random.split(jax.random.key(5), 3)
    one = jax.jit(lambda k, y: bootstrap_particle_filter(k, y, lg_initial, lg_transition, lg_log_density, 300,
                                                         keep_particles=True))
    batched = jax.jit(jax.vmap(one))(keys, ys)
    assert batched.particles.shape == (3, 10, 300, 2) and batched.log_weights.shape == (3, 10, 300)
    for i in range(3):
        single = one(keys[i], ys[i])
        np.testing.assert_allclose(batched.means[i], single.means, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(batched.log_likelihoods[i], single.log_likelihoods, rtol=1e-5, atol=1e-5)
    # the stored weights give back the stored moments
    w = np.exp(np.asarray(batched.log_weights, np.float64))
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.einsum("btp,btpm->btm", w, np.asarray(batched.particles)), batched.means,
                               atol=1e-5)


def test_zero_likelihood_everywhere_gives_minus_inf_not_nan():
    out = bootstrap_particle_filter(jax.random.key(0), jnp.zeros((3, 1)), lg_initial, lg_transition,
                                    lambda y, x: -jnp.inf, 100)
    assert np.all(np.isneginf(out.log_likelihoods))
    assert np.all(np.isfinite(out.means)) and np.all(np.isfinite(out.covariances))


@pytest.mark.parametrize(
    "change, match",
    [
        ({"num_particles": 0}, "num_particles must be an int >= 1"),
        ({"num_particles": 10.0}, "num_particles must be an int >= 1"),
        ({"y": jnp.zeros(5)}, "y must have shape"),
        ({"mask": np.ones(4, bool)}, "mask must be a bool array"),
        ({"y": jnp.full((5, 1), jnp.nan)}, "not finite"),
        ({"initial_sampler": lambda k, n: jnp.zeros((n,))}, "initial_sampler"),
        ({"transition_sampler": lambda k, x: jnp.zeros(3)}, "transition_sampler"),
        ({"observation_log_density": lambda y, x: jnp.zeros(2)}, "observation_log_density"),
    ],
)
def test_bad_inputs_raise_value_error(change, match):
    args = {
        "key": jax.random.key(0), "y": jnp.zeros((5, 1)), "initial_sampler": lg_initial,
        "transition_sampler": lg_transition, "observation_log_density": lg_log_density, "num_particles": 10,
        "mask": None,
    }
    args.update(change)
    with pytest.raises(ValueError, match=match):
        bootstrap_particle_filter(**args)

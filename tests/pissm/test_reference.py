"""True-dynamics particle filters as Predictions (what is new beside test_particle.py): the exact first step
(conjugate Gaussian update; Pong's box-proposal with the closed-form log p(y_0) against numerical integration),
the predictive moments assembled from the particles (against the Kalman filter on a linear-Gaussian model, with
missing steps including a missing first step), and the two true-dynamics filters: on Pong the position error is
far below the observation noise, the quadrant posterior finds the true modes, missing steps are imputed well; on
Lorenz the error is far below R and the predictive log-likelihood is near the noise-only limit; bad inputs raise."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import quad
from scipy.stats import multivariate_normal, norm, truncnorm

from memlab.kalman import kalman_filter, sample_lgssm
from memlab.pissm.data.lorenz import integrate_lorenz
from memlab.pissm.data.pong import NOISE_STD, simulate_pong
from memlab.pissm.metrics import imputation_mask, position_mse, predictive_log_likelihood
from memlab.pissm.reference import gaussian_prior_particle_filter, lorenz_particle_filter, pong_particle_filter

A = np.array([[0.9, 0.2], [-0.1, 0.95]], np.float32)
C = np.array([[1.0, 0.5]], np.float32)
Q = np.array([[0.1, 0.02], [0.02, 0.05]], np.float32)
R = np.array([[0.2]], np.float32)
M0, P0 = np.array([0.5, -0.5], np.float32), np.eye(2, dtype=np.float32)
Q_CHOL = np.linalg.cholesky(Q)


def lg_transition(key, x):
    return A @ x + Q_CHOL @ jax.random.normal(key, (2,))


@jax.jit
def repeated_lg_filter(keys, y, mask):
    return jax.vmap(lambda k: gaussian_prior_particle_filter(k, y, mask, lg_transition, C, R, M0, P0, 4000))(keys)


@pytest.mark.parametrize("first_observed", [True, False])
def test_gaussian_prior_filter_gives_the_kalman_predictive_moments(first_observed):
    T, repeats = 15, 8
    _, y = sample_lgssm(jax.random.key(1), A, C, Q, R, M0, P0, T)
    mask = np.array(jax.random.bernoulli(jax.random.key(2), 0.7, (T,)))
    mask[0] = first_observed
    kf = kalman_filter(y, A, C, Q, R, M0, P0, mask, observe_initial=True)
    pf = repeated_lg_filter(jax.random.split(jax.random.key(3), repeats), y, mask)
    pf = jax.tree_util.tree_map(np.asarray, pf)
    kf_obs_means = np.einsum("ij,tj->ti", C, kf.predicted_means)
    kf_obs_covs = np.einsum("ij,tjk,lk->til", C, kf.predicted_covariances, C) + R
    # step 0 is exact: the prior predictive and log p(y_0) of the conjugate update
    np.testing.assert_allclose(pf.obs_means[:, 0], np.broadcast_to(C @ M0, (repeats, 1)), rtol=1e-6)
    np.testing.assert_allclose(pf.obs_covs[:, 0], np.broadcast_to(C @ P0 @ C.T + R, (repeats, 1, 1)), rtol=1e-6)
    np.testing.assert_allclose(pf.log_likelihoods[:, 0], float(kf.log_likelihoods[0]), rtol=1e-5, atol=1e-6)
    # later steps: the particle moments converge to the Kalman predictive (posterior stds ~0.4-1)
    assert np.abs(pf.obs_means[:, 1:].mean(0) - kf_obs_means[1:]).max() < 0.03
    assert np.abs(pf.obs_means - kf_obs_means).max() < 0.1
    np.testing.assert_allclose(pf.obs_covs[:, 1:].mean(0), kf_obs_covs[1:], rtol=0.05)
    assert np.abs(pf.means - np.asarray(kf.means)).max() < 0.1
    np.testing.assert_allclose(pf.filtered_obs, np.einsum("ij,rtj->rti", C, pf.means), rtol=1e-5, atol=1e-6)
    ll_err = pf.log_likelihoods.sum(1) - float(np.sum(kf.log_likelihoods))
    # exp(estimate) is unbiased, so the log is biased low by O(1/P); MC spread ~0.1 here (test_particle.py)
    assert abs(ll_err.mean()) < 4 * ll_err.std(ddof=1) / np.sqrt(repeats) + 0.01 and np.abs(ll_err).max() < 0.4
    assert np.all(pf.log_likelihoods[:, ~mask] == 0) and np.all(pf.score_log_probs == 0)
    assert pf.modes is None and pf.mode_probs is None


def test_pong_first_step_is_exact():
    run = jax.jit(lambda y: pong_particle_filter(jax.random.key(0), y, num_particles=4000))
    # inside, near a wall, just outside, 4 and 6 noise stds outside the box
    for y0 in ([0.4, 0.98], [-0.07, 0.5], [1.2, -0.3]):
        out = jax.tree_util.tree_map(np.asarray, run(jnp.asarray([y0], jnp.float32)))
        # log p(y_0) = log int_box N(y_0; p, s^2 I) dp, by quadrature per axis
        expected = sum(np.log(quad(lambda p, v=v: norm.pdf(v, p, NOISE_STD), 0, 1, epsabs=1e-14)[0]) for v in y0)
        assert float(out.log_likelihoods[0]) == pytest.approx(expected, rel=1e-4, abs=1e-4)
        np.testing.assert_allclose(out.obs_means[0], [0.5, 0.5])
        np.testing.assert_allclose(out.obs_covs[0], (1 / 12 + NOISE_STD**2) * np.eye(2), rtol=1e-6)
        # the filtered position is the mean of N(y_0, s^2) truncated to [0, 1], per axis
        a, b = -np.array(y0) / NOISE_STD, (1 - np.array(y0)) / NOISE_STD
        posterior_mean = np.array(y0) + NOISE_STD * np.array([truncnorm(*ab).mean() for ab in zip(a, b, strict=True)])
        np.testing.assert_allclose(out.filtered_obs[0], posterior_mean, atol=2e-3)
        assert np.all(np.isfinite(out.means)) and out.mode_probs.shape == (1, 4)


@pytest.fixture(scope="module")
def pong_run():
    split = simulate_pong(jax.random.key(0), 6, 50)
    mask = imputation_mask(jax.random.key(5), 6, 50)
    full = jnp.ones((6, 50), bool)
    run = jax.jit(jax.vmap(lambda k, y, m: pong_particle_filter(k, y, m, num_particles=3000)))
    keys = jax.random.split(jax.random.key(1), 6)
    return split, np.asarray(mask), run(keys, split.y, full), run(keys, split.y, mask)


def test_pong_filter_tracks_far_below_the_observation_noise_and_finds_the_modes(pong_run):
    split, _, out, _ = pong_run
    truth = split.x[..., jnp.array([0, 2])]
    mse = np.asarray(position_mse(out.filtered_obs[None], truth))
    late = np.asarray(position_mse(out.filtered_obs[None, :, 10:], truth[:, 10:]))
    assert mse.mean() < 0.35 * NOISE_STD**2 and late.mean() < 0.25 * NOISE_STD**2, (mse, late)
    # one-step predictive: log-likelihood per step below the noise-only limit E log N(y; p, s^2 I), and near it
    limit = -np.log(2 * np.pi * NOISE_STD**2) - 1
    ll = float(predictive_log_likelihood(out.log_likelihoods[None, :, 1:]).mean())
    assert limit - 0.5 < ll < limit + 0.2, (ll, limit)
    probs = np.asarray(out.mode_probs)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
    accuracy = np.mean(probs[:, 5:].argmax(-1) == np.asarray(split.z)[:, 5:])
    assert accuracy > 0.85, accuracy


def test_pong_filter_imputes_missing_steps(pong_run):
    split, mask, _, out = pong_run
    truth = split.x[..., jnp.array([0, 2])]
    assert np.all(np.asarray(out.log_likelihoods)[~mask] == 0)
    imputed = np.asarray(position_mse(out.filtered_obs[None], truth, ~mask))
    # carrying the last observation forward (what the observation-only model imputes) is much worse
    y = np.asarray(split.y)
    last = np.maximum.accumulate(np.where(mask, np.arange(mask.shape[1]), 0), axis=1)
    carried = np.take_along_axis(y, last[..., None], axis=1)
    naive = np.asarray(position_mse(carried[None], truth, ~mask))
    assert imputed.mean() < NOISE_STD**2 and imputed.mean() < 0.5 * naive.mean(), (imputed, naive)
    # at a missing step the filtered estimate is the one-step prediction
    np.testing.assert_allclose(np.asarray(out.filtered_obs)[~mask], np.asarray(out.obs_means)[~mask], atol=1e-5)


def test_lorenz_filter_tracks_far_below_the_observation_noise(x64):
    start = integrate_lorenz([1.0, 1.0, 25.0], 2, delta_t=10.0, substeps=10_000)[-1]  # onto the attractor
    x = integrate_lorenz(start, 60, substeps=100)
    y = x + np.sqrt(0.5) * np.random.default_rng(0).normal(size=x.shape)
    with jax.enable_x64(False):
        run = jax.jit(lambda k, y: lorenz_particle_filter(k, y, num_particles=1000))
        out = jax.tree_util.tree_map(np.asarray, run(jax.random.key(0), jnp.asarray(y, jnp.float32)))
    mse = np.mean((out.filtered_obs[5:] - x[5:]) ** 2)
    assert mse < 0.15, mse  # R = 0.5 I
    expected = multivariate_normal([0, 0, 25], 100 * np.eye(3) + 0.5 * np.eye(3)).logpdf(y[0])
    assert out.log_likelihoods[0] == pytest.approx(expected, rel=1e-5)
    limit = -1.5 * np.log(2 * np.pi * 0.5) - 1.5  # E log N(y; x, R)
    assert limit - 0.5 < out.log_likelihoods[1:].mean() < limit + 0.3, out.log_likelihoods[1:].mean()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: pong_particle_filter(jax.random.key(0), jnp.zeros((4, 3))), r"y must have shape \(T, 2\)"),
        (lambda: pong_particle_filter(jax.random.key(0), jnp.zeros((4, 2)), noise_std=0.0), "noise_std"),
        (lambda: pong_particle_filter(jax.random.key(0), jnp.zeros((4, 2)), jitter=(1.0, 2.0)), "jitter must"),
        (lambda: pong_particle_filter(jax.random.key(0), jnp.zeros((4, 2)), jitter=-1.0), "jitter must"),
        (lambda: pong_particle_filter(jax.random.key(0), jnp.zeros((4, 2)), num_particles=0), "num_particles"),
        (lambda: pong_particle_filter(jax.random.key(0), jnp.zeros((4, 2)), speed_range=(0.1, 1.5)), "speed_range"),
        (lambda: lorenz_particle_filter(jax.random.key(0), jnp.zeros((4, 2))), r"y must have shape \(T, 3\)"),
        (lambda: lorenz_particle_filter(jax.random.key(0), jnp.zeros((4, 3)), substeps=0), "substeps"),
        (lambda: lorenz_particle_filter(jax.random.key(0), jnp.zeros((4, 3)), R=-np.eye(3)), "R must be positive"),
        (lambda: lorenz_particle_filter(jax.random.key(0), jnp.zeros((4, 3)), R=np.zeros((3, 3))),
         "R must be positive definite"),
        (lambda: gaussian_prior_particle_filter(jax.random.key(0), jnp.zeros((4, 1)), None, lg_transition, C, R,
                                                M0, np.eye(3), 10), "initial_cov must have shape"),
    ],
)
def test_bad_inputs_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()

"""True-dynamics particle filters: the high-cost posterior reference of section 7 (Fig. 4, "Particle Filter (PF)
estimates") for Pong and Lorenz, returned as ``Predictions`` so the metrics score them like every model.

Both run ``particle.bootstrap_particle_filter`` with the data set's own dynamics from step 1 on, after an exact
step 0 (draws from p(x_0 | y_0), exact log p(y_0)): ``gaussian_prior_particle_filter`` (Lorenz) and
``pong_particle_filter`` (the generator's prior). Our choice: a small artificial process noise ``jitter`` keeps a
bootstrap filter of deterministic dynamics from collapsing. One sequence per call; vmap and jit outside.

Step 0, the outputs per step and the jitter: docs/studies/pissm.md, "Particle filters".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_covariance, check_int, check_matrix, is_concrete
from memlab.kalman import check_observations, update
from memlab.pissm.data.lorenz import DELTA_T, NOISE_VAR, lorenz_flow
from memlab.pissm.data.pong import NOISE_STD, OBSERVATION_MATRIX, SPEED_RANGE, pong_mode, reflect_step
from memlab.pissm.metrics import gaussian_log_density
from memlab.pissm.particle import bootstrap_particle_filter
from memlab.pissm.predictions import Predictions

PONG_JITTER = (5e-3, 1e-3, 5e-3, 1e-3)  # std of the artificial noise on [p_x, v_x, p_y, v_y] per step
PONG_MODES = 4  # velocity quadrants, data.pong.pong_mode
LORENZ_JITTER = 0.05  # std of the artificial noise per coordinate per step (the observation noise std is 0.71)
LORENZ_SUBSTEPS = 4  # RK4 steps per Delta t = 0.01: error per step <= 1e-7 against dt = 1e-5, far below the jitter
# A broad Gaussian prior over the attractor (x in +-20, y in +-27, z in 0..50); pass the training split's moments
# of x to match the data better. Only step 0's log-likelihood depends noticeably on it.
LORENZ_PRIOR_MEAN = (0.0, 0.0, 25.0)
LORENZ_PRIOR_STD = 10.0


class _FirstStep(NamedTuple):
    """Step 0 of a filter. particles (P, M): equally weighted draws from p(x_0 | y_0) (from the prior where y_0 is
    missing); log_likelihood () is log p(y_0) (ignored if missing); obs_mean (N,), obs_cov (N, N) are the moments
    of the prior predictive p(y_0)."""

    particles: Array
    log_likelihood: Array
    obs_mean: Array
    obs_cov: Array


def _moments(particles: Array, weights: Array) -> tuple[Array, Array]:
    """Weighted mean (..., M) and covariance (..., M, M) of particles (..., P, M) with normalised weights (..., P)."""
    mean = jnp.einsum("...p,...pm->...m", weights, particles)
    centred = particles - mean[..., None, :]
    cov = jnp.einsum("...p,...pi,...pj->...ij", weights, centred, centred)
    return mean, 0.5 * (cov + jnp.swapaxes(cov, -1, -2))


def _run(key: Array, y: Array, mask: Array, first: _FirstStep, transition_sampler: Callable, C: Array, R: Array,
         mode_of: Callable | None = None, num_modes: int = 0) -> Predictions:
    """Step 0 from ``first``, steps 1..T-1 by the bootstrap filter, assembled into ``Predictions``."""
    P = first.particles.shape[0]
    weights0 = jnp.full(P, 1.0 / P, first.particles.dtype)
    mean0, cov0 = _moments(first.particles, weights0)
    means, covs = mean0[None], cov0[None]
    obs_means, obs_covs = first.obs_mean[None], first.obs_cov[None]
    log_likelihoods = jnp.where(mask[0], first.log_likelihood, 0.0)[None]
    particles, weights = first.particles[None], weights0[None]
    if y.shape[0] > 1:
        rest = bootstrap_particle_filter(
            key, y[1:], lambda k, num: first.particles, transition_sampler,
            lambda y_t, x: gaussian_log_density(y_t, C @ x, R), P, mask[1:], keep_particles=True)
        uniform = jnp.broadcast_to(weights0, rest.log_weights.shape)  # propagated, not yet weighted
        predicted_mean, predicted_cov = _moments(rest.particles @ C.T, uniform)
        means, covs = jnp.concatenate([means, rest.means]), jnp.concatenate([covs, rest.covariances])
        obs_means = jnp.concatenate([obs_means, predicted_mean])
        obs_covs = jnp.concatenate([obs_covs, predicted_cov + R])
        log_likelihoods = jnp.concatenate([log_likelihoods, rest.log_likelihoods])
        particles = jnp.concatenate([particles, rest.particles])
        weights = jnp.concatenate([weights, jnp.exp(rest.log_weights)])
    mode_probs = None
    if mode_of is not None:
        mode_probs = jnp.einsum("tp,tpk->tk", weights, jax.nn.one_hot(mode_of(particles), num_modes,
                                                                      dtype=weights.dtype))
    return Predictions(log_likelihoods, obs_means, obs_covs, means @ C.T, jnp.zeros_like(log_likelihoods),
                       mode_probs=mode_probs, means=means, covariances=covs)


def _check_jitter(jitter, M: int) -> Array:
    """Scalar or (M,) standard deviations >= 0 -> (M,)."""
    if np.ndim(jitter) not in (0, 1) or (np.ndim(jitter) == 1 and np.shape(jitter) != (M,)):
        raise ValueError(f"jitter must be a scalar or have shape ({M},), got shape {np.shape(jitter)}")
    if is_concrete(jitter) and not np.all(np.isfinite(jitter) & (np.asarray(jitter) >= 0)):
        raise ValueError(f"jitter must be finite and >= 0, got {jitter}")
    return jnp.broadcast_to(jnp.asarray(jitter, jnp.result_type(float)), (M,))


def gaussian_prior_particle_filter(
    key: Array, y: Array, mask: Array | None, transition_sampler: Callable[[Array, Array], Array], C, R,
    initial_mean, initial_cov, num_particles: int,
) -> Predictions:
    """Bootstrap PF for x_0 ~ N(initial_mean, initial_cov), x_t ~ ``transition_sampler(key, x_{t-1})``,
    y_t = C x_t + N(0, R), with y[0] observing x_0 (exact conjugate step 0, docs/studies/pissm.md).

    y (T, N), mask (T,) bool (None: all observed), C (N, M), R (N, N) positive definite, initial_mean (M,),
    initial_cov (M, M) positive semi-definite. Returns ``Predictions`` (modes and mode_probs None).
    """
    y, mask = check_observations(y, mask)
    P = check_int("num_particles", num_particles)
    M = np.shape(initial_mean)[-1] if np.ndim(initial_mean) == 1 else 0
    if M < 1:
        raise ValueError(f"initial_mean must have shape (M,) with M >= 1, got {np.shape(initial_mean)}")
    N = y.shape[1]
    for name, X, shape in (("C", C, (N, M)), ("R", R, (N, N)), ("initial_cov", initial_cov, (M, M))):
        check_matrix(name, X, shape)
    for name, X in (("R", R), ("initial_cov", initial_cov)):
        check_covariance(name, X)
    if is_concrete(R) and np.min(np.linalg.eigvalsh(np.asarray(R, np.float64))) <= 0:
        raise ValueError("R must be positive definite (the observation density needs its Cholesky factor)")
    dtype = jnp.result_type(float)
    C, R = jnp.asarray(C, dtype), jnp.asarray(R, dtype)
    m0, P0 = jnp.asarray(initial_mean, dtype), jnp.asarray(initial_cov, dtype)
    k_first, k_run = jax.random.split(key)
    y0 = jnp.where(mask[0], y[0], 0.0)
    post_mean, post_cov, log_lik = update(m0, P0, y0, C, R)  # exact p(x_0 | y_0) and log p(y_0)
    mean, cov = jnp.where(mask[0], post_mean, m0), jnp.where(mask[0], post_cov, P0)
    eigenvalues, vectors = jnp.linalg.eigh(cov)  # square root of a possibly singular covariance
    root = vectors * jnp.sqrt(jnp.clip(eigenvalues, 0.0))
    particles = mean + jax.random.normal(k_first, (P, M), dtype) @ root.T
    first = _FirstStep(particles, log_lik, C @ m0, C @ P0 @ C.T + R)
    return _run(k_run, y, mask, first, transition_sampler, C, R)


def lorenz_particle_filter(
    key: Array, y: Array, mask: Array | None = None, R=None, num_particles: int = 1000, jitter=LORENZ_JITTER, *,
    initial_mean=LORENZ_PRIOR_MEAN, initial_cov=None, substeps: int = LORENZ_SUBSTEPS,
) -> Predictions:
    """PF with the true Lorenz flow (eq. 200): x_t = RK4^substeps(x_{t-1}; h = 0.01 / substeps) + N(0, jitter^2),
    y_t = x_t + N(0, R). y (T, 3); R (3, 3) defaults to 0.5 I (section 7); prior N(initial_mean,
    initial_cov), default N((0, 0, 25), 10^2 I) (see ``LORENZ_PRIOR_MEAN``)."""
    P = check_int("num_particles", num_particles)
    check_int("substeps", substeps)
    y, mask = check_observations(y, mask)
    if y.shape[1] != 3:
        raise ValueError(f"y must have shape (T, 3), got {y.shape}")
    noise = _check_jitter(jitter, 3)
    R = NOISE_VAR * np.eye(3) if R is None else R
    initial_cov = LORENZ_PRIOR_STD**2 * np.eye(3) if initial_cov is None else initial_cov
    h = DELTA_T / int(substeps)

    def transition(key, x):
        x = lorenz_flow(x, h, int(substeps))
        return x + noise * jax.random.normal(key, x.shape, x.dtype)

    return gaussian_prior_particle_filter(key, y, mask, transition, np.eye(3), R, initial_mean, initial_cov, P)


def _lower_tail(a: Array, b: Array) -> tuple[Array, Array, Array]:
    """[a, b] (a < b) as the mirrored interval [lo, hi] with lo <= 0 where a > 0 (Phi(b) - Phi(a) = Phi(-a) -
    Phi(-b)), so both Phi values are small where they are close: no cancellation. Returns (lo, hi, flipped)."""
    flip = a > 0
    return jnp.where(flip, -b, a), jnp.where(flip, -a, b), flip


def _log_normal_interval(a: Array, b: Array) -> Array:
    """log(Phi(b) - Phi(a)) for a < b."""
    lo, hi, _ = _lower_tail(a, b)
    log_hi, log_lo = jax.scipy.special.log_ndtr(hi), jax.scipy.special.log_ndtr(lo)
    return log_hi + jnp.log1p(-jnp.exp(log_lo - log_hi))


def _truncated_standard_normal(key: Array, a: Array, b: Array, shape: tuple[int, ...]) -> Array:
    """Draws of N(0, 1) truncated to [a, b] (broadcast to ``shape``) by the inverse CDF on the mirrored interval.
    (jax.random.truncated_normal returns the far bound when both bounds lie beyond ~6 in one tail.)"""
    lo, hi, flip = _lower_tail(a, b)
    p_lo, p_hi = jax.scipy.special.ndtr(lo), jax.scipy.special.ndtr(hi)
    u = jax.random.uniform(key, shape, p_lo.dtype)
    x = jnp.clip(jax.scipy.special.ndtri(p_lo + u * (p_hi - p_lo)), lo, hi)
    return jnp.where(flip, -x, x)


def pong_particle_filter(
    key: Array, y: Array, mask: Array | None = None, noise_std: float = NOISE_STD, num_particles: int = 3000,
    jitter=PONG_JITTER, *, speed_range=SPEED_RANGE,
) -> Predictions:
    """PF with Pong's true dynamics (``data.pong.reflect_step``, elastic reflections in the unit box) plus jitter
    (scalar or (4,) std on [p_x, v_x, p_y, v_y]); y (T, 2) = position + N(0, noise_std^2 I), noise_std > 0.
    Prior as in ``data.pong.simulate_pong`` (step 0: docs/studies/pissm.md). ``mode_probs`` (T, 4).

    With half of the observations missing, 1000 particles lost track of one ball in six for ~25 steps (a fast
    ball bouncing between two walls); 3000 did not, and more changed the error little."""
    P = check_int("num_particles", num_particles)
    y, mask = check_observations(y, mask)
    if y.shape[1] != 2:
        raise ValueError(f"y must have shape (T, 2), got {y.shape}")
    if is_concrete(noise_std) and not (math.isfinite(float(noise_std)) and float(noise_std) > 0):
        raise ValueError(f"noise_std must be a finite number > 0, got {noise_std!r}")
    lo, hi = (float(s) for s in speed_range)
    if not 0 < lo <= hi < 1:
        raise ValueError(f"speed_range must satisfy 0 < low <= high < 1 (box widths per step), got {speed_range}")
    noise = _check_jitter(jitter, 4)
    dtype = jnp.result_type(float)
    C = jnp.asarray(OBSERVATION_MATRIX, dtype)
    R = noise_std**2 * jnp.eye(2, dtype=dtype)
    k_posterior, k_box, k_heading, k_speed, k_run = jax.random.split(key, 5)

    y0 = jnp.where(mask[0], y[0], 0.5).astype(dtype)
    lower, upper = -y0 / noise_std, (1 - y0) / noise_std  # the box in standard units around y_0
    posterior = jnp.clip(y0 + noise_std * _truncated_standard_normal(k_posterior, lower, upper, (P, 2)), 0.0, 1.0)
    position = jnp.where(mask[0], posterior, jax.random.uniform(k_box, (P, 2), dtype))
    heading = jax.random.uniform(k_heading, (P,), dtype, 0.0, 2 * jnp.pi)
    speed = jax.random.uniform(k_speed, (P,), dtype, lo, hi)
    velocity = speed[:, None] * jnp.stack([jnp.cos(heading), jnp.sin(heading)], axis=-1)
    particles = jnp.stack([position[:, 0], velocity[:, 0], position[:, 1], velocity[:, 1]], axis=-1)
    log_lik = jnp.sum(_log_normal_interval(lower, upper))  # log p(y_0) = log int_box N(y_0; p, s^2 I) dp
    prior_cov = (1 / 12 + noise_std**2) * jnp.eye(2, dtype=dtype)  # uniform position: variance 1/12 per axis
    first = _FirstStep(particles, log_lik, jnp.full(2, 0.5, dtype), prior_cov)

    def transition(key, x):
        x = x + noise * jax.random.normal(key, x.shape, x.dtype)
        p, v, _, _ = reflect_step(x[jnp.array([0, 2])], x[jnp.array([1, 3])])
        return jnp.stack([p[0], v[0], p[1], v[1]])

    def quadrant(x):
        return pong_mode(x[..., jnp.array([1, 3])])

    return _run(k_run, y, mask, first, transition, C, R, quadrant, PONG_MODES)

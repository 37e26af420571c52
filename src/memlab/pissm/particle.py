"""Bootstrap particle filter (Gordon et al. 1993) with systematic resampling (Kitagawa 1996): the high-cost posterior
reference of section 7 (Fig. 4), run with the true dynamics.

Time convention as in ``memlab.kalman`` and eq. (1); ``observe_initial=True`` when y[0] observes x_0; a missing y_t is
propagation only. Per step: the filtered moments, log p_hat(y_t | y_{1:t-1}) (its exponential unbiased), the
effective sample size and optionally every particle. One sequence per call, ``lax.scan`` over time; vmap and jit
outside. The estimator's bias and deterministic dynamics: docs/studies/pissm.md, "Particle filters".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import Array

from memlab.checks import check_int
from memlab.kalman import check_observations


class ParticleFiltered(NamedTuple):
    """Output of ``bootstrap_particle_filter`` for T steps, P particles, state size M.

    ``means`` (T, M), ``covariances`` (T, M, M): weighted particle moments of p(x_t | y_{1:t});
    ``log_likelihoods`` (T,): log p_hat(y_t | y_{1:t-1}), 0 where y_t is missing; ``ess`` (T,) effective sample
    size before resampling; ``particles`` (T, P, M) and ``log_weights`` (T, P) (normalised, before resampling) when
    ``keep_particles``, else None. ``particles[t]`` with equal weights is a sample of the one-step predictive
    p(x_t | y_{1:t-1}) (the previous step resampled).
    """

    means: Array
    covariances: Array
    log_likelihoods: Array
    ess: Array
    particles: Array | None = None
    log_weights: Array | None = None


def systematic_resample(key: Array, weights: Array) -> Array:
    """Systematic resampling: P indices (int32, sorted) for normalised weights (P,).

    One uniform U; index i is taken for each point (U + j) / P, j = 0..P-1, that falls in its cumulative-weight
    interval, so particle i appears floor(P w_i) or ceil(P w_i) times.
    """
    P = weights.shape[-1]
    points = (jax.random.uniform(key, (), weights.dtype) + jnp.arange(P, dtype=weights.dtype)) / P
    cumulative = jnp.cumsum(weights)
    cumulative = cumulative / cumulative[-1]  # the last interval must end at 1 despite rounding
    return jnp.minimum(jnp.searchsorted(cumulative, points, side="right"), P - 1).astype(jnp.int32)


def bootstrap_particle_filter(
    key: Array,
    y: Array,
    initial_sampler: Callable[[Array, int], Array],
    transition_sampler: Callable[[Array, Array], Array],
    observation_log_density: Callable[[Array, Array], Array],
    num_particles: int,
    mask: Array | None = None,
    observe_initial: bool = False,
    keep_particles: bool = False,
) -> ParticleFiltered:
    """Filter y (T, N) with P = ``num_particles`` particles.

    ``initial_sampler(key, P) -> (P, M)`` draws x_0; ``transition_sampler(key, x (M,)) -> (M,)`` draws
    x_t ~ p(x_t | x_{t-1} = x); ``observation_log_density(y (N,), x (M,)) -> ()`` is log p(y_t | x_t = x). The two
    per-particle functions are vmapped over particles here. mask (T,) bool, True where y_t is observed (None: all).
    """
    y, mask = check_observations(y, mask)
    P = check_int("num_particles", num_particles)
    k_init, k_steps = jax.random.split(key)
    initial = jax.eval_shape(lambda k: initial_sampler(k, P), k_init)
    shape = initial.shape
    if len(shape) != 2 or shape[0] != P:
        raise ValueError(f"initial_sampler(key, {P}) must return particles of shape ({P}, M), got {shape}")
    particle = jax.ShapeDtypeStruct(shape[1:], initial.dtype)
    out_shape = jax.eval_shape(transition_sampler, k_init, particle).shape
    if out_shape != shape[1:]:
        raise ValueError(f"transition_sampler(key, x) must return shape {shape[1:]} for x of that shape, "
                         f"got {out_shape}")
    log_density_shape = jax.eval_shape(observation_log_density, y[0], particle).shape
    if log_density_shape != ():
        raise ValueError(f"observation_log_density(y_t, x) must return a scalar, got shape {log_density_shape}")
    propagate = jax.vmap(transition_sampler)
    log_density = jax.vmap(observation_log_density, in_axes=(None, 0))
    skip_propagation = jnp.zeros(y.shape[0], bool).at[0].set(bool(observe_initial))

    def step(particles, inputs):
        key_t, y_t, observed, skip = inputs
        k_move, k_resample = jax.random.split(key_t)
        moved = propagate(jax.random.split(k_move, P), particles)
        particles = jnp.where(skip, particles, moved)
        log_w = jnp.where(observed, log_density(jnp.where(observed, y_t, 0.0), particles), 0.0)
        log_norm = jax.nn.logsumexp(log_w)
        log_w = jnp.where(jnp.isfinite(log_norm), log_w - log_norm, -math.log(P))  # all zero likelihood: uniform
        weights = jnp.exp(log_w)
        mean = weights @ particles
        centred = particles - mean
        cov = (centred * weights[:, None]).T @ centred
        ess = 1.0 / jnp.sum(weights**2)
        resampled = particles[systematic_resample(k_resample, weights)]
        out = (mean, 0.5 * (cov + cov.T), jnp.where(observed, log_norm - math.log(P), 0.0), ess)
        if keep_particles:
            out = out + (particles, log_w)
        return jnp.where(observed, resampled, particles), out

    initial = initial_sampler(k_init, P)
    keys = jax.random.split(k_steps, y.shape[0])
    _, out = jax.lax.scan(step, initial, (keys, y, mask, skip_propagation))
    return ParticleFiltered(*out)

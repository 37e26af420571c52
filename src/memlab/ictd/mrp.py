"""Markov reward processes (paper 2, section 2.2): container, value function, stationary distribution, sampling.

ROW convention of this paper (unlike memlab.belief): P[s, s'] = p(s' | s), every ROW of P sums to 1.
A trajectory is (S_0, R_1, S_1, ..., R_n, S_n) with S_0 ~ p0, S_{t+1} ~ P[S_t, :] and R_{t+1} = r(S_t);
it is stored as ``states`` (n+1,) and ``rewards`` (n,) with rewards[k] = R_{k+1} = r(states[k]).

The per-row and p0 checks reuse ``memlab.belief.hmm.check_distribution`` (row s of P is the distribution
p(. | s)); ``safe_log`` from the same module gives the log-probabilities for categorical sampling.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_distribution, check_int
from memlab.logspace import safe_log


def _check_finite(name: str, a: np.ndarray) -> None:
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or inf")


class MRP(eqx.Module):
    """Markov reward process (S, p, r, gamma, p0) of section 2.2 with m = |S| states.

    Fields: ``P`` (m, m) row-stochastic, P[s, s'] = p(s' | s); ``r`` (m,) reward r(s);
    ``gamma`` () discount in [0, 1); ``p0`` (m,) initial distribution.
    Checked when built from concrete arrays (skipped on tracers inside jit/vmap).
    """

    P: Array = eqx.field(converter=jnp.asarray)
    r: Array = eqx.field(converter=jnp.asarray)
    gamma: Array = eqx.field(converter=jnp.asarray)
    p0: Array = eqx.field(converter=jnp.asarray)

    def __check_init__(self):
        if any(isinstance(a, jax.core.Tracer) for a in (self.P, self.r, self.gamma, self.p0)):
            return
        P = np.asarray(self.P, dtype=np.float64)
        if P.ndim != 2 or P.shape[0] != P.shape[1] or P.size == 0:
            raise ValueError(f"P must be a non-empty square matrix of shape (m, m), got shape {P.shape}")
        m = P.shape[0]
        for s in range(m):
            check_distribution(f"row {s} of P (p(. | s), rows of P must sum to 1)", P[s])
        r = np.asarray(self.r, dtype=np.float64)
        if r.shape != (m,):
            raise ValueError(f"r must have shape (m,) = ({m},), got {r.shape}")
        _check_finite("r", r)
        gamma = np.asarray(self.gamma, dtype=np.float64)
        if gamma.shape != ():
            raise ValueError(f"gamma must be a scalar, got shape {gamma.shape}")
        _check_finite("gamma", gamma)
        if not 0.0 <= gamma < 1.0:
            raise ValueError(f"gamma must lie in [0, 1), got {float(gamma)}")
        if np.shape(self.p0) != (m,):
            raise ValueError(f"p0 must have shape (m,) = ({m},), got {np.shape(self.p0)}")
        check_distribution("p0", self.p0)

    @property
    def num_states(self) -> int:
        return self.P.shape[-1]


class Task(eqx.Module):
    """A policy-evaluation task with a feature map: ``mrp`` (m states), ``features`` (m, d) with row s = x(s),
    ``w_star`` (d,) a weight with features @ w_star = v_star, ``v_star`` (m,) = v_pi of ``mrp``.
    Made by ``boyan.boyan_chain`` (Algorithm 2) and ``random_tasks.random_task``."""

    mrp: MRP
    features: Array
    w_star: Array
    v_star: Array


@jax.jit
def value_function(mrp: MRP) -> Array:
    """v_pi = (I - gamma P)^{-1} r, shape (m,): the fixed point of the Bellman operator T^pi, eq. (7)."""
    m = mrp.num_states
    return jnp.linalg.solve(jnp.eye(m, dtype=mrp.P.dtype) - mrp.gamma * mrp.P, mrp.r)  # v = r + gamma P v, eq. (7)


@jax.jit
def stationary_distribution(mrp: MRP) -> Array:
    """mu_pi, shape (m,): mu P = mu, sum(mu) = 1 (unique for an ergodic chain, section 2.2).

    Least-squares solution of the stacked system [P^T - I; 1^T] mu = [0; 1] (m+1 equations, full column
    rank exactly when mu_pi is unique); jit- and vmap-friendly.
    """
    m = mrp.num_states
    A = jnp.concatenate([mrp.P.T - jnp.eye(m, dtype=mrp.P.dtype), jnp.ones((1, m), mrp.P.dtype)], axis=0)
    b = jnp.zeros(m + 1, mrp.P.dtype).at[m].set(1.0)
    mu, *_ = jnp.linalg.lstsq(A, b)
    return mu


def msve(mrp: MRP, v_hat: Array) -> Array:
    """Mean squared value error sum_s mu_pi(s) (v_hat(s) - v_pi(s))^2, shape (); ``v_hat`` has shape (m,)."""
    v_hat = jnp.asarray(v_hat)
    if v_hat.shape != (mrp.num_states,):
        raise ValueError(f"v_hat must have shape (m,) = ({mrp.num_states},), got {v_hat.shape}")
    return jnp.sum(stationary_distribution(mrp) * (v_hat - value_function(mrp)) ** 2)


def sample_trajectory(mrp: MRP, key: Array, length: int, stationary: bool = False) -> tuple[Array, Array]:
    """One trajectory of ``length`` transitions (section 2.2).

    S_0 ~ p0 (or mu_pi when ``stationary``), S_{t+1} ~ P[S_t, :], R_{t+1} = r(S_t).
    Returns ``states`` (length+1,) int32 = S_0..S_n and ``rewards`` (length,) = R_1..R_n.
    Jitted with ``length`` and ``stationary`` static; batch with ``jax.vmap`` over keys.
    """
    return _sample_trajectory(mrp, key, check_int("length", length, 0), bool(stationary))


@functools.partial(jax.jit, static_argnames=("length", "stationary"))
def _sample_trajectory(mrp: MRP, key: Array, length: int, stationary: bool) -> tuple[Array, Array]:
    k0, kscan = jax.random.split(key)
    start = jnp.clip(stationary_distribution(mrp), 0.0) if stationary else mrp.p0
    s0 = jax.random.categorical(k0, safe_log(start)).astype(jnp.int32)
    log_P = safe_log(mrp.P)  # zero-probability transitions get -inf and are never drawn

    def step(s, k):
        s_next = jax.random.categorical(k, log_P[s]).astype(jnp.int32)
        return s_next, s_next

    _, rest = jax.lax.scan(step, s0, jax.random.split(kscan, length))
    states = jnp.concatenate([s0[None], rest])
    return states, mrp.r[states[:-1]]  # R_{t+1} = r(S_t), section 2.2

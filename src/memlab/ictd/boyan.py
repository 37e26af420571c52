"""Randomised Boyan chain tasks: Algorithm 2 of App. F.3 (adapted from Wang et al., 2025a).

Algorithm 2 numbers states 1..m; here they are 0..m-1 (paper state i is index i-1):

    paper (1-based)                                  here (0-based)
    i -> i+1 w.p. eps_i, i -> i+2 w.p. 1 - eps_i,    i -> i+1 w.p. eps[i], i -> i+2 w.p. 1 - eps[i],
         for i = 1..m-2                                   for i = 0..m-3
    m-1 -> m w.p. 1                                  m-2 -> m-1 w.p. 1
    m -> z (z a random distribution on all states)   m-1 -> z, P[m-1, :] = z

All other transitions are 0. Every state reaches the last one and the last one reaches every state
(z > 0), which also has a self-loop, so the chain is irreducible and aperiodic (ergodic).
Features x(s) and w_* ~ U(-1, 1)^d, v* = X w_* (linear in the features), p0 ~ U(0, 1)^m normalised,
and the rewards are set by Bellman consistency, r = (I - gamma P) v*, so that v_pi = v* exactly.
Uniform draws are on the open intervals the algorithm names (jax.random.uniform can return its lower end).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_gamma, check_int
from memlab.ictd.mrp import MRP, Task, stationary_distribution
from memlab.ictd.softmax_td import population_kernel


def boyan_chain(key: Array, m: int, d: int, gamma) -> Task:
    """Sample a Boyan chain MRP with m >= 2 states and a d-dimensional feature map (Algorithm 2).

    Jitted with static ``m``, ``d`` (``gamma`` may be traced). Batch with
    ``jax.vmap(lambda k: boyan_chain(k, m, d, gamma))(keys)``: every field gains a leading batch axis.
    Floats are float32, or float64 under ``jax.enable_x64``.
    """
    check_int("m", m, 2)
    check_int("d", d, 1)
    check_gamma(gamma)
    return _boyan_chain(key, int(m), int(d), gamma)


def uniform_open(key: Array, shape: tuple, lo: float, hi: float) -> Array:
    """Uniform on the open interval (lo, hi), in the default float dtype."""
    dtype = jnp.result_type(float)
    just_above_lo = max(np.nextafter(np.asarray(lo, dtype), np.asarray(hi, dtype)), lo + np.finfo(dtype).tiny)
    return jnp.maximum(jax.random.uniform(key, shape, dtype, lo, hi), jnp.asarray(just_above_lo, dtype))


@functools.partial(jax.jit, static_argnames=("m", "d"))
def _boyan_chain(key: Array, m: int, d: int, gamma) -> Task:
    k_w, k_x, k_p0, k_eps, k_z = jax.random.split(key, 5)
    w_star = uniform_open(k_w, (d,), -1.0, 1.0)  # Alg. 2 line 2
    features = uniform_open(k_x, (m, d), -1.0, 1.0)  # line 4, row s = x(s)
    v_star = features @ w_star  # line 5
    p0 = uniform_open(k_p0, (m,), 0.0, 1.0)  # lines 7-8
    p0 = p0 / p0.sum()
    eps = uniform_open(k_eps, (m - 2,), 0.0, 1.0)  # lines 10-14 (0-based rows 0..m-3)
    rows = jnp.arange(m - 2)
    P = jnp.zeros((m, m), v_star.dtype)
    P = P.at[rows, rows + 1].set(eps).at[rows, rows + 2].set(1.0 - eps)
    P = P.at[m - 2, m - 1].set(1.0)  # line 15
    z = uniform_open(k_z, (m,), 0.0, 1.0)  # lines 16-18
    P = P.at[m - 1].set(z / z.sum())
    gamma = jnp.asarray(gamma, v_star.dtype)
    r = v_star - gamma * (P @ v_star)  # line 19: r = (I - gamma P) v*
    return Task(MRP(P, r, gamma, p0), features, w_star, v_star)


def chain_statistics(key: Array, num_tasks: int, m: int, d: int, gamma: float, tau: float = 1.0) -> dict[str, float]:
    """Two properties of Algorithm 2's chains that decide what multi-task TD pretraining learns, over ``num_tasks``
    tasks (keys ``split(key, num_tasks)``), as JSON-able floats:

    * ``self_weight_*``: min_s M_pi(s, s) (eq. 27, softmax temperature ``tau``), against ``margin_needed`` =
      (1 + gamma) / 2 of Assumption 5.1 (eq. 28); ``assumption_holds``: the fraction of tasks where it does.
    * ``reward_lag1_*``: the stationary lag-1 correlation corr(r(S_t), r(S_{t+1})) of the rewards. With r =
      (I - gamma P) v* (Bellman consistency), consecutive rewards share -gamma v*(S_{t+1}) and +v*(S_{t+1}).
    """
    check_int("num_tasks", num_tasks)
    self_weight, lag1 = [], []
    for k in jax.random.split(key, num_tasks):
        task = boyan_chain(k, m, d, gamma)
        mu = np.asarray(stationary_distribution(task.mrp), float)
        M = np.asarray(population_kernel(task.features, mu, tau), float)
        self_weight.append(np.diagonal(M).min())
        r, P = np.asarray(task.mrp.r, float), np.asarray(task.mrp.P, float)
        mean, var = mu @ r, mu @ r**2 - (mu @ r) ** 2
        lag1.append(((mu * r) @ (P @ r) - mean**2) / var)
    self_weight, lag1 = np.array(self_weight), np.array(lag1)
    needed = (1 + gamma) / 2
    return {"self_weight_mean": float(self_weight.mean()), "self_weight_max": float(self_weight.max()),
            "margin_needed": float(needed), "assumption_holds": float(np.mean(self_weight > needed)),
            "reward_lag1_mean": float(lag1.mean()), "reward_lag1_min": float(lag1.min()),
            "reward_lag1_max": float(lag1.max())}

"""Random policy-evaluation tasks whose softmax kernel satisfies Assumption 5.1 (sections 1, 5, 6).

Fig. 1 averages over tasks in which "the state space, transition dynamics, reward function, and policy vary",
and Theorems 2-3 assume the diagonal margin of eq. (28). The paper does not say which tasks it used, so memlab
draws them from this explicit family (stated in every experiment summary that uses it):

    MDP      p_MDP(. | s, a) ~ Dirichlet(1_m),  r_MDP(s, a) ~ U(-1, 1),  for m states and ``num_actions`` actions
    policy   pi(. | s) ~ Dirichlet(1_A)
    MRP      P_pi[s, s'] = sum_a pi(a|s) p_MDP(s'|s, a),  r(s) = sum_a pi(a|s) r_MDP(s, a)   (section 2.2)
    p0       U(0, 1)^m normalised (as Algorithm 2)
    features x(s) = c q_s, with q_0..q_{m-1} orthonormal in R^d (d >= m, a Haar-random orthogonal basis)

Dense Dirichlet rows make the chain ergodic. With orthonormal features the score <x(s), x(s')> = c^2 1{s = s'},
so M_pi of eq. (27) has diagonal mu(s) e^{c^2} / (mu(s) e^{c^2} + 1 - mu(s)): the feature scale c sets the
diagonal margin, and a "state space that varies" is a different m (and a different random basis) per task.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_gamma, check_int
from memlab.ictd.mrp import MRP, Task, stationary_distribution, value_function
from memlab.ictd.softmax_td import diagonal_margin, population_kernel

__all__ = ["flat_dirichlet", "random_task", "random_task_batch", "task_margin"]


def random_task(key: Array, m: int, d: int, gamma, num_actions: int = 2, feature_scale=3.0) -> Task:
    """One task of the family above: a ``Task`` (mrp, features (m, d), w_star, v_star).

    ``w_star`` = X^T v_pi / c^2 (exact: X X^T = c^2 I) and ``v_star`` = v_pi. Jitted with static ``m``, ``d``,
    ``num_actions``; vmap over keys (or use ``random_task_batch``).
    """
    check_int("m", m, 2)
    check_int("d", d, m)  # orthonormal features need d >= m
    check_int("num_actions", num_actions, 1)
    check_gamma(gamma)
    if not isinstance(feature_scale, jax.core.Tracer):
        c = np.asarray(feature_scale, dtype=np.float64)
        if c.shape != () or not (c > 0 and np.isfinite(c)):
            raise ValueError(f"feature_scale must be a scalar > 0, got {feature_scale!r}")
    return _random_task(key, int(m), int(d), gamma, int(num_actions), feature_scale)


def random_task_batch(key: Array, count: int, m: int, d: int, gamma, num_actions: int = 2, feature_scale=3.0) -> Task:
    """``count`` tasks of the family, one per key of ``jax.random.split(key, count)``, vmapped: a batched ``Task``
    (every leaf gains a leading (count,) axis)."""
    check_int("count", count)
    return jax.vmap(lambda k: random_task(k, m, d, gamma, num_actions, feature_scale))(jax.random.split(key, count))


def flat_dirichlet(key: Array, shape: tuple, dtype) -> Array:
    """Dirichlet(1, ..., 1) draws over the last axis: normalised Exp(1) variables (same law as
    ``jax.random.dirichlet`` with unit concentrations, and much cheaper to compile than its gamma sampler)."""
    e = jax.random.exponential(key, shape, dtype) + jnp.finfo(dtype).tiny
    return e / e.sum(axis=-1, keepdims=True)


@functools.partial(jax.jit, static_argnames=("m", "d", "num_actions"))
def _random_task(key: Array, m: int, d: int, gamma, num_actions: int, feature_scale) -> Task:
    k_p, k_r, k_pi, k_p0, k_q = jax.random.split(key, 5)
    dtype = jnp.result_type(float)
    p_mdp = flat_dirichlet(k_p, (m, num_actions, m), dtype)  # (m, A, m): p(s' | s, a)
    r_mdp = jax.random.uniform(k_r, (m, num_actions), dtype, -1.0, 1.0)
    pi = flat_dirichlet(k_pi, (m, num_actions), dtype)  # (m, A): pi(a | s)
    P = jnp.einsum("sa,sat->st", pi, p_mdp)  # marginalise the policy, section 2.2
    r = jnp.sum(pi * r_mdp, axis=1)
    p0 = jax.random.uniform(k_p0, (m,), dtype, 0.0, 1.0) + jnp.finfo(dtype).tiny
    p0 = p0 / p0.sum()
    q, _ = jnp.linalg.qr(jax.random.normal(k_q, (d, d), dtype))  # Haar-random orthogonal basis (up to signs)
    features = jnp.asarray(feature_scale, dtype) * q[:m]  # (m, d): orthonormal rows scaled by c
    gamma = jnp.asarray(gamma, dtype)
    mrp = MRP(P, r, gamma, p0)
    v = value_function(mrp)
    w_star = features.T @ v / jnp.asarray(feature_scale, dtype) ** 2  # X X^T = c^2 I, so X w_star = v exactly
    return Task(mrp, features, w_star, v)


def task_margin(task: Task, tau=1.0) -> Array:
    """Diagonal margin min_s M_pi(s, s) - (1 + gamma)/2 (eq. 27-28) of one task; > 0 iff Assumption 5.1 holds."""
    M_pi = population_kernel(task.features, stationary_distribution(task.mrp), tau)
    return diagonal_margin(M_pi, task.mrp.gamma)

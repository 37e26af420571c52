"""An approximate posterior-mean predictor for the policy-evaluation task: what a Bayesian reads from the context.

The task's reference, the TD fixed point of the context (``memlab.arena.policy``), is the paper's in-context
algorithm, not the best predictor, and trained layers beat it. This predictor uses what the fixed point ignores: the
task's prior (w* ~ U(-1, 1)^d, features ~ U(-1, 1)^d, Algorithm 2's randomised Boyan chain) and the fact that a
reward is an exact function of its state, r(s) = v(s) - gamma E[v(S') | s] with v = X w*. It is computed from the
context alone, so its expected loss bounds the Bayes-optimal loss from above however rough its approximations are;
a trained layer that stays above it on a held-out batch is about that far from the optimum at least (within the
batch's sampling error).

Likelihood of one transition (s -> S', reward R) given w (``transition_log_likelihood``). For s < m - 2 the chain
moves to s + 1 with probability eps_s ~ U(0, 1), else to s + 2. The observer sees x(s), R and x(S') but not which
branch S' was, so the probability p of the branch taken has posterior density 2p on (0, 1) (p(p | branch) is
proportional to p(branch | p) = p under the uniform prior; the factor 1/2 of either branch does not depend on w and is
dropped); the other successor's features y are unseen, y ~ U(-1, 1)^d. Hence R = a - gamma p b - gamma (1 - p) T
with a = w^T x(s), b = w^T x(S'), T = w^T y, and

    p(R | w) = int_0^1 2p f_T((a - gamma p b - R) / (gamma (1 - p))) / (gamma (1 - p)) dp,

f_T the density of a sum of uniforms sum_i |w_i| u_i (closed form, piecewise cubic for d = 4; |w_i| since u_i is
symmetric), the integral by Gauss-Legendre quadrature (its mass is 1 to 0.3 % typically; at s = m - 2, where
R = a - gamma b exactly, the integrand grows like 1 / (1 - p) and the quadrature truncates it).
Approximations (why this is not the exact posterior): every transition is treated as a
fresh s < m - 2; the last two states' rules (s = m - 2 moves to m - 1 surely, m - 1 to a random state), revisited
states and a sibling seen later in the trajectory are not used.

Inference (``posterior_values``): a particle filter over w with the prior as proposal; each transition reweights
the particles, the posterior mean of w gives the value of the query, v(S_k) = E[w | context]^T x(S_k); when the
effective sample size falls below half the particles they are resampled and moved with Liu and West's (2001)
shrinkage kernel (which keeps the particles' mean and covariance; a particle it moves out of the prior's box is
weighted 0, which pulls the estimate slightly inwards near the box's faces).
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.arena.policy import PolicyEvalTask
from memlab.arena.task import Batch
from memlab.checks import check_int

__all__ = ["posterior_predictor", "posterior_values", "sum_of_uniforms_density", "transition_log_likelihood"]

QUADRATURE_NODES = 48
SHRINKAGE = 0.98  # Liu-West: a particle moves to a w_i + (1 - a) mean + sqrt(1 - a^2) chol(cov) z


def sum_of_uniforms_density(t: Array, half_widths: Array) -> Array:
    """The density at ``t`` (any shape) of sum_i c_i u_i, u_i ~ U(-1, 1) independent, c_i = ``half_widths`` (d,) > 0:
    (1 / (prod(2 c_i) (d - 1)!)) sum over signs s in {-1, 1}^d of prod(s) (t + s^T c)_+^(d - 1), zero outside
    |t| < sum c (where the alternating sum only cancels, inexactly in floating point)."""
    d = half_widths.shape[-1]
    signs = jnp.asarray(list(itertools.product((-1.0, 1.0), repeat=d)), half_widths.dtype)  # (2^d, d)
    parity = jnp.prod(signs, -1)
    shifted = t[..., None] + signs @ half_widths
    terms = parity * jnp.where(shifted > 0, jnp.maximum(shifted, 0.0) ** (d - 1), 0.0)  # x_+^0 is 0 for x <= 0
    density = terms.sum(-1) / (jnp.prod(2.0 * half_widths) * float(np.prod(np.arange(1, d))))
    return jnp.where(jnp.abs(t) < half_widths.sum(), jnp.maximum(density, 0.0), 0.0)


def _quadrature(dtype) -> tuple[Array, Array]:
    """Gauss-Legendre nodes and weights on (0, 1)."""
    nodes, weights = np.polynomial.legendre.leggauss(QUADRATURE_NODES)
    return jnp.asarray((nodes + 1) / 2, dtype), jnp.asarray(weights / 2, dtype)


def transition_log_likelihood(w: Array, x_prev: Array, reward: Array, x_next: Array, gamma: float) -> Array:
    """log p(R | w), up to a constant, of one transition x(s) -> x(S') with reward R from a state s < m - 2 not seen
    before (module docstring); ``w`` (..., d), the others one transition's (d,), (), (d,)."""
    branch, quadrature_weights = _quadrature(w.dtype)  # p, the probability of the branch taken
    a, b = w @ x_prev, w @ x_next  # (...,)
    scale = gamma * (1.0 - branch)  # (Q,)
    t = (a[..., None] - gamma * branch * b[..., None] - reward) / scale  # (..., Q)
    # a weight near 0 is a uniform of half-width 1e-3 (a point mass in the limit): the closed form's alternating sum
    # divides by the product of the half-widths, which float32 cannot carry much below that
    half_widths = jnp.maximum(jnp.abs(w), 1e-3).reshape(-1, w.shape[-1])
    density = jax.vmap(sum_of_uniforms_density)(t.reshape(-1, branch.shape[0]), half_widths)
    integral = (density.reshape(t.shape) * (2.0 * branch * quadrature_weights / scale)).sum(-1)
    return jnp.log(jnp.maximum(integral, jnp.finfo(w.dtype).tiny))


def _ess(log_weights: Array) -> Array:
    weights = jax.nn.softmax(log_weights)
    return 1.0 / jnp.sum(weights**2)


def _resample_and_move(key: Array, particles: Array, log_weights: Array) -> tuple[Array, Array]:
    """Systematic resampling, then Liu-West's shrinkage kernel: the moved particles and their unnormalised
    log-weights, 0, or -inf for a particle outside [-1, 1]^d."""
    k_pick, k_move = jax.random.split(key)
    N, d = particles.shape
    weights = jax.nn.softmax(log_weights)
    mean = weights @ particles
    cov = (weights[:, None] * (particles - mean)).T @ (particles - mean)
    cov = cov + (1e-6 * jnp.trace(cov) / d + 1e-12) * jnp.eye(d, dtype=particles.dtype)  # collapsed weights: rank < d
    cumulative = jnp.cumsum(weights)
    positions = (jax.random.uniform(k_pick, (), particles.dtype) + jnp.arange(N)) / N * cumulative[-1]
    picked = particles[jnp.clip(jnp.searchsorted(cumulative, positions, method="sort"), 0, N - 1)]
    noise = jax.random.normal(k_move, (N, d), particles.dtype) @ jnp.linalg.cholesky(cov).T
    moved = SHRINKAGE * picked + (1 - SHRINKAGE) * mean + jnp.sqrt(1 - SHRINKAGE**2) * noise
    inside = jnp.all(jnp.abs(moved) < 1.0, -1)
    return moved, jnp.where(inside, 0.0, -jnp.inf)


def posterior_values(key: Array, x_prev: Array, rewards: Array, x_next: Array, gamma: float,
                     particles: int = 4096) -> Array:
    """(n,): the approximate posterior mean of v(S_k) = w*^T x(S_k) after transitions 1..k of one trajectory
    (x_prev (n, d) x(S_{k-1}), rewards (n,) R_k, x_next (n, d) x(S_k)), for k = 1..n (module docstring)."""
    check_int("particles", particles, 2)
    k_prior, k_steps = jax.random.split(key)
    d = x_prev.shape[-1]
    w0 = jax.random.uniform(k_prior, (particles, d), x_prev.dtype, -1.0, 1.0)

    def step(carry, inputs):
        w, log_weights = carry
        key, x0, r, x1 = inputs
        log_weights = log_weights + transition_log_likelihood(w, x0, r, x1, gamma)
        value = jax.nn.softmax(log_weights) @ w @ x1  # E[w | transitions 1..k]^T x(S_k)
        w, log_weights = jax.lax.cond(_ess(log_weights) < particles / 2, _resample_and_move,
                                      lambda _, w, lw: (w, lw - jax.nn.logsumexp(lw)), key, w, log_weights)
        return (w, log_weights), value

    keys = jax.random.split(k_steps, x_prev.shape[0])
    _, values = jax.lax.scan(step, (w0, jnp.zeros(particles, x_prev.dtype)), (keys, x_prev, rewards, x_next))
    return values


def posterior_predictor(task: PolicyEvalTask, batch: Batch, key: Array, particles: int = 4096) -> Array:
    """(B, L, 1): :func:`posterior_values` read out at both steps of pair k, as ``task.reference`` is; computed from
    the inputs alone (the context a model sees) and the task's prior."""
    L = batch.inputs.shape[1]
    x_prev, rewards, x_next = task.transitions(batch)
    values = _batch_values(jax.random.split(key, x_prev.shape[0]), x_prev, rewards, x_next, task.gamma, particles)
    return jnp.repeat(values, 2, axis=1)[:, :L, None]


@functools.partial(jax.jit, static_argnames=("gamma", "particles"))
def _batch_values(keys: Array, x_prev: Array, rewards: Array, x_next: Array, gamma: float, particles: int) -> Array:
    # under vmap the resampling's lax.cond runs both branches at every step: its cost is paid whether or not it fires
    return jax.vmap(lambda k, a, r, b: posterior_values(k, a, r, b, gamma, particles))(keys, x_prev, rewards, x_next)

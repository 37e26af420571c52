"""Gated DeltaNet (Yang, Kautz and Hatamizadeh 2024, "Gated Delta Networks: improving Mamba2 with delta rule"),
multi-head, one sequence x (L, d) -> (L, d).

Per head, with k_t and q_t L2-normalised, beta_t = sigmoid(w_beta . x_t) in (0, 1) the writing strength and
alpha_t = exp(-softplus(w_alpha . x_t + b_alpha)) in (0, 1) the decay:

    S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T          (the gated delta rule)
    o_t = S_t q_t

alpha = 1 is DeltaNet (Schlag et al. 2021); beta_t k_t k_t^T = 0 is gated linear attention. The recurrence runs
as one ``lax.scan`` over time (on a CPU the sequential form is the fast one; the chunked parallel form of the
paper is a GPU kernel). State: a (d_h x d_h) matrix per head.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.layers.attention import HeadProjections

__all__ = ["GatedDeltaNet", "gated_delta_rule"]


def _unit(x: Array) -> Array:
    return x / (jnp.linalg.norm(x, axis=-1, keepdims=True) + 1e-6)


def gated_delta_rule(q: Array, k: Array, v: Array, alpha: Array, beta: Array) -> Array:
    """o_t = S_t q_t with S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, S_0 = 0.

    q, k (L, d_k); v (L, d_v); alpha, beta (L,) -> o (L, d_v).
    """
    def step(S, inputs):
        q_t, k_t, v_t, a_t, b_t = inputs
        S = a_t * (S - b_t * jnp.outer(S @ k_t, k_t)) + b_t * jnp.outer(v_t, k_t)
        return S, S @ q_t

    S0 = jnp.zeros((v.shape[-1], k.shape[-1]), v.dtype)
    return jax.lax.scan(step, S0, (q, k, v, alpha, beta))[1]


class GatedDeltaNet(eqx.Module):
    proj: HeadProjections
    gates: eqx.nn.Linear  # x_t -> (w_alpha . x_t + b_alpha, w_beta . x_t + b_beta) per head

    def __init__(self, width: int, heads: int = 1, *, key: Array):
        k_proj, k_gates = jax.random.split(key)
        self.proj = HeadProjections(width, heads, k_proj)
        gates = eqx.nn.Linear(width, 2 * heads, key=k_gates)
        # decay near 1 at initialisation (softplus(-4) = 0.018: alpha ~ 0.98), as in the paper's code
        bias = jnp.concatenate([jnp.full(heads, -4.0), jnp.zeros(heads)])
        self.gates = eqx.tree_at(lambda g: g.bias, gates, bias)

    def state_size(self, length: int | None = None) -> int:
        """heads d_h^2 numbers, for any length."""
        heads = self.proj.heads
        d_h = self.proj.out.in_features // heads
        return heads * d_h * d_h

    def __call__(self, x: Array) -> Array:
        q, k, v = self.proj.split(x)  # (heads, L, d_h) each
        a, b = jnp.split(jax.vmap(self.gates)(x), 2, axis=-1)  # (L, heads) each
        alpha, beta = jnp.exp(-jax.nn.softplus(a)).T, jax.nn.sigmoid(b).T  # (heads, L)
        return self.proj.merge(jax.vmap(gated_delta_rule)(_unit(q), _unit(k), v, alpha, beta))

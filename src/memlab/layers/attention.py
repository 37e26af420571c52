"""Causal self-attention over one sequence: softmax attention (Vaswani et al. 2017) and linear attention
(Katharopoulos et al. 2020), multi-head, x (L, d) -> (L, d).

Softmax: o_t = sum_{s <= t} softmax_s(q_t . k_s / sqrt(d_h)) v_s per head, with rotary position embeddings on q and
k by default (Su et al. 2021, "RoFormer"; without a position signal attention sees its context as a bag of tokens).
Its state at step t is the key-value cache, 2 d t numbers.

Linear: o_t = S_t phi(q_t) / (z_t . phi(q_t)) with S_t = sum_{s <= t} v_s phi(k_s)^T and z_t = sum_{s <= t} phi(k_s),
phi = elu + 1 (no position embedding, as in the paper); a recurrence with a (d_h x d_h) state per head, computed
here in its parallel form o_t = sum_{s <= t} (phi(q_t) . phi(k_s)) v_s / sum_{s <= t} phi(q_t) . phi(k_s) (the same
numbers as the recurrence, which the tests run step by step; a cumulative sum of the states S_t held L d_h^2
numbers a sequence and made a training step many times slower on the CPU).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.checks import check_int
from memlab.layers.dense import apply_linear

__all__ = ["CausalLinearAttention", "CausalSoftmaxAttention", "rotary"]


def rotary(x: Array, base: float = 10_000.0) -> Array:
    """Rotary position embedding of x (..., L, d_h), d_h even: the pair (x[2i], x[2i+1]) at position t is rotated by
    the angle t base^(-2i / d_h), so a rotated query and key have a dot product that depends on their positions
    only through t - s."""
    L, d = x.shape[-2:]
    if d % 2:
        raise ValueError(f"rotary position embeddings need an even head size, got {d}")
    angle = jnp.arange(L)[:, None] * base ** (-jnp.arange(0, d, 2) / d)  # (L, d / 2)
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    even, odd = x[..., 0::2], x[..., 1::2]
    return jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1).reshape(x.shape)


class HeadProjections(eqx.Module):
    """The query, key and value projections split into heads, and the output projection (shared by the
    attention layers and ``memlab.layers.deltanet``)."""

    qkv: eqx.nn.Linear
    out: eqx.nn.Linear
    heads: int = eqx.field(static=True)

    def __init__(self, width: int, heads: int, key: Array):
        check_int("width", width)
        check_int("heads", heads)
        if width % heads:
            raise ValueError(f"width ({width}) must be a multiple of heads ({heads})")
        k_qkv, k_out = jax.random.split(key)
        self.qkv = eqx.nn.Linear(width, 3 * width, use_bias=False, key=k_qkv)
        self.out = eqx.nn.Linear(width, width, use_bias=False, key=k_out)
        self.heads = heads

    @property
    def head_size(self) -> int:
        """d_h = width / heads."""
        return self.out.in_features // self.heads

    def split(self, x: Array) -> tuple[Array, Array, Array]:
        """q, k, v, each (heads, L, d_h)."""
        return self.split_heads(apply_linear(self.qkv, x))

    def split_heads(self, qkv: Array) -> tuple[Array, Array, Array]:
        """The projections (L, 3 d), [q | k | v], as q, k, v, each (heads, L, d_h)."""
        L, d = qkv.shape[0], qkv.shape[1] // 3
        qkv = qkv.reshape(L, 3, self.heads, d // self.heads)
        return tuple(jnp.moveaxis(qkv[:, i], 1, 0) for i in range(3))

    def merge(self, o: Array) -> Array:
        """(heads, L, d_h) -> out-projected (L, d)."""
        return apply_linear(self.out, jnp.moveaxis(o, 0, 1).reshape(o.shape[1], -1))

    def split_token(self, x: Array) -> tuple[Array, Array, Array]:
        """q, k, v of one token x (d,), each (heads, d_h) (a recurrent form's step)."""
        return self.split_heads_token(apply_linear(self.qkv, x[None])[0])

    def split_heads_token(self, qkv: Array) -> tuple[Array, Array, Array]:
        """One token's projections (3 d,), [q | k | v], as q, k, v, each (heads, d_h)."""
        return tuple(a[:, 0] for a in self.split_heads(qkv[None]))

    def merge_token(self, o: Array) -> Array:
        """(heads, d_h) -> out-projected (d,)."""
        return self.merge(o[:, None])[0]


class CausalSoftmaxAttention(eqx.Module):
    proj: HeadProjections
    positions: bool = eqx.field(static=True)

    def __init__(self, width: int, heads: int = 1, *, key: Array, positions: bool = True):
        """``positions``: rotary position embeddings on the queries and keys (module docstring)."""
        self.proj = HeadProjections(width, heads, key)
        self.positions = positions

    def state_size(self, length: int) -> int:
        """The key-value cache at the last step: 2 d L."""
        return 2 * self.proj.out.in_features * length

    def __call__(self, x: Array) -> Array:
        q, k, v = self.proj.split(x)
        if self.positions:
            q, k = rotary(q), rotary(k)
        scores = q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(q.shape[-1])  # (heads, L, L)
        causal = jnp.tril(jnp.ones(scores.shape[-2:], bool))
        weights = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
        return self.proj.merge(weights @ v)


def feature_map(x: Array) -> Array:
    """phi(x) = elu(x) + 1 > 0 (Katharopoulos et al. 2020)."""
    return jax.nn.elu(x) + 1.0


class CausalLinearAttention(eqx.Module):
    """Causal linear attention (Katharopoulos et al. 2020): o_t = S_t phi(q_t) / (z_t . phi(q_t)) with
    S_t = sum_{s<=t} v_s phi(k_s)^T, z_t = sum_{s<=t} phi(k_s). ``normalise=False`` drops the normaliser,
    o_t = S_t phi(q_t) (the arena's ablation of linear attention)."""

    proj: HeadProjections
    normalise: bool = eqx.field(static=True)

    def __init__(self, width: int, heads: int = 1, *, key: Array, normalise: bool = True):
        self.proj = HeadProjections(width, heads, key)
        self.normalise = normalise

    def state_size(self, length: int | None = None) -> int:
        """S (and z, when normalised) per head: heads (d_h^2 + d_h), or heads d_h^2."""
        d_h = self.proj.head_size
        return self.proj.heads * (d_h * d_h + (d_h if self.normalise else 0))

    def init_state(self) -> tuple[Array, ...]:
        """(S, z) = 0, or (S,) without the normaliser: per head S_t = sum_s v_s phi(k_s)^T (heads, d_h, d_h) and
        z_t = sum_s phi(k_s) (heads, d_h)."""
        heads, d_h, dtype = self.proj.heads, self.proj.head_size, self.proj.out.weight.dtype
        S = jnp.zeros((heads, d_h, d_h), dtype)
        return (S, jnp.zeros((heads, d_h), dtype)) if self.normalise else (S,)

    def step(self, state: tuple[Array, ...], x: Array) -> tuple[tuple[Array, ...], Array]:
        """One step of the recurrence: (state, x_t (d,)) -> (state_t, o_t (d,))."""
        q, k, v = self.proj.split_token(x)  # (heads, d_h) each
        q, k = feature_map(q), feature_map(k)
        S = state[0] + v[:, :, None] * k[:, None, :]
        o = jnp.einsum("hij,hj->hi", S, q)
        if not self.normalise:
            return (S,), self.proj.merge_token(o)
        z = state[1] + k
        return (S, z), self.proj.merge_token(o / jnp.sum(z * q, -1, keepdims=True))

    def __call__(self, x: Array) -> Array:
        q, k, v = self.proj.split(x)
        q, k = feature_map(q), feature_map(k)
        causal = jnp.tril(jnp.ones((x.shape[0], x.shape[0]), q.dtype))
        weights = (q @ jnp.swapaxes(k, -1, -2)) * causal  # (heads, L, L): phi(q_t) . phi(k_s), s <= t
        if not self.normalise:
            return self.proj.merge(weights @ v)
        return self.proj.merge((weights @ v) / jnp.sum(weights, -1, keepdims=True))

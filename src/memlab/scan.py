"""Linear recurrences in sequential (``lax.scan``) and parallel (``lax.associative_scan``) form.

Scaled-permutation recurrence (the ALF of paper 1, eqs. 24 and 46, and the exact
linear filters of Theorem 4.4 / Corollary 4.5 have this form):

    h_k = c_k * h_{k-1}[src_k] + b_k          h (N,), src_k (N,) int, c_k scalar, b_k (N,)

i.e. h_k = A_k h_{k-1} + b_k with A_k = c_k Π_k a scaled permutation (Π_k h)[i] = h[src_k[i]].
Entries may be -inf (logits of impossible states); products use the convention
0 * (-inf) = 0 so nothing turns into NaN.

The parallel form composes affine maps: applying (src1, c1, b1) then (src2, c2, b2) gives
(src1[src2], c1 c2, c2 b1[src2] + b2); a flag records whether a factor was exactly zero,
since a product of small factors may underflow to 0 without being a true zero. On a CPU the sequential form is
usually faster (see DESIGN.md); the parallel form is the accelerator path and the cross-check.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array


def extended_mul(c: Array, h: Array) -> Array:
    """c * h with 0 * (-inf) = 0 (c broadcasts against h)."""
    return jnp.where(c == 0, 0.0, c * h)


def _check(src, c, b, h0):
    if src.ndim != 2 or b.shape != src.shape or c.shape != src.shape[:1] or h0.shape != src.shape[1:]:
        raise ValueError(
            f"expected src (K, N), c (K,), b (K, N), h0 (N,); got {src.shape}, {c.shape}, {b.shape}, {h0.shape}"
        )


def permutation_scan(src: Array, c: Array, b: Array, h0: Array) -> Array:
    """Sequential h_k = c_k h_{k-1}[src_k] + b_k for k = 1..K; returns (K, N)."""
    _check(src, c, b, h0)

    def step(h, inp):
        s, ck, bk = inp
        h = extended_mul(ck, h[s]) + bk
        return h, h

    return jax.lax.scan(step, h0, (src, c, b))[1]


def _scaled(c: Array, zero: Array, h: Array) -> Array:
    """c * h where c is a product of factors and ``zero`` says whether one factor was exactly 0.

    A product of nonzero factors can underflow to 0.0; it must still map -inf to -inf
    (with c's sign), not to 0 — only a true zero factor gets 0 * (-inf) = 0.
    """
    sign = jnp.where(jnp.signbit(c), -1.0, 1.0)
    return jnp.where(zero, 0.0, jnp.where(jnp.isinf(h), sign * h, c * h))


def _compose(first, second):
    """The affine map 'first, then second' for batches of elements (leading axis)."""
    s1, c1, z1, b1 = first
    s2, c2, z2, b2 = second
    src = jnp.take_along_axis(s1, s2, axis=-1, mode="promise_in_bounds")
    b1_moved = jnp.take_along_axis(b1, s2, axis=-1, mode="promise_in_bounds")
    return src, c1 * c2, z1 | z2, _scaled(c2[..., None], z2[..., None], b1_moved) + b2


def permutation_scan_parallel(src: Array, c: Array, b: Array, h0: Array) -> Array:
    """Same as ``permutation_scan`` with ``lax.associative_scan`` (O(log K) depth); returns (K, N)."""
    _check(src, c, b, h0)
    src_k, c_k, z_k, b_k = jax.lax.associative_scan(_compose, (src, c, c == 0, b))
    return _scaled(c_k[:, None], z_k[:, None], h0[src_k]) + b_k

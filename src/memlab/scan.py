"""Linear recurrences in sequential (``lax.scan``) and parallel (``lax.associative_scan``) form, with per-step resets.

    h_t = a_t * h_{t-1} + b_t      (``linear_scan``)        h_t = M_t h_{t-1} + b_t      (``matrix_scan``)
    h_k = c_k * h_{k-1}[src_k] + b_k                         (scaled permutations: the ALF of paper 1, eq. 24 / 46,
                                                              and the exact linear filters of Theorem 4.4)

A ``reset`` flag restarts the recurrence at t from h0, so packed sequences behave as separate ones. Entries may be
-inf (logits of impossible states) with 0 * (-inf) = 0. How the parallel forms compose: docs/architecture.md,
"Linear recurrences".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array

from memlab.checks import check_choice

METHODS = ("sequential", "parallel")


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


def scan_inputs(b: Array, h0, reset, state_shape, method: str):
    """Common checks of the scans; returns (h0, reset) filled in."""
    check_choice("method", method, METHODS)
    L = b.shape[0]
    h0 = jnp.zeros(state_shape, b.dtype) if h0 is None else jnp.asarray(h0)
    if h0.shape != state_shape:
        raise ValueError(f"h0 must have the state shape {state_shape}, got {h0.shape}")
    reset = jnp.zeros(L, bool) if reset is None else jnp.asarray(reset)
    if reset.shape != (L,) or reset.dtype != jnp.bool_:
        raise ValueError(f"reset must be a boolean array of shape ({L},), got {reset.dtype} {reset.shape}")
    return h0, reset


def linear_scan(a: Array, b: Array, h0: Array | None = None, reset: Array | None = None,
                method: str = "sequential") -> Array:
    """h_t = a_t * h_{t-1} + b_t elementwise for t = 0..L-1, h_{-1} = h0; returns h (L, *S).

    a, b (L, *S); h0 (*S) (default zeros); reset (L,) bool: where reset[t], h_{t-1} is replaced by h0.
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.shape != b.shape or a.ndim < 1:
        raise ValueError(f"a and b must have the same shape (L, *S), got {a.shape} and {b.shape}")
    h0, reset = scan_inputs(b, h0, reset, b.shape[1:], method)
    if method == "sequential":

        def step(h, inputs):
            a_t, b_t, r_t = inputs
            h = a_t * jnp.where(r_t, h0, h) + b_t
            return h, h

        return jax.lax.scan(step, h0, (a, b, reset))[1]
    # A reset step is the constant map h -> a_t h0 + b_t, i.e. the affine map (0, a_t h0 + b_t).
    r = reset.reshape((-1,) + (1,) * (a.ndim - 1))
    a, b = jnp.where(r, 0.0, a), jnp.where(r, a * h0 + b, b)

    def compose(first, second):  # "first, then second"
        a1, b1 = first
        a2, b2 = second
        return a1 * a2, a2 * b1 + b2

    a_cum, b_cum = jax.lax.associative_scan(compose, (a, b))
    return a_cum * h0 + b_cum


def matrix_scan(M: Array, b: Array, h0: Array | None = None, reset: Array | None = None,
                method: str = "sequential") -> Array:
    """h_t = M_t h_{t-1} + b_t for t = 0..L-1, h_{-1} = h0; returns h (L, d).

    M (L, d, d); b (L, d); h0 (d,) (default zeros); reset (L,) bool: where reset[t], h_{t-1} is replaced by h0.
    """
    M, b = jnp.asarray(M), jnp.asarray(b)
    if M.ndim != 3 or b.ndim != 2 or M.shape != b.shape + b.shape[1:]:
        raise ValueError(f"expected M (L, d, d) and b (L, d), got {M.shape} and {b.shape}")
    h0, reset = scan_inputs(b, h0, reset, b.shape[1:], method)
    if method == "sequential":

        def step(h, inputs):
            M_t, b_t, r_t = inputs
            h = M_t @ jnp.where(r_t, h0, h) + b_t
            return h, h

        return jax.lax.scan(step, h0, (M, b, reset))[1]
    b = jnp.where(reset[:, None], M @ h0 + b, b)
    M = jnp.where(reset[:, None, None], 0.0, M)

    def compose(first, second):
        M1, b1 = first
        M2, b2 = second
        return M2 @ M1, jnp.einsum("...ij,...j->...i", M2, b1) + b2

    M_cum, b_cum = jax.lax.associative_scan(compose, (M, b))
    return M_cum @ h0 + b_cum

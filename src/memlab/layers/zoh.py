"""The ZOH matrices (exp(delta A), int_0^delta exp(sA) ds) of the S6 layer by scaling and squaring: the engine.

``memlab.layers.s6.expm_and_integral_reference`` computes the same two blocks plainly, as jax.scipy's expm of the
augmented matrix delta [[A, I], [0, 0]]; this module computes them without forming it, batched over steps with a
per-step squaring count and a hand-written reverse mode (tested equal in value and gradient, benchmarks/bench_s6.py).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import Array

# Scaling and squaring (below): after scaling, ||2^-s delta A||_1 <= 1; the most squarings per step, as in
# jax.scipy.linalg.expm's reach (||delta A||_1 up to 2^19 ~ 5e5 here, 5.4 * 2^16 ~ 3.5e5 there); beyond it: NaN.
MAX_SQUARINGS = 19
_HIGHEST = jax.lax.Precision.HIGHEST  # full float32 products on accelerators too (no bfloat16 passes)


def _phi1_taylor_degree(dtype) -> int:
    """Smallest degree m whose Taylor remainder of phi1(Y) = sum_k Y^k / (k+1)! is below eps/8 for ||Y|| <= 1:
    sum_{k>m} 1/(k+1)! <= (m+3) / ((m+2) (m+2)!). float64: 17, float32: 10."""
    eps, m = float(jnp.finfo(dtype).eps), 1
    while (m + 3) / ((m + 2) * math.factorial(m + 2)) > eps / 8:
        m += 1
    return m


def _phi1_taylor(Y: Array, degree: int) -> Array:
    """sum_{k=0..degree} Y^k / (k+1)! for Y (..., d, d), by Paterson-Stockmeyer: the polynomial in Y is a polynomial
    in Y^p (p ~ sqrt(degree)) with matrix coefficients of degree < p, so ~2 sqrt(degree) products, not degree."""
    p = math.isqrt(degree - 1) + 1  # ceil(sqrt(degree))
    powers = [jnp.broadcast_to(jnp.eye(Y.shape[-1], dtype=Y.dtype), Y.shape), Y]  # Y^0 .. Y^p
    for _ in range(p - 1):
        powers.append(jnp.matmul(powers[-1], Y, precision=_HIGHEST))
    coeffs = [1 / math.factorial(k + 1) for k in range(degree + 1)]

    def chunk(j):  # sum_{i<p} c_{jp+i} Y^i
        return sum(coeffs[j * p + i] * powers[i] for i in range(min(p, degree + 1 - j * p)))

    acc = chunk(degree // p)
    for j in range(degree // p - 1, -1, -1):  # Horner in Y^p
        acc = jnp.matmul(acc, powers[p], precision=_HIGHEST) + chunk(j)
    return acc


def _double(M: Array, integral: Array, active: Array) -> tuple[Array, Array]:
    """One squaring where ``active`` (...): (M, integral) for step h -> (M^2, M integral + integral) for step 2h."""
    d = M.shape[-1]
    products = jnp.matmul(M, jnp.concatenate([M, integral], axis=-1), precision=_HIGHEST)  # [M^2, M integral]
    active = active[..., None, None]
    return jnp.where(active, products[..., :d], M), jnp.where(active, products[..., d:] + integral, integral)


def _square_up_loop(step, carry, largest):
    """Run ``step(k, carry)`` for k = 0 .. largest - 1 (a while loop: as many squarings as the batch needs)."""
    def body(state):
        k, carry = state
        return k + 1, step(k, carry)

    largest = jnp.asarray(largest).astype(jnp.int32)  # squaring counts are floats (from the ceil of a log2)
    return jax.lax.while_loop(lambda state: state[0] < largest, body, (jnp.int32(0), carry))[1]


# reverse mode keeps every CHECKPOINT_EVERY-th level of the squarings and recomputes the levels between them
CHECKPOINT_EVERY = 4


def _square_up_forward(M: Array, integral: Array, squarings: Array):
    """``_square_up`` for reverse mode, keeping the levels (M_k, I_k) at k = 0, 4, 8, ... (before squaring k) as
    (ceil(MAX_SQUARINGS / 4), ..., d, 2d); slots past the batch's largest count stay zero."""
    def step(k, carry):
        M, integral, checkpoints = carry
        slot = k // CHECKPOINT_EVERY
        kept = jax.lax.dynamic_index_in_dim(checkpoints, slot, 0, keepdims=False)
        level = jnp.where(k % CHECKPOINT_EVERY == 0, jnp.concatenate([M, integral], axis=-1), kept)
        checkpoints = jax.lax.dynamic_update_index_in_dim(checkpoints, level, slot, 0)
        return (*_double(M, integral, k < squarings), checkpoints)

    slots = -(-MAX_SQUARINGS // CHECKPOINT_EVERY)
    checkpoints = jnp.zeros((slots, *M.shape[:-1], 2 * M.shape[-1]), M.dtype)
    M, integral, checkpoints = _square_up_loop(step, (M, integral, checkpoints), jnp.max(squarings, initial=0))
    return (M, integral), (checkpoints, squarings)


@jax.custom_vjp
def _square_up(M: Array, integral: Array, squarings: Array) -> tuple[Array, Array]:
    """Apply ``_double`` squarings (...) <= MAX_SQUARINGS times to each (M, integral) (..., d, d): a loop that stops
    after the largest count (typically a few, not MAX_SQUARINGS).

    Reverse mode runs the adjoint (``_square_up_adjoint``) over the same number of levels. A while loop has no
    reverse-mode derivative of its own, and a fixed MAX_SQUARINGS-step scan, which has one, squares every matrix 19
    times where typically 0-3 squarings are needed (the S6 layer's backward pass was many times slower that
    way, benchmarks/bench_s6.py). Being a ``custom_vjp``, it has no forward mode (``jax.jvp`` raises a TypeError).
    """
    largest = jnp.max(squarings, initial=0)
    return _square_up_loop(lambda k, carry: _double(*carry, k < squarings), (M, integral), largest)


def _square_up_adjoint(residuals, cotangents):
    """The adjoint of the squarings, from the last level down. One squaring (M, I) -> (M^2, M I + I) has the
    tangent map dM' = dM M + M dM, dI' = dM I + M dI + dI, whose transpose is
        cM = cM' M^T + M^T cM' + cI' I^T,      cI = M^T cI' + cI'.
    The level (M_k, I_k) before squaring k is recomputed from the checkpoint below it by at most 3 squarings:
    keeping all MAX_SQUARINGS possible levels (a static shape) costs more memory traffic than recomputing, when the
    batch needs the typical 0-6 squarings (storing was slower even at 1 squaring, bench_s6.py), and recomputing
    every level from the inputs costs ~s^2/2 squarings (slower than storing for many squarings)."""
    checkpoints, squarings = residuals
    d = checkpoints.shape[-1] // 2
    largest = jnp.max(squarings, initial=0).astype(jnp.int32)
    # squarings base*4 .. k-1 are redone unmasked: where squaring k applies so did they; elsewhere it is masked below
    unmasked = jnp.asarray(True)

    def step(j, carry):
        cM, cI = carry
        k = largest - 1 - j
        base = k // CHECKPOINT_EVERY
        MI = jax.lax.dynamic_index_in_dim(checkpoints, base, 0, keepdims=False)
        M, integral = _square_up_loop(lambda i, c: _double(*c, unmasked), (MI[..., :d], MI[..., d:]),
                                      k % CHECKPOINT_EVERY)
        active = (k < squarings)[..., None, None]
        stacked = jnp.concatenate([cM, cI], axis=-1)  # [cM', cI']
        left = jnp.matmul(stacked, jnp.concatenate([M, integral], axis=-1).mT, precision=_HIGHEST)  # cM' M^T + cI' I^T
        right = jnp.matmul(M.mT, stacked, precision=_HIGHEST)  # M^T [cM', cI']
        return jnp.where(active, left + right[..., :d], cM), jnp.where(active, right[..., d:] + cI, cI)

    cM, cI = _square_up_loop(step, tuple(cotangents), largest)
    return cM, cI, jnp.zeros_like(squarings)


_square_up.defvjp(_square_up_forward, _square_up_adjoint)


def expm_and_integral(A: Array, delta: Array) -> tuple[Array, Array]:
    """(exp(delta A), int_0^delta exp(sA) ds) for A (d, d) and steps delta (...): two (..., d, d).

    Both are blocks of expm(delta [[A, I], [0, 0]]), computed here without forming that 2d x 2d matrix. For a step
    h = delta / 2^s with ||h A||_1 <= 1, phi1(hA) = sum_k (hA)^k / (k+1)! by its Taylor polynomial (remainder
    < eps/8, ``_phi1_taylor_degree``) gives both blocks: exp(hA) = I + hA phi1(hA), int_0^h exp(sA) ds = h phi1(hA)
    (exact for singular and defective A). Each squaring doubles the step, by the semigroup property:
        exp(2hA) = exp(hA)^2,      int_0^2h exp(sA) ds = (exp(hA) + I) int_0^h exp(sA) ds.
    Each step has its own s = ceil(log2 ||delta A||_1) (no step is over-scaled, which would cost accuracy); all
    steps square together, masked per step (``_square_up``): batched products, no per-matrix branch, so it
    vectorises (jax.scipy.linalg.expm under vmap instead evaluates all five of its Pade branches and 16 squarings
    of the 2d x 2d matrix).
    """
    d = A.shape[0]
    delta = jnp.asarray(delta, A.dtype)
    norm = jnp.abs(jax.lax.stop_gradient(delta)) * jnp.linalg.norm(jax.lax.stop_gradient(A), 1)
    needed = jnp.ceil(jnp.log2(jnp.where(norm > 1, norm, 1.0)))  # 0 when ||delta A||_1 <= 1
    squarings = jnp.minimum(needed, MAX_SQUARINGS)
    h = delta * jnp.exp2(-squarings)  # exact: a power of two
    hA = h[..., None, None] * A
    phi = _phi1_taylor(hA, _phi1_taylor_degree(A.dtype))
    M = jnp.eye(d, dtype=A.dtype) + jnp.matmul(hA, phi, precision=_HIGHEST)
    integral = h[..., None, None] * phi

    M, integral = _square_up(M, integral, squarings)
    out_of_reach = (needed > MAX_SQUARINGS)[..., None, None]
    return jnp.where(out_of_reach, jnp.nan, M), jnp.where(out_of_reach, jnp.nan, integral)

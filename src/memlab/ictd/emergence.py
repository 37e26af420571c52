"""Emergence diagnostics of a learned softmax ICTD block (App. F.4 and eq. (34) of section 8).

Three plain functions, each jit-able and vmap-able:

- :func:`v_emergence` (V) -> V_em in [0, 1], eq. (109)-(110): the TD sign pattern (+, +, -) of the coefficients the
  value row applies to (reward r, bootstrap gamma v', current value v), times their magnitude comparability.
- :func:`a_emergence` (A) -> A_em in [0, 1], eq. (111): the diagonal share of the column-normalised |A_feat|, times
  the comparability of the raw diagonal of A_feat.
- :func:`kernel_diagonal_mean` (Z0, A, tau) -> d_t in [1/n .. 1], eq. (34): (1/n) tr of the n x n context block of the
  attention matrix of eq. (4) built from the prompt Z0 and A.

Both scores are exactly 1 at theta* of eq. (15). Indices: the paper's 1-based row d+3 of V (the value row) is the
0-based row d+2 here, and its columns "d:d+3" are the 0-based columns d, d+1, d+2, i.e. the prompt rows that hold the
reward, the bootstrap (target) memory gamma v' and the current value v (eq. (13), (22)). The feature block of A is
A[:d, :d]. V and A have shape (d+3, d+3), so d = V.shape[0] - 3.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array

from memlab.ictd.softmax_td import kernel_weights

EPS = 1e-8  # the small constant epsilon of eq. (110) and (111)

__all__ = ["EPS", "a_emergence", "emergence_scores", "kernel_diagonal_mean", "v_emergence"]


def _check_square(name: str, M) -> int:
    """Return d for a (d+3, d+3) parameter matrix; ValueError otherwise."""
    shape = jnp.shape(M)
    if len(shape) != 2 or shape[0] != shape[1] or shape[0] < 4:
        raise ValueError(f"{name} must be a square (d+3, d+3) matrix with d >= 1, got shape {shape}")
    return shape[0] - 3


def v_emergence(V: Array, eps: float = EPS) -> Array:
    """V-emergence score of App. F.4.1, eq. (109)-(110).

    V: (d+3, d+3). Uses p = (p_r, p_gv, p_v) = V[d+2, d:d+3] (the paper's (V)_{d+3, d:d+3}). Returns a () array in
    [0, 1]: 1{p_r > 0, p_gv > 0, p_v < 0} * C_V, with C_V = max(0, 1 - sum_i ||p_i| - m| / (3 max(m, eps))) and
    m = mean |p_i|. C_V = 0 when m = 0.
    """
    d = _check_square("V", V)
    p = jnp.asarray(V)[d + 2, d : d + 3]
    signs_ok = (p[0] > 0) & (p[1] > 0) & (p[2] < 0)  # eq. (109)
    mag = jnp.abs(p)
    m = jnp.mean(mag)
    c_v = jnp.maximum(0.0, 1.0 - jnp.sum(jnp.abs(mag - m)) / (3.0 * jnp.maximum(m, eps)))  # eq. (110)
    c_v = jnp.where(m > 0, c_v, 0.0)
    return jnp.where(signs_ok, c_v, 0.0)


def a_emergence(A: Array, eps: float = EPS) -> Array:
    """A-emergence score of App. F.4.2, eq. (111).

    A: (d+3, d+3); only the feature block A_feat = A[:d, :d] is used. Returns a () array in [0, 1]:
    A_diag * C_A, where A_diag = tr(A_hat) / max(sum A_hat, eps) for A_hat = |A_feat| with each nonzero column divided
    by its l2 norm (zero columns stay zero), and C_A = max(0, 1 - sum_i |a_i - m_A| / (d max(m_A, eps))) for the raw
    diagonal a = diag(A_feat) and m_A = mean(a). As in the paper, C_A does not check that m_A > 0 beyond the eps floor.
    """
    d = _check_square("A", A)
    A_feat = jnp.asarray(A)[:d, :d]
    norms = jnp.linalg.norm(A_feat, axis=0)  # column l2 norms, (d,)
    A_hat = jnp.where(norms > 0, jnp.abs(A_feat) / jnp.where(norms > 0, norms, 1.0), 0.0)
    a_diag = jnp.trace(A_hat) / jnp.maximum(jnp.sum(A_hat), eps)
    a = jnp.diag(A_feat)
    m_a = jnp.mean(a)
    c_a = jnp.maximum(0.0, 1.0 - jnp.sum(jnp.abs(a - m_a)) / (d * jnp.maximum(m_a, eps)))
    return a_diag * c_a  # eq. (111)


def emergence_scores(V: Array, A: Array, eps: float = EPS) -> tuple[Array, Array]:
    """(V_em, A_em) of one parameter pair; V, A: (d+3, d+3)."""
    return v_emergence(V, eps), a_emergence(A, eps)


def kernel_diagonal_mean(Z0: Array, A: Array, tau: float = 1.0, rho: float = 0.0) -> Array:
    """Kernel diagonal mean d_t of eq. (34) for one prompt.

    Z0: (d+3, n+1) prompt of eq. (13); A: (d+3, d+3). The attention matrix is the masked, column-normalised
    softmax(Z0^T A Z0 / tau) of eq. (4) (with eq. (104)'s rho * I mixed in if rho > 0; the paper's d_t uses rho = 0),
    computed by ``softmax_td.kernel_weights``. Returns (1/n) tr of its n x n context block (source and target columns
    0..n-1), a () array: 1/n for A = 0 (uniform attention), -> 1 when every context token attends only to itself.
    """
    d = _check_square("A", A)
    Z0 = jnp.asarray(Z0)
    if Z0.ndim != 2 or Z0.shape[0] != d + 3 or Z0.shape[1] < 2:
        raise ValueError(f"Z0 must have shape (d+3, n+1) = ({d + 3}, n+1) with n >= 1 to match A, got {Z0.shape}")
    n = Z0.shape[1] - 1
    K = kernel_weights(Z0.T @ A @ Z0, "softmax", tau=tau, rho=rho)  # eq. (4) / (104)
    return jnp.trace(K[:n, :n]) / n  # eq. (34)

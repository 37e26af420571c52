"""The Kalman predict-then-update step of ``memlab.kalman`` (eq. 18-21) for small matrices, fast under vmap.

The switching task's particle filter runs a Kalman step for every particle, every successor mode, every step and
every sequence (about 1.6 M steps for a batch of 512 sequences of 64 steps, 16 particles, 3 modes). Under vmap the
plain step (``kalman.predict`` then ``kalman.update``) becomes one small GEMM call per matrix product and a LAPACK
call per Cholesky factor and triangular solve, and the calls' overhead dominates. Here the products are
product-sums (``memlab.small_matmul``) and the D x D innovation covariance is factored and solved by loops unrolled
over D, so XLA fuses the whole step, an order of magnitude faster. Tested equal to the plain step
(tests/arena/test_switching_task.py).
The covariance update is P - W^T W with W = L^{-1} C P (S = L L^T), not the Joseph form of ``kalman.update``; the
two agree to float32 rounding on the arena's models. Unrolling costs compile time of order D^3: for small D only.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import Array

from memlab.kalman import symmetrise
from memlab.small_matmul import fused_matmul, fused_matvec

__all__ = ["cholesky_unrolled", "kalman_step_small"]


def cholesky_unrolled(S: Array) -> Array:
    """The lower Cholesky factor (..., D, D) of S (..., D, D) positive definite, by the Cholesky-Banachiewicz loop
    unrolled over D."""
    D = S.shape[-1]
    L = [[jnp.zeros_like(S[..., 0, 0])] * D for _ in range(D)]
    for j in range(D):
        L[j][j] = jnp.sqrt(S[..., j, j] - sum((L[j][k] ** 2 for k in range(j)), jnp.zeros_like(S[..., 0, 0])))
        for i in range(j + 1, D):
            L[i][j] = (S[..., i, j] - sum((L[i][k] * L[j][k] for k in range(j)), jnp.zeros_like(S[..., 0, 0]))) \
                / L[j][j]
    return jnp.stack([jnp.stack(row, -1) for row in L], -2)


def _forward_substitution(L: Array, B: Array) -> Array:
    """L^{-1} B (D, n) for L (D, D) lower triangular, unrolled over D."""
    rows: list[Array] = []
    for i in range(L.shape[-1]):
        rows.append((B[i] - sum((L[i, k] * rows[k] for k in range(i)), jnp.zeros_like(B[i]))) / L[i, i])
    return jnp.stack(rows)


def kalman_step_small(mean: Array, cov: Array, y: Array, A: Array, Q: Array, C: Array, R: Array
                      ) -> tuple[Array, Array, Array]:
    """Predict with (A, Q) then update with y (eq. 18-21): mean (M,), cov (M, M) of x_{t-1} -> the filtered mean
    (M,), covariance (M, M) of x_t and log N(y; C m_{t|t-1}, S) (scalar), S = C P_{t|t-1} C^T + R. One step; vmap
    outside."""
    mean, cov = fused_matvec(A, mean), symmetrise(fused_matmul(fused_matmul(A, cov), A.T) + Q)  # eq. (18)
    CP = fused_matmul(C, cov)  # (D, M)
    L = cholesky_unrolled(symmetrise(fused_matmul(CP, C.T) + R))
    W = _forward_substitution(L, CP)  # L^{-1} C P: the gain K = P C^T S^{-1} = W^T L^{-1}, eq. (19)
    whitened = _forward_substitution(L, (y - fused_matvec(C, mean))[:, None])[:, 0]  # L^{-1} (y - C m)
    log_lik = -0.5 * (y.shape[-1] * math.log(2 * math.pi) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(L)))
                      + whitened @ whitened)
    return mean + fused_matvec(W.T, whitened), symmetrise(cov - fused_matmul(W.T, W)), log_lik  # eq. (20), (21)

"""Log-space arithmetic shared by the studies and the arena: logs of probabilities that may be exactly zero.

* ``safe_log``          log with log(0) = -inf, no warnings or NaN
* ``log_matvec``        log(T exp(w)), a log-sum-exp per row: exact over the whole float range (the LOF's step, eq. 7
                        of the belief paper)
* ``log_matvec_fast``   the same through one matmul (terms far below the maximum underflow to -inf)
* ``normalize_logits``  w - logsumexp(w): log of the softmax (eq. 8 of the belief paper); all -inf rows stay -inf
* ``finite_max``        a row maximum that is 0 for an all -inf row (the shift of the last two)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array

__all__ = ["finite_max", "log_matvec", "log_matvec_fast", "normalize_logits", "safe_log"]


def safe_log(p: Array) -> Array:
    """Elementwise log with log(0) = -inf and no warnings or NaN."""
    p = jnp.asarray(p)
    return jnp.where(p > 0, jnp.log(jnp.where(p > 0, p, 1.0)), -jnp.inf)


def finite_max(w: Array) -> Array:
    """Row maximum (..., 1), replaced by 0 where the row is all -inf (avoids -inf - -inf)."""
    m = jnp.max(w, axis=-1, keepdims=True)
    return jnp.where(jnp.isfinite(m), m, 0.0)


def log_matvec(T: Array, w: Array) -> Array:
    """log(T exp(w)) for T (N, N) or (..., N, N) and logits w (..., N): a log-sum-exp per row.

    Exact over the whole float range (every row is shifted by its own maximum), -inf safe.
    Costs N^2 exponentials; ``log_matvec_fast`` is the matmul version.
    """
    return jax.nn.logsumexp(safe_log(T) + w[..., None, :], axis=-1)


def log_matvec_fast(T: Array, w: Array) -> Array:
    """log(T exp(w)) through one matmul, shifting w by its overall maximum.

    Terms more than ~87 (float32) or ~745 (float64) nats below max(w) underflow, so a
    state whose every incoming term is that small gets -inf instead of a finite logit.
    Harmless for decoding and for normalised beliefs (the state's probability is below
    1e-38); use ``log_matvec`` where logits must be exact.
    """
    m = finite_max(w)
    return jnp.log(jnp.einsum("...ij,...j->...i", T, jnp.exp(w - m))) + m


def normalize_logits(w: Array) -> Array:
    """w - logsumexp(w) over the last axis (log of the softmax; eq. 8 of the belief paper); all -inf rows stay -inf."""
    m = finite_max(w)
    lse = jnp.log(jnp.sum(jnp.exp(w - m), axis=-1, keepdims=True)) + m
    return jnp.where(jnp.isfinite(lse), w - lse, w)

"""Log-space arithmetic shared by the studies: logs of probabilities that may be exactly zero."""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array

__all__ = ["safe_log"]


def safe_log(p: Array) -> Array:
    """Elementwise log with log(0) = -inf and no warnings or NaN."""
    p = jnp.asarray(p)
    return jnp.where(p > 0, jnp.log(jnp.where(p > 0, p, 1.0)), -jnp.inf)

"""Euclidean projection onto the l1 ball (Duchi, Shalev-Shwartz, Singer & Chandra 2008, Fig. 1).

    P(v) = argmin_w ||w - v||_2^2  s.t.  ||w||_1 <= radius      v (d,)

is soft thresholding w = sign(v) max(|v| - tau, 0) at the tau that puts w on the sphere (pi-SSM App. C.9,
eq. 190-194). With mu = |v| sorted in descending order, tau = (sum_{j<=k} mu_j - radius) / k for the
LARGEST k with mu_k - (sum_{j<=k} mu_j - radius) / k > 0. C.9 step 3 says "smallest k", which is always
k = 1 and gives tau = mu_1 - radius (wrong whenever two or more entries survive); we follow Duchi et al.

Applied row by row to a matrix U it is the Euclidean projection onto {U : ||U||_inf <= radius}, the
induced infinity norm ||U||_inf = max_i sum_j |U_ij| being the largest row l1 norm.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array


def check_radius(radius) -> None:
    """ValueError unless a concrete radius is finite and > 0 (a traced radius is the caller's business)."""
    if isinstance(radius, jax.core.Tracer):
        return
    r = np.asarray(radius)
    if r.ndim != 0 or not np.isfinite(r) or r <= 0:
        raise ValueError(f"l1-ball radius must be a finite scalar > 0, got {radius!r}")


def _project(v: Array, radius) -> Array:
    """Duchi et al. Fig. 1 without input checks; points already inside the ball are returned unchanged."""
    abs_v = jnp.abs(v)
    mu = jnp.sort(abs_v)[::-1]
    k = jnp.arange(1, v.shape[0] + 1, dtype=v.dtype)
    excess = jnp.cumsum(mu) - radius
    rho = jnp.max(jnp.where(mu - excess / k > 0, jnp.arange(v.shape[0]), 0))  # k = 1 always qualifies
    tau = excess[rho] / k[rho]  # eq. (193)
    shrunk = jnp.sign(v) * jnp.maximum(abs_v - tau, 0.0)  # eq. (194)
    return jnp.where(jnp.sum(abs_v) <= radius, v, shrunk)


def project_l1_ball(v, radius) -> Array:
    """Euclidean projection of v (d,) onto {w : ||w||_1 <= radius}; returns (d,). Jittable."""
    v = jnp.asarray(v)
    if v.ndim != 1 or v.shape[0] == 0 or not jnp.issubdtype(v.dtype, jnp.floating):
        raise ValueError(f"v must be a non-empty 1-D float array, got shape {v.shape} and dtype {v.dtype}")
    check_radius(radius)
    return _project(v, jnp.asarray(radius, v.dtype))


def project_rows_l1(U, radius) -> Array:
    """Each row of U (n, d) projected onto the l1 ball of the given radius, so ||U||_inf <= radius after."""
    U = jnp.asarray(U)
    if U.ndim != 2 or 0 in U.shape or not jnp.issubdtype(U.dtype, jnp.floating):
        raise ValueError(f"U must be a non-empty 2-D float array, got shape {U.shape} and dtype {U.dtype}")
    check_radius(radius)
    return jax.vmap(_project, in_axes=(0, None))(U, jnp.asarray(radius, U.dtype))

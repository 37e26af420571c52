"""Lorenz attractor data set of section 7 ("Lorenz Attractor") and App. G.2.

x = [x, y, z] follows eq. (200) with sigma = 10, rho = 28, beta = 8/3, integrated with classical RK4 at the fine
step dt = 1e-5 (App. G.2) in a jitted ``lax.scan`` over samples with an inner ``fori_loop`` over the 1000 fine steps
between samples, and subsampled at Delta t = 0.01. The integration runs in float64 (inside ``jax.enable_x64``)
whatever the caller's setting: at dt = 1e-5 an RK4 increment is ~1e-4 of the state, and float32 would round away
most of its digits. The observations are y_t = x_t + r_t, r_t ~ N(0, 0.5 I) (section 7), so C = I.

Choices the paper leaves open (documented defaults):
- Start: x_0 ~ (0, 0, 25) + N(0, 25 I), then a burn-in of ``BURN_IN`` = 10 time units (RK4 at dt = 1e-3; only its
  end point is used) so the recorded trajectory starts on the attractor, not on the transient.
- The 5k-step trajectory is cut in time order into sequences of 100 steps (one time unit, roughly one loop
  around a wing): 40 for training, 5 for validation, 5 for testing (``LORENZ_LAYOUT``, an 80/10/10 split of the
  5000 steps; App. F.1 lists no sequence length). Contiguous windows, so the splits share no step.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_int, check_real
from memlab.pissm.data.splits import Dataset, Split, SplitLayout, cut_recording

SIGMA, RHO, BETA = 10.0, 28.0, 8.0 / 3.0
DELTA_T = 0.01  # sampling interval of the data (App. G.2)
SUBSTEPS = 1000  # fine RK4 steps per sample: dt = DELTA_T / SUBSTEPS = 1e-5 (App. G.2)
NOISE_VAR = 0.5  # R = 0.5 I (section 7)
BURN_IN = 10.0
LORENZ_LAYOUT = SplitLayout(train=(40, 100), validation=(5, 100), test=(5, 100))


def lorenz_vector_field(x: Array) -> Array:
    """dx/dt of eq. (200) for states (..., 3)."""
    u, v, w = x[..., 0], x[..., 1], x[..., 2]
    return jnp.stack([SIGMA * (v - u), u * (RHO - w) - v, u * v - BETA * w], axis=-1)


def _rk4(x: Array, h) -> Array:
    k1 = lorenz_vector_field(x)
    k2 = lorenz_vector_field(x + 0.5 * h * k1)
    k3 = lorenz_vector_field(x + 0.5 * h * k2)
    k4 = lorenz_vector_field(x + h * k3)
    return x + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)


def lorenz_flow(x: Array, h, substeps: int) -> Array:
    """x (..., 3) moved forward by ``substeps`` RK4 steps of size h along eq. (200)."""
    return jax.lax.fori_loop(0, substeps, lambda _, x: _rk4(x, h), x)


@functools.partial(jax.jit, static_argnames=("num_samples", "substeps"))
def _integrate(x0, h, num_samples, substeps):
    def sample(x, _):
        x = lorenz_flow(x, h, substeps)
        return x, x

    _, xs = jax.lax.scan(sample, x0, None, length=num_samples - 1)
    return jnp.concatenate([x0[None], xs], axis=0)


def integrate_lorenz(x0, num_samples: int, delta_t: float = DELTA_T, substeps: int = SUBSTEPS) -> np.ndarray:
    """Samples x(k delta_t), k = 0..num_samples-1, of eq. (200) from x(0) = x0 (..., 3), by RK4 at step
    delta_t / substeps. Returns a float64 NumPy array (..., num_samples, 3); batch axes are integrated together.
    """
    x0 = np.asarray(x0, dtype=np.float64)
    if x0.ndim < 1 or x0.shape[-1] != 3 or not np.all(np.isfinite(x0)):
        raise ValueError(f"x0 must be finite with shape (..., 3), got shape {x0.shape}")
    for name, n in (("num_samples", num_samples), ("substeps", substeps)):
        check_int(name, n)
    check_real("delta_t", delta_t, 0, open_low=True)
    with jax.enable_x64(True):
        xs = _integrate(jnp.asarray(x0), jnp.float64(delta_t / substeps), int(num_samples), int(substeps))
        xs = np.asarray(xs)
    return np.moveaxis(xs, 0, -2)


def lorenz_transition_matrix(x: Array, delta_t: float = DELTA_T, order: int = 5) -> Array:
    """Discrete state-dependent transition of App. G.2 for the linearised (LG) baselines: x_{t+1} ~ A_t x_t.

    A_c(x) of eq. (201), written with sigma, rho, beta (the paper prints their values), satisfies
    A_c(x) x = dx/dt exactly; eq. (202) approximates exp(A_c delta_t) by its Taylor series up to degree ``order``.
    x (..., 3) -> (..., 3, 3).
    """
    zero, one = jnp.zeros_like(x[..., 0]), jnp.ones_like(x[..., 0])
    rows = [
        [-SIGMA * one, SIGMA * one, zero],
        [RHO - x[..., 2], -one, zero],
        [x[..., 1], zero, -BETA * one],
    ]
    A = jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2) * delta_t  # eq. (201) times delta_t
    term = jnp.broadcast_to(jnp.eye(3, dtype=A.dtype), A.shape)
    total = term
    for j in range(1, order + 1):  # eq. (202)
        term = term @ A / j
        total = total + term
    return total


def generate_lorenz(
    key: Array,
    layout: SplitLayout = LORENZ_LAYOUT,
    noise_var: float = NOISE_VAR,
    substeps: int = SUBSTEPS,
    burn_in: float = BURN_IN,
) -> Dataset:
    """One trajectory of ``layout.total_steps`` (5000) samples at Delta t = 0.01, cut into the splits in time order.

    Each split: t (B, T) time since the first recorded sample, y (B, T, 3), x (B, T, 3); z and events are None.
    C = I (3, 3), R = noise_var I. ``substeps`` sets the fine step dt = 0.01 / substeps (1e-5 by default).
    """
    layout.check()
    check_real("noise_var", noise_var, 0)
    check_real("burn_in", burn_in, 0)
    k_start, k_noise = jax.random.split(key)
    start = np.array([0.0, 0.0, 25.0]) + 5.0 * np.asarray(jax.random.normal(k_start, (3,)), np.float64)
    burn_steps = round(burn_in / 1e-3)
    if burn_steps:
        start = integrate_lorenz(start, 2, delta_t=burn_in, substeps=burn_steps)[-1]
    num_steps = layout.total_steps
    dtype = jnp.result_type(float)
    x = jnp.asarray(integrate_lorenz(start, num_steps, DELTA_T, substeps), dtype)
    y = x + math.sqrt(noise_var) * jax.random.normal(k_noise, x.shape, dtype)
    t = jnp.arange(num_steps, dtype=dtype) * DELTA_T
    splits = [Split(**parts) for parts in cut_recording(layout, t=t, y=y, x=x)]
    return Dataset(*splits, C=jnp.eye(3, dtype=dtype), R=noise_var * jnp.eye(3, dtype=dtype))

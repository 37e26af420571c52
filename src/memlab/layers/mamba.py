"""The Mamba block (the mixer only: no norm, no residual; the student wraps it), Gu & Dao (2024), as used by the
student of A.1 of paper 4 (d_model 16, d_state 32, d_conv 4, expand 2, Delta rank ceil(d_model / 16)).

    [x, z] = in_proj(u)                       (L, d_inner) each
    xc     = silu(causal depthwise conv(x))   width d_conv, taps never cross a reset (sequence start)
    [dt, B, C] = x_proj(xc)                   (L, dt_rank), (L, N), (L, N)
    delta  = softplus(dt_proj(dt))            (L, d_inner)
    y      = selective_scan(xc, delta, A = -exp(A_log), B, C, D)
    out    = out_proj(y * silu(z))

Initialisation as in the public Mamba code: A_log = log(1..N) per channel (S4D-real, A = -exp(A_log));
dt_proj weight uniform in +-dt_rank^-1/2; dt_proj bias = softplus^{-1}(dt), dt log-uniform in [dt_min, dt_max]
floored at 1e-4; D = 1; the projections and the conv use the default uniform +-fan_in^-1/2.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.checks import check_choice
from memlab.layers.causal_conv import causal_depthwise_conv, conv_step, init_conv_weight
from memlab.layers.s6 import DISCRETIZATIONS, METHODS, selective_scan, selective_step


class MambaBlock(eqx.Module):
    """Mamba mixer for one sequence x (L, d_model) -> (L, d_model); the caller vmaps over a batch."""

    in_proj: eqx.nn.Linear
    conv_weight: Array  # (d_inner, d_conv); conv_weight[:, -1] multiplies the current token
    conv_bias: Array
    x_proj: eqx.nn.Linear
    dt_proj: eqx.nn.Linear
    A_log: Array
    D: Array
    out_proj: eqx.nn.Linear
    d_state: int = eqx.field(static=True)
    discretization: str = eqx.field(static=True)
    scan: str = eqx.field(static=True)

    def __init__(self, d_model: int, d_state: int = 32, d_conv: int = 4, expand: int = 2, dt_rank="auto",
                 discretization: str = "zoh", scan: str = "sequential", dt_min: float = 1e-3,
                 dt_max: float = 1e-1, *, key: Array):
        for name, value in (("d_model", d_model), ("d_state", d_state), ("d_conv", d_conv), ("expand", expand)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if dt_rank == "auto":
            dt_rank = math.ceil(d_model / 16)
        if not isinstance(dt_rank, int) or dt_rank < 1:
            raise ValueError(f"dt_rank must be 'auto' or a positive integer, got {dt_rank!r}")
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"need 0 < dt_min <= dt_max, got dt_min={dt_min}, dt_max={dt_max}")
        check_choice("discretization", discretization, DISCRETIZATIONS)
        check_choice("scan", scan, METHODS)
        d_inner = expand * d_model
        k_in, k_conv, k_conv_b, k_x, k_dt_w, k_dt, k_out = jax.random.split(key, 7)
        self.in_proj = eqx.nn.Linear(d_model, 2 * d_inner, use_bias=False, key=k_in)
        bound = 1 / math.sqrt(d_conv)  # depthwise conv: fan_in = d_conv
        self.conv_weight = init_conv_weight(k_conv, d_inner, d_conv)
        self.conv_bias = jax.random.uniform(k_conv_b, (d_inner,), minval=-bound, maxval=bound)
        self.x_proj = eqx.nn.Linear(d_inner, dt_rank + 2 * d_state, use_bias=False, key=k_x)
        dt_std = dt_rank**-0.5
        dt = jnp.exp(jax.random.uniform(k_dt, (d_inner,), minval=math.log(dt_min), maxval=math.log(dt_max)))
        dt = jnp.maximum(dt, 1e-4)
        # dt_proj: weight uniform +-dt_rank^-1/2; bias softplus^{-1}(dt), so that softplus(bias) = dt at init
        dt_proj = eqx.nn.Linear(dt_rank, d_inner, key=k_dt_w)
        weight = jax.random.uniform(k_dt_w, (d_inner, dt_rank), minval=-dt_std, maxval=dt_std)
        self.dt_proj = eqx.tree_at(lambda lin: (lin.weight, lin.bias), dt_proj, (weight, dt + jnp.log(-jnp.expm1(-dt))))
        self.A_log = jnp.log(jnp.broadcast_to(jnp.arange(1, d_state + 1, dtype=dt.dtype), (d_inner, d_state)))
        self.D = jnp.ones(d_inner, dt.dtype)
        self.out_proj = eqx.nn.Linear(d_inner, d_model, use_bias=False, key=k_out)
        self.d_state = d_state
        self.discretization = discretization
        self.scan = scan

    @property
    def A(self) -> Array:
        """The diagonal state matrix, (d_inner, d_state), all entries negative."""
        return -jnp.exp(self.A_log)

    @property
    def dt_rank(self) -> int:
        return self.dt_proj.in_features

    def ssm_inputs(self, x: Array, reset: Array | None = None) -> dict[str, Array]:
        """For x (L, d_model): xc, z (L, d_inner), delta (L, d_inner), B, C (L, d_state)."""
        x = jnp.asarray(x)
        d_model = self.in_proj.in_features
        if x.ndim != 2 or x.shape[1] != d_model:
            raise ValueError(f"x must be (L, d_model) with d_model = {d_model}, got shape {x.shape}")
        if reset is not None and (jnp.shape(reset) != x.shape[:1] or jnp.asarray(reset).dtype != jnp.bool_):
            raise ValueError(f"reset must be a boolean array of shape ({x.shape[0]},), got {jnp.shape(reset)}")
        x_in, z = jnp.split(x @ self.in_proj.weight.T, 2, axis=-1)
        xc = jax.nn.silu(causal_depthwise_conv(x_in, self.conv_weight, self.conv_bias, reset))
        return {"xc": xc, "z": z, **self._selection(xc)}

    def _selection(self, xc: Array) -> dict[str, Array]:
        """delta (..., d_inner), B, C (..., N) from the convolved inputs xc (..., d_inner)."""
        dt, B, C = jnp.split(xc @ self.x_proj.weight.T, [self.dt_rank, self.dt_rank + self.d_state], axis=-1)
        return {"delta": jax.nn.softplus(dt @ self.dt_proj.weight.T + self.dt_proj.bias), "B": B, "C": C}

    def init_state(self) -> tuple[Array, Array]:
        """The convolution's last d_conv - 1 inputs (d_conv - 1, d_inner) and the SSM state (d_inner, N), zero."""
        d_inner, d_conv = self.conv_weight.shape
        dtype = self.conv_weight.dtype
        return jnp.zeros((d_conv - 1, d_inner), dtype), jnp.zeros((d_inner, self.d_state), dtype)

    def step(self, state: tuple[Array, Array], x: Array) -> tuple[tuple[Array, Array], Array]:
        """One token: ((last inputs, h), x_t (d_model,)) -> (state_t, out_t (d_model,)); scanned over a sequence
        from ``init_state()`` it gives ``self(x)``."""
        earlier, h = state
        x_in, z = jnp.split(x @ self.in_proj.weight.T, 2)
        earlier, conv = conv_step(earlier, x_in, self.conv_weight, self.conv_bias)
        xc = jax.nn.silu(conv)
        s = self._selection(xc)
        h, y = selective_step(h, xc, s["delta"], self.A, s["B"], s["C"], self.discretization, a_nonzero=True)
        return (earlier, h), self._out(y + self.D * xc, z)

    def __call__(self, x: Array, reset: Array | None = None) -> Array:
        """(L, d_model) -> (L, d_model); reset (L,) bool starts a new sequence at those tokens (packing)."""
        s = self.ssm_inputs(x, reset)
        y = selective_scan(s["xc"], s["delta"], self.A, s["B"], s["C"], self.D, reset=reset,
                           discretization=self.discretization, method=self.scan, a_nonzero=True)  # A < 0
        return self._out(y, s["z"])

    def last(self, x: Array, reset: Array | None = None) -> Array:
        """(L, d_model) -> (d_model,): ``self(x, reset)[-1]``, the output at the last token only.

        The scan keeps only its final state h_{L-1} and reads it out once, y = h_{L-1} C_{L-1} + D x_{L-1}, so no
        (L, d_inner) output is formed and the gate and out-projection run on one token: what a last-token readout
        needs (the recall students), a little faster than ``self(x)[-1]`` in a forward pass.
        """
        s = self.ssm_inputs(x, reset)
        _, h = selective_scan(s["xc"], s["delta"], self.A, s["B"], s["C"], None, reset=reset,
                              discretization=self.discretization, method=self.scan, return_state=True,
                              a_nonzero=True)
        y = h @ s["C"][-1] + self.D * s["xc"][-1]  # selective_scan's readout at t = L-1
        return self._out(y, s["z"][-1])

    def _out(self, y: Array, z: Array) -> Array:
        """The gated out-projection out_proj(y * silu(z)) of one token (d_inner,) or of every token (L, d_inner)."""
        return (y * jax.nn.silu(z)) @ self.out_proj.weight.T

"""The short causal depthwise convolution in front of a recurrence (Mamba's block; gated DeltaNet as its authors'
code runs it, on q, k and v): each channel c of x (L, C) filtered by its own K taps,

    out_t[c] = bias[c] + sum_{j=0}^{K-1} weight[c, K-1-j] x_{t-j}[c]          (weight[:, -1] multiplies x_t)

with x_{t-j} = 0 before the sequence start (and, with ``reset``, before the token that starts the current sequence).
:func:`causal_depthwise_conv` runs a whole sequence, :func:`conv_step` one token from the last K - 1 inputs (the
recurrent form: its state is that window).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import Array

__all__ = ["causal_depthwise_conv", "conv_step", "init_conv_weight"]


def init_conv_weight(key: Array, channels: int, taps: int) -> Array:
    """(channels, taps), uniform in +- taps^-1/2: PyTorch's Conv1d default for a depthwise conv (fan_in = taps)."""
    bound = 1 / math.sqrt(taps)
    return jax.random.uniform(key, (channels, taps), minval=-bound, maxval=bound)


def causal_depthwise_conv(x: Array, weight: Array, bias: Array | None = None, reset: Array | None = None) -> Array:
    """x (L, C), weight (C, K), bias (C,) or None, reset (L,) bool or None -> (L, C); taps never cross a reset."""
    L, K = x.shape[0], weight.shape[1]
    segment = jnp.zeros(L, jnp.int32) if reset is None else jnp.cumsum(reset)
    padded = jnp.concatenate([jnp.zeros((K - 1,) + x.shape[1:], x.dtype), x])
    out = jnp.zeros_like(x) if bias is None else jnp.broadcast_to(bias, x.shape)
    for j in range(K):  # over the K taps, not over time
        x_back = padded[K - 1 - j: K - 1 - j + L]  # x_{t-j}, zero for t < j
        same = (jnp.arange(L) >= j) & (segment == jnp.roll(segment, j))
        out = out + weight[:, K - 1 - j] * jnp.where(same[:, None], x_back, 0.0)
    return out


def conv_step(earlier: Array, x: Array, weight: Array, bias: Array | None = None) -> tuple[Array, Array]:
    """One token: (the last K - 1 inputs (K - 1, C), x_t (C,)) -> (the window for the next token, out_t (C,))."""
    window = jnp.concatenate([earlier, x[None]])  # x_{t-K+1} .. x_t
    out = jnp.sum(weight.T * window, 0)
    return window[1:], out if bias is None else bias + out

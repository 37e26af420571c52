"""Products of small matrices that XLA on the CPU fuses with their neighbours: shared numerics of the engines.

``fused_matmul(a, b)`` is ``a @ b`` and ``fused_matvec(a, x)`` is ``a @ x``, written as a product summed over the
inner axis. Under vmap, ``@`` of tiny matrices becomes a batched ``dot`` that the CPU backend runs as one small GEMM
call per matrix (~0.5 us each; at 5 x 5 it was half of pi-SSM's training time, benchmarks/bench_pissm.py); the
product-sum fuses instead. The plain Kalman filter (``memlab.kalman``) keeps ``@``; pi-SSM's filter and gain
(``memlab.pissm.model``, ``memlab.pissm.gain``) and the arena's fused Kalman step (``memlab.arena.small_kalman``)
use these, tested equal to ``@`` in value and gradient (tests/test_small_matmul.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array

__all__ = ["fused_matmul", "fused_matvec"]


@jax.custom_vjp
def fused_matmul(a: Array, b: Array) -> Array:
    """a (..., n, k) @ b (..., k, m) (leading axes broadcast) as a product summed over k: the same matrix product,
    written so that XLA on the CPU fuses it with its neighbours. Under vmap, ``@`` of tiny matrices becomes a
    batched ``dot`` that the CPU backend runs as one small GEMM call per matrix (~0.5 us each; at 5 x 5 it was half
    the training time of pi-SSM, see benchmarks/bench_pissm.py). Its gradient is two such products (a custom VJP:
    the automatic one materialises the broadcast (..., n, k, m) cotangent). Only for small n, k, m."""
    return _product_sum(a, b)


def _product_sum(a: Array, b: Array) -> Array:
    return jnp.sum(a[..., :, :, None] * b[..., None, :, :], axis=-2)


def _fused_matmul_forward(a: Array, b: Array):
    return _product_sum(a, b), (a, b)


def _fused_matmul_backward(residuals, cotangent: Array):
    a, b = residuals
    da = _product_sum(cotangent, jnp.swapaxes(b, -1, -2))
    db = _product_sum(jnp.swapaxes(a, -1, -2), cotangent)
    return _sum_to_shape(da, a.shape), _sum_to_shape(db, b.shape)


def _sum_to_shape(x: Array, shape: tuple[int, ...]) -> Array:
    """x summed over the axes along which an input of ``shape`` was broadcast to x.shape."""
    leading = x.ndim - len(shape)
    x = jnp.sum(x, axis=tuple(range(leading))) if leading else x
    broadcast = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return jnp.sum(x, axis=broadcast, keepdims=True) if broadcast else x


fused_matmul.defvjp(_fused_matmul_forward, _fused_matmul_backward)


def fused_matvec(a: Array, x: Array) -> Array:
    """a (..., n, k) @ x (..., k) as a product summed over k (see ``fused_matmul``)."""
    return jnp.sum(a * x[..., None, :], axis=-1)

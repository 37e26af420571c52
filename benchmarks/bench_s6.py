"""S6 / Mamba throughput on the CPU at the sizes of paper 4 (A.1): batch 16 (vmapped), L = 5002 (context 5000 plus
the two query tokens), d_inner 32, N = 32, float32.

* the diagonal selective scan (``memlab.layers.s6.selective_scan``, ZOH), forward and forward+backward, sequential
  ``lax.scan`` vs ``lax.associative_scan``;
* a plain NumPy loop over time steps doing the same arithmetic, on L = 200 only, for scale;
* the whole MambaBlock (d_model 16: in_proj, conv, x_proj, dt_proj, scan, gate, out_proj), forward and
  forward+backward, both scan forms;
* the paper-form S6 layer with a general A (one 2 d_h x 2 d_h matrix exponential per token), d_in = d_h = 32,
  on L = 50 (vmapped jax.scipy.linalg.expm runs all its Pade branches and 16 squarings: slow on CPU).
"""

from __future__ import annotations

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from timing import timed  # benchmarks/timing.py (run.py puts benchmarks/ on sys.path)

from memlab.layers.mamba import MambaBlock
from memlab.layers.s6 import S6, selective_scan

BATCH, L, D_INNER, N = 16, 5002, 32, 32


def scan_inputs(key, batch, length):
    kx, kd, kb, kc = jax.random.split(key, 4)
    x = jax.random.normal(kx, (batch, length, D_INNER))
    delta = jax.nn.softplus(jax.random.normal(kd, (batch, length, D_INNER)) - 4.0)
    A = -jnp.broadcast_to(jnp.arange(1.0, N + 1), (D_INNER, N))  # S4D-real
    B, C = jax.random.normal(kb, (batch, length, N)), jax.random.normal(kc, (batch, length, N))
    return x, delta, A, B, C, jnp.ones(D_INNER)


def row(case, form, batch, length, seconds):
    return {"case": case, "form": form, "batch": batch, "L": length, "seconds": seconds,
            "tokens_per_s": batch * length / seconds}


def selective_scan_rows() -> list[dict]:
    x, delta, A, B, C, D = scan_inputs(jax.random.key(0), BATCH, L)
    rows = []
    for method in ("sequential", "parallel"):
        def forward(x, delta, B, C, method=method):
            return jax.vmap(lambda *a: selective_scan(*a[:2], A, *a[2:], D, method=method))(x, delta, B, C)

        def loss(x, delta, B, C, forward=forward):
            return jnp.sum(forward(x, delta, B, C) ** 2)

        fwd = jax.jit(forward)
        fwd_bwd = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))
        rows.append(row("selective_scan forward", method, BATCH, L, timed(lambda fwd=fwd: fwd(x, delta, B, C))))
        seconds = timed(lambda f=fwd_bwd: f(x, delta, B, C))
        rows.append(row("selective_scan forward+backward", method, BATCH, L, seconds))
    return rows


def numpy_loop_row(length: int = 200) -> dict:
    """The same recurrence as a Python loop over time steps (NumPy, vectorised over batch and state)."""
    x, delta, A, B, C, D = (np.asarray(v) for v in scan_inputs(jax.random.key(0), BATCH, length))
    start = time.perf_counter()
    h = np.zeros((BATCH, D_INNER, N), np.float32)
    ys = []
    for t in range(length):
        z = delta[:, t, :, None] * A
        h = np.exp(z) * h + np.expm1(z) / A * x[:, t, :, None] * B[:, t, None, :]
        ys.append(np.einsum("bdn,bn->bd", h, C[:, t]) + D * x[:, t])
    np.stack(ys, 1)
    return row("selective_scan forward", "python loop (numpy)", BATCH, length, time.perf_counter() - start)


def mamba_rows() -> list[dict]:
    x = jax.random.normal(jax.random.key(1), (BATCH, L, 16))
    rows = []
    for scan in ("sequential", "parallel"):
        block = MambaBlock(16, d_state=N, scan=scan, key=jax.random.key(2))  # d_inner = 2 * 16 = 32
        fwd = eqx.filter_jit(lambda block, x: jax.vmap(block)(x))
        fwd_bwd = eqx.filter_jit(eqx.filter_value_and_grad(lambda block, x: jnp.sum(jax.vmap(block)(x) ** 2)))
        rows.append(row("MambaBlock forward", scan, BATCH, L, timed(lambda f=fwd, b=block: f(b, x))))
        rows.append(row("MambaBlock forward+backward", scan, BATCH, L, timed(lambda f=fwd_bwd, b=block: f(b, x))))
    return rows


def general_s6_rows(length: int = 50) -> list[dict]:
    layer = S6(32, 32, 32, key=jax.random.key(3))
    u = jax.random.normal(jax.random.key(4), (BATCH, length, 32))
    rows = []
    for method in ("sequential", "parallel"):
        fwd = eqx.filter_jit(lambda layer, u, method=method: jax.vmap(lambda v: layer(v, method=method))(u))
        seconds = timed(lambda f=fwd: f(layer, u))
        rows.append(row("S6 general A (expm per token) forward", method, BATCH, length, seconds))
    return rows


def run() -> list[dict]:
    return selective_scan_rows() + [numpy_loop_row()] + mamba_rows() + general_s6_rows()


if __name__ == "__main__":
    for r in run():
        print(r)

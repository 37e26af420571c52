"""What every benchmark shares: wall time of a JAX computation, measured after a warm-up (compile) run."""

from __future__ import annotations

import time

import jax
import numpy as np


def timed(fn, repeats: int = 1) -> float:
    """Best wall time in seconds of ``fn()`` (blocked until ready) over ``repeats`` runs, after one warm-up."""
    jax.block_until_ready(fn())
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t)
    return best

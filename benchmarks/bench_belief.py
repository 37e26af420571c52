"""Belief study throughput on the CPU.

* the paper-size Fig. 1 sweep (23 values of 1/eps x 20,000 runs x 1,000 steps, LOF + 5 ALFs),
  target <= 2 minutes on the 2-core CI machine;
* exact filtering (N = 12, T = 1000, batch 20,000) in the serial time-major form (a (B, N)
  carry, as the Monte-Carlo engine runs it) and the parallel associative-scan form
  (``lof_parallel``, vmapped over chunks of sequences to bound memory: it holds K x N x N per sequence).

Throughput is reported in sequence-steps/s (B*T/s) and state-steps/s (B*T*N/s).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from timing import timed  # benchmarks/timing.py (run.py puts benchmarks/ on sys.path)

from memlab.belief.examples import example_filters, two_state_example
from memlab.belief.exp_error import ErrorVsEpsilonConfig
from memlab.belief.filters import LOF, lof_parallel
from memlab.belief.hmm import HMM
from memlab.belief.montecarlo import error_curves


def fig1_sweep() -> dict:
    cfg = ErrorVsEpsilonConfig()
    inv_eps = np.linspace(cfg.inv_eps_min, cfg.inv_eps_max, cfg.num_eps)
    key = jax.random.key(0)
    hmm, D = two_state_example(1 / inv_eps[0], cfg.emission, flip=True)
    names, filters = example_filters(hmm, D, 1 / inv_eps[0], cfg.schedules, cfg.lam)
    error_curves(hmm, filters, key, cfg.num_runs, cfg.num_steps)  # compile once
    t = time.perf_counter()
    for i, ie in enumerate(inv_eps):
        hmm, D = two_state_example(1 / ie, cfg.emission, flip=True)
        names, filters = example_filters(hmm, D, 1 / ie, cfg.schedules, cfg.lam)
        error_curves(hmm, filters, jax.random.fold_in(key, i), cfg.num_runs, cfg.num_steps)
    seconds = time.perf_counter() - t
    steps = cfg.num_eps * cfg.num_runs * cfg.num_steps
    return {"benchmark": "Fig. 1 sweep, paper size", "filters": len(filters), "seconds": seconds,
            "target_s": 120.0, "seq_steps_per_s": steps / seconds, "state_steps_per_s": 2 * steps / seconds}


def random_hmm(N: int, S: int, seed: int = 0) -> HMM:
    rng = np.random.default_rng(seed)
    T = rng.random((N, N)) ** 4
    E = rng.random((S, N))
    return HMM(jnp.asarray(T / T.sum(0), jnp.float32), jnp.asarray(E / E.sum(0), jnp.float32),
               jnp.full(N, 1.0 / N, jnp.float32))


def exact_filter_throughput(N: int = 12, K: int = 1000, B: int = 20_000, chunk: int = 500) -> list[dict]:
    hmm = random_hmm(N, 4)
    ys = jax.random.randint(jax.random.key(1), (K, B), 0, 4)  # time-major observations
    lof = LOF.of(hmm)

    @jax.jit
    def serial_final(ys):
        return jax.lax.scan(lambda w, y: (lof.step(w, y, None), None), jnp.broadcast_to(lof.w0, (B, N)), ys)[0]

    @jax.jit
    def serial_all(ys):
        return jax.lax.scan(lambda w, y: (lof.step(w, y, None),) * 2, jnp.broadcast_to(lof.w0, (B, N)), ys)[1]

    parallel_chunk = jax.jit(jax.vmap(lambda y: lof_parallel(hmm, y)[-1]))

    def parallel(ys):
        return [parallel_chunk(ys[:, i:i + chunk].T) for i in range(0, B, chunk)]

    rows = []
    for form, fn in (("serial, final belief only", lambda: serial_final(ys)),
                     ("serial, every belief stored", lambda: serial_all(ys)),
                     (f"parallel (associative scan, chunks of {chunk})", lambda: parallel(ys))):
        seconds = timed(fn)
        rows.append({"benchmark": f"exact filter N={N} T={K} B={B}", "form": form, "seconds": seconds,
                     "seq_steps_per_s": B * K / seconds, "state_steps_per_s": B * K * N / seconds})
    return rows


def run() -> list[dict]:
    return [fig1_sweep(), *exact_filter_throughput()]

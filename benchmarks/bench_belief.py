"""Belief study throughput on the CPU.

* the paper-size Fig. 1 sweep (23 values of 1/eps x 20,000 runs x 1,000 steps, LOF + 5 ALFs),
  target <= 2 minutes on the 2-core CI machine;
* the exact HMM filter side by side with dynamax (N in {2, 12, 64}, T = 1000, batch 2000, S = 4 symbols,
  float32): serial forms (memlab ``log_belief`` and ``lof`` vmapped - the public API -, the time-major
  ``LOF.step`` scan of the Monte-Carlo engine, dynamax ``hmm_filter`` vmapped) and parallel forms (memlab
  ``lof_parallel``, dynamax ``parallel_inference.hmm_filter``), every belief stored and final belief only.
  The "fast pass alone" row times the scaled probability-space pass of ``log_belief`` without the loop that
  reruns the batch in log space when a belief nears underflow (zero trips here): the cost of staying exact; the
  "bound" row is a bare scaled recursion with no exactness at all, writing the same (B, K, N) result: what no exact
  filter with this output can beat on one device (it bounds the stored-belief speed-up over dynamax there).
  With several CPU devices (run.py gives one per core, as ``memlab run`` does) the vmapped public filters split
  the sequences over them (``memlab.devices``); the "one device" row is the same filter unsplit, so both are shown.
  ``result_alone`` times only allocating and writing the stored result (no filter): what every stored-belief row pays.

Each implementation returns its natural public output - memlab log beliefs or LOF logits, dynamax
probabilities - and is timed producing exactly that; max_abs_diff compares probabilities (memlab's output is
turned into probabilities outside the timed call, ``AsProbabilities``). Conventions: memlab's alpha_0 = pi0
takes a transition before y_1, so dynamax gets T pi0 as its initial distribution and T.T (row-stochastic).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

# benchmarks/timing.py (run.py puts benchmarks/ on sys.path)
from timing import ROUNDS, isolated, peer, side_by_side, timed

from memlab.belief import fast_filters
from memlab.belief.examples import example_filters, two_state_example
from memlab.belief.experiments.error_epsilon import ErrorVsEpsilonConfig
from memlab.belief.fast_filters import lof, lof_parallel, log_belief
from memlab.belief.filters import LOF
from memlab.belief.hmm import HMM
from memlab.belief.montecarlo import error_curves
from memlab.devices import over_devices


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


class AsProbabilities:
    """memlab logits (..., N), or a filter's FilterResult (the logits and the marginal log-likelihood its API
    returns, computed together), seen as probabilities (softmax) when compared; ready when the logits are."""

    def __init__(self, logits):
        self.logits = getattr(logits, "logits", logits)

    def block_until_ready(self):
        self.logits.block_until_ready()
        return self

    def __array__(self, dtype=None, copy=None):
        return np.asarray(jax.nn.softmax(jnp.asarray(self.logits, jnp.float64 if jax.config.x64_enabled
                                                     else jnp.float32), axis=-1), dtype=dtype)


def _chunked(fn, ys, chunk):
    """fn over batch chunks of ys (B, K), concatenated (the parallel forms hold K x N x N per sequence)."""
    return jax.tree.map(lambda *parts: jnp.concatenate(parts), *[fn(ys[i:i + chunk]) for i in range(0, len(ys), chunk)])


def bare_recursion(hmm: HMM, ys: jax.Array, final_only: bool) -> jax.Array:
    """The least any exact filter with memlab's output must do: alpha_k = normalise(diag(E y_k) T alpha_{k-1}),
    log beliefs written to a (B, K, N) result; no log normaliser, no underflow check. Same layouts as the filter:
    (N, B) below ``fast_filters.STATE_MAJOR_BELOW`` states, (B, N) from there on."""
    B, K = ys.shape
    state_major = hmm.num_states < fast_filters.STATE_MAJOR_BELOW
    orient = (lambda x: x.T) if state_major else (lambda x: x)  # (B, N) <-> the layout of p

    def step(p, y):
        q = fast_filters._transition(hmm.T[None], p, None, state_major) * orient(hmm.E[y])  # the filter's T p
        return q / jnp.sum(q, axis=0 if state_major else 1, keepdims=True)

    p0 = orient(jnp.broadcast_to(hmm.pi0, (B, hmm.num_states)))
    if final_only:
        return orient(jnp.log(jax.lax.fori_loop(0, K, lambda k, p: step(p, ys[:, k]), p0)))

    def store(k, state):
        p, out = state
        p = step(p, ys[:, k])
        return p, jax.lax.dynamic_update_slice_in_dim(out, orient(jnp.log(p))[:, None], k, axis=1)

    return jax.lax.fori_loop(0, K, store, (p0, jnp.empty((B, K, hmm.num_states), hmm.E.dtype)))[1]


def _split_note() -> str:
    """How the vmapped public filters ran: split over this process's devices (``memlab.devices``) or not."""
    count = jax.local_device_count()
    return f", sequences split over {count} CPU devices" if count > 1 else ""


def serial_filters(N: int, K: int = 1000, B: int = 2000, final_only: bool = False) -> list[dict]:
    hmm = random_hmm(N, 4)
    ys = jax.random.randint(jax.random.key(1), (B, K), 0, 4)
    f = LOF.of(hmm)
    last = (lambda x: x[:, -1]) if final_only else (lambda x: x)

    @jax.jit
    def lof_step_scan(ys):  # (B, K) -> log beliefs, time-major (B, N) carry as the Monte-Carlo engine runs it
        w0 = jnp.broadcast_to(f.w0, (B, N))
        if final_only:
            return jax.lax.scan(lambda w, y: (f.step(w, y, None), None), w0, ys.T)[0]
        return jax.lax.scan(lambda w, y: (f.step(w, y, None),) * 2, w0, ys.T)[1].transpose(1, 0, 2)

    memlab_log_belief = jax.jit(jax.vmap(lambda y: log_belief(hmm, y, final_only=final_only)))
    memlab_lof = jax.jit(jax.vmap(lambda y: lof(hmm, y, final_only=final_only)))
    T_all, acts, w0 = hmm.T[None], jnp.zeros_like(ys), jnp.broadcast_to(jnp.log(hmm.pi0), (B, N))
    bare = jax.jit(lambda ys: fast_filters._fast_filter(T_all, hmm.E, w0, ys, acts, True, final_only)[0])
    bound = jax.jit(lambda ys: bare_recursion(hmm, ys, final_only))
    impls = [(f"memlab log_belief (vmapped){_split_note()}", lambda: AsProbabilities(memlab_log_belief(ys))),
             ("bound: bare scaled recursion, no exactness (not an API)", lambda: AsProbabilities(bound(ys))),
             ("memlab log_belief's fast pass alone (no rerun)", lambda: AsProbabilities(bare(ys))),
             (f"memlab lof (vmapped){_split_note()}", lambda: AsProbabilities(memlab_lof(ys))),
             ("memlab LOF.step time-major scan", lambda: AsProbabilities(lof_step_scan(ys)))]
    if jax.local_device_count() > 1:  # what log_belief computes on one device: its batched form, unsplit
        whole = jax.jit(lambda ys: fast_filters._exact_filter(T_all, hmm.E, w0, ys, acts, True, final_only)[0])
        impls.insert(1, ("memlab log_belief, one device (its batched form)", lambda: AsProbabilities(whole(ys))))
        # the bound for the split public filters: the same bare recursion, its sequences split over the devices
        bound_split = jax.jit(lambda ys: over_devices(lambda y: bare_recursion(hmm, y, final_only), ys))
        impls.insert(3, (f"bound{_split_note()} (not an API)", lambda: AsProbabilities(bound_split(ys))))
    dynamax = peer("dynamax.hidden_markov_model")
    if dynamax is not None:
        log_E = jnp.log(hmm.E)
        dyn = jax.jit(lambda ys: last(jax.vmap(lambda y: dynamax.hmm_filter(hmm.T @ hmm.pi0, hmm.T.T,
                                                                            log_E[y]).filtered_probs)(ys)))
        impls.append(("dynamax hmm_filter (vmapped)", lambda: dyn(ys)))
    return side_by_side(f"exact HMM filter, serial, {'final belief' if final_only else 'every belief stored'}",
                        impls, missing=None if dynamax else "pip install -e '.[bench]' adds dynamax",
                        extra={"N": N, "T": K, "batch": B, "output": "memlab: log beliefs / logits; dynamax: "
                               "probabilities; diff in probabilities"})


def parallel_filters(N: int, K: int = 1000, B: int = 2000, chunk: int = 250, final_only: bool = False) -> list[dict]:
    hmm = random_hmm(N, 4)
    ys = jax.random.randint(jax.random.key(1), (B, K), 0, 4)
    last = (lambda x: x[:, -1]) if final_only else (lambda x: x)
    memlab = jax.jit(jax.vmap(lambda s: lof_parallel(hmm, s, final_only=final_only)))
    impls = [(f"memlab lof_parallel (vmapped){_split_note()}", lambda: AsProbabilities(_chunked(memlab, ys, chunk)))]
    if jax.local_device_count() > 1:  # what lof_parallel computes on one device: its batched form, unsplit
        T_all, w0, block = hmm.T[None], jnp.broadcast_to(jnp.log(hmm.pi0), (chunk, N)), fast_filters.default_block(K)
        whole = jax.jit(lambda y: fast_filters._parallel_batch(T_all, hmm.E, w0[:len(y)], y, jnp.zeros_like(y),
                                                          final_only, block))
        impls.append(("memlab lof_parallel, one device (its batched form)",
                      lambda: AsProbabilities(_chunked(whole, ys, chunk))))
    par = peer("dynamax.hidden_markov_model.parallel_inference")
    if par is not None:
        log_E = jnp.log(hmm.E)
        dyn = jax.jit(lambda y: last(jax.vmap(lambda s: par.hmm_filter(hmm.T @ hmm.pi0, hmm.T.T,
                                                                      log_E[s]).filtered_probs)(y)))
        impls.append(("dynamax parallel hmm_filter (vmapped)", lambda: _chunked(dyn, ys, chunk)))
    return side_by_side(f"exact HMM filter, parallel, {'final belief' if final_only else 'every belief stored'}",
                        impls, missing=None if par else "pip install -e '.[bench]' adds dynamax",
                        extra={"N": N, "T": K, "batch": B, "output": "memlab: logits; dynamax: probabilities; "
                               f"diff in probabilities; batch in chunks of {chunk}"})


def result_alone(N: int, K: int = 1000, B: int = 2000) -> list[dict]:
    """What the stored-belief rows cannot avoid: a fresh (B, K, N) float32 result allocated and written once (a
    constant, no filter), split over the devices as the public filters are, and on one device. Its first touch of
    every memory page costs the kernel a page fault, which does not spread over the devices."""
    ys = jnp.zeros((B, K), jnp.int32)
    fill = lambda y: jnp.zeros((y.shape[0], K, N), jnp.float32) + y[:, :1, None]  # noqa: E731
    split, whole = jax.jit(lambda ys: over_devices(fill, ys)), jax.jit(fill)
    return [{"benchmark": "a (batch, T, N) result alone, allocated and written once (no filter)", "N": N, "T": K,
             "batch": B, "seconds_split": timed(lambda: split(ys), repeats=ROUNDS),
             "seconds_one_device": timed(lambda: whole(ys), repeats=ROUNDS)}]


def exact_filters() -> list[dict]:
    """Every workload in its own process (``timing.isolated``): the parallel filters allocate and free up to 1 GB."""
    rows = []
    for N in (2, 12, 64):
        for final_only in (False, True):
            rows += isolated(serial_filters, N, final_only=final_only)
        rows += isolated(result_alone, N)
    # whole batches where they fit: N = 2 holds 16 KB per sequence; N = 12 0.6 MB, N = 64 16 MB per sequence and array
    for N, B, chunk in ((2, 2000, 2000), (12, 2000, 250), (64, 100, 25)):
        for final_only in (False, True):
            rows += isolated(parallel_filters, N, B=B, chunk=chunk, final_only=final_only)
    return rows


def run() -> list[dict]:
    return [fig1_sweep(), *exact_filters()]

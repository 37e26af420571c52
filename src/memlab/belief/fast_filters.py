"""The exact HMM filters of ``memlab.belief.filters`` as fast engines, tested equal to those plain forms
(``lof_reference``, ``log_belief_reference``); each returns the same :class:`~memlab.belief.filters.FilterResult`.

Under ``vmap``, ``lof``, ``log_belief`` and ``lof_parallel`` split their batch of sequences over this process's
CPU devices (``memlab.devices.over_devices``), one share per core.

* ``lof`` / ``log_belief`` — eq. (7) / (8), serial: run in probability space with a carried log normaliser
  (w_k = log alpha_k + offset_k), rerun with a log-sum-exp per row only if a belief of the batch came near
  underflow, so they are exact over the whole float range at the cost of one small matmul a step.
* ``lof_parallel`` — the same logits from normalised products U_k ... U_1 exp(w_0), U_k = diag(E^T y_k) T(a_{k-1})
  (eq. 57), in parallel over blocks of ~sqrt(K) steps: each block's product, a parallel prefix over the blocks,
  then each block's steps from its starting vector. Beliefs below ~1e-38 (float32) may round to zero.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import Array

from memlab.belief.filters import FilterResult, check_sequence_inputs, initial_logits, lof_step, log_evidence
from memlab.belief.hmm import HMM, ControlledHMM
from memlab.checks import check_int
from memlab.devices import over_devices
from memlab.logspace import finite_max, normalize_logits, safe_log


def lof(model: HMM | ControlledHMM, ys: Array, w0: Array | None = None, actions: Array | None = None,
        normalize: bool = False, final_only: bool = False) -> FilterResult:
    """Logit optimal filter, eq. (7), serial form: logits w_1..w_K (K, N), or only w_K (N,) if ``final_only``, and
    the marginal log-likelihood (:class:`~memlab.belief.filters.FilterResult`).

    w0 defaults to log pi0; ``normalize`` gives log beliefs (eq. 8) instead of the drifting logits.
    Exact over the whole float range (see ``_exact_filter``); under ``vmap`` the batch runs as one
    time-major recursion.
    """
    ys = jnp.asarray(ys, jnp.int32)
    actions = check_sequence_inputs(model, ys, actions)
    return FilterResult(*_lof(model, ys, initial_logits(model, w0), actions, normalize, final_only))


@functools.partial(jax.jit, static_argnames=("normalize", "final_only"))
def _lof(model, ys, w0, actions, normalize, final_only):
    T_all = model.T if isinstance(model, ControlledHMM) else model.T[None]
    return _sequence_filter(normalize, final_only)(T_all, model.E, w0, ys, actions)


def log_belief(model: HMM | ControlledHMM, ys: Array, actions: Array | None = None,
               final_only: bool = False) -> FilterResult:
    """log alpha_k of the optimal filter eq. (6), shape (K, N) (or (N,) for k = K only), and the marginal
    log-likelihood."""
    return lof(model, ys, actions=actions, normalize=True, final_only=final_only)


# ------------------------------------------------------------------ the exact serial recursion, batched
#
# Two passes at most. The fast pass runs in probability space, scaled every step, with the log normaliser
# carried beside it: p_k = alpha_k (eq. 6) and w_k = log p_k + offset_k (eq. 7). It is exact in floating point
# (relative rounding only) as long as no product T_ij p_j E_i underflows, which ``_underflow_floor`` guarantees
# for beliefs above a per-state floor; the pass records whether any belief of the batch ever fell below it.
# Only then is the batch recomputed by the exact log-space recursion (``log_matvec``: a log-sum-exp per row,
# N^2 exponentials a step), so the common case costs one small matmul a step and no exponentials. Below
# STATE_MAJOR_BELOW states the fast pass keeps the batch on the last axis (N, B): the per-step normalisation and
# the likelihood product then run along contiguous batch rows, which vectorises far better than short rows of a
# few states.


def _underflow_floor(T_all: Array, E: Array) -> Array:
    """(N,): beliefs p_j >= floor_j keep every product T_ij p_j E_i (> 0) above float's smallest normal.

    floor_j = 4 tiny / (min_{a,i} T[a, i, j] * min E) over positive entries; computed in logs (may be inf).
    """
    tiny = jnp.finfo(E.dtype).tiny
    t_min = jnp.min(jnp.where(T_all > 0, T_all, jnp.inf), axis=(0, 1))
    e_min = jnp.min(jnp.where(E > 0, E, jnp.inf))
    return jnp.exp(jnp.log(4 * tiny) - jnp.log(t_min) - jnp.log(e_min))


# below this many states the fast pass keeps the batch on the last axis, (N, B); from it on, on the first, (B, N)
# (the matmul then dominates and prefers a long contiguous state axis; measured in benchmarks/bench_belief.py)
STATE_MAJOR_BELOW = 32
# below this many states the products are multiply-sums (the fast pass's T p with the batch on the last axis, the
# parallel form's products): a dot of tiny matrices is a loop of tiny GEMM calls on the CPU, the elementwise form
# vectorises over the batch (faster at N = 2, no gain from N = 12 on: benchmarks/bench_belief.py's sizes)
ELEMENTWISE_BELOW = 8


def _matmul(A: Array, B: Array) -> Array:
    """A @ B for A (..., N, N) and matrices B (..., N, M) or vectors B (..., N)."""
    if A.shape[-1] >= ELEMENTWISE_BELOW:
        return A @ B if B.ndim == A.ndim else jnp.einsum("...ij,...j->...i", A, B)
    if B.ndim == A.ndim:
        return jnp.sum(A[..., :, :, None] * B[..., None, :, :], axis=-2)
    return jnp.sum(A * B[..., None, :], axis=-1)


def _transition(T_all: Array, p: Array, a: Array, state_major: bool) -> Array:
    """T(a_b) p_b for every sequence b: T_all (A, N, N), a (B,), p (N, B) if ``state_major`` else (B, N)."""
    if T_all.shape[0] == 1:
        return _matmul(T_all[0], p) if state_major else p @ T_all[0].T
    if state_major:
        return jnp.take_along_axis(jnp.einsum("aij,jb->aib", T_all, p), a[None, None], axis=0)[0]
    return jnp.einsum("bij,bj->bi", T_all[a], p)


def _fast_filter(T_all, E, w0, ys, actions, normalize, final_only):
    """The scaled probability-space pass: (logits or log beliefs (B, K, N) / (B, N), any belief below the floor,
    the marginal log-likelihoods (B,): the carried log normaliser's change)."""
    state_major = w0.shape[-1] < STATE_MAJOR_BELOW
    axis = 0 if state_major else 1  # the state axis of p
    orient = (lambda x: x.T) if state_major else (lambda x: x)  # (B, N) <-> the layout of p
    floor = orient(_underflow_floor(T_all, E)[None])
    m = finite_max(w0)  # (B, 1)
    q = jnp.exp(w0 - m)
    norm = jnp.sum(q, axis=-1)
    p0 = orient(q / jnp.where(norm > 0, norm, 1.0)[:, None])
    offset0 = m[:, 0] + jnp.log(norm)
    unsafe0 = jnp.any(orient(jnp.isfinite(w0)) & (p0 < floor))  # also a finite logit whose exp underflowed to 0

    def step(carry, y, a):
        p, offset, unsafe = carry
        q = _transition(T_all, p, a, state_major) * orient(E[y])  # eq. (6) numerator
        norm = jnp.sum(q, axis=axis)
        p = q / jnp.expand_dims(jnp.where(norm > 0, norm, 1.0), axis)  # impossible observation: p = 0, offset -inf
        return p, offset + jnp.log(norm), unsafe | jnp.any((p > 0) & (p < floor))

    def output(p, offset):  # (B, N): log alpha_k, or the LOF logits w_k
        return orient(jnp.log(p)) if normalize else orient(jnp.log(p)) + offset[:, None]

    def loglik(offset):  # offset_K - offset_0 = logsumexp(w_K) - logsumexp(w_0)
        return jnp.where(offset0 > -jnp.inf, offset - offset0, -jnp.inf)

    carry = (p0, offset0, unsafe0)
    if final_only:
        p, offset, unsafe = jax.lax.fori_loop(0, ys.shape[1], lambda k, c: step(c, ys[:, k], actions[:, k]), carry)
        return output(p, offset), unsafe, loglik(offset)

    def store(k, state):  # written straight into the (B, K, N) result: no transpose of the whole output after
        carry, out = state
        carry = step(carry, ys[:, k], actions[:, k])
        return carry, jax.lax.dynamic_update_slice_in_dim(out, output(*carry[:2])[:, None], k, axis=1)

    out = jnp.empty((*ys.shape, w0.shape[-1]), w0.dtype)
    (_, offset, unsafe), out = jax.lax.fori_loop(0, ys.shape[1], store, (carry, out))
    return out, unsafe, loglik(offset)


def _log_space_step(T_all, log_E, w, y, a, normalize):
    """The exact step in log space for a batch (eq. 7, ``lof_step``: a log-sum-exp per row): w (B, N) -> (B, N),
    and log p(y_k | y_1..y_{k-1}) (B,)."""
    w_next = lof_step(T_all[0] if T_all.shape[0] == 1 else T_all[a], log_E, w, y)
    return normalize_logits(w_next) if normalize else w_next, log_evidence(w_next, w)


def _exact_filter(T_all: Array, E: Array, w0: Array, ys: Array, actions: Array, normalize: bool,
                  final_only: bool) -> tuple[Array, Array]:
    """Batched LOF: w0 (B, N), ys and actions (B, K) -> logits (B, K, N) or (B, N) if ``final_only``, and the
    marginal log-likelihoods (B,).

    The fast pass, then the log-space recursion for the whole batch only if a belief came near underflow:
    a loop of K steps or of none, rewriting the fast pass's result in place (a ``lax.cond`` returning the
    (B, K, N) result would copy it, which costs as much as the fast pass itself at N = 12).
    """
    log_E = safe_log(E)
    out, unsafe, loglik = _fast_filter(T_all, E, w0, ys, actions, normalize, final_only)
    redo_steps = jnp.where(unsafe, ys.shape[1], 0)

    def redo(k, state):
        w, out, redo_loglik = state
        w, evidence = _log_space_step(T_all, log_E, w, ys[:, k], actions[:, k], normalize)
        out = w if final_only else jax.lax.dynamic_update_slice_in_dim(out, w[:, None], k, axis=1)
        return w, out, redo_loglik + evidence

    _, out, redo_loglik = jax.lax.fori_loop(0, redo_steps, redo, (w0, out, jnp.zeros_like(loglik)))
    return out, jnp.where(unsafe, redo_loglik, loglik)


@functools.cache
def _sequence_filter(normalize: bool, final_only: bool):
    """``_exact_filter`` for one sequence (T_all, E, w0 (N,), ys (K,), actions (K,)), vmapped as one batch.

    Under ``vmap`` over w0, ys or actions the batch runs as one recursion over the time steps (on each of this
    process's CPU devices, a share of the sequences: ``devices.over_devices``), and the log-space pass is a real
    branch taken only when needed (per device); batched models fall back to vmapping the
    single-sequence form (the branch becomes a select, so both passes run: exact, slower).
    """
    def batched(T_all, E, w0, ys, actions):
        return _exact_filter(T_all, E, w0, ys, actions, normalize, final_only)

    def single(T_all, E, w0, ys, actions):
        return jax.tree.map(lambda x: x[0], batched(T_all, E, w0[None], ys[None], actions[None]))

    return _over_sequences(single, batched)


def _over_sequences(single: Callable, batched: Callable) -> Callable:
    """``single(T_all, E, w0, ys, actions)`` for one sequence, which under ``vmap`` over w0, ys or actions runs
    ``batched`` (the same arguments with a leading batch axis) on each of this process's CPU devices, a share of
    the sequences each (``devices.over_devices``; one device: simply batched). Under ``vmap`` over the model
    (T_all or E) ``single`` is vmapped."""
    one = jax.custom_batching.custom_vmap(single)

    @one.def_vmap
    def _vmap_rule(axis_size, in_batched, T_all, E, w0, ys, actions):
        if in_batched[0] or in_batched[1]:
            axes = [0 if b else None for b in in_batched]
            out = jax.vmap(single, in_axes=axes)(T_all, E, w0, ys, actions)
        else:
            w0, ys, actions = (x if b else jnp.broadcast_to(x, (axis_size, *x.shape))
                               for x, b in zip((w0, ys, actions), in_batched[2:], strict=True))
            out = over_devices(functools.partial(batched, T_all, E), w0, ys, actions)
        return out, jax.tree.map(lambda _: True, out)

    return one


# ------------------------------------------------------------------ the parallel form


def _rescale(M: Array, s: Array) -> tuple[Array, Array]:
    """Divide each matrix or vector (..., N, N) / (..., N) by its largest entry, adding that entry's log to s (...).

    An all-zero entry (after an impossible observation) stays zero with log scale -inf.
    """
    axes = tuple(range(s.ndim, M.ndim))
    scale = jnp.max(M, axis=axes)
    ok = scale > 0
    safe = jnp.where(ok, scale, 1.0)
    return M / safe.reshape(safe.shape + (1,) * len(axes)), s + jnp.where(ok, jnp.log(safe), -jnp.inf)


def _prefix_apply(U: Array, s: Array, v: Array, t: Array) -> tuple[Array, Array]:
    """V_k = U_k ... U_1 v for k = 1..K, as rescaled vectors (K, N) and their log scales (K,).

    U (K, N, N) rescaled matrices with log scales s (K,); v (N,) with log scale t. A parallel prefix of depth
    2 log2 K: pair products U_2 U_1, U_4 U_3, ... (K/2 matmuls) recurse to the even prefixes, and each odd
    prefix is one matrix-vector product from the even one before it (K/2 matvecs).
    """
    K = U.shape[0]
    if K == 1:
        V, tV = _rescale(_matmul(U[0], v), s[0] + t)
        return V[None], tV[None]
    half = K // 2
    P, sp = _rescale(_matmul(U[1:2 * half:2], U[0:2 * half:2]), s[1:2 * half:2] + s[0:2 * half:2])
    V_even, t_even = _prefix_apply(P, sp, v, t)  # V_2, V_4, ...
    prev = jnp.concatenate([v[None], V_even[:(K + 1) // 2 - 1]])  # V_0 = v, V_2, ... before each odd step
    t_prev = jnp.concatenate([t[None], t_even[:(K + 1) // 2 - 1]])
    V_odd, t_odd = _rescale(_matmul(U[0::2], prev), s[0::2] + t_prev)  # V_1, V_3, ...
    V = jnp.stack([V_odd[:half], V_even], axis=1).reshape(2 * half, -1)
    tV = jnp.stack([t_odd[:half], t_even], axis=1).reshape(2 * half)
    if K % 2:
        V, tV = jnp.concatenate([V, V_odd[-1:]]), jnp.concatenate([tV, t_odd[-1:]])
    return V, tV


def lof_parallel(model: HMM | ControlledHMM, ys: Array, w0: Array | None = None, actions: Array | None = None,
                 final_only: bool = False, block: int | None = None) -> FilterResult:
    """LOF logits (K, N) (or w_K alone (N,) if ``final_only``) and the marginal log-likelihood, from parallel
    products of U_k = diag(E^T y_k) T(a_{k-1}) applied to exp(w_0) (eq. 57), in three phases over blocks of
    ``block`` steps (default ceil(sqrt K)):

    1. every block's product U_{b+block} ... U_{b+1}, all blocks at once, ``block`` steps each;
    2. a parallel prefix over the K / block block products applied to exp(w_0) (``_prefix_apply``, depth
       2 log2(K / block)): the vector at the start of every block;
    3. every block's steps from its starting vector, all blocks at once (skipped with ``final_only``).

    Depth 2 block + 2 log2(K / block) and work K matmuls + K matvecs of N x N (``block=1``: the plain parallel prefix
    of depth 2 log2 K, over twice the work of the serial filter; larger blocks trade depth for
    less memory traffic). Every product and vector is stored as (M / max M, log max M), so the logits are
    exact up to floating-point underflow of entries below ~1e-38 (float32) or ~1e-308 (float64) relative to
    the largest entry of a product: such an entry becomes -inf here while the serial ``lof`` keeps it finite.
    Decoding is unaffected. Under ``vmap`` over sequences the batch is split over this process's CPU devices and
    runs a chunk of sequences at a time on each (``_parallel_batch``).
    """
    ys = jnp.asarray(ys, jnp.int32)
    actions = check_sequence_inputs(model, ys, actions)
    block = default_block(len(ys)) if block is None else check_int("block", block)
    return FilterResult(*_lof_parallel(model, ys, initial_logits(model, w0), actions, final_only, block))


def default_block(K: int) -> int:
    """``lof_parallel``'s block length for K steps: ceil(sqrt(K)) (32 for K = 1000), at least 1."""
    return math.isqrt(max(K - 1, 0)) + 1


@functools.partial(jax.jit, static_argnames=("final_only", "block"))
def _lof_parallel(model, ys, w0, actions, final_only, block):
    T_all = model.T if isinstance(model, ControlledHMM) else model.T[None]
    w = _parallel_filter(final_only, block)(T_all, model.E, w0, ys, actions)
    return w, log_evidence(w if final_only else w[-1], w0)


def _parallel_one(T_all: Array, E: Array, w0: Array, ys: Array, actions: Array, final_only: bool,
                  block: int) -> Array:
    """One sequence's logits (K, N), or (N,) if ``final_only``, by the three phases of ``lof_parallel``.

    T_all (A, N, N), E (S, N), w0 (N,), ys and actions (K,). The steps are laid out (block, K / block), step c of
    every block in row c, and each U_k is made from (y_k, a_{k-1}) where a phase needs it, never stored for all k.
    A last block shorter than ``block`` is padded with identity steps.
    """
    K, N = ys.shape[0], w0.shape[-1]
    num_blocks = -(-K // block)
    pad = num_blocks * block - K
    by_step = lambda x: jnp.pad(x, (0, pad)).reshape(num_blocks, block).T  # noqa: E731  (K,) -> (block, blocks)
    steps = (by_step(ys), by_step(actions), by_step(jnp.ones(K, bool)))
    E_hat, log_e = _rescale(E, jnp.zeros(E.shape[0], E.dtype))  # each symbol's row of E scaled to max 1
    eye = jnp.eye(N, dtype=E.dtype)

    def step_matrices(y, a, real):  # eq. (57) for one step of every block: (blocks, N, N), log scales (blocks,)
        U = E_hat[y][:, :, None] * (T_all[a] if T_all.shape[0] > 1 else T_all[0])
        return jnp.where(real[:, None, None], U, eye), jnp.where(real, log_e[y], 0.0)

    def multiply(carry, step):  # phase 1: P <- U P for every block
        U, s = step_matrices(*step)
        return _rescale(_matmul(U, carry[0]), carry[1] + s), None

    start = (jnp.broadcast_to(eye, (num_blocks, N, N)), jnp.zeros(num_blocks, E.dtype))
    (P, sP), _ = jax.lax.scan(multiply, start, steps)
    m = finite_max(w0)[0]
    v, t = _rescale(jnp.exp(w0 - m), m)
    V, tV = _prefix_apply(P, sP, v, t)  # phase 2: the vector after every block
    if final_only:
        return jnp.log(V[-1]) + tV[-1]

    def advance(carry, step):  # phase 3: x <- U x for every block
        U, s = step_matrices(*step)
        x, tx = _rescale(_matmul(U, carry[0]), carry[1] + s)
        return (x, tx), jnp.log(x) + tx[:, None]

    starts = (jnp.concatenate([v[None], V[:-1]]), jnp.concatenate([t[None], tV[:-1]]))
    _, w = jax.lax.scan(advance, starts, steps)  # (block, blocks, N)
    return w.transpose(1, 0, 2).reshape(num_blocks * block, N)[:K]


# the batched parallel form runs this many bytes of results and block products, (chunk, K, N) and (chunk, K / block,
# N, N), at a time: its buffers then fit in memory the allocator reuses instead of being page-faulted in anew on
# every call (at benchmarks/bench_belief.py's sizes chunks run markedly faster than one batch for N = 12 and 64,
# and no slower for N = 2)
PARALLEL_CHUNK_BYTES = 16 * 2**20


def _parallel_batch(T_all: Array, E: Array, w0: Array, ys: Array, actions: Array, final_only: bool,
                    block: int) -> Array:
    """``_parallel_one`` for a batch on one device, w0 (B, N), ys and actions (B, K) -> (B, K, N) (or (B, N)):
    vmapped over chunks of sequences holding about ``PARALLEL_CHUNK_BYTES`` each, one chunk after another."""
    (B, K), N = ys.shape, w0.shape[-1]
    per_sequence = (K * N + -(-K // block) * N * N) * E.dtype.itemsize
    chunk = max(1, PARALLEL_CHUNK_BYTES // per_sequence)
    one = functools.partial(_parallel_one, T_all, E, final_only=final_only, block=block)
    if chunk >= B:
        return jax.vmap(one)(w0, ys, actions)
    return jax.lax.map(lambda seq: one(*seq), (w0, ys, actions), batch_size=chunk)


@functools.cache
def _parallel_filter(final_only: bool, block: int):
    """``_parallel_one`` for one sequence (T_all, E, w0, ys, actions), run under ``vmap`` over sequences as
    ``_parallel_batch`` on each CPU device (``_over_sequences``)."""
    options = {"final_only": final_only, "block": block}
    return _over_sequences(functools.partial(_parallel_one, **options), functools.partial(_parallel_batch, **options))

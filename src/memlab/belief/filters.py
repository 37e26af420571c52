"""The exact Bayes filter of an (action-controlled) HMM in logit space.

* ``lof``          — logit optimal filter (LOF), eq. (7), serial ``lax.scan``:
                     w_k = log(T(a_{k-1}) exp(w_{k-1})) + log(E^T y_k).
* ``lof_parallel`` — the same logits from normalised matrix products
                     U_k ... U_1 exp(w_0), U_k = diag(E^T y_k) T(a_{k-1}) (eq. 57),
                     combined with ``lax.associative_scan``.
* ``log_belief``   — log alpha_k = w_k - logsumexp(w_k), eq. (6)/(8).
* ``bayes_decode`` — argmax of the logits: the Bayes-optimal (MAP) decoder of section 5.

Zero probabilities give -inf logits, never NaN. ``lof`` is exact over the whole
float range (a log-sum-exp per row); the Monte-Carlo filter ``LOF`` and
``lof_parallel`` use matmuls, where beliefs below ~1e-38 (float32) may round to
zero. The LOF is unnormalised, as in the
paper, so its logits drift towards -inf over long runs (the cause of the PPO
instability of section 6.2); use ``log_belief`` (or ``normalize=True``) when only
the belief matters.

Shapes: ``ys`` (K,) int observations y_1..y_K, ``actions`` (K,) int a_0..a_{K-1};
outputs (K, N), row k-1 holding w_k. Batch with ``vmap`` — or call the ``*_step``
functions directly on (B, N) logits, as the Monte-Carlo engine does.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.belief.hmm import HMM, ControlledHMM
from memlab.checks import check_indices
from memlab.logspace import safe_log


def _finite_max(w: Array) -> Array:
    """Row maximum (..., 1), replaced by 0 where the row is all -inf (avoids -inf - -inf)."""
    m = jnp.max(w, axis=-1, keepdims=True)
    return jnp.where(jnp.isfinite(m), m, 0.0)


def log_matvec(T: Array, w: Array) -> Array:
    """log(T exp(w)) for T (N, N) or (..., N, N) and logits w (..., N): a log-sum-exp per row.

    Exact over the whole float range (every row is shifted by its own maximum), -inf safe.
    Costs N^2 exponentials; ``log_matvec_fast`` is the matmul version.
    """
    return jax.nn.logsumexp(safe_log(T) + w[..., None, :], axis=-1)


def log_matvec_fast(T: Array, w: Array) -> Array:
    """log(T exp(w)) through one matmul, shifting w by its overall maximum.

    Terms more than ~87 (float32) or ~745 (float64) nats below max(w) underflow, so a
    state whose every incoming term is that small gets -inf instead of a finite logit.
    Harmless for decoding and for normalised beliefs (the state's probability is below
    1e-38); use ``log_matvec`` where logits must be exact.
    """
    m = _finite_max(w)
    return jnp.log(jnp.einsum("...ij,...j->...i", T, jnp.exp(w - m))) + m


def normalize_logits(w: Array) -> Array:
    """w - logsumexp(w) over the last axis (log of the softmax, eq. 8); all -inf rows stay -inf."""
    m = _finite_max(w)
    lse = jnp.log(jnp.sum(jnp.exp(w - m), axis=-1, keepdims=True)) + m
    return jnp.where(jnp.isfinite(lse), w - lse, w)


def lof_step(T: Array, log_E: Array, w: Array, y: Array, normalize: bool = False, fast: bool = False) -> Array:
    """One LOF update, eq. (7): w (..., N), y (...,) int, T (N, N) or (..., N, N) -> (..., N).

    ``fast`` uses ``log_matvec_fast`` (a matmul; tiny terms may underflow to -inf).
    """
    w_next = (log_matvec_fast if fast else log_matvec)(T, w) + log_E[y]  # eq. (7)
    return normalize_logits(w_next) if normalize else w_next


def _check_inputs(model, ys, actions):
    if ys.ndim != 1:
        raise ValueError(f"ys must have shape (K,), got {ys.shape}; vmap over batches")
    check_indices("observations ys", ys, model.num_obs)
    if isinstance(model, ControlledHMM):
        if actions is None:
            raise ValueError("a ControlledHMM needs the actions a_0..a_{K-1}")
        actions = jnp.asarray(actions, jnp.int32)
        if actions.shape != ys.shape:
            raise ValueError(f"actions must have the shape of ys {ys.shape}, got {actions.shape}")
        check_indices("actions", actions, model.num_actions)
        return actions
    if actions is not None:
        raise ValueError("actions given for an HMM with fixed transitions")
    return jnp.zeros(ys.shape, jnp.int32)


def _initial_logits(model, w0):
    return safe_log(model.pi0) if w0 is None else jnp.asarray(w0, dtype=model.T.dtype)


def lof(model: HMM | ControlledHMM, ys: Array, w0: Array | None = None,
        actions: Array | None = None, normalize: bool = False) -> Array:
    """Logit optimal filter, eq. (7), serial form. Returns (K, N); w0 defaults to log pi0."""
    ys = jnp.asarray(ys, jnp.int32)
    actions = _check_inputs(model, ys, actions)
    return _lof(model, ys, _initial_logits(model, w0), actions, normalize)


@functools.partial(jax.jit, static_argnames="normalize")
def _lof(model, ys, w0, actions, normalize):
    log_E = safe_log(model.E)

    def step(w, inp):
        y, a = inp
        w = lof_step(model.transition(a), log_E, w, y, normalize)
        return w, w

    return jax.lax.scan(step, w0, (ys, actions))[1]


def log_belief(model: HMM | ControlledHMM, ys: Array, actions: Array | None = None) -> Array:
    """log alpha_k of the optimal filter eq. (6), shape (K, N)."""
    return lof(model, ys, actions=actions, normalize=True)


def _rescale(M: Array, s: Array) -> tuple[Array, Array]:
    """Divide each matrix (..., N, N) by its largest entry and add that entry's log to s (...)."""
    scale = jnp.max(M, axis=(-2, -1))
    ok = scale > 0  # an impossible observation gives the zero matrix: keep it, log scale -inf
    safe = jnp.where(ok, scale, 1.0)
    return M / safe[..., None, None], s + jnp.where(ok, jnp.log(safe), -jnp.inf)


def _combine(earlier, later):
    """(M_b, s_b) after (M_a, s_a) -> rescaled (M_b M_a, s_a + s_b)."""
    (Ma, sa), (Mb, sb) = earlier, later
    return _rescale(Mb @ Ma, sa + sb)


def lof_parallel(model: HMM | ControlledHMM, ys: Array, w0: Array | None = None,
                 actions: Array | None = None) -> Array:
    """LOF logits (K, N) from a parallel prefix product of U_k = diag(E^T y_k) T(a_{k-1}) (eq. 57).

    Each prefix product is stored as (M / max M, log max M), so the logits are
    exact up to floating-point underflow of entries below ~1e-38 (float32) or
    ~1e-308 (float64) relative to the largest entry of the product: such an entry
    becomes -inf here while the serial ``lof`` keeps it finite. Decoding is unaffected.
    """
    ys = jnp.asarray(ys, jnp.int32)
    actions = _check_inputs(model, ys, actions)
    return _lof_parallel(model, ys, _initial_logits(model, w0), actions)


@jax.jit
def _lof_parallel(model, ys, w0, actions):
    T_seq = jax.vmap(model.transition)(actions) if isinstance(model, ControlledHMM) else model.T[None]
    U = model.E[ys][:, :, None] * T_seq  # diag(E^T y_k) T(a_{k-1}), eq. (57)
    M, s = jax.lax.associative_scan(_combine, _rescale(U, jnp.zeros(len(ys), U.dtype)))
    return log_matvec_fast(M, w0) + s[:, None]


def bayes_decode(w: Array) -> Array:
    """MAP state from logits (..., N) -> (...,) int; ties go to the lowest index."""
    return jnp.argmax(w, axis=-1)


class LOF(eqx.Module):
    """The LOF as a filter for the Monte-Carlo engine (batched steps).

    ``T`` (A, N, N) (A = 1 for a plain HMM), ``log_E`` (S, N), ``w0`` (N,).
    ``normalize=True`` keeps log-beliefs instead of the drifting unnormalised
    logits; decoding (argmax) is the same, and long runs stay well conditioned.
    Steps use the matmul form ``log_matvec_fast`` (beliefs below ~1e-38 may round to 0).
    """

    T: Array
    log_E: Array
    w0: Array
    normalize: bool = eqx.field(static=True, default=True)

    @classmethod
    def of(cls, model: HMM | ControlledHMM, w0: Array | None = None, normalize: bool = True) -> LOF:
        T = model.T if isinstance(model, ControlledHMM) else model.T[None]
        return cls(T, safe_log(model.E), _initial_logits(model, w0), normalize)

    def step(self, w: Array, y: Array, a: Array) -> Array:
        """w (B, N), y (B,), a (B,) -> (B, N); eq. (7)."""
        T = self.T[0] if self.T.shape[0] == 1 else self.T[a]
        return lof_step(T, self.log_E, w, y, self.normalize, fast=True)

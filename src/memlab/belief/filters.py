"""The exact Bayes filter of an (action-controlled) HMM in logit space: the plain reference forms.

* ``lof``          — logit optimal filter (LOF), eq. (7), one ``lax.scan`` of ``lof_step``:
                     w_k = log(T(a_{k-1}) exp(w_{k-1})) + log(E^T y_k), a log-sum-exp per row (exact over the
                     whole float range, N^2 exponentials a step).
* ``log_belief``   — log alpha_k = w_k - logsumexp(w_k), eq. (6)/(8).
* ``bayes_decode`` — argmax of the logits: the Bayes-optimal (MAP) decoder of section 5.
* ``LOF``          — the same step for the Monte-Carlo engine (batched steps).

These are what the documentation points to. ``memlab.belief.fast_filters`` holds the same filters as fast
engines (probability space with a log-space rerun, the batch split over the CPU devices, the block-parallel
form ``lof_parallel``), tested equal to these; ``memlab.belief.lof`` and ``log_belief`` are the fast ones. The
log-space arithmetic of the step (``log_matvec``, its matmul form ``log_matvec_fast``, ``normalize_logits``) is the
core module ``memlab.logspace``.

Zero probabilities give -inf logits, never NaN. The LOF is unnormalised, as in the paper, so its logits drift
towards -inf over long runs (the cause of the PPO instability of section 6.2); use ``log_belief`` (or
``normalize=True``) when only the belief matters.

Shapes: ``ys`` (K,) int observations y_1..y_K, ``actions`` (K,) int a_0..a_{K-1}; outputs (K, N), row k-1 holding
w_k (or w_K alone with ``final_only``). Batch with ``vmap``, or call ``lof_step`` on (B, N) logits.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.belief.hmm import HMM, ControlledHMM
from memlab.checks import check_indices
from memlab.logspace import log_matvec, log_matvec_fast, normalize_logits, safe_log


def lof_step(T: Array, log_E: Array, w: Array, y: Array, normalize: bool = False, fast: bool = False) -> Array:
    """One LOF update, eq. (7): w (..., N), y (...,) int, T (N, N) or (..., N, N) -> (..., N).

    ``fast`` uses ``log_matvec_fast`` (a matmul; tiny terms may underflow to -inf).
    """
    w_next = (log_matvec_fast if fast else log_matvec)(T, w) + log_E[y]  # eq. (7)
    return normalize_logits(w_next) if normalize else w_next


def check_sequence_inputs(model, ys, actions):
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


def initial_logits(model, w0):
    return safe_log(model.pi0) if w0 is None else jnp.asarray(w0, dtype=model.T.dtype)


def lof(model: HMM | ControlledHMM, ys: Array, w0: Array | None = None, actions: Array | None = None,
        normalize: bool = False, final_only: bool = False) -> Array:
    """Logit optimal filter, eq. (7): w_1..w_K (K, N), or only w_K (N,) if ``final_only``; w0 defaults to
    log pi0; ``normalize`` gives log beliefs (eq. 8) instead of the drifting logits."""
    ys = jnp.asarray(ys, jnp.int32)
    actions = check_sequence_inputs(model, ys, actions)
    T_all = model.T if isinstance(model, ControlledHMM) else model.T[None]
    log_E = safe_log(model.E)

    def step(w, inputs):
        y, a = inputs
        w = lof_step(T_all[a], log_E, w, y, normalize)  # eq. (7), and eq. (8) if normalize
        return w, w

    w_K, ws = jax.lax.scan(step, initial_logits(model, w0), (ys, actions))
    return w_K if final_only else ws


def log_belief(model: HMM | ControlledHMM, ys: Array, actions: Array | None = None,
               final_only: bool = False) -> Array:
    """log alpha_k of the optimal filter eq. (6), shape (K, N) (or (N,) for k = K only)."""
    return lof(model, ys, actions=actions, normalize=True, final_only=final_only)


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
        return cls(T, safe_log(model.E), initial_logits(model, w0), normalize)

    def step(self, w: Array, y: Array, a: Array) -> Array:
        """w (B, N), y (B,), a (B,) -> (B, N); eq. (7)."""
        T = self.T[0] if self.T.shape[0] == 1 else self.T[a]
        return lof_step(T, self.log_E, w, y, self.normalize, fast=True)

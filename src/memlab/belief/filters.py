"""The exact Bayes filter of an (action-controlled) HMM in logit space: the plain reference forms.

* ``lof_reference``        — logit optimal filter (LOF), eq. (7), one ``lax.scan`` of ``lof_step``:
                             w_k = log(T(a_{k-1}) exp(w_{k-1})) + log(E^T y_k), a log-sum-exp per row (exact over the
                             whole float range, N^2 exponentials a step).
* ``log_belief_reference`` — log alpha_k = w_k - logsumexp(w_k), eq. (6)/(8).
* ``bayes_decode``         — argmax of the logits: the Bayes-optimal (MAP) decoder of section 5.
* ``LOF``                  — the same step for the Monte-Carlo engine (batched steps).

These are what the documentation points to; a ``_reference`` name marks the plain form of a computation that also
has a fast engine (as ``memlab.layers.s6.expm_and_integral_reference`` does). ``memlab.belief.fast_filters`` holds
the engines, ``lof``, ``log_belief`` and ``lof_parallel`` (probability space with a log-space rerun, the batch split
over the CPU devices, the block-parallel form), tested equal to these: they are what ``memlab.belief`` exports
under the plain names. The log-space arithmetic of the step (``log_matvec``, its matmul form ``log_matvec_fast``,
``normalize_logits``) is the core module ``memlab.logspace``.

Every filter returns a :class:`FilterResult`, as dynamax's filters return ``HMMPosteriorFiltered``: the logits
and the marginal log-likelihood log p(y_1..y_K) = logsumexp(w_K) - logsumexp(w_0), the sum of the log
normalisers of eq. (6).

Zero probabilities give -inf logits, never NaN. The LOF is unnormalised, as in the paper, so its logits drift
towards -inf over long runs (the cause of the PPO instability of section 6.2); use ``log_belief_reference`` (or
``normalize=True``) when only the belief matters.

Shapes: ``ys`` (K,) int observations y_1..y_K, ``actions`` (K,) int a_0..a_{K-1}; logits (K, N), row k-1 holding
w_k (or w_K alone with ``final_only``). Batch with ``vmap``, or call ``lof_step`` on (B, N) logits.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.belief.hmm import HMM, ControlledHMM
from memlab.checks import check_indices
from memlab.logspace import log_matvec, log_matvec_fast, normalize_logits, safe_log


class FilterResult(NamedTuple):
    """What a belief filter returns for K observations and N states.

    ``logits`` (K, N), row k-1 holding w_k, or (N,) holding w_K alone with ``final_only``: the LOF's logits of
    eq. (7), log beliefs log alpha_k (eq. 8) where the filter normalises (``normalize=True``, ``log_belief``), or
    an approximate filter's own logits (the ALF's, eq. 24 / 46).
    ``marginal_loglik`` (): log p(y_1..y_K | a_0..a_{K-1}) when the hidden state starts from softmax(w_0) (with the
    default w_0 = log pi0 the model's marginal log-likelihood of the observations); -inf for observations the model
    cannot emit; None for a filter that has no likelihood (the ALF).
    """

    logits: Array
    marginal_loglik: Array | None = None


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


def log_evidence(w_next: Array, w: Array) -> Array:
    """log p(y_k | y_1..y_{k-1}) = logsumexp(w_k) - logsumexp(w_{k-1}) for unnormalised logits w_k of eq. (7),
    over the last axis; -inf once the observations so far are impossible (w_{k-1} all -inf)."""
    before = jax.nn.logsumexp(w, axis=-1)
    return jnp.where(before > -jnp.inf, jax.nn.logsumexp(w_next, axis=-1) - before, -jnp.inf)


def lof_reference(model: HMM | ControlledHMM, ys: Array, w0: Array | None = None, actions: Array | None = None,
                  normalize: bool = False, final_only: bool = False) -> FilterResult:
    """Logit optimal filter, eq. (7): logits w_1..w_K (K, N), or only w_K (N,) if ``final_only``, and the marginal
    log-likelihood; w0 defaults to log pi0; ``normalize`` gives log beliefs (eq. 8) instead of the drifting logits."""
    ys = jnp.asarray(ys, jnp.int32)
    actions = check_sequence_inputs(model, ys, actions)
    T_all = model.T if isinstance(model, ControlledHMM) else model.T[None]
    log_E = safe_log(model.E)

    def step(carry, inputs):
        w, loglik = carry
        y, a = inputs
        w_next = lof_step(T_all[a], log_E, w, y)  # eq. (7)
        loglik = loglik + log_evidence(w_next, w)  # the log normaliser of eq. (6)
        w_next = normalize_logits(w_next) if normalize else w_next  # eq. (8)
        return (w_next, loglik), w_next

    w_start = initial_logits(model, w0)
    (w_K, loglik), ws = jax.lax.scan(step, (w_start, jnp.zeros((), w_start.dtype)), (ys, actions))
    return FilterResult(w_K if final_only else ws, loglik)


def log_belief_reference(model: HMM | ControlledHMM, ys: Array, actions: Array | None = None,
                         final_only: bool = False) -> FilterResult:
    """log alpha_k of the optimal filter eq. (6), shape (K, N) (or (N,) for k = K only), and the marginal
    log-likelihood."""
    return lof_reference(model, ys, actions=actions, normalize=True, final_only=final_only)


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

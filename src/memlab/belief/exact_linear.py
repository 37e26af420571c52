"""Exact linear filters for deterministic transitions (paper 1, Sec. 4): Theorem 4.4 for any nilpotent index ell,
eq. (14)-(15) with psi of eq. (64)-(65), and Corollary 4.5 (ell = 1, r = 0, action-dependent T' = P(a_{k-1}),
eq. (17)-(18)).

Choices the paper leaves open:

- psi for any ell (the paper writes it out for ell = 2), w^o_{k-1} recomputed from the last ell observations;
- T' applied as a gather, so -inf logits move without 0 * (-inf) = NaN;
- where no finite psi can be exact (zeros in pi0 or E) the filter returns -inf there and flags the row ``inexact``;
  ``construction_is_exact`` decides beforehand.

The construction and when exactness is impossible: docs/studies/belief.md, "Exact linear filters".
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.belief.hmm import HMM, ControlledHMM
from memlab.belief.structure import decompose_deterministic, is_permutation, successors
from memlab.checks import check_indices
from memlab.logspace import log_matvec, safe_log


class LinearFilterOutput(NamedTuple):
    w: Array  # (K, N) logits, row k-1 = w_k
    inexact: Array  # (K,) bool, True where w_k differs from the LOF logit w^o_k


def _extended_difference(a: Array, b: Array) -> Array:
    """a - b over [-inf, inf): -inf where a = -inf; 0 where only b = -inf (exactness impossible)."""
    return jnp.where(a == -jnp.inf, -jnp.inf, jnp.where(b == -jnp.inf, 0.0, a - b))


def _scan(w0, log_pi0, src, succ, actions, psis, log_E_rows) -> LinearFilterOutput:
    """w_k = w_{k-1}[src[a]] + psi_k, eqs. (14)/(18); src, succ (A, N); psis, log_E_rows (K, N)."""

    def step(carry, x):
        w, supp = carry
        a, psi, log_e = x
        w = w[src[a]] + psi  # eq. (14)/(18): T' w as a gather
        supp = jnp.zeros_like(supp).at[succ[a]].max(supp) & (log_e > -jnp.inf)  # beta_k > 0, eq. (57)
        return (w, supp), (w, jnp.any(supp & (w == -jnp.inf)))

    _, (ws, inexact) = jax.lax.scan(step, (w0, log_pi0 > -jnp.inf), (actions, psis, log_E_rows))
    return LinearFilterOutput(ws, inexact)


def _check_w0(w0, N: int, dtype) -> Array:
    if w0 is None:
        return jnp.zeros(N, dtype)
    w0_np = np.asarray(w0, dtype=np.float64)
    if w0_np.shape != (N,):
        raise ValueError(f"w0 must have shape ({N},), got {w0_np.shape}")
    if np.any(np.isnan(w0_np)) or np.any(w0_np == np.inf):
        raise ValueError("w0 must not contain NaN or +inf (entries in [-inf, inf) are allowed)")
    return jnp.asarray(w0, dtype)


def _check_ints(name: str, v, upper: int, shape=None) -> Array:
    v = jnp.asarray(v, jnp.int32)
    if shape is not None and v.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {v.shape}")
    if v.ndim != 1 or v.shape[0] == 0:
        raise ValueError(f"{name} must have shape (K,) with K >= 1, got {v.shape}; vmap over batches")
    check_indices(name, v, upper)
    return v


@jax.jit
def _forward(filt, *inputs) -> LinearFilterOutput:
    return filt.forward(*inputs)


# --------------------------------------------------------------------------- Theorem 4.4


class ExactLinearFilter(eqx.Module):
    """Theorem 4.4 realisation for a deterministic T; build with ``make_exact_linear_filter``.

    ``src`` (N,) int is T' as an index array, (T' w)[i] = w[src[i]] (original labels);
    ``succ`` (N,) int is T as a map j -> n_j; ``ell`` the nilpotent index (Lemma 4.2).
    """

    T: Array
    log_E: Array
    log_pi0: Array
    w0: Array
    src: Array
    succ: Array
    ell: int = eqx.field(static=True)

    def correction(self, k, window) -> Array:
        """c_k (N,) for 1 <= k <= ell from window (ell,) = (y_{k-ell+1}, ..., y_k), eq. (65)."""
        ell = self.ell

        def lof_step(m, w):  # w^o_m from y_1..y_m (eq. 7/57); y_m sits at window[ell - k + m - 1]
            y = window[jnp.clip(ell - k + m - 1, 0, ell - 1)]
            return jnp.where(m <= k - 1, log_matvec(self.T, w) + self.log_E[y], w)

        w_prev = jax.lax.fori_loop(1, ell, lof_step, self.log_pi0)  # w^o_{k-1}
        target = log_matvec(self.T, w_prev)  # log(T exp w^o_{k-1})
        moved = jnp.where(k == 1, self.w0, w_prev)[self.src]  # T' w^o_{k-1}, w^o_0 -> w_0
        return _extended_difference(target, moved)

    def psi(self, k, window) -> Array:
        """psi(k, y_k, ..., y_{k-ell+1}) (N,), eq. (14); window (ell,) int, -1 = padding before y_1."""
        c = jnp.where(k <= self.ell, self.correction(k, window), 0.0)  # eq. (65) / (64)
        return self.log_E[window[-1]] + c

    def __call__(self, ys) -> LinearFilterOutput:
        """Run eq. (14) on ys (K,) int -> (w (K, N), inexact (K,)); jit-compiled."""
        return _forward(self, _check_ints("ys", ys, self.log_E.shape[0]))

    def forward(self, ys) -> LinearFilterOutput:
        """Un-jitted body of ``__call__`` (ys already validated)."""
        K, ell = ys.shape[0], self.ell
        L = min(K, ell)
        padded = jnp.concatenate([jnp.full(ell - 1, -1, jnp.int32), ys])
        windows = padded[jnp.arange(L)[:, None] + jnp.arange(ell)]  # (L, ell)
        head = jax.vmap(self.psi)(jnp.arange(1, L + 1), windows)
        psis = jnp.concatenate([head, self.log_E[ys[L:]]])  # psi = log(E^T y_k) for k > ell, eq. (64)
        return _scan(self.w0, self.log_pi0, self.src[None], self.succ[None], jnp.zeros(K, jnp.int32),
                     psis, self.log_E[ys])


def make_exact_linear_filter(T, E, pi0, w0=None) -> ExactLinearFilter:
    """Validate (T (N, N) deterministic, E (S, N), pi0 (N,), w0 (N,) or None -> 0) and build eq. (14)."""
    model = HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))  # shape / stochasticity checks
    dec = decompose_deterministic(np.asarray(T))  # raises unless T is deterministic
    dtype = model.T.dtype
    return ExactLinearFilter(
        T=model.T, log_E=safe_log(model.E), log_pi0=safe_log(model.pi0),
        w0=_check_w0(w0, model.num_states, dtype), src=jnp.asarray(dec.T_prime_index, jnp.int32),
        succ=jnp.asarray(dec.successor, jnp.int32), ell=dec.ell,
    )


def exact_linear_filter(T, E, pi0, ys, w0=None) -> LinearFilterOutput:
    """Theorem 4.4: logits (K, N) equal to ``lof`` wherever ``inexact`` (K,) is False."""
    return make_exact_linear_filter(T, E, pi0, w0)(ys)


def construction_is_exact(T, E, pi0, max_supports: int = 100_000) -> bool:
    """True if eq. (14) reproduces the LOF for every observation sequence and every finite w0.

    Enumerates the supports of beta_k (eq. 57) reachable for k <= ell over all zero
    patterns of the rows of E, and looks for (T' w^o_{k-1})(i) = -inf with w^o_k(i)
    finite. That is necessary and sufficient (failing sequences have positive
    probability); if more than ``max_supports`` supports arise the search stops and
    returns False (not proven). pi0 > 0 and E > 0 always give True.
    """
    E, pi0 = np.asarray(E), np.asarray(pi0)
    HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))  # validation
    dec = decompose_deterministic(T)
    f, src, N = dec.successor, dec.T_prime_index, len(dec.order)
    patterns = np.unique(E > 0, axis=0)
    frontier = {(pi0 > 0).tobytes()}
    for k in range(1, dec.ell + 1):
        nxt = set()
        for key in frontier:
            prev = np.frombuffer(key, dtype=bool)
            moved = np.zeros(N, dtype=bool)
            moved[f[prev]] = True  # support of T beta_{k-1}
            for z in patterns:
                supp = moved & z
                if k >= 2 and np.any(supp & ~prev[src]):
                    return False
                if supp.any():
                    nxt.add(supp.tobytes())
        if len(nxt) > max_supports:
            return False
        frontier = nxt
    return True


# --------------------------------------------------------------------------- Corollary 4.5


class ExactLinearFilterControlled(eqx.Module):
    """Corollary 4.5 for permutations T(a) = P(a); ``src`` (A, N): (P(a) w)[i] = w[src[a, i]]."""

    log_E: Array
    c0: Array  # log(pi0) - w0 over extended reals, (N,)
    log_pi0: Array
    w0: Array
    src: Array
    succ: Array

    def psi(self, k, y, a) -> Array:
        """psi(k, y_k, a_{k-1}) = log(E^T y_k) + 1{k=1} P(a_0)(log pi0 - w0), eq. (17)-(18)."""
        return self.log_E[y] + jnp.where(k == 1, self.c0[self.src[a]], 0.0)

    def __call__(self, ys, actions) -> LinearFilterOutput:
        """Run eq. (18) on ys (K,) and actions (K,) = a_0..a_{K-1} -> (w (K, N), inexact (K,)); jit-compiled."""
        ys = _check_ints("ys", ys, self.log_E.shape[0])
        return _forward(self, ys, _check_ints("actions", actions, self.src.shape[0], shape=ys.shape))

    def forward(self, ys, actions) -> LinearFilterOutput:
        """Un-jitted body of ``__call__`` (inputs already validated)."""
        psis = jax.vmap(self.psi)(jnp.arange(1, ys.shape[0] + 1), ys, actions)
        return _scan(self.w0, self.log_pi0, self.src, self.succ, actions, psis, self.log_E[ys])


def make_exact_linear_filter_controlled(T, E, pi0, w0=None) -> ExactLinearFilterControlled:
    """Validate (T (A, N, N) permutations, E (S, N), pi0 (N,), w0) and build eq. (18)."""
    model = ControlledHMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    T_np = np.asarray(T)
    for a, Ta in enumerate(T_np):
        if not is_permutation(Ta):
            raise ValueError(f"Corollary 4.5 needs permutation matrices, but T[{a}] is not one")
    succ = np.stack([successors(Ta) for Ta in T_np])
    src = np.argsort(succ, axis=1)  # inverse permutations
    w0 = _check_w0(w0, model.num_states, model.T.dtype)
    log_pi0 = safe_log(model.pi0)
    return ExactLinearFilterControlled(
        log_E=safe_log(model.E), c0=_extended_difference(log_pi0, w0), log_pi0=log_pi0, w0=w0,
        src=jnp.asarray(src, jnp.int32), succ=jnp.asarray(succ, jnp.int32),
    )


def exact_linear_filter_controlled(T, E, pi0, ys, actions, w0=None) -> LinearFilterOutput:
    """Corollary 4.5: logits (K, N) equal to ``lof`` (with actions) wherever ``inexact`` is False."""
    return make_exact_linear_filter_controlled(T, E, pi0, w0)(ys, actions)

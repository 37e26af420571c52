"""The Adaptive Logit Filter (ALF), paper 1 section 5.

Time-invariant ALF, eq. (24), in the recurrent-first labelling of eq. (22):

    w_k = blockdiag(P, I_r) (1 - delta) w_{k-1} + delta log(E^T y_k)

Time-varying ALF for action-controlled HMMs with T(a) = P(a) + eps Q(a), eq. (46):

    w_k = P(a_{k-1}) (1 - delta) w_{k-1} + delta log(E^T y_k)

Both in the ORIGINAL state labels (the block matrix becomes a permutation gather), so an ALF is compared state by
state with the exact filter, with the paper's -inf * 0 = 0: docs/studies/belief.md, "The ALF in original labels".
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.belief.filters import FilterResult
from memlab.belief.structure import decompose_deterministic, is_permutation
from memlab.checks import check_column_stochastic
from memlab.logspace import safe_log
from memlab.scan import extended_mul, permutation_scan, permutation_scan_parallel

# delta_eps choices of section 6.1: valid eq. (48), invalid eq. (49).
DELTA_SCHEDULES = {
    "sqrt": (lambda eps, lam: eps ** 0.5, "δ = √ε", True),
    "log": (lambda eps, lam: lam / np.log(1.0 / eps), "δ = {lam}/log(1/ε)", True),
    "eps2": (lambda eps, lam: eps ** 2, "δ = ε²", False),
    "zero": (lambda eps, lam: 0.0 * eps, "δ = 0", False),
    "one": (lambda eps, lam: 1.0 + 0.0 * eps, "δ = 1", False),
}


def delta_schedule(name: str, eps, lam: float = 0.7):
    """delta_eps for a named schedule ('sqrt', 'log', 'eps2', 'zero', 'one'); eps scalar or array."""
    if name not in DELTA_SCHEDULES:
        raise ValueError(f"unknown delta schedule {name!r}; expected one of {sorted(DELTA_SCHEDULES)}")
    eps = np.asarray(eps, dtype=np.float64)
    if np.any((eps <= 0) | (eps >= 1)):
        raise ValueError("eps must lie in (0, 1)")
    return DELTA_SCHEDULES[name][0](eps, lam)


def delta_label(name: str, lam: float = 0.7) -> str:
    """Plot label of a schedule, e.g. 'δ = 0.7/log(1/ε)'."""
    delta_schedule(name, 0.5, lam)
    return DELTA_SCHEDULES[name][1].format(lam=lam)


def delta_is_valid(name: str) -> bool:
    """Whether the schedule satisfies conditions (31)-(32) of Theorem 5.7 (delta -> 0, eps/delta -> 0)."""
    delta_schedule(name, 0.5)
    return DELTA_SCHEDULES[name][2]


def alf_backbone(D) -> np.ndarray:
    """Gather indices (N,) of blockdiag(P, I_r) of eq. (24) in the original labels of D.

    D is the deterministic backbone of T = D + eps Q (Def. 5.1): recurrent state i
    receives the logit of its D-predecessor, a transient state keeps its own. This is
    the map T' of Theorem 4.4 (eq. 15) in the other block order.
    """
    return decompose_deterministic(np.asarray(D)).T_prime_index


def permutation_sources(P) -> np.ndarray:
    """Gather indices of permutation matrices: P (..., N, N) -> src (..., N) with (P w)[i] = w[src[i]]."""
    P = np.asarray(P)
    flat = P.reshape(-1, *P.shape[-2:])
    for a, Pa in enumerate(flat):
        if not is_permutation(Pa):
            raise ValueError(f"P[{a}] is not a permutation matrix")
    return np.argmax(P, axis=-1)


def alf_initial_logits(D, w0_tilde=None) -> np.ndarray:
    """w_0 of Assumption 5.3, eq. (26): finite on recurrent states (default 0), -inf on transient ones."""
    transient = decompose_deterministic(np.asarray(D)).transient
    w0 = np.zeros(len(transient))
    if w0_tilde is not None:
        w0_tilde = np.asarray(w0_tilde, dtype=np.float64)
        if w0_tilde.shape != ((~transient).sum(),) or not np.all(np.isfinite(w0_tilde)):
            raise ValueError(f"w0_tilde must be finite with shape ({(~transient).sum()},) (one per recurrent state)")
        w0[~transient] = w0_tilde
    w0[transient] = -np.inf
    return w0


def alf_step(src: Array, log_E: Array, delta: Array, w: Array, y: Array) -> Array:
    """One ALF update, eq. (24)/(46): w (..., N), y (...,), src (..., N) gather indices."""
    permuted = w[..., src] if src.ndim == 1 else jnp.take_along_axis(w, src, axis=-1)
    return alf_update(delta, permuted, log_E[y])


def alf_update(delta: Array, moved: Array, log_likelihood: Array) -> Array:
    """The ALF's mix once the backbone has moved the logits, eq. (24)/(46): (1 - delta) P w_{k-1} + delta
    log(E^T y_k), with -inf * 0 = 0. ``moved`` P w_{k-1} (..., N), ``log_likelihood`` log(E^T y_k) (..., N)."""
    return extended_mul(1.0 - delta, moved) + extended_mul(delta, log_likelihood)  # eq. (24)


class ALF(eqx.Module):
    """An ALF as a filter for the Monte-Carlo engine.

    ``src`` (A, N): per-action gather indices (A = 1 for the time-invariant ALF);
    ``log_E`` (S, N); ``delta`` scalar; ``w0`` (N,) initial logits.
    """

    src: Array
    log_E: Array
    delta: Array
    w0: Array

    @classmethod
    def time_invariant(cls, D, E, delta, w0=None) -> ALF:
        """eq. (24) for T = D + eps Q; w0 defaults to Assumption 5.3 with zeros on recurrent states."""
        src = alf_backbone(D)
        w0 = alf_initial_logits(D) if w0 is None else np.asarray(w0, dtype=np.float64)
        return cls._build(src[None], E, delta, w0)

    @classmethod
    def _build(cls, src, E, delta, w0) -> ALF:
        N = src.shape[-1]
        E = jnp.asarray(E)
        check_column_stochastic("E", E)
        if E.ndim != 2 or E.shape[1] != N:
            raise ValueError(f"E must have shape (S, {N}) to match the {N} states of the backbone, got {E.shape}")
        if w0.shape != (N,) or np.any(np.isnan(w0)) or np.any(w0 == np.inf):
            raise ValueError(f"w0 must have shape ({N},) with entries in [-inf, inf), got shape {w0.shape}")
        delta_np = np.asarray(delta, dtype=np.float64)
        if delta_np.shape != () or not 0.0 <= float(delta_np) <= 1.0:
            raise ValueError(f"delta must be a scalar in [0, 1], got {delta!r}")
        return cls(jnp.asarray(src), safe_log(E), jnp.asarray(delta, E.dtype), jnp.asarray(w0, dtype=E.dtype))

    @classmethod
    def time_varying(cls, P, E, delta, w0=None) -> ALF:
        """eq. (46) for T(a) = P(a) + eps Q(a); P (A, N, N); w0 finite (Assumption 5.8), default 0."""
        if np.ndim(P) != 3:
            raise ValueError(f"P must hold one permutation per action, shape (A, N, N), got {np.shape(P)}")
        src = permutation_sources(P)
        N = src.shape[-1]
        w0 = np.zeros(N) if w0 is None else np.asarray(w0, dtype=np.float64)
        if w0.shape != (N,) or not np.all(np.isfinite(w0)):
            raise ValueError(f"w0 of the time-varying ALF must be finite with shape ({N},) (Assumption 5.8)")
        return cls._build(src, E, delta, w0)

    def step(self, w: Array, y: Array, a: Array) -> Array:
        """w (B, N), y (B,), a (B,) -> (B, N)."""
        src = self.src[a] if self.src.shape[0] > 1 else self.src[0]
        return alf_step(src, self.log_E, self.delta, w, y)


def alf_filter(alf: ALF, ys: Array, actions: Array | None = None, parallel: bool = False) -> FilterResult:
    """ALF logits w_1..w_K (K, N) of one observation sequence ``ys`` (K,), eq. (24)/(46), as the ``logits`` of a
    :class:`~memlab.belief.filters.FilterResult` whose ``marginal_loglik`` is None (the ALF is an approximation of
    the filter and has no likelihood of the observations).

    ``actions`` (K,) holds a_0..a_{K-1} for the time-varying ALF. ``parallel`` selects
    the associative-scan form (same numbers, O(log K) depth).
    """
    ys = jnp.asarray(ys, jnp.int32)
    if ys.ndim != 1:
        raise ValueError(f"ys must have shape (K,), got {ys.shape}; vmap over batches")
    K = ys.shape[0]
    if (actions is None) != (alf.src.shape[0] == 1):
        raise ValueError("give actions exactly when the ALF is time-varying (one permutation per action)")
    if actions is not None:
        src = alf.src[jnp.asarray(actions, jnp.int32)]  # (K, N): P(a_{k-1}) of eq. (46)
    else:
        src = jnp.broadcast_to(alf.src, (K, alf.src.shape[-1]))
    c = jnp.full(K, 1.0 - alf.delta, alf.w0.dtype)
    b = extended_mul(alf.delta, alf.log_E[ys])  # delta log(E^T y_k)
    scan = permutation_scan_parallel if parallel else permutation_scan
    return FilterResult(scan(src, c, b, alf.w0))

"""What the belief experiments measure beyond the decoding error p_k (``montecarlo.decoding_error``, eq. (19)).

* ``trend``          — least-squares slope of y on x and its t-statistic: does p_1000 fall as 1/eps grows (Fig. 1)?
* ``switch_lags``    — steps from each state switch until a decoder agrees with the new state (App. B.1, Fig. 5).
* ``logit_agreement`` / ``merge_agreement`` — how far a filter's logits are from the LOF's, entry by entry over
  the extended reals (Theorem 4.4, Corollary 4.5).

NumPy, on concrete arrays (results of a Monte-Carlo run), float64.
"""

from __future__ import annotations

import dataclasses

import numpy as np


def trend(x, y) -> tuple[float, float]:
    """Least-squares slope of y on x (both (n,), n >= 2) and its t-statistic slope / stderr.

    The residual variance has n - 2 degrees of freedom (at least 1). A residual of exactly 0 (e.g. two points)
    gives t = ±inf by the sign of the slope (which rounding may give a flat line too); a fit perfect up to
    rounding gives a huge finite t.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.ndim != 1 or x.shape != y.shape or x.size < 2:
        raise ValueError(f"x and y must be vectors of one length >= 2, got shapes {x.shape} and {y.shape}")
    if np.all(x == x[0]):
        raise ValueError("x must not be constant: the slope is undefined")
    A = np.stack([x, np.ones_like(x)], 1)
    coef, res, *_ = np.linalg.lstsq(A, y, rcond=None)
    dof = max(len(x) - 2, 1)
    sigma2 = (res[0] if res.size else 0.0) / dof
    se = np.sqrt(sigma2 / np.sum((x - x.mean()) ** 2))
    if se == 0:  # a perfect fit: the sign alone decides
        return coef[0], float(np.sign(coef[0])) * np.inf if coef[0] != 0 else 0.0
    return coef[0], coef[0] / se


def switch_lags(decoded: np.ndarray, states: np.ndarray) -> np.ndarray:
    """Steps from each state switch until the decoder first agrees with the new state, censored at the next
    switch (a decoder that never catches up before the next switch scores the whole stretch).

    ``decoded``, ``states`` (B, K) int: decoded and true states of B trajectories. Returns (number of switches,)
    float, trajectory by trajectory; a switch at step s is ``states[b, s] != states[b, s - 1]``.
    """
    decoded, states = np.asarray(decoded), np.asarray(states)
    if decoded.ndim != 2 or decoded.shape != states.shape:
        raise ValueError(f"decoded and states must both have shape (B, K), got {decoded.shape} and {states.shape}")
    lags = []
    for dec, x in zip(decoded, states):
        switches = np.flatnonzero(np.diff(x)) + 1
        ends = np.append(switches[1:], len(x))
        for s, e in zip(switches, ends):
            hit = np.flatnonzero(dec[s:e] == x[s:e])
            lags.append(hit[0] if hit.size else e - s)
    return np.array(lags, float)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogitAgreement:
    """How far logits are from reference logits (``logit_agreement``): ``max_abs_error`` over the entries finite in
    both, ``pattern_mismatches`` (entries finite in one and -inf in the other), ``neg_inf_entries`` (-inf entries of
    the reference checked), the rows skipped as flagged (``flagged_rows``) of all ``rows``."""

    max_abs_error: float
    pattern_mismatches: int
    neg_inf_entries: int
    flagged_rows: int
    rows: int


def logit_agreement(w: np.ndarray, w_ref: np.ndarray, flagged: np.ndarray) -> LogitAgreement:
    """Compare logits w with reference logits w_ref (both (..., N), entries in [-inf, inf)), skipping the rows
    ``flagged`` (...,) bool (a filter's own "inexact" rows): :class:`LogitAgreement`."""
    w, w_ref, flagged = np.asarray(w), np.asarray(w_ref), np.asarray(flagged, bool)
    if w.shape != w_ref.shape or flagged.shape != w.shape[:-1]:
        raise ValueError(f"w, w_ref must share a shape (..., N) and flagged be (...,); got {w.shape}, "
                         f"{w_ref.shape}, {flagged.shape}")
    keep = ~flagged[..., None] & np.ones_like(w, bool)
    finite = np.isfinite(w_ref) & np.isfinite(w) & keep
    diff = np.subtract(w, w_ref, where=finite, out=np.zeros_like(w))
    return LogitAgreement(max_abs_error=float(np.max(np.abs(diff))),
                          pattern_mismatches=int(np.sum((np.isfinite(w) != np.isfinite(w_ref)) & keep)),
                          neg_inf_entries=int(np.sum(np.isneginf(w_ref) & keep)),
                          flagged_rows=int(flagged.sum()), rows=int(flagged.size))


def merge_agreement(stats: list[LogitAgreement]) -> LogitAgreement:
    """Several ``logit_agreement`` results as one: the largest error, the counts summed."""
    if not stats:
        raise ValueError("give at least one logit_agreement result")
    return LogitAgreement(max_abs_error=max(s.max_abs_error for s in stats),
                          **{k: sum(getattr(s, k) for s in stats)
                             for k in ("pattern_mismatches", "neg_inf_entries", "flagged_rows", "rows")})

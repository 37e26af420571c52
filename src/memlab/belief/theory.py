"""Constants of the Adaptive Logit Filter's error bound (paper 1, Sec. 5.1, App. D): xi of eq. (144)-(145) through
Lambda_n of eq. (99) and d_n of eq. (171), W of eq. (190), the delta range of eq. (34).

NumPy/SciPy float64 references (not hot paths) on the recurrent part of the model only: the backbone permutation P
(n, n) of Def. 5.4 and the emission columns E_tilde (S, n) of eq. (28). The index convention of eqs. (92), (99),
(100), which the paper leaves implicit, is fixed once: docs/studies/belief.md, "The ALF error bound".
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import quad
from scipy.special import logsumexp

from memlab.belief.structure import (
    is_permutation,
    permutation_order,
    stacked_emission,
    successors,
)
from memlab.checks import check_column_stochastic, check_distribution

# Below this |tau| the integrand Lambda(tau)/tau is replaced by its Taylor
# expansion d + Lambda''(0) tau / 2 (error O(tau^2), i.e. < 1e-12 relative).
_TAU_SERIES = 1e-6


# --------------------------------------------------------------------------- permutation


def _sigma(P) -> np.ndarray:
    """sigma of a permutation matrix P (n, n) as an index array: sigma[j] = i iff P[i, j] = 1."""
    if not is_permutation(P):
        raise ValueError("P must be a permutation matrix: entries 0/1, exactly one 1 in every row and column")
    return successors(np.asarray(P))


def _sigma_power(sigma: np.ndarray, k: int) -> np.ndarray:
    """sigma^k as an index array (k >= 0)."""
    out = np.arange(len(sigma))
    for _ in range(k):
        out = sigma[out]
    return out


# --------------------------------------------------------------------------- validation


def _check_model(P, E_tilde, positive: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """Validate (P, E_tilde); return (sigma, E_tilde as float64, M)."""
    sigma = _sigma(P)
    E = np.asarray(E_tilde, dtype=np.float64)
    if E.ndim != 2 or E.shape[1] != len(sigma):
        raise ValueError(f"E_tilde must have shape (S, {len(sigma)}) to match P, got {E.shape}")
    check_column_stochastic("E_tilde", E)
    if positive and np.any(E <= 0):
        s, j = np.argwhere(E <= 0)[0]
        raise ValueError(f"Assumption 5.6a fails: E_tilde must be strictly positive, E_tilde[{s}, {j}] = {E[s, j]}")
    return sigma, E, permutation_order(P)


def check_assumption_5_6(P, E_tilde) -> None:
    """Raise ValueError naming the failing part of Assumption 5.6 (a: E_tilde > 0; b: distinct stacked columns)."""
    _check_model(P, E_tilde, positive=True)
    Es = stacked_emission(E_tilde, P)
    for j in range(Es.shape[1]):
        for i in range(j):
            if np.array_equal(Es[:, i], Es[:, j]):
                raise ValueError(
                    f"Assumption 5.6b fails: columns {i} and {j} of the stacked matrix eq. (29) are identical, "
                    f"so recurrent states {i} and {j} (0-based) emit alike along their whole M-step cycles"
                )


def _check_index(name: str, v, n_states: int) -> None:
    if not (isinstance(v, (int, np.integer)) and 0 <= v < n_states):
        raise ValueError(f"{name} must be a recurrent state index in [0, {n_states}), got {v!r}")


def _check_pair(n_states: int, x1: int, x: int) -> None:
    _check_index("x1", x1, n_states)
    _check_index("x", x, n_states)
    if x1 == x:
        raise ValueError(f"x must differ from x1 (both are {x1}); eq. (144) ranges over x != x1")


# --------------------------------------------------------------------------- Lambda, Gamma, d_n


def log_mgf(t, p, q):
    """Lambda(t) = log sum_y p(y)^(1+t) q(y)^(-t), y ~ p  # eq. (99)

    p, q: (S,) strictly positive distributions; t: any shape, returns the same shape.
    """
    check_distribution("p", p)
    check_distribution("q", q)
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    if np.any(p <= 0) or np.any(q <= 0):
        raise ValueError("p and q must be strictly positive (Assumption 5.6a) for Lambda to be finite on R")
    logp, logq = np.log(p), np.log(q)
    t = np.asarray(t, dtype=np.float64)
    if not np.all(np.isfinite(t)):
        raise ValueError("t must be finite")
    out = logsumexp(logp + t[..., None] * (logp - logq), axis=-1)
    return float(out) if out.ndim == 0 else out


def _pair_columns(sigma: np.ndarray, M: int, x1: int, x: int, n: int) -> tuple[int, int]:
    """(sigma^{(-n) mod M}(x1), sigma^{(-n) mod M}(x)): true state and rival at lag n  # eq. (100)"""
    s = _sigma_power(sigma, (-n) % M)
    return int(s[x1]), int(s[x])


def gamma_set(P, E_tilde, x1: int, x: int) -> list[int]:
    """Gamma(x) relative to x1: the n in {0..M-1} whose emission columns differ  # eq. (100)"""
    sigma, E, M = _check_model(P, E_tilde, positive=False)
    _check_pair(len(sigma), x1, x)
    out = []
    for n in range(M):
        a, b = _pair_columns(sigma, M, x1, x, n)
        if not np.array_equal(E[:, a], E[:, b]):
            out.append(n)
    return out


def kl_drift(P, E_tilde, x1: int, x: int, n: int) -> float:
    """d_n(x) = E[g] = KL(p_{sigma^-n(x1)} || p_{sigma^-n(x)})  # eq. (171)"""
    sigma, E, M = _check_model(P, E_tilde, positive=True)
    _check_pair(len(sigma), x1, x)
    if not (isinstance(n, (int, np.integer)) and 0 <= n < M):
        raise ValueError(f"n must be an integer in [0, M) = [0, {M}), got {n!r}")
    a, b = _pair_columns(sigma, M, x1, x, n)
    return float(np.sum(E[:, a] * (np.log(E[:, a]) - np.log(E[:, b]))))


# --------------------------------------------------------------------------- xi


def _integral_lambda_over_tau(p: np.ndarray, q: np.ndarray, upper: float) -> float:
    """int_0^upper Lambda(tau)/tau dtau, with the removable singularity at 0 (limit d = KL(p||q))."""
    g = np.log(p) - np.log(q)
    d = float(p @ g)
    var = float(p @ (g - d) ** 2)  # Lambda''(0)

    def integrand(tau: float) -> float:
        if abs(tau) < _TAU_SERIES:
            return d + 0.5 * var * tau
        return log_mgf(tau, p, q) / tau

    value, _ = quad(integrand, 0.0, upper, epsabs=1e-13, epsrel=1e-12, limit=200)
    return value


def _xi_pair(sigma, E, M, x1, x, cache: dict) -> float:
    """-(1/M) sum_{n in Gamma(x)} int_0^{-1/M} Lambda_n(tau; x)/tau dtau, inner term of eq. (144)."""
    total = 0.0
    for n in range(M):
        a, b = _pair_columns(sigma, M, x1, x, n)
        if np.array_equal(E[:, a], E[:, b]):  # n not in Gamma(x): Lambda_n = 0, eq. (101)
            continue
        if (a, b) not in cache:  # the integral depends on the column pair only
            cache[(a, b)] = _integral_lambda_over_tau(E[:, a], E[:, b], -1.0 / M)
        total += cache[(a, b)]
    return -total / M


def _xi_inputs(P, E_tilde) -> tuple[np.ndarray, np.ndarray, int]:
    """Validate Assumption 5.6 and n >= 2; return (sigma, E_tilde, M)."""
    check_assumption_5_6(P, E_tilde)
    sigma, E, M = _check_model(P, E_tilde, positive=True)
    if len(sigma) < 2:
        raise ValueError("xi needs at least two recurrent states (eq. 144 minimises over x != x1)")
    return sigma, E, M


def xi_pair(P, E_tilde, x1: int, x: int) -> float:
    """Inner term of eq. (144) for one rival x != x1 (> 0 under Assumption 5.6)."""
    sigma, E, M = _xi_inputs(P, E_tilde)
    _check_pair(len(sigma), x1, x)
    return _xi_pair(sigma, E, M, x1, x, {})


def xi_of(P, E_tilde, x1: int) -> float:
    """xi(x1) = min_{x != x1} xi_pair(x1, x)  # eq. (144)"""
    sigma, E, M = _xi_inputs(P, E_tilde)
    _check_index("x1", x1, len(sigma))
    cache: dict = {}
    return min(_xi_pair(sigma, E, M, x1, x, cache) for x in range(len(sigma)) if x != x1)


def xi(P, E_tilde) -> float:
    """xi = min_{x1} xi(x1): the supremum of admissible lambda in delta = lambda / log(1/eps)  # eq. (145)"""
    sigma, E, M = _xi_inputs(P, E_tilde)
    n, cache = len(sigma), {}
    return min(_xi_pair(sigma, E, M, x1, x, cache) for x1 in range(n) for x in range(n) if x != x1)


# --------------------------------------------------------------------------- other constants


def logit_bound_W(E_tilde, w0_tilde) -> float:
    """W = max(||w0_tilde||_inf, A_E), A_E = max_y ||log(E_tilde^T y)||_inf  # eq. (190)

    E_tilde (S, n) strictly positive; w0_tilde (n,) finite (Assumption 5.3).
    """
    E = np.asarray(E_tilde, dtype=np.float64)
    check_column_stochastic("E_tilde", E)
    if np.any(E <= 0):
        raise ValueError("Assumption 5.6a fails: E_tilde must be strictly positive for A_E to be finite")
    w0 = np.asarray(w0_tilde, dtype=np.float64)
    if w0.shape != (E.shape[1],):
        raise ValueError(f"w0_tilde must have shape ({E.shape[1]},), got {w0.shape}")
    if not np.all(np.isfinite(w0)):
        raise ValueError("w0_tilde must be finite (Assumption 5.3)")
    A_E = float(np.max(np.abs(np.log(E))))
    return max(float(np.max(np.abs(w0))), A_E)


def _check_eps(eps) -> np.ndarray:
    eps = np.asarray(eps, dtype=np.float64)
    if not np.all((eps > 0) & (eps < 1)):  # also rejects NaN
        raise ValueError(f"eps must lie in (0, 1), got {eps}")
    return eps


def _check_xi(xi_value) -> float:
    if not (np.ndim(xi_value) == 0 and np.isfinite(xi_value) and xi_value > 0):
        raise ValueError(f"xi must be a finite positive scalar, got {xi_value!r}")
    return float(xi_value)


def delta_upper_bound(eps, xi_value):
    """xi / log(1/eps): the supremum of delta = lambda / log(1/eps), lambda in (0, xi)  # eq. (34)"""
    eps, xi_value = _check_eps(eps), _check_xi(xi_value)
    out = xi_value / np.log(1.0 / eps)
    return float(out) if out.ndim == 0 else out


def lambda_is_valid(lam, xi_value):
    """True where lambda lies in (0, xi)  # eq. (34)"""
    xi_value = _check_xi(xi_value)
    lam = np.asarray(lam, dtype=np.float64)
    if not np.all(np.isfinite(lam)):
        raise ValueError(f"lambda must be finite, got {lam}")
    out = (lam > 0) & (lam < xi_value)
    return bool(out) if out.ndim == 0 else out


def q_min(D, Q) -> float:
    """q_min = min_j q_{n_j j} <= 0 for T = D + eps Q  # eq. (159), with Q as in eq. (21)

    D (N, N) deterministic (one 1 per column), Q (N, N).
    """
    D = np.asarray(D, dtype=np.float64)
    Q = np.asarray(Q, dtype=np.float64)
    if D.ndim != 2 or D.shape[0] != D.shape[1] or D.size == 0:
        raise ValueError(f"D must be a non-empty square matrix, got shape {D.shape}")
    if Q.shape != D.shape:
        raise ValueError(f"Q must have the shape of D {D.shape}, got {Q.shape}")
    if not (np.all((D == 0) | (D == 1)) and np.all(D.sum(axis=0) == 1)):
        raise ValueError("D must be deterministic (Def. 4.1): entries 0/1 with exactly one 1 per column")
    if not np.all(np.isfinite(Q)):
        raise ValueError("Q contains NaN or inf")
    n_j = np.argmax(D, axis=0)
    cols = np.arange(D.shape[1])
    diag = Q[n_j, cols]
    off = Q.copy()
    off[n_j, cols] = 0.0
    if np.any(off < 0):
        raise ValueError("Q violates eq. (21): q_ij must be >= 0 for i != n_j")
    if not np.allclose(diag, -off.sum(axis=0), rtol=0, atol=1e-9 * max(1.0, np.abs(Q).max())):
        raise ValueError("Q violates eq. (21): q_{n_j j} must equal -sum_{i != n_j} q_ij (columns sum to 0)")
    return float(diag.min())


def irregular_jump_bound(eps, T_eps, qmin):
    """(T_eps + 1) eps (-q_min): bound on P[IrJ in [k - T_eps, k]]  # eq. (165)

    Requires eps <= -1/q_min (eq. 163), which holds whenever T = D + eps Q is a valid transition matrix.
    """
    eps = _check_eps(eps)
    T_eps = np.asarray(T_eps, dtype=np.float64)
    if not np.all(np.isfinite(T_eps) & (T_eps >= 0)):
        raise ValueError(f"T_eps must be finite and >= 0, got {T_eps}")
    if not (np.ndim(qmin) == 0 and np.isfinite(qmin) and qmin <= 0):
        raise ValueError(f"q_min must be a finite scalar <= 0 (eq. 159), got {qmin!r}")
    if np.any(eps * -qmin > 1):
        raise ValueError(f"eq. (163) fails: eps must be <= -1/q_min = {-1 / qmin:.6g}, "
                         "else D + eps Q is not stochastic")
    out = (T_eps + 1.0) * eps * (-qmin)
    return float(out) if out.ndim == 0 else out

"""Structure of deterministic and nearly-deterministic transition matrices (paper 1, Sec. 4-5).

NumPy analyses of given matrices, column convention T[i, j] = P(next = i | current = j):

* ``is_deterministic`` / ``is_permutation``      Def. 4.1 (columns are canonical basis vectors).
* ``decompose_deterministic``                    Lemma 4.2: transient/recurrent split, eq. (13) or eq. (22).
* ``NearlyDeterministic``, ``split_nearly_deterministic``   Def. 5.1, T = D + eps Q, eq. (20)-(21).
* ``permutation_order``, ``stacked_emission``    Def. 5.4 / Lemma 5.5, eq. (29).
* ``check_observability`` / ``check_observability_controlled``   Assumptions 5.6 and 5.8.

A deterministic T is a map j -> n_j (the row of the 1 in column j; ``successors``).
Recurrent states are the states on a cycle of this map, transient states all others.
Matrix entries are compared exactly (0/1 for D, P; column equality in Assumption 5.6b),
as in the paper: nearly equal is not equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from memlab.checks import check_column_stochastic

Q_ATOL = 1e-9  # relative tolerance for q_{n_j j} = -sum_{i != n_j} q_ij, eq. (21)


def _square(name: str, T) -> np.ndarray:
    T = np.asarray(T, dtype=np.float64)
    if T.ndim != 2 or T.shape[0] != T.shape[1] or T.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty square matrix (N, N), got shape {T.shape}")
    if not np.all(np.isfinite(T)):
        raise ValueError(f"{name} contains NaN or inf")
    return T


def is_deterministic(T) -> bool:
    """Def. 4.1: every column of T (N, N) is a canonical basis vector, eq. (12)."""
    T = _square("T", T)
    return bool(np.all((T == 0) | (T == 1)) and np.all(T.sum(axis=0) == 1))


def is_permutation(T) -> bool:
    """T (N, N) is deterministic and every row also holds exactly one 1."""
    return is_deterministic(T) and bool(np.all(np.asarray(T).sum(axis=1) == 1))


def successors(T) -> np.ndarray:
    """n_j of Def. 5.1 for a deterministic T (N, N): (N,) int with T[n_j, j] = 1."""
    T = _square("T", T)
    if not is_deterministic(T):
        raise ValueError("T must be deterministic (Def. 4.1): entries exactly 0/1, one 1 per column")
    return np.argmax(T, axis=0)


def permutation_order(P) -> int:
    """Order M of the permutation matrix P (n, n): lcm of its cycle lengths (Def. 5.4, Lemma 5.5)."""
    if not is_permutation(P):
        raise ValueError("P must be a permutation matrix: entries 0/1, exactly one 1 in every row and column")
    sigma, seen, M = successors(P), np.zeros(len(P), dtype=bool), 1
    for start in range(len(sigma)):
        length, j = 0, start
        while not seen[j]:
            seen[j], j, length = True, sigma[j], length + 1
        M = math.lcm(M, max(length, 1))
    return M


# --------------------------------------------------------------------------- Lemma 4.2


@dataclass(frozen=True, eq=False)
class DeterministicDecomposition:
    """Lemma 4.2 for a deterministic T (N, N); all index arrays use the ORIGINAL labels.

    ``order`` (N,)        new label i is old state order[i]; ``relabelled = T[order][:, order]
                          = Pm^T T Pm`` with Pm = I[:, order] (``permutation_matrix``).
    ``form``              "transient-first": relabelled = [[T11, 0], [T21, P]]      eq. (13)
                          "recurrent-first": relabelled = [[P, D12], [0, D22]]      eq. (22)-(23)
    ``r``, ``ell``        number of transient states; nilpotent index of T11, the smallest
                          ell >= 1 with T11^ell = 0. It equals the longest run of transient
                          states (max number of steps from a transient state into the
                          recurrent set), and ell = 1 when r = 0 (Remark 4.3).
    ``T11`` (r, r)        transient -> transient, strictly lower triangular (transient states
                          in topological order: a state's successor comes later).
    ``T21`` (N-r, r)      transient -> recurrent.   ``P`` (N-r, N-r) recurrent permutation block.
    ``transient`` (N,)    bool mask of transient states; ``successor`` (N,) the map j -> n_j.

    Both forms use the same order inside each group, so the blocks are the same
    matrices and only move: D22 = T11 (nilpotent with index ell), D12 = T21.
    Recurrent states keep their original relative order (P is then not necessarily
    block diagonal by cycles as drawn in eq. (56)).
    """

    form: str
    order: np.ndarray
    r: int
    ell: int
    transient: np.ndarray
    successor: np.ndarray
    relabelled: np.ndarray
    T11: np.ndarray
    T21: np.ndarray
    P: np.ndarray

    @property
    def D22(self) -> np.ndarray:
        return self.T11

    @property
    def D12(self) -> np.ndarray:
        return self.T21

    @property
    def recurrent_states(self) -> np.ndarray:
        """Original labels of the recurrent states, in the order of the rows of P."""
        return np.flatnonzero(~self.transient)

    @property
    def permutation_matrix(self) -> np.ndarray:
        """Pm (N, N) with relabelled = Pm^T T Pm."""
        return np.eye(len(self.order))[:, self.order]

    @property
    def T_prime_index(self) -> np.ndarray:
        """(N,) int: (T' w)[i] = w[T_prime_index[i]] in ORIGINAL labels, T' = blockdiag(I_r, P) eq. (15).

        Transient states keep their own entry; a recurrent state i takes the entry of its
        predecessor sigma^{-1}(i). The same map is blockdiag(P, I_r) of the ALF, eq. (24).
        """
        src = np.arange(len(self.order))
        rec = self.recurrent_states
        src[self.successor[rec]] = rec
        return src

    @property
    def T_prime(self) -> np.ndarray:
        """T' (N, N) in original labels (a permutation matrix)."""
        N = len(self.order)
        Tp = np.zeros((N, N))
        Tp[np.arange(N), self.T_prime_index] = 1.0
        return Tp


def decompose_deterministic(T, form: str = "transient-first") -> DeterministicDecomposition:
    """Lemma 4.2: split a deterministic T (N, N) into transient and recurrent states."""
    if form not in ("transient-first", "recurrent-first"):
        raise ValueError(f"form must be 'transient-first' or 'recurrent-first', got {form!r}")
    T = _square("T", T)
    f = successors(T)
    N = len(f)
    image = np.arange(N)
    for _ in range(N):  # f^N maps every state onto a cycle
        image = f[image]
    transient = np.ones(N, dtype=bool)
    transient[image] = False
    height = np.zeros(N, dtype=int)  # steps to reach the recurrent set
    for _ in range(N):
        height = np.where(transient, 1 + height[f], 0)
    trans = np.flatnonzero(transient)
    trans = trans[np.argsort(-height[trans], kind="stable")]  # successors later -> T11 strictly lower
    rec = np.flatnonzero(~transient)
    r = len(trans)
    order = np.concatenate([trans, rec] if form == "transient-first" else [rec, trans])
    return DeterministicDecomposition(
        form=form, order=order, r=r, ell=max(1, int(height.max())),
        transient=transient, successor=f, relabelled=T[order][:, order],
        T11=T[trans][:, trans], T21=T[rec][:, trans], P=T[rec][:, rec],
    )


# --------------------------------------------------------------------------- Def. 5.1


def _check_eps(eps) -> float:
    if not (np.ndim(eps) == 0 and np.isfinite(eps) and 0 < eps < 1):
        raise ValueError(f"eps must be a scalar with 0 < eps < 1 (Def. 5.1), got {eps!r}")
    return float(eps)


@dataclass(frozen=True, eq=False)
class NearlyDeterministic:
    """T = D + eps Q (N, N), eq. (20); validated on construction.

    D deterministic (Def. 4.1); Q satisfies eq. (21): q_ij >= 0 for i != n_j and
    q_{n_j j} = -sum_{i != n_j} q_ij; 0 < eps < 1; and T column-stochastic, which
    (21) alone does not give: it also needs eps * sum_{i != n_j} q_ij <= 1.
    """

    D: np.ndarray
    Q: np.ndarray
    eps: float

    def __post_init__(self):
        D, Q = _square("D", self.D), _square("Q", self.Q)
        if Q.shape != D.shape:
            raise ValueError(f"Q must have the shape of D {D.shape}, got {Q.shape}")
        n = successors(D)  # raises unless D is deterministic
        eps = _check_eps(self.eps)
        cols = np.arange(len(n))
        off = Q.copy()
        off[n, cols] = 0.0
        if np.any(off < 0):
            i, j = np.argwhere(off < 0)[0]
            raise ValueError(f"Q violates eq. (21): q_ij must be >= 0 for i != n_j, got Q[{i}, {j}] = {Q[i, j]:.3g}")
        bad = np.abs(Q[n, cols] + off.sum(axis=0)) > Q_ATOL * max(1.0, np.abs(Q).max())
        if np.any(bad):
            j = np.flatnonzero(bad)[0]
            raise ValueError(f"Q violates eq. (21): column {j} must sum to 0 (q_(n_j j) = -sum of the others)")
        check_column_stochastic("T = D + eps Q", D + eps * Q)
        for name, value in (("D", D), ("Q", Q), ("eps", eps)):
            object.__setattr__(self, name, value)

    @property
    def T(self) -> np.ndarray:
        return self.D + self.eps * self.Q


def split_nearly_deterministic(T, eps) -> NearlyDeterministic:
    """Def. 5.1 from T (N, N): D from the column argmax n_j, Q = (T - D) / eps.

    A column whose largest entry is not unique leaves D ambiguous: ValueError.
    """
    T = _square("T", T)
    check_column_stochastic("T", T)
    eps = _check_eps(eps)
    n = np.argmax(T, axis=0)
    ties = np.sum(T == T.max(axis=0), axis=0) > 1
    if np.any(ties):
        raise ValueError(f"column {np.flatnonzero(ties)[0]} of T has no unique largest entry, so D is ambiguous")
    D = np.zeros_like(T)
    D[n, np.arange(len(n))] = 1.0
    return NearlyDeterministic(D, (T - D) / eps, eps)


# --------------------------------------------------------------------------- Assumptions 5.6, 5.8


def stacked_emission(E_tilde, P) -> np.ndarray:
    """[E_tilde P^0; ...; E_tilde P^(M-1)], shape (S M, n) for E_tilde (S, n), P (n, n), eq. (29)."""
    E_tilde = np.asarray(E_tilde, dtype=np.float64)
    M = permutation_order(P)
    if E_tilde.ndim != 2 or E_tilde.shape[1] != len(P):
        raise ValueError(f"E_tilde must have shape (S, {len(P)}) to match P, got {E_tilde.shape}")
    sigma, idx, blocks = successors(P), np.arange(len(P)), []
    for _ in range(M):
        blocks.append(E_tilde[:, idx])  # (E_tilde P^m)[:, j] = E_tilde[:, sigma^m(j)]
        idx = sigma[idx]
    return np.concatenate(blocks, axis=0)


@dataclass(frozen=True)
class ObservabilityReport:
    """Outcome of Assumption 5.6 (or 5.8); states are ORIGINAL labels.

    ``nonpositive_states``  recurrent states whose emission column has a zero (part a).
    ``identical_pairs``     pairs (i, j), i < j, with identical columns of the stacked
                            matrix eq. (29) (5.6b) or of E (5.8).
    ``w0_finite``           Assumption 5.8.1 (True when no w0 was given or for 5.6).
    ``M``                   order of the recurrent permutation (None for 5.8).
    """

    assumption: str
    nonpositive_states: tuple
    identical_pairs: tuple
    w0_finite: bool = True
    M: int | None = None

    @property
    def holds(self) -> bool:
        return not self.nonpositive_states and not self.identical_pairs and self.w0_finite

    @property
    def reasons(self) -> list[str]:
        out = []
        if self.nonpositive_states:
            out.append(f"({self.assumption} a) emission columns of states {list(self.nonpositive_states)} "
                       "have zero entries; they must be strictly positive")
        if self.identical_pairs:
            what = "E" if self.assumption == "5.8" else f"the stacked matrix eq. (29) (M = {self.M})"
            out.append(f"({self.assumption} b) states {list(self.identical_pairs)} have identical columns of {what}")
        if not self.w0_finite:
            out.append("(5.8.1) w0 has non-finite entries")
        return out


def _check_emission(E, N: int) -> np.ndarray:
    E = np.asarray(E, dtype=np.float64)
    if E.ndim != 2 or E.shape[1] != N:
        raise ValueError(f"E must have shape (S, N) = (S, {N}), got {E.shape}")
    check_column_stochastic("E", E)
    return E


def _identical_pairs(A: np.ndarray, labels: np.ndarray) -> tuple:
    n = A.shape[1]  # labels are increasing, so each pair comes out as (smaller, larger)
    return tuple((int(labels[i]), int(labels[j])) for i in range(n) for j in range(i + 1, n)
                 if np.array_equal(A[:, i], A[:, j]))


def check_observability(E, D) -> ObservabilityReport:
    """Assumption 5.6 for E (S, N) and deterministic backbone D (N, N), in D's recurrent-first labels eq. (23).

    (a) E_tilde = E on the recurrent states is strictly positive; (b) the stacked
    matrix eq. (29) of (E_tilde, P) has no two identical columns. Transient states are free.
    """
    dec = decompose_deterministic(D, form="recurrent-first")
    E = _check_emission(E, len(dec.order))
    rec = dec.recurrent_states
    E_tilde = E[:, rec]  # eq. (28)
    bad = rec[np.any(E_tilde <= 0, axis=0)]
    pairs = _identical_pairs(stacked_emission(E_tilde, dec.P), rec)
    return ObservabilityReport("5.6", tuple(int(s) for s in bad), pairs, M=permutation_order(dec.P))


def check_observability_controlled(E, w0=None) -> ObservabilityReport:
    """Assumption 5.8 for E (S, N) and optional w0 (N,): w0 finite, E > 0, no two identical columns."""
    E = np.asarray(E, dtype=np.float64)
    if E.ndim != 2:
        raise ValueError(f"E must have shape (S, N), got {E.shape}")
    E = _check_emission(E, E.shape[1])
    finite = True
    if w0 is not None:
        w0 = np.asarray(w0, dtype=np.float64)
        if w0.shape != (E.shape[1],):
            raise ValueError(f"w0 must have shape ({E.shape[1]},), got {w0.shape}")
        finite = bool(np.all(np.isfinite(w0)))
    states = np.arange(E.shape[1])
    bad = states[np.any(E <= 0, axis=0)]
    return ObservabilityReport("5.8", tuple(int(s) for s in bad), _identical_pairs(E, states), w0_finite=finite)

"""Random model generators (NumPy, column convention) for tests, experiments and benchmarks."""

from __future__ import annotations

import numpy as np


def random_deterministic(rng: np.random.Generator, N: int, r: int, chain: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic T (N, N) (Def. 4.1) with exactly r transient states, ``chain`` of them in a
    row (so the nilpotent index ell >= chain), and random labels. Returns (T, transient mask (N,))."""
    if not (0 <= r < N and 1 <= chain <= max(r, 1)):
        raise ValueError(f"need 0 <= r < N and 1 <= chain <= max(r, 1), got N={N}, r={r}, chain={chain}")
    labels = rng.permutation(N)
    rec, trans = labels[: N - r], labels[N - r:]
    f = np.empty(N, dtype=int)
    f[rec] = rng.permutation(rec)  # a random permutation of the recurrent states
    for i, s in enumerate(trans):  # a transient state points to a recurrent or an earlier transient state
        f[s] = trans[i - 1] if 0 < i < chain else rng.choice(np.concatenate([rec, trans[:i]]))
    T = np.zeros((N, N))
    T[f, np.arange(N)] = 1.0
    mask = np.zeros(N, dtype=bool)
    mask[trans] = True
    return T, mask


def random_permutation(rng: np.random.Generator, N: int) -> np.ndarray:
    """A uniformly random N x N permutation matrix."""
    return np.eye(N)[:, rng.permutation(N)]


def random_columns(rng: np.random.Generator, rows: int, cols: int, zero_frac: float = 0.0) -> np.ndarray:
    """Column-stochastic (rows, cols) with Dirichlet(1) columns; about ``zero_frac`` of the entries
    set to 0 (never a whole column)."""
    M = rng.dirichlet(np.ones(rows), size=cols).T
    if zero_frac:
        M = M * (rng.random(M.shape) >= zero_frac)
        empty = M.sum(axis=0) == 0
        M[rng.integers(rows, size=empty.sum()), np.flatnonzero(empty)] = 1.0
        M = M / M.sum(axis=0)
    return M


def simulate_observations(rng: np.random.Generator, T, E, pi0, K: int, actions=None) -> np.ndarray:
    """Observations y_1..y_K (K,) of an HMM (T (N, N)) or controlled HMM (T (A, N, N), actions (K,)),
    drawn state by state in plain NumPy: a reference sampler independent of ``hmm.sample``."""
    T, E, pi0 = np.asarray(T), np.asarray(E), np.asarray(pi0)
    x, ys = rng.choice(len(pi0), p=pi0), []
    for k in range(K):
        Tk = T if actions is None else T[actions[k]]
        x = rng.choice(len(pi0), p=Tk[:, x])
        ys.append(rng.choice(E.shape[0], p=E[:, x]))
    return np.array(ys)

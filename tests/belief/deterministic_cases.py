"""Random test instances shared by test_structure.py and test_exact_linear.py (NumPy, column convention)."""

import numpy as np


def random_deterministic(rng, N, r, chain=1):
    """Deterministic T (N, N) with exactly r transient states, a chain of `chain` of them
    (so ell >= chain), and random labels. Returns (T, transient mask)."""
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


def random_permutation(rng, N):
    return np.eye(N)[:, rng.permutation(N)]


def random_columns(rng, rows, cols, zero_frac=0.0):
    """Column-stochastic (rows, cols); about zero_frac of the entries set to 0 (never a whole column)."""
    M = rng.dirichlet(np.ones(rows), size=cols).T
    if zero_frac:
        M = M * (rng.random(M.shape) >= zero_frac)
        empty = M.sum(axis=0) == 0
        M[rng.integers(rows, size=empty.sum()), np.flatnonzero(empty)] = 1.0
        M = M / M.sum(axis=0)
    return M

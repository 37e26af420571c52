"""Lemma 4.2, Def. 5.1, Def. 5.4 / Lemma 5.5, eq. (29), Assumptions 5.6 and 5.8."""

import itertools
import math

import numpy as np
import pytest

from memlab.belief import random_models as cases
from memlab.belief.structure import (
    NearlyDeterministic,
    check_observability,
    check_observability_controlled,
    decompose_deterministic,
    is_deterministic,
    is_permutation,
    permutation_order,
    split_nearly_deterministic,
    stacked_emission,
)

random_columns, random_deterministic, random_permutation = cases.random_columns, cases.random_deterministic, \
    cases.random_permutation

CASES = [(1, 0, 1), (4, 0, 1), (5, 2, 1), (6, 3, 3), (8, 5, 4), (10, 6, 6), (12, 4, 2)]  # (N, r, chain)


def _recurrent_by_powers(T):
    """Independent reference: j is recurrent iff (T^m)[j, j] = 1 for some 1 <= m <= N."""
    N, Tm, rec = len(T), np.eye(len(T)), np.zeros(len(T), dtype=bool)
    for _ in range(N):
        Tm = T @ Tm
        rec |= np.diag(Tm) == 1
    return rec


# --------------------------------------------------------------------------- Def. 4.1


def test_is_deterministic_and_permutation():
    assert is_deterministic(np.eye(3)) and is_permutation(np.eye(3))
    T = np.array([[1, 1, 0], [0, 0, 1], [0, 0, 0.0]])
    assert is_deterministic(T) and not is_permutation(T)
    assert not is_deterministic(np.array([[0.5, 0], [0.5, 1]]))
    assert not is_deterministic(np.array([[1, 1], [1, 0.0]]))  # a column with two ones
    assert not is_deterministic(np.array([[1 - 1e-12, 0], [0, 1]]))  # exact 0/1 only


@pytest.mark.parametrize("bad", [np.ones((2, 3)), np.ones(3), np.zeros((0, 0)), np.array([[np.nan, 0], [1, 1]])])
def test_is_deterministic_rejects_bad_shapes(bad):
    with pytest.raises(ValueError):
        is_deterministic(bad)


# --------------------------------------------------------------------------- Lemma 4.2


@pytest.mark.parametrize("N,r,chain", CASES)
@pytest.mark.parametrize("seed", range(5))
def test_decomposition_properties(N, r, chain, seed):
    rng = np.random.default_rng(seed)
    T, transient = random_deterministic(rng, N, r, chain)
    dec = decompose_deterministic(T)
    assert dec.r == r and np.array_equal(dec.transient, transient)
    assert np.array_equal(~dec.transient, _recurrent_by_powers(T))
    assert sorted(dec.order) == list(range(N)) and np.all(dec.transient[dec.order[:r]])
    Pm = dec.permutation_matrix
    assert np.array_equal(dec.relabelled, Pm.T @ T @ Pm)
    assert np.array_equal(dec.relabelled[:r, :r], dec.T11) and np.array_equal(dec.relabelled[r:, :r], dec.T21)
    assert np.array_equal(dec.relabelled[r:, r:], dec.P) and not dec.relabelled[:r, r:].any()  # eq. (13)
    assert is_permutation(dec.P)
    assert np.array_equal(dec.T11, np.tril(dec.T11, -1))  # strictly lower triangular
    assert dec.ell >= chain and dec.ell <= max(r, 1)
    if r:
        assert dec.T21.any()
        assert not np.linalg.matrix_power(dec.T11, dec.ell).any()
        assert np.linalg.matrix_power(dec.T11, dec.ell - 1).any()
    else:
        assert dec.ell == 1  # Remark 4.3
    # T' = blockdiag(I_r, P), eq. (15), in original labels
    blk = np.block([[np.eye(r), np.zeros((r, N - r))], [np.zeros((N - r, r)), dec.P]])
    assert np.array_equal(Pm.T @ dec.T_prime @ Pm, blk)
    w = rng.normal(size=N)
    assert np.allclose(w[dec.T_prime_index], dec.T_prime @ w)


@pytest.mark.parametrize("N,r,chain", CASES)
def test_recurrent_first_form(N, r, chain):
    rng = np.random.default_rng(N)
    T, transient = random_deterministic(rng, N, r, chain)
    a, b = decompose_deterministic(T), decompose_deterministic(T, form="recurrent-first")
    n = N - r
    assert np.array_equal(b.relabelled, b.permutation_matrix.T @ T @ b.permutation_matrix)
    assert np.array_equal(b.relabelled[:n, :n], b.P) and not b.relabelled[n:, :n].any()  # eq. (22)
    assert np.array_equal(b.relabelled[:n, n:], b.D12) and np.array_equal(b.relabelled[n:, n:], b.D22)
    assert not np.linalg.matrix_power(b.D22, b.ell).any()
    assert not np.any(b.transient[b.order[:n]])  # eq. (23): recurrent states first
    for name in ("T11", "T21", "P", "transient", "successor", "T_prime_index"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert a.ell == b.ell and a.r == b.r


def test_decomposition_of_a_known_chain():
    # 0 -> 1 -> 2 -> 3, 3 <-> 4 is a 2-cycle: transient {0, 1, 2}, ell = 3
    T = np.zeros((5, 5))
    T[[1, 2, 3, 4, 3], range(5)] = 1
    dec = decompose_deterministic(T)
    assert dec.r == 3 and dec.ell == 3 and list(dec.order) == [0, 1, 2, 3, 4]
    assert np.array_equal(dec.P, [[0, 1], [1, 0]])
    assert list(dec.T_prime_index) == [0, 1, 2, 4, 3]


def test_decompose_rejects():
    with pytest.raises(ValueError, match="deterministic"):
        decompose_deterministic(np.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="square"):
        decompose_deterministic(np.eye(3)[:2])
    with pytest.raises(ValueError, match="form"):
        decompose_deterministic(np.eye(2), form="upper")


# --------------------------------------------------------------------------- Def. 5.1


@pytest.mark.parametrize("seed", range(5))
def test_split_recovers_D_and_Q(seed):
    rng = np.random.default_rng(seed)
    N, eps = 6, 0.03
    D, _ = random_deterministic(rng, N, 2, 2)
    Q = rng.random((N, N)) * (1 - D)  # off-n_j entries >= 0
    Q -= D * Q.sum(axis=0)  # q_{n_j j} = -sum of the others, eq. (21)
    nd = NearlyDeterministic(D, Q, eps)
    assert np.allclose(nd.T, D + eps * Q) and np.allclose(nd.T.sum(axis=0), 1)
    back = split_nearly_deterministic(nd.T, eps)
    assert np.array_equal(back.D, D) and np.allclose(back.Q, Q, atol=1e-12) and back.eps == eps
    assert np.allclose(split_nearly_deterministic(nd.T, 0.5).Q, Q * eps / 0.5)


def _valid_DQ():
    D = np.array([[0, 1.0], [1, 0]])
    Q = np.array([[1.0, -2.0], [-1.0, 2.0]])
    return D, Q


def test_nearly_deterministic_accepts_valid():
    D, Q = _valid_DQ()
    assert np.allclose(NearlyDeterministic(D, Q, 0.1).T, [[0.1, 0.8], [0.9, 0.2]])


@pytest.mark.parametrize("eps", [0.0, 1.0, -0.1, np.nan, np.inf, np.array([0.1, 0.2])])
def test_bad_eps(eps):
    D, Q = _valid_DQ()
    with pytest.raises(ValueError, match="eps"):
        NearlyDeterministic(D, Q, eps)
    with pytest.raises(ValueError, match="eps"):
        split_nearly_deterministic(np.array([[0.9, 0.2], [0.1, 0.8]]), eps)


def test_nearly_deterministic_rejects():
    D, Q = _valid_DQ()
    with pytest.raises(ValueError, match=r"eq. \(21\).*>= 0"):
        NearlyDeterministic(D, np.array([[-1.0, -2.0], [1.0, 2.0]]), 0.1)  # q_00 < 0, n_0 = 1
    with pytest.raises(ValueError, match=r"eq. \(21\).*sum to 0"):
        NearlyDeterministic(D, np.array([[1.0, -1.0], [-0.5, 2.0]]), 0.1)
    with pytest.raises(ValueError, match="column-stochastic|negative"):
        NearlyDeterministic(D, 20 * Q, 0.1)  # (21) holds but 1 - eps * 20 * 2 < 0
    with pytest.raises(ValueError, match="deterministic"):
        NearlyDeterministic(np.full((2, 2), 0.5), Q, 0.1)
    with pytest.raises(ValueError, match="shape"):
        NearlyDeterministic(D, np.zeros((3, 3)), 0.1)


def test_split_rejects():
    with pytest.raises(ValueError, match="column-stochastic"):
        split_nearly_deterministic(np.array([[0.9, 0.2], [0.2, 0.8]]), 0.1)
    with pytest.raises(ValueError, match="unique largest"):
        split_nearly_deterministic(np.array([[0.5, 0.2], [0.5, 0.8]]), 0.1)
    with pytest.raises(ValueError, match="square"):
        split_nearly_deterministic(np.ones((2, 3)) / 2, 0.1)


# --------------------------------------------------------------------------- Def. 5.4, eq. (29)


def _order_brute_force(P):
    Pm, M = P.copy(), 1
    while not np.array_equal(Pm, np.eye(len(P))):
        Pm, M = P @ Pm, M + 1
    return M


@pytest.mark.parametrize("seed", range(20))
def test_permutation_order_vs_brute_force(seed):
    rng = np.random.default_rng(seed)
    P = random_permutation(rng, int(rng.integers(1, 12)))
    assert permutation_order(P) == _order_brute_force(P)


def test_permutation_order_known_and_rejects():
    cyc = lambda n: np.roll(np.eye(n), 1, axis=0)  # noqa: E731
    P = np.block([[cyc(2), np.zeros((2, 3))], [np.zeros((3, 2)), cyc(3)]])
    assert permutation_order(P) == 6 == math.lcm(2, 3)
    assert permutation_order(np.eye(4)) == 1
    with pytest.raises(ValueError, match="permutation"):
        permutation_order(np.array([[1, 1], [0, 0.0]]))


EX1_P = np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0.0]])  # eq. (50)
EX1_E = np.array([[0.5, 0.8, 0.5, 0.2], [0.5, 0.2, 0.5, 0.8]])
EX1_ES = np.array([[0.5, 0.8, 0.5, 0.2], [0.5, 0.2, 0.5, 0.8], [0.8, 0.5, 0.2, 0.5], [0.2, 0.5, 0.8, 0.5]])  # eq. (51)


def test_example_1_stacked_emission():
    assert np.array_equal(stacked_emission(EX1_E, EX1_P), EX1_ES)


@pytest.mark.parametrize("seed", range(5))
def test_stacked_emission_vs_matrix_powers(seed):
    rng = np.random.default_rng(seed)
    P, E = random_permutation(rng, 5), random_columns(rng, 3, 5)
    M = permutation_order(P)
    ref = np.concatenate([E @ np.linalg.matrix_power(P, m) for m in range(M)])
    assert stacked_emission(E, P).shape == (3 * M, 5) and np.allclose(stacked_emission(E, P), ref)


def test_stacked_emission_rejects():
    with pytest.raises(ValueError, match="shape"):
        stacked_emission(EX1_E[:, :3], EX1_P)
    with pytest.raises(ValueError, match="permutation"):
        stacked_emission(EX1_E, np.ones((4, 4)) / 4)


# --------------------------------------------------------------------------- Assumptions 5.6, 5.8


def test_example_1_passes_assumption_5_6():
    assert np.array_equal(EX1_E[:, 0], EX1_E[:, 2])  # identical columns x1, x3 in E_tilde
    rep = check_observability(EX1_E, EX1_P)
    assert rep.holds and rep.M == 2 and not rep.reasons
    assert not check_observability_controlled(EX1_E).holds  # Assumption 5.8 is stricter


def test_assumption_5_6_with_transient_states_and_labels():
    # states 0, 1 transient (0 -> 1 -> 2), recurrent 2..5 carry Example 1 under a relabelling;
    # transient columns may be zero / duplicated (Appendix A.1)
    D = np.zeros((6, 6))
    D[[1, 2, 3, 2, 5, 4], range(6)] = 1
    E = np.column_stack([[1.0, 0.0], [0.5, 0.5], EX1_E])
    rep = check_observability(E, D)
    assert rep.holds and rep.M == 2


def test_assumption_5_6_failures_name_the_reason():
    E = EX1_E.copy()
    E[:, 1] = [1.0, 0.0]
    rep = check_observability(E, EX1_P)
    assert not rep.holds and rep.nonpositive_states == (1,) and "5.6 a" in rep.reasons[0]
    rep = check_observability(EX1_E, np.eye(4))  # M = 1: the stacked matrix is E, x1 = x3
    assert not rep.holds and rep.identical_pairs == ((0, 2),) and "5.6 b" in rep.reasons[0]
    cyc = np.roll(np.eye(2), 1, axis=0)
    E2 = np.array([[0.3, 0.7, 0.3, 0.7], [0.7, 0.3, 0.7, 0.3]])  # two 2-cycles with the same emissions
    P2 = np.block([[cyc, np.zeros((2, 2))], [np.zeros((2, 2)), cyc]])
    rep = check_observability(E2, P2)
    assert rep.identical_pairs == ((0, 2), (1, 3)) and not rep.holds


def test_assumption_5_8():
    rng = np.random.default_rng(0)
    E = random_columns(rng, 3, 4)
    assert check_observability_controlled(E, np.zeros(4)).holds
    rep = check_observability_controlled(E, np.array([0, -np.inf, 0, 0]))
    assert not rep.holds and not rep.w0_finite and "5.8.1" in rep.reasons[0]
    E[:, 3] = E[:, 1]
    assert check_observability_controlled(E).identical_pairs == ((1, 3),)
    E[:, 0] = [1, 0, 0]
    assert check_observability_controlled(E).nonpositive_states == (0,)


def test_observability_rejects():
    with pytest.raises(ValueError, match="shape"):
        check_observability(EX1_E[:, :3], EX1_P)
    with pytest.raises(ValueError, match="column-stochastic"):
        check_observability(2 * EX1_E, EX1_P)
    with pytest.raises(ValueError, match="deterministic"):
        check_observability(EX1_E, np.full((4, 4), 0.25))
    with pytest.raises(ValueError, match="w0"):
        check_observability_controlled(EX1_E, np.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        check_observability_controlled(np.ones(3))


def _nilpotent_index(A):
    """Smallest k >= 1 with A^k = 0 (1 for the empty matrix)."""
    k = 1
    while np.linalg.matrix_power(A, k).any():
        k += 1
    return k


def test_all_3_state_deterministic_matrices():
    for cols in itertools.product(range(3), repeat=3):
        T = np.zeros((3, 3))
        T[list(cols), range(3)] = 1
        dec = decompose_deterministic(T)
        assert np.array_equal(~dec.transient, _recurrent_by_powers(T))
        assert dec.ell == _nilpotent_index(dec.T11)

"""Tests of memlab.belief.theory against independent references (paper 1, Sec. 5.1, App. D).

The independent references here use matrix powers of P (not sigma index arrays),
the plain formula log sum p^(1+t) q^(-t) (not logsumexp) and Gauss-Legendre
quadrature (not scipy.integrate.quad).
"""


import numpy as np
import pytest

from memlab.belief import theory as th
from memlab.belief.structure import permutation_order, stacked_emission

P2 = np.array([[0, 1], [1, 0]])
E2 = np.array([[0.9, 0.1], [0.1, 0.9]])  # eq. (47)
P_EX1 = np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]])  # eq. (50)
E_EX1 = np.array([[0.5, 0.8, 0.5, 0.2], [0.5, 0.2, 0.5, 0.8]])


def _perm_matrix(sigma):
    """P[sigma[j], j] = 1."""
    P = np.zeros((len(sigma), len(sigma)), dtype=int)
    P[sigma, np.arange(len(sigma))] = 1
    return P


def _random_model(rng, n, S):
    sigma = rng.permutation(n)
    E = rng.dirichlet(np.ones(S), size=n).T  # (S, n), generic -> Assumption 5.6 holds
    return _perm_matrix(sigma), E


def _gl_integral(f, a, b, nodes=80):
    """Gauss-Legendre quadrature of f on [a, b] (nodes are interior, so tau = 0 is never hit)."""
    x, w = np.polynomial.legendre.leggauss(nodes)
    tau = 0.5 * (b - a) * x + 0.5 * (b + a)
    return 0.5 * (b - a) * np.sum(w * f(tau))


def _ref_lambda(tau, p, q):
    tau = np.asarray(tau, dtype=float)[..., None]
    return np.log(np.sum(p ** (1 + tau) * q ** (-tau), axis=-1))


def _ref_xi_pair(P, E, x1, x):
    """Eq. (144) inner term via matrix powers: the column of sigma^{-n}(z) is E (P^T)^n u_z."""
    n_states = P.shape[0]
    M = next(m for m in range(1, 10_000) if np.array_equal(np.linalg.matrix_power(P, m), np.eye(n_states)))
    total = 0.0
    for n in range(M):
        back = np.linalg.matrix_power(P.T, n)
        p, q = E @ back[:, x1], E @ back[:, x]
        if not np.allclose(p, q, rtol=0, atol=0):
            total += _gl_integral(lambda t, p=p, q=q: _ref_lambda(t, p, q) / t, 0.0, -1.0 / M)
    return -total / M


# --------------------------------------------------------------------------- xi


def test_two_state_xi_matches_paper_and_direct_integral():
    # eq. (150): xi = -int_0^{-1/2} log(0.9 e^{t log 9} + 0.1 e^{-t log 9}) / t dt ~ 0.7206
    def closed(t):
        return np.log(0.9 * np.exp(t * np.log(9)) + 0.1 * np.exp(-t * np.log(9))) / t

    direct = -_gl_integral(closed, 0.0, -0.5)
    value = th.xi(P2, E2)
    assert value == pytest.approx(direct, abs=1e-8)
    assert value == pytest.approx(0.7206, abs=5e-5)
    # eq. (149b): by symmetry xi = -int Lambda_0, i.e. both lags contribute equally
    assert th.xi_pair(P2, E2, 0, 1) == pytest.approx(value, abs=1e-12)


def test_xi_pair_matches_matrix_power_reference():
    rng = np.random.default_rng(0)
    sigma = np.array([1, 2, 0, 4, 3])  # a 3-cycle and a 2-cycle, M = 6
    P = _perm_matrix(sigma)
    E = rng.dirichlet(np.ones(3), size=5).T
    for x1, x in [(0, 1), (0, 3), (3, 4), (4, 2)]:
        assert th.xi_pair(P, E, x1, x) == pytest.approx(_ref_xi_pair(P, E, x1, x), abs=1e-9)


def test_xi_is_min_over_rivals_and_over_x1():
    rng = np.random.default_rng(1)
    P = _perm_matrix(np.array([1, 2, 0]))
    E = rng.dirichlet(np.ones(3), size=3).T
    pairs = {(x1, x): th.xi_pair(P, E, x1, x) for x1 in range(3) for x in range(3) if x != x1}
    assert len({round(v, 10) for v in pairs.values()}) > 1  # not trivially symmetric
    per_x1 = [th.xi_of(P, E, x1) for x1 in range(3)]
    for x1 in range(3):
        assert per_x1[x1] == pytest.approx(min(v for (a, _), v in pairs.items() if a == x1), abs=1e-14)
    assert th.xi(P, E) == pytest.approx(min(per_x1), abs=1e-14)
    assert all(v > 0 for v in pairs.values())


def test_example1_xi_finite_positive_and_violation_raises():
    np.testing.assert_array_equal(
        stacked_emission(E_EX1, P_EX1),
        [[0.5, 0.8, 0.5, 0.2], [0.5, 0.2, 0.5, 0.8], [0.8, 0.5, 0.2, 0.5], [0.2, 0.5, 0.8, 0.5]],
    )  # eq. (51)
    value = th.xi(P_EX1, E_EX1)
    assert np.isfinite(value) and value > 0
    bad = np.array([[0.5, 0.8, 0.5, 0.8], [0.5, 0.2, 0.5, 0.2]])  # x1, x3 identical along their cycles
    with pytest.raises(ValueError, match="5.6b"):
        th.xi(P_EX1, bad)


def test_more_distinguishable_emissions_give_larger_xi():
    values = [th.xi(P2, np.array([[a, 1 - a], [1 - a, a]])) for a in (0.6, 0.75, 0.9, 0.95)]
    assert np.all(np.diff(values) > 0)
    assert values[-1] > values[-2]  # 0.95/0.05 beats 0.9/0.1 (App. D.2)


# --------------------------------------------------------------------------- Lambda, d_n, Gamma


def test_log_mgf_properties_on_random_distributions():
    rng = np.random.default_rng(2)
    h = 1e-5
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
        assert th.log_mgf(0.0, p, q) == pytest.approx(0.0, abs=1e-14)
        assert th.log_mgf(-1.0, p, q) == pytest.approx(0.0, abs=1e-14)
        deriv = (th.log_mgf(h, p, q) - th.log_mgf(-h, p, q)) / (2 * h)
        assert deriv == pytest.approx(np.sum(p * np.log(p / q)), abs=1e-7)  # Lambda'(0) = d (Lemma D.8)
        t = np.linspace(-3, 2, 11).reshape(11, 1)
        np.testing.assert_allclose(th.log_mgf(t, p, q), _ref_lambda(t, p, q), rtol=1e-12, atol=1e-14)
        inner = np.linspace(-0.9, -0.1, 9)
        assert np.all(th.log_mgf(inner, p, q) < 0)  # convex with zeros at -1 and 0


def test_kl_drift_is_lambda_slope_and_positive_exactly_on_gamma():
    rng = np.random.default_rng(3)
    for _ in range(5):
        P, E = _random_model(rng, 5, 3)
        M = permutation_order(P)
        for x in range(1, 5):
            gamma = th.gamma_set(P, E, 0, x)
            for n in range(M):
                d = th.kl_drift(P, E, 0, x, n)
                back = np.linalg.matrix_power(P.T, n)
                p, q = E @ back[:, 0], E @ back[:, x]
                assert d == pytest.approx(np.sum(p * np.log(p / q)), abs=1e-14)
                assert (d > 0) == (n in gamma)  # Lemma D.7


def test_gamma_nonempty_and_matches_matrix_powers():
    rng = np.random.default_rng(4)
    for _ in range(10):
        P, E = _random_model(rng, 6, 2)
        th.check_assumption_5_6(P, E)
        M = permutation_order(P)
        for x1 in range(6):
            for x in range(6):
                if x == x1:
                    continue
                gamma = th.gamma_set(P, E, x1, x)
                assert len(gamma) >= 1  # Lemma D.6
                back = [np.linalg.matrix_power(P.T, n) for n in range(M)]
                ref = [n for n in range(M) if not np.array_equal(E @ back[n][:, x], E @ back[n][:, x1])]
                assert gamma == ref


def test_gamma_uses_paper_direction_minus_n():
    # 4-cycle 0 -> 1 -> 2 -> 3 -> 0 with emissions a, a, b, a. Relative to x1 = 0, x = 1:
    # n = 2 compares sigma^{-2}: (2, 3) -> b vs a; n = 3 compares sigma^{-3} = sigma: (1, 2) -> a vs b.
    # Iterating sigma^{+n} instead would give {1, 2}.
    P = _perm_matrix(np.array([1, 2, 3, 0]))
    a, b = [0.7, 0.3], [0.2, 0.8]
    E = np.array([a, a, b, a]).T
    assert th.gamma_set(P, E, 0, 1) == [2, 3]


def test_entries_outside_gamma_have_zero_lambda():
    # Example 1: x1 = 0 and x3 = 2 share the column (0.5, 0.5), so lag 0 is not in Gamma.
    assert th.gamma_set(P_EX1, E_EX1, 0, 2) == [1]
    p = E_EX1[:, 0]
    np.testing.assert_allclose(th.log_mgf(np.linspace(-5, 5, 21), p, p), 0.0, atol=1e-15)
    assert th.kl_drift(P_EX1, E_EX1, 0, 2, 0) == 0.0
    # xi_pair is then the lag-1 term alone: sigma^{-1}(x1) = x2 (col 1), sigma^{-1}(x3) = x4 (col 3)
    p1, q1 = E_EX1[:, 1], E_EX1[:, 3]
    lag1 = -0.5 * _gl_integral(lambda t: _ref_lambda(t, p1, q1) / t, 0.0, -0.5)
    assert th.xi_pair(P_EX1, E_EX1, 0, 2) == pytest.approx(lag1, abs=1e-10)


# --------------------------------------------------------------------------- ValueError paths


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: permutation_order([[1, 0], [1, 0]]), "one 1 in every row"),
        (lambda: th.gamma_set(P2, np.ones((2, 3)) / 2, 0, 1), "shape"),
        (lambda: th.gamma_set(P2, [[0.9, 0.2], [0.2, 0.9]], 0, 1), "column-stochastic"),
        (lambda: th.gamma_set(P2, E2, 0, 0), "differ"),
        (lambda: th.gamma_set(P2, E2, 0, 2), "x must be"),
        (lambda: th.gamma_set(P2, E2, -1, 1), "x1 must be"),
        (lambda: th.gamma_set(P2, E2, 0.0, 1), "x1 must be"),
        (lambda: th.kl_drift(P2, E2, 0, 1, 2), "n must be"),
        (lambda: th.kl_drift(P2, [[1.0, 0.1], [0.0, 0.9]], 0, 1, 0), "5.6a"),
        (lambda: th.xi(P2, [[1.0, 0.1], [0.0, 0.9]]), "5.6a"),
        (lambda: th.xi(P2, [[0.5, 0.5], [0.5, 0.5]]), "5.6b"),
        (lambda: th.xi_of(P_EX1, [[0.5, 0.8, 0.5, 0.8], [0.5, 0.2, 0.5, 0.2]], 0), "5.6b"),
        (lambda: th.xi_pair(P_EX1, [[0.5, 0.8, 0.5, 0.8], [0.5, 0.2, 0.5, 0.2]], 0, 1), "5.6b"),
        (lambda: th.xi(np.eye(1), [[0.3], [0.7]]), "two recurrent states"),
        (lambda: th.xi_of(P2, E2, 5), "x1 must be"),
        (lambda: th.xi_pair(P2, E2, 1, 1), "differ"),
        (lambda: th.xi(P2, [[np.nan, 0.1], [0.1, 0.9]]), "NaN"),
        (lambda: th.log_mgf(0.5, [0.5, 0.5], [1.0, 0.0]), "strictly positive"),
        (lambda: th.log_mgf(0.5, [0.5, 0.5], [0.2, 0.3, 0.5]), "same shape"),
        (lambda: th.log_mgf(np.nan, [0.5, 0.5], [0.2, 0.8]), "finite"),
        (lambda: th.log_mgf(0.5, [0.6, 0.6], [0.2, 0.8]), "sum to 1"),
        (lambda: th.logit_bound_W([[1.0, 0.1], [0.0, 0.9]], [0.0, 0.0]), "5.6a"),
        (lambda: th.logit_bound_W(E2, [0.0, 0.0, 0.0]), "shape"),
        (lambda: th.logit_bound_W(E2, [0.0, -np.inf]), "finite"),
        (lambda: th.delta_upper_bound(0.0, 0.7), "eps"),
        (lambda: th.delta_upper_bound([0.1, 1.0], 0.7), "eps"),
        (lambda: th.delta_upper_bound(np.nan, 0.7), "eps"),
        (lambda: th.delta_upper_bound(0.1, 0.0), "xi"),
        (lambda: th.delta_upper_bound(0.1, np.inf), "xi"),
        (lambda: th.lambda_is_valid(np.nan, 0.7), "lambda"),
        (lambda: th.lambda_is_valid(0.5, -1.0), "xi"),
        (lambda: th.q_min(np.ones((2, 3)), np.zeros((2, 3))), "square"),
        (lambda: th.q_min(P2, np.zeros((3, 3))), "shape"),
        (lambda: th.q_min([[1, 1], [1, 0]], np.zeros((2, 2))), "deterministic"),
        (lambda: th.q_min(P2, [[-1.0, -1.0], [1.0, 1.0]]), ">= 0"),
        (lambda: th.q_min(P2, [[1.0, -1.0], [-0.5, 1.0]]), "columns sum to 0"),
        (lambda: th.q_min(P2, [[np.nan, -1.0], [-1.0, 1.0]]), "NaN"),
        (lambda: th.irregular_jump_bound(1.5, 3.0, -1.0), "eps"),
        (lambda: th.irregular_jump_bound(0.1, -1.0, -1.0), "T_eps"),
        (lambda: th.irregular_jump_bound(0.1, 3.0, 0.5), "q_min"),
        (lambda: th.irregular_jump_bound(0.5, 3.0, -4.0), "163"),
    ],
)
def test_value_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()

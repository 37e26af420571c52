"""Theorem 4.4 (any ell) and Corollary 4.5 against the LOF and an independent NumPy eq. (57) reference."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.belief import lof_reference as lof
from memlab.belief import random_models as cases
from memlab.belief.exact_linear import (
    construction_is_exact,
    exact_linear_filter,
    exact_linear_filter_controlled,
    make_exact_linear_filter,
    make_exact_linear_filter_controlled,
)
from memlab.belief.hmm import HMM, ControlledHMM
from memlab.belief.structure import decompose_deterministic

CASES = [(1, 0, 1), (3, 0, 1), (4, 1, 1), (5, 2, 2), (6, 3, 3), (8, 5, 5), (10, 6, 4), (12, 7, 7)]  # (N, r, chain)
TOL = 1e-10


@pytest.fixture(autouse=True)
def _float64(x64):
    """Every test here checks Theorem 4.4 / Corollary 4.5 to ~1e-10: float64 throughout."""


def beta_logits(T, E, pi0, ys, actions=None):
    """Independent reference: log beta_k of eq. (57), products with per-step rescaling, float64."""
    b, s, out = np.asarray(pi0, float), 0.0, []
    for k, y in enumerate(np.asarray(ys)):
        b = E[y] * ((T if actions is None else T[actions[k]]) @ b)
        if b.max() > 0:
            s, b = s + np.log(b.max()), b / b.max()
        with np.errstate(divide="ignore"):
            out.append(np.log(b) + s)
    return np.array(out)




def differs(w, ref):
    """(K,) bool: row differs from the reference (finite pattern or > TOL where both finite)."""
    w, ref = np.asarray(w), np.asarray(ref)
    assert not np.isnan(w).any() and not np.any(w == np.inf)
    fin = np.isfinite(ref)
    gap = np.where(fin & np.isfinite(w), np.abs(np.where(fin, ref, 0) - np.where(np.isfinite(w), w, 0)), 0)
    return np.any(np.isfinite(w) != fin, axis=1) | np.any(gap > TOL, axis=1)


def assert_exact(out, ref):
    assert not differs(out.w, ref).any()
    assert not np.asarray(out.inexact).any()


def random_model(rng, N, r, chain, S=3, e_zero=0.0, pi_zero=0.0):
    T, _ = cases.random_deterministic(rng, N, r, chain)
    E = cases.random_columns(rng, S, N, e_zero)
    pi0 = cases.random_columns(rng, N, 1, pi_zero)[:, 0]
    return T, E, pi0


# --------------------------------------------------------------------------- Theorem 4.4


@pytest.mark.parametrize("N,r,chain", CASES)
@pytest.mark.parametrize("seed", range(4))
def test_theorem_4_4_reproduces_lof(N, r, chain, seed):
    rng = np.random.default_rng(seed)
    T, E, pi0 = random_model(rng, N, r, chain)
    w0 = rng.normal(scale=5.0, size=N)  # arbitrary initialisation
    assert construction_is_exact(T, E, pi0)
    for K in (2, 40):  # K < ell included
        ys = rng.integers(3, size=K)
        out = exact_linear_filter(T, E, pi0, ys, w0)
        assert out.w.shape == (K, N) and out.inexact.shape == (K,)
        assert_exact(out, beta_logits(T, E, pi0, ys))
        assert_exact(out, jax.jit(lof)(HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0)), jnp.asarray(ys)).logits)
        dec = decompose_deterministic(T)
        assert np.all(np.asarray(out.w)[dec.ell - 1:][:, dec.transient] == -np.inf)  # eq. (58), k >= ell


def test_zero_emissions_exact_or_flagged():
    """E and pi0 with zeros: every row is either exact or flagged, and construction_is_exact predicts flags."""
    n_exact_with_zeros = n_flagged = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        N, r, chain = CASES[seed % len(CASES)]
        T, E, pi0 = random_model(rng, N, r, chain, e_zero=0.3, pi_zero=0.3 * (seed % 2))
        exact = construction_is_exact(T, E, pi0)
        ys = cases.simulate_observations(rng, T, E, pi0, 30)  # a sequence of positive probability
        out = exact_linear_filter(T, E, pi0, ys, rng.normal(size=N))
        ref = beta_logits(T, E, pi0, ys)
        assert np.array_equal(np.asarray(out.inexact), differs(out.w, ref))  # the flag is exactly "differs"
        w = np.asarray(out.w)
        assert np.all(np.isfinite(w) | (w == -np.inf))
        with np.errstate(invalid="ignore"):  # -inf - (-inf): both -inf, already accepted by w == ref
            assert np.all((w == ref) | (np.abs(w - ref) <= TOL) | (w == -np.inf))  # wrong only as -inf
        if exact:
            assert not np.asarray(out.inexact).any()
            n_exact_with_zeros += bool((E == 0).any() and np.isneginf(ref[-1]).any())
        n_flagged += bool(np.asarray(out.inexact).any())
    assert n_exact_with_zeros >= 5 and n_flagged >= 1  # both regimes are exercised


@pytest.mark.parametrize("seed", range(12))
def test_construction_is_exact_vs_brute_force(seed):
    """construction_is_exact <=> no observation sequence of length ell + 2 gets a flagged row."""
    rng = np.random.default_rng(100 + seed)
    N, r, chain = [(4, 2, 2), (5, 3, 3), (5, 2, 1), (3, 0, 1)][seed % 4]
    T, E, pi0 = random_model(rng, N, r, chain, S=2, e_zero=0.35, pi_zero=0.4)
    filt = make_exact_linear_filter(T, E, pi0, rng.normal(size=N))
    K = filt.ell + 2
    ys = np.array(list(itertools.product(range(2), repeat=K)))
    out = jax.vmap(filt)(jnp.asarray(ys))
    flags = np.asarray(out.inexact)
    for i, y in enumerate(ys):
        assert np.array_equal(flags[i], differs(out.w[i], beta_logits(T, E, pi0, y)))
    assert construction_is_exact(T, E, pi0) == (not flags.any())


def test_counter_example_a_b_c_is_flagged():
    """pi0 = e_a, a -> b -> c, c recurrent: w^o_1(c) = -inf, w^o_2(c) finite; no linear update gets it."""
    T = np.zeros((4, 4))
    T[[1, 2, 2, 3], range(4)] = 1  # 0=a -> 1=b -> 2=c (self-loop), 3 self-loop
    E = np.array([[0.6, 0.3, 0.2, 0.5], [0.4, 0.7, 0.8, 0.5]])
    pi0 = np.array([1.0, 0, 0, 0])
    assert decompose_deterministic(T).ell == 2
    assert not construction_is_exact(T, E, pi0)
    ys = np.array([0, 1, 1, 0, 1])
    out = exact_linear_filter(T, E, pi0, ys, np.zeros(4))
    ref = beta_logits(T, E, pi0, ys)
    assert np.isneginf(ref[0, 2]) and np.isfinite(ref[1, 2]) and np.isneginf(out.w[1, 2])
    assert list(np.asarray(out.inexact)) == [False, True, True, True, True]
    assert not differs(out.w[:1], ref[:1]).any()
    full = np.full(4, 0.25)
    assert construction_is_exact(T, E, full)  # pi0 > 0 and E > 0 is sufficient
    assert_exact(exact_linear_filter(T, E, full, ys, np.zeros(4)), beta_logits(T, E, full, ys))


def test_minus_inf_in_w0_is_flagged_at_step_1():
    T = np.eye(3)[:, [1, 2, 0]]
    E, pi0 = np.full((2, 3), 0.5), np.full(3, 1 / 3)
    out = exact_linear_filter(T, E, pi0, np.array([0, 1, 0]), np.array([0.0, -np.inf, 0.0]))
    assert list(np.asarray(out.inexact)) == [True, True, True]
    out = exact_linear_filter(T, E, np.array([0.5, 0, 0.5]), np.array([0, 1]), np.array([0.0, -np.inf, 0.0]))
    assert not np.asarray(out.inexact).any()  # -inf where pi0 = 0 is harmless


def test_psi_matches_eq_65():
    """ell = 2: psi(1), psi(2), psi(k >= 3) written out as in eq. (65), in NumPy."""
    rng = np.random.default_rng(7)
    T, E, pi0 = np.zeros((6, 6)), cases.random_columns(rng, 3, 6), cases.random_columns(rng, 6, 1)[:, 0]
    T[[1, 3, 4, 4, 5, 3], range(6)] = 1  # 0 -> 1 -> 3, 2 -> 4; 3 -> 4 -> 5 -> 3 recurrent: ell = 2
    dec = decompose_deterministic(T)
    assert dec.ell == 2 and dec.r == 3
    w0 = rng.normal(size=6)
    filt = make_exact_linear_filter(T, E, pi0, w0)
    Tp, lE = dec.T_prime, np.log(E)
    y1, y2, y3 = 2, 0, 1
    u1 = E[y1] * (T @ pi0)  # diag(E^T y1) T pi0
    with np.errstate(divide="ignore", invalid="ignore"):  # log 0 = -inf and -inf - (-inf) = nan are expected here
        eq65_1 = np.log(T @ pi0) - Tp @ w0 + lE[y1]
        eq65_2 = np.log(T @ u1) - np.log(u1)[dec.T_prime_index] + lE[y2]  # T' as a gather: 0 * (-inf) = 0
        for got, want in [(filt.psi(1, jnp.array([-1, y1])), eq65_1), (filt.psi(2, jnp.array([y1, y2])), eq65_2),
                          (filt.psi(3, jnp.array([y2, y3])), lE[y3])]:
            got = np.asarray(got)
            fin = np.isfinite(want)
            assert np.array_equal(np.isfinite(got), fin) and np.allclose(got[fin], want[fin], rtol=0, atol=TOL)
    assert np.array_equal(np.asarray(filt.src), dec.T_prime_index)


def test_jit_and_vmap_agree_with_eager():
    rng = np.random.default_rng(3)
    T, E, pi0 = random_model(rng, 8, 5, 5)
    filt = make_exact_linear_filter(T, E, pi0, rng.normal(size=8))
    ys = jnp.asarray(rng.integers(3, size=(4, 20)))
    eager = np.stack([np.asarray(filt(y).w) for y in ys])
    assert np.array_equal(np.asarray(jax.jit(jax.vmap(filt))(ys).w), eager)


def test_theorem_4_4_rejects_bad_input():
    T, E, pi0 = np.eye(3)[:, [1, 2, 2]], np.full((2, 3), 0.5), np.full(3, 1 / 3)
    with pytest.raises(ValueError, match="deterministic"):
        exact_linear_filter(np.full((3, 3), 1 / 3), E, pi0, [0])
    with pytest.raises(ValueError, match="column-stochastic"):
        exact_linear_filter(2 * T, E, pi0, [0])
    with pytest.raises(ValueError, match="E must have shape"):
        exact_linear_filter(T, E[:, :2], pi0, [0])
    with pytest.raises(ValueError, match="w0 must have shape"):
        exact_linear_filter(T, E, pi0, [0], np.zeros(2))
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match="NaN or \\+inf"):
            exact_linear_filter(T, E, pi0, [0], np.array([0.0, bad, 0.0]))
    with pytest.raises(ValueError, match=r"ys must lie in \[0, 2\)"):
        exact_linear_filter(T, E, pi0, [0, 2])
    with pytest.raises(ValueError, match="ys must have shape"):
        exact_linear_filter(T, E, pi0, np.zeros((2, 3), int))
    with pytest.raises(ValueError, match="K >= 1"):
        exact_linear_filter(T, E, pi0, np.zeros(0, int))
    with pytest.raises(ValueError, match="deterministic"):
        construction_is_exact(np.full((3, 3), 1 / 3), E, pi0)


# --------------------------------------------------------------------------- Corollary 4.5


@pytest.mark.parametrize("N,A", [(1, 1), (3, 2), (5, 3), (8, 4)])
@pytest.mark.parametrize("seed", range(4))
def test_corollary_4_5_reproduces_lof(N, A, seed):
    rng = np.random.default_rng(seed)
    T = np.stack([cases.random_permutation(rng, N) for _ in range(A)])
    E = cases.random_columns(rng, 3, N, 0.3 * (seed % 2))  # zeros in E are fine for permutations
    pi0 = cases.random_columns(rng, N, 1, 0.3 * (seed % 2))[:, 0]
    model = ControlledHMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    acts = rng.integers(A, size=40)
    ys = cases.simulate_observations(rng, T, E, pi0, 40, acts)
    out = exact_linear_filter_controlled(T, E, pi0, ys, acts, rng.normal(scale=5.0, size=N))
    assert out.w.shape == (40, N)
    assert_exact(out, beta_logits(T, E, pi0, ys, acts))
    assert_exact(out, jax.jit(lof)(model, jnp.asarray(ys), actions=jnp.asarray(acts)).logits)


def test_corollary_4_5_psi_is_eq_17():
    rng = np.random.default_rng(1)
    T = np.stack([cases.random_permutation(rng, 4) for _ in range(3)])
    E, pi0, w0 = cases.random_columns(rng, 2, 4), cases.random_columns(rng, 4, 1)[:, 0], rng.normal(size=4)
    filt = make_exact_linear_filter_controlled(T, E, pi0, w0)
    for a in range(3):
        want = np.log(E[1]) + T[a] @ (np.log(pi0) - w0)  # eq. (17) with P = P(a_0)
        assert np.allclose(np.asarray(filt.psi(1, 1, a)), want, rtol=0, atol=TOL)
        assert np.allclose(np.asarray(filt.psi(2, 1, a)), np.log(E[1]), rtol=0, atol=TOL)


def test_corollary_4_5_rejects_bad_input():
    E, pi0 = np.full((2, 3), 0.5), np.full(3, 1 / 3)
    P = np.stack([np.eye(3), np.eye(3)[:, [1, 2, 0]]])
    with pytest.raises(ValueError, match=r"permutation matrices, but T\[1\]"):
        exact_linear_filter_controlled(np.stack([np.eye(3), np.eye(3)[:, [1, 1, 0]]]), E, pi0, [0], [0])
    with pytest.raises(ValueError, match="shape"):
        exact_linear_filter_controlled(np.eye(3), E, pi0, [0], [0])
    with pytest.raises(ValueError, match="actions must have shape"):
        exact_linear_filter_controlled(P, E, pi0, [0, 1], [0])
    with pytest.raises(ValueError, match=r"actions must lie in \[0, 2\)"):
        exact_linear_filter_controlled(P, E, pi0, [0, 1], [0, 2])
    with pytest.raises(ValueError, match="ys must lie"):
        exact_linear_filter_controlled(P, E, pi0, [0, 5], [0, 1])
    with pytest.raises(ValueError, match="w0"):
        exact_linear_filter_controlled(P, E, pi0, [0], [0], np.zeros(4))
    out = exact_linear_filter_controlled(P, E, pi0, [0, 1], [1, 0], np.array([0.0, -np.inf, 0.0]))
    assert list(np.asarray(out.inexact)) == [True, True]  # -inf in w0 where pi0 > 0 cannot be repaired

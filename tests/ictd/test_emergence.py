"""Emergence metrics (App. F.4, eq. (109)-(111)) and the kernel diagonal mean (eq. (34)).

References are written here in NumPy float64 straight from the formulas; the scores must be exactly 1 on theta* of
eq. (15), below 1 on random parameters, and 0 when the TD sign pattern is broken.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.ictd.emergence import a_emergence, emergence_scores, kernel_diagonal_mean, v_emergence
from memlab.ictd.transformer import make_prompt, theta_star

EPS = 1e-8


def v_em_ref(V: np.ndarray) -> float:
    d = V.shape[0] - 3
    pr, pg, pv = (float(V[d + 2, d + i]) for i in range(3))  # paper's (V)_{d+3, d:d+3}
    if not (pr > 0 and pg > 0 and pv < 0):
        return 0.0
    mags = np.abs([pr, pg, pv])
    m = mags.mean()
    return max(0.0, 1.0 - np.abs(mags - m).sum() / (3 * max(m, EPS)))


def a_em_ref(A: np.ndarray) -> float:
    d = A.shape[0] - 3
    F = np.asarray(A[:d, :d], dtype=np.float64)
    A_hat = np.zeros_like(F)
    for j in range(d):
        norm = np.sqrt(np.sum(F[:, j] ** 2))
        if norm > 0:
            A_hat[:, j] = np.abs(F[:, j]) / norm
    a_diag = np.trace(A_hat) / max(A_hat.sum(), EPS)
    a = np.diag(F)
    m = a.mean()
    c_a = max(0.0, 1.0 - np.abs(a - m).sum() / (d * max(m, EPS)))
    return a_diag * c_a


def d_t_ref(Z0: np.ndarray, A: np.ndarray, tau: float) -> float:
    n = Z0.shape[1] - 1
    L = Z0.T @ A @ Z0 / tau  # (n+1, n+1); source rows 0..n-1 only (eq. (2))
    src = L[:n, :]
    K = np.exp(src - src.max(axis=0))
    K = K / K.sum(axis=0)
    return float(np.trace(K[:, :n]) / n)


def random_prompt(key, d: int, n: int, unit: bool = False) -> jax.Array:
    kx, kr = jax.random.split(key)
    X = jax.random.uniform(kx, (n + 1, d), minval=-1.0, maxval=1.0)
    if unit:
        X = X / jnp.linalg.norm(X, axis=1, keepdims=True)
    return make_prompt(X, jax.random.uniform(kr, (n,), minval=-1.0, maxval=1.0))


@pytest.mark.parametrize("d", [1, 4, 7])
@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_scores_are_one_at_theta_star(d, alpha):
    V, A = theta_star(d, alpha)
    assert float(v_emergence(V)) == 1.0
    assert float(a_emergence(A)) == 1.0
    assert tuple(map(float, emergence_scores(V, A))) == (1.0, 1.0)


def test_theta_star_score_does_not_depend_on_the_scale_of_A():
    _, A = theta_star(4)
    assert float(a_emergence(3.7 * A)) == 1.0


@pytest.mark.parametrize("seed", range(6))
def test_scores_match_reference_and_are_lower_on_random_parameters(seed):
    d = 4
    kv, ka = jax.random.split(jax.random.key(seed))
    V = 0.1 * jax.random.normal(kv, (d + 3, d + 3))
    A = 0.1 * jax.random.normal(ka, (d + 3, d + 3))
    v, a = float(v_emergence(V)), float(a_emergence(A))
    np.testing.assert_allclose(v, v_em_ref(np.asarray(V)), atol=1e-6)
    np.testing.assert_allclose(a, a_em_ref(np.asarray(A)), atol=1e-6)
    assert 0.0 <= v < 1.0 and 0.0 <= a < 1.0


@pytest.mark.parametrize("seed", range(4))
def test_scores_below_one_for_perturbed_theta_star_with_right_signs(seed):
    d = 4
    V, A = theta_star(d)
    kv, ka = jax.random.split(jax.random.key(100 + seed))
    V = V.at[d + 2, d : d + 3].multiply(jax.random.uniform(kv, (3,), minval=0.5, maxval=1.5))
    A = A + 0.05 * jnp.abs(jax.random.normal(ka, (d + 3, d + 3)))
    v, a = float(v_emergence(V)), float(a_emergence(A))
    assert 0.0 < v < 1.0 and 0.0 < a < 1.0
    np.testing.assert_allclose(v, v_em_ref(np.asarray(V)), atol=1e-6)
    np.testing.assert_allclose(a, a_em_ref(np.asarray(A)), atol=1e-6)


@pytest.mark.parametrize("col", [0, 1, 2])
def test_v_score_is_zero_when_a_sign_is_wrong(col):
    d = 4
    V, _ = theta_star(d)
    assert float(v_emergence(V.at[d + 2, d + col].multiply(-1.0))) == 0.0
    assert float(v_emergence(V.at[d + 2, d + col].set(0.0))) == 0.0  # strict inequalities of eq. (109)


def test_v_score_ignores_other_entries_and_is_zero_for_zero_V():
    d = 4
    V, _ = theta_star(d)
    noisy = V.at[: d + 2, :].set(5.0).at[d + 2, :d].set(-2.0)
    assert float(v_emergence(noisy)) == 1.0
    assert float(v_emergence(jnp.zeros((d + 3, d + 3)))) == 0.0


def test_a_score_zero_cases():
    d = 4
    assert float(a_emergence(jnp.zeros((d + 3, d + 3)))) == 0.0  # empty A_hat and m_A = 0
    _, A = theta_star(d)
    assert float(a_emergence(-A)) == 1.0  # a common negative diagonal passes C_A too, as F.4.2 remarks
    off = jnp.zeros((d + 3, d + 3)).at[:d, :d].set(jnp.ones((d, d)) - jnp.eye(d))
    assert float(a_emergence(off)) == 0.0  # no diagonal mass


def test_a_score_uses_only_the_feature_block():
    d = 4
    _, A = theta_star(d)
    assert float(a_emergence(A.at[d:, :].set(3.0).at[:, d:].set(-1.0))) == 1.0


def test_d_t_bounds_and_reference():
    d, n = 4, 10
    for seed in range(5):
        kz, ka = jax.random.split(jax.random.key(seed))
        Z0 = random_prompt(kz, d, n)
        A = jax.random.normal(ka, (d + 3, d + 3))
        for tau in (1.0, 1.2):
            got = float(kernel_diagonal_mean(Z0, A, tau))
            assert 0.0 <= got <= 1.0
            np.testing.assert_allclose(got, d_t_ref(np.asarray(Z0, np.float64), np.asarray(A, np.float64), tau),
                                       rtol=1e-5)


def test_d_t_is_one_over_n_for_zero_A():
    d, n = 4, 10
    Z0 = random_prompt(jax.random.key(3), d, n)
    np.testing.assert_allclose(float(kernel_diagonal_mean(Z0, jnp.zeros((d + 3, d + 3)))), 1.0 / n, rtol=1e-6)


def test_d_t_tends_to_one_for_sharply_diagonal_A():
    # unit-norm distinct features: <x_j, x_j> = 1 > <x_i, x_j>, so c * I concentrates every column on itself
    d, n = 4, 10
    Z0 = random_prompt(jax.random.key(4), d, n, unit=True)
    eye = jnp.zeros((d + 3, d + 3)).at[:d, :d].set(jnp.eye(d))
    values = [float(kernel_diagonal_mean(Z0, c * eye, tau=1.2)) for c in (0.0, 5.0, 50.0, 2000.0)]
    assert values == sorted(values)
    assert values[-1] > 1.0 - 1e-4


def test_d_t_rho_mixes_identity():
    d, n = 4, 10
    Z0 = random_prompt(jax.random.key(5), d, n)
    A = jnp.zeros((d + 3, d + 3))
    np.testing.assert_allclose(float(kernel_diagonal_mean(Z0, A, rho=0.8)), 0.2 / n + 0.8, rtol=1e-6)  # eq. (104)


def test_vmap_and_jit():
    d, n = 4, 6
    keys = jax.random.split(jax.random.key(7), 3)
    Zs = jax.vmap(lambda k: random_prompt(k, d, n))(keys)
    _, A = theta_star(d)
    batched = jax.jit(jax.vmap(kernel_diagonal_mean, in_axes=(0, None, None)))(Zs, A, 1.2)
    single = [float(kernel_diagonal_mean(Z, A, 1.2)) for Z in Zs]
    np.testing.assert_allclose(np.asarray(batched), single, rtol=1e-6)
    Vs = jax.random.normal(jax.random.key(8), (5, d + 3, d + 3))
    np.testing.assert_allclose(jax.jit(jax.vmap(v_emergence))(Vs), [v_em_ref(np.asarray(V)) for V in Vs], atol=1e-6)


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="square"):
        v_emergence(jnp.zeros((7, 6)))
    with pytest.raises(ValueError, match="square"):
        a_emergence(jnp.zeros((3, 3)))
    with pytest.raises(ValueError, match="Z0"):
        kernel_diagonal_mean(jnp.zeros((6, 11)), jnp.zeros((7, 7)))

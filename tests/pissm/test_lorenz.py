"""Lorenz generator: RK4 at dt = 1e-5 against SciPy's DOP853 (rtol 1e-10) over t <= 2 (chaos forbids longer),
the observation noise R = 0.5 I, the contiguous split of the 5k-step trajectory, and eq. (201)-(202)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.linalg import expm

from memlab.pissm.data.lorenz import (
    BETA,
    DELTA_T,
    LORENZ_LAYOUT,
    NOISE_VAR,
    RHO,
    SIGMA,
    generate_lorenz,
    integrate_lorenz,
    lorenz_transition_matrix,
    lorenz_vector_field,
)
from memlab.pissm.data.splits import SplitLayout


def lorenz_rhs(_, s):
    x, y, z = s
    return [10.0 * (y - x), x * (28.0 - z) - y, x * y - 8.0 / 3.0 * z]


def reference(x0, num_samples):
    t = np.arange(num_samples) * 0.01
    sol = solve_ivp(lorenz_rhs, (0.0, t[-1]), x0, method="DOP853", rtol=1e-10, atol=1e-10, t_eval=t)
    assert sol.success
    return sol.y.T


X0 = np.array([[-8.0, 7.0, 27.0], [1.0, 1.0, 1.0]])


def test_constants_are_the_papers():
    assert (SIGMA, RHO, BETA, DELTA_T, NOISE_VAR) == (10.0, 28.0, 8.0 / 3.0, 0.01, 0.5)


def test_rk4_at_1e5_matches_dop853_over_two_time_units():
    xs = integrate_lorenz(X0, 201)  # t = 0, 0.01, ..., 2; dt = 1e-5; both start points integrated together
    assert xs.shape == (2, 201, 3) and xs.dtype == np.float64
    for b in range(2):
        ref = reference(X0[b], 201)
        np.testing.assert_allclose(xs[b], ref, rtol=0, atol=1e-6)
    # the comparison can tell integrators apart: one RK4 step per sample (dt = 0.01) is far off
    coarse = integrate_lorenz(X0[0], 201, substeps=1)
    assert np.abs(coarse - reference(X0[0], 201)).max() > 1e-4


def test_vector_field_is_eq_200():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 3)) * 10
    np.testing.assert_allclose(np.asarray(lorenz_vector_field(x)), np.array([lorenz_rhs(0, s) for s in x]), rtol=1e-5)


@pytest.fixture(scope="module")
def data():
    return generate_lorenz(jax.random.key(0))


def test_split_sizes_and_contiguity(data):
    for split, (n, length) in zip(data[:3], LORENZ_LAYOUT):
        assert split.y.shape == (n, length, 3) and split.x.shape == (n, length, 3) and split.t.shape == (n, length)
        assert split.z is None and split.events is None
    t = np.concatenate([np.asarray(s.t).ravel() for s in data[:3]])
    np.testing.assert_allclose(t, np.arange(5000) * 0.01, atol=1e-3)  # 5k steps, each in exactly one split
    # consecutive windows continue one trajectory: the first test state is one Delta t after the last validation one
    last_val = np.asarray(data.validation.x[-1, -1], np.float64)
    np.testing.assert_allclose(integrate_lorenz(last_val, 2)[-1], np.asarray(data.test.x[0, 0]), atol=2e-3)


def test_trajectory_is_on_the_attractor(data):
    x = np.concatenate([np.asarray(s.x).reshape(-1, 3) for s in data[:3]])
    assert np.abs(x).max() < 60 and x[:, 2].min() > 0
    assert (x[:, 0] > 5).mean() > 0.1 and (x[:, 0] < -5).mean() > 0.1  # both wings visited


def test_observation_noise_has_covariance_half_identity(data):
    r = np.concatenate([np.asarray(s.y - s.x).reshape(-1, 3) for s in data[:3]]).astype(np.float64)
    n = r.shape[0]
    cov = np.cov(r, rowvar=False)
    np.testing.assert_allclose(np.diag(cov), 0.5, rtol=5 * np.sqrt(2 / n))
    off = cov[~np.eye(3, dtype=bool)]
    assert np.abs(off).max() < 5 * 0.5 / np.sqrt(n)
    assert np.abs(r.mean(0)).max() < 5 * np.sqrt(0.5 / n)
    np.testing.assert_allclose(np.asarray(data.R), 0.5 * np.eye(3))
    np.testing.assert_array_equal(np.asarray(data.C), np.eye(3))


SMALL = SplitLayout(train=(4, 20), validation=(1, 20), test=(1, 20))


def test_same_seed_same_data_different_seed_different_data():
    a = generate_lorenz(jax.random.key(5), SMALL, substeps=100)
    b = generate_lorenz(jax.random.key(5), SMALL, substeps=100)
    c = generate_lorenz(jax.random.key(6), SMALL, substeps=100)
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    assert not np.allclose(np.asarray(a.train.x), np.asarray(c.train.x))


def test_transition_matrix_is_eq_201_202(x64):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 3)) * 10
    first_order = np.asarray(lorenz_transition_matrix(x, DELTA_T, order=1))
    A_c = (first_order - np.eye(3)) / DELTA_T  # eq. (201): A_c(x) x = dx/dt
    np.testing.assert_allclose(np.einsum("bij,bj->bi", A_c, x), np.asarray(lorenz_vector_field(x)), rtol=1e-10)
    taylor = np.asarray(lorenz_transition_matrix(x, DELTA_T, order=5))  # eq. (202)
    for b in range(4):
        np.testing.assert_allclose(taylor[b], expm(A_c[b] * DELTA_T), atol=1e-6)
        assert np.abs(taylor[b] - expm(A_c[b] * DELTA_T)).max() < np.abs(first_order[b] - expm(A_c[b] * DELTA_T)).max()


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="x0"):
        integrate_lorenz([1.0, 2.0], 10)
    with pytest.raises(ValueError, match="x0"):
        integrate_lorenz([1.0, np.nan, 2.0], 10)
    with pytest.raises(ValueError, match="num_samples"):
        integrate_lorenz([1.0, 1.0, 1.0], 0)
    with pytest.raises(ValueError, match="noise_var"):
        generate_lorenz(jax.random.key(0), SMALL, noise_var=-1.0)

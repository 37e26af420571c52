"""Kalman filter against a float64 NumPy batch computation: the joint Gaussian of x_{0:T}, y_{1:T} conditioned
directly (no recursion), with and without missing observations; the total log-likelihood against the exact
marginal of the stacked observations; float32 covariances stay symmetric positive definite over 10^5 steps and
reach the Riccati fixed point; the sampler draws from the same joint Gaussian; bad inputs raise ValueError."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from memlab.kalman import kalman_filter, sample_lgssm, scan_filter
from memlab.pissm.data.lorenz import integrate_lorenz, lorenz_transition_matrix


def random_spd(rng, n, scale=1.0):
    B = rng.normal(size=(n, n))
    return scale * (B @ B.T / n + 0.3 * np.eye(n))


def random_model(rng, M, N, T, time_varying=True):
    """A, C, Q, R (time-varying with a leading axis T, or fixed), m0, P0 in float64."""

    def per_step(draw):
        return np.stack([draw() for _ in range(T)]) if time_varying else draw()

    A = per_step(lambda: 0.9 * scipy.linalg.expm(0.3 * rng.normal(size=(M, M))))
    C = per_step(lambda: rng.normal(size=(N, M)))
    Q = per_step(lambda: random_spd(rng, M, 0.2))
    R = per_step(lambda: random_spd(rng, N, 0.5))
    return A, C, Q, R, rng.normal(size=M), random_spd(rng, M)


def joint_gaussian(A, C, Q, R, m0, P0, T):
    """Mean and covariance of the stacked (x_0..x_T, y_1..y_T), built as linear maps of independent noises."""
    M, N = m0.shape[0], (C[0] if C.ndim == 3 else C).shape[0]
    at = lambda X, t: X[t] if X.ndim == 3 else X  # noqa: E731
    dim = M + T * M + T * N  # noise vector w = [x_0 - m0, q_1..q_T, r_1..r_T]
    W = scipy.linalg.block_diag(P0, *[at(Q, t) for t in range(T)], *[at(R, t) for t in range(T)])
    Gx, mx, Gy, my = [np.eye(M, dim)], [m0], [], []
    for t in range(T):
        E_q = np.zeros((M, dim))
        E_q[:, M + t * M : M + (t + 1) * M] = np.eye(M)
        E_r = np.zeros((N, dim))
        E_r[:, M + T * M + t * N : M + T * M + (t + 1) * N] = np.eye(N)
        Gx.append(at(A, t) @ Gx[-1] + E_q)
        mx.append(at(A, t) @ mx[-1])
        Gy.append(at(C, t) @ Gx[-1] + E_r)
        my.append(at(C, t) @ mx[-1])
    G = np.concatenate(Gx + Gy)
    return np.concatenate(mx + my), G @ W @ G.T


def log_normal(y, mean, cov):
    if y.size == 0:
        return 0.0
    d = y - mean
    return -0.5 * (y.size * np.log(2 * np.pi) + np.linalg.slogdet(cov)[1] + d @ np.linalg.solve(cov, d))


def batch_reference(y, mask, A, C, Q, R, m0, P0):
    """Filtered / predicted moments and per-step log-likelihoods by conditioning the joint Gaussian directly."""
    T, N = y.shape
    M = m0.shape[0]
    mean, cov = joint_gaussian(A, C, Q, R, m0, P0, T)
    y_index = lambda t: (T + 1) * M + t * N + np.arange(N)  # noqa: E731  (rows of y_{t+1} in the stack)
    x_index = lambda t: (t + 1) * M + np.arange(M)  # noqa: E731  (rows of x_{t+1})

    def condition(t_x, steps):
        obs = [s for s in steps if mask[s]]
        o = np.concatenate([y_index(s) for s in obs]) if obs else np.zeros(0, int)
        xi = x_index(t_x)
        y_obs = np.concatenate([y[s] for s in obs]) if obs else np.zeros(0)
        gain = np.linalg.solve(cov[np.ix_(o, o)], cov[np.ix_(o, xi)]).T if obs else np.zeros((M, 0))
        m = mean[xi] + gain @ (y_obs - mean[o])
        P = cov[np.ix_(xi, xi)] - gain @ cov[np.ix_(o, xi)]
        return m, P, log_normal(y_obs, mean[o], cov[np.ix_(o, o)])

    out = {"means": [], "covs": [], "pred_means": [], "pred_covs": [], "log_liks": []}
    for t in range(T):
        m, P, log_marginal = condition(t, range(t + 1))
        pm, pP, log_marginal_before = condition(t, range(t))
        for k, v in zip(out, (m, P, pm, pP, log_marginal - log_marginal_before)):
            out[k].append(v)
    total = log_normal(*(lambda o: (y[mask].ravel(), mean[o], cov[np.ix_(o, o)]))(
        np.concatenate([y_index(s) for s in range(T) if mask[s]])))
    return {k: np.array(v) for k, v in out.items()}, total


def assert_matches_reference(result, ref, total, tol=1e-10):
    np.testing.assert_allclose(result.means, ref["means"], rtol=0, atol=tol)
    np.testing.assert_allclose(result.covariances, ref["covs"], rtol=0, atol=tol)
    np.testing.assert_allclose(result.predicted_means, ref["pred_means"], rtol=0, atol=tol)
    np.testing.assert_allclose(result.predicted_covariances, ref["pred_covs"], rtol=0, atol=tol)
    np.testing.assert_allclose(result.log_likelihoods, ref["log_liks"], rtol=0, atol=tol)
    np.testing.assert_allclose(np.sum(result.log_likelihoods), total, rtol=0, atol=tol)


@pytest.mark.parametrize("time_varying", [False, True])
def test_filter_equals_direct_conditioning_of_the_joint_gaussian(x64, time_varying):
    rng = np.random.default_rng(0)
    M, N, T = 3, 2, 7
    A, C, Q, R, m0, P0 = random_model(rng, M, N, T, time_varying)
    y = rng.normal(size=(T, N)) * 2
    mask = np.ones(T, bool)
    ref, total = batch_reference(y, mask, A, C, Q, R, m0, P0)
    result = jax.jit(kalman_filter)(y, A, C, Q, R, m0, P0)
    assert result.means.dtype == jnp.float64
    assert_matches_reference(result, ref, total)


def test_missing_observations_equal_conditioning_without_them(x64):
    rng = np.random.default_rng(1)
    M, N, T = 3, 2, 8
    A, C, Q, R, m0, P0 = random_model(rng, M, N, T)
    y = rng.normal(size=(T, N))
    mask = np.array([1, 0, 0, 1, 1, 0, 1, 0], bool)
    y[~mask] = np.nan  # ignored where missing
    ref, total = batch_reference(y, mask, A, C, Q, R, m0, P0)
    result = kalman_filter(y, A, C, Q, R, m0, P0, mask=mask)
    assert_matches_reference(result, ref, total)
    assert np.all(np.asarray(result.log_likelihoods)[~mask] == 0)
    # a missing step only predicts: filtered = predicted there
    np.testing.assert_array_equal(result.means[~mask], result.predicted_means[~mask])


def test_observe_initial_is_a_first_step_without_prediction(x64):
    rng = np.random.default_rng(2)
    M, N, T = 3, 2, 6
    A, C, Q, R, m0, P0 = random_model(rng, M, N, T)
    y = rng.normal(size=(T, N))
    A_first, Q_first = A.copy(), Q.copy()
    A_first[0], Q_first[0] = np.eye(M), np.zeros((M, M))
    ref, total = batch_reference(y, np.ones(T, bool), A_first, C, Q_first, R, m0, P0)
    assert_matches_reference(kalman_filter(y, A, C, Q, R, m0, P0, observe_initial=True), ref, total)
    # the default convention (predict first) is a different filter: the flag is not ignored
    assert not np.allclose(kalman_filter(y, A, C, Q, R, m0, P0).means[0], ref["means"][0])


def test_float32_covariances_stay_symmetric_positive_definite_over_1e5_steps():
    # 4-d model: a constant-velocity pair observed very precisely (R = 1e-6) and a weakly damped oscillator
    # observed with unit noise, 10 % of the steps missing. The filtered covariance spans eigenvalues ~1e-6 .. 1;
    # on this system eq. (21)'s P - K S K^T in float32 turns indefinite within 3 steps and then NaN (checked
    # when the test was written), the Joseph form does not.
    dt = 0.1
    A = np.array([[1, dt, 0, 0], [0, 1, 0, 0], [0, 0, 1, dt], [0, 0, -0.5 * dt, 0.999]], np.float32)
    C = np.array([[1, 0, 0, 0], [0, 0, 1, 0]], np.float32)
    Q = np.diag([1e-6, 1e-3, 1e-6, 1e-4]).astype(np.float32)
    R = np.diag([1e-6, 1.0]).astype(np.float32)
    T = 100_000
    y = np.asarray(jax.random.normal(jax.random.key(0), (T, 2)), np.float32)
    mask = np.asarray(jax.random.bernoulli(jax.random.key(1), 0.9, (T,)))
    P0 = 100.0 * np.eye(4, dtype=np.float32)
    result = jax.jit(kalman_filter)(y, A, C, Q, R, np.zeros(4, np.float32), P0, mask)
    for covs in (np.asarray(result.covariances), np.asarray(result.predicted_covariances)):
        assert covs.dtype == np.float32 and covs.shape == (T, 4, 4)
        np.testing.assert_array_equal(covs, np.swapaxes(covs, -1, -2))
        eigenvalues = np.linalg.eigvalsh(covs.astype(np.float64))
        assert np.all(np.isfinite(eigenvalues)) and eigenvalues.min() > 0, eigenvalues.min()
    # and they are the right matrices: the last predicted covariance after an observed step is the Riccati fixed
    # point once enough steps are observed in a row (check the steady state on a fully observed tail)
    tail = 2000
    tail_result = jax.jit(kalman_filter)(y[:tail], A, C, Q, R, np.zeros(4, np.float32), result.covariances[-1])
    P_pred = scipy.linalg.solve_discrete_are(A.T.astype(np.float64), C.T.astype(np.float64), Q, R)
    np.testing.assert_allclose(tail_result.predicted_covariances[-1], P_pred, rtol=2e-3, atol=1e-7)


def test_sampler_draws_from_the_joint_gaussian(x64):
    rng = np.random.default_rng(3)
    M, N, T = 2, 2, 3
    A, C, Q, R, m0, P0 = random_model(rng, M, N, T)
    mean, cov = joint_gaussian(A, C, Q, R, m0, P0, T)
    keys = jax.random.split(jax.random.key(4), 40_000)
    xs, ys = jax.jit(jax.vmap(lambda k: sample_lgssm(k, A, C, Q, R, m0, P0, T)))(keys)
    samples = np.concatenate([np.asarray(xs).reshape(len(keys), -1), np.asarray(ys).reshape(len(keys), -1)], 1)
    keep = np.r_[M : (T + 1) * M, (T + 1) * M : len(mean)]  # x_1..x_T and y_1..y_T (x_0 is not returned)
    std = np.sqrt(np.diag(cov)[keep])
    standard_error = std / np.sqrt(len(keys))
    assert np.all(np.abs(samples.mean(0) - mean[keep]) < 5 * standard_error)
    corr_empirical = np.corrcoef(samples, rowvar=False)
    corr = cov[np.ix_(keep, keep)] / np.outer(std, std)
    assert np.max(np.abs(corr_empirical - corr)) < 0.03


def test_total_log_likelihood_is_maximised_near_the_true_parameters(x64):
    # the filter's likelihood identifies the model: scaling A away from the truth lowers it on data from the model
    rng = np.random.default_rng(5)
    A, C, Q, R, m0, P0 = random_model(rng, 3, 2, 200, time_varying=False)
    _, y = jax.jit(sample_lgssm, static_argnums=7)(jax.random.key(6), A, C, Q, R, m0, P0, 200)
    total = jax.jit(lambda s: jnp.sum(kalman_filter(y, s * A, C, Q, R, m0, P0).log_likelihoods))
    assert total(1.0) > max(total(0.8), total(1.15))


def test_state_dependent_matrices_lorenz_linearisation_tracks_the_attractor():
    # scan_filter with A_t = exp(A_c(m_{t-1|t-1}) dt) of App. G.2, eq. (201)-(202): the linearised LG filter of the
    # Lorenz baseline. A coarse reference trajectory (RK4, dt = 1e-3) suffices for this check.
    x = integrate_lorenz(np.array([1.0, 1.0, 25.0]), 600, substeps=10)[100:].astype(np.float32)
    noise_var = 0.5
    y = x + np.sqrt(noise_var) * np.asarray(jax.random.normal(jax.random.key(0), x.shape), np.float32)
    C, Q, R = np.eye(3, dtype=np.float32), 0.05 * np.eye(3, dtype=np.float32), noise_var * np.eye(3, dtype=np.float32)

    @jax.jit
    def run(y):
        step_matrices = lambda m, _: (lorenz_transition_matrix(m), C, Q, R, None)  # noqa: E731
        return scan_filter(y, jnp.ones(len(y), bool), y[0], R, step_matrices, observe_initial=True)[0]

    out = run(jnp.asarray(y))
    rmse = np.sqrt(np.mean((np.asarray(out.means) - x) ** 2))
    assert rmse < 0.5 * np.sqrt(noise_var), rmse
    assert np.all(np.isfinite(out.log_likelihoods))


@pytest.mark.parametrize(
    "change, match",
    [
        ({"y": np.zeros((5,))}, "y must have shape"),
        ({"A": np.eye(2)}, "A must have shape"),
        ({"A": np.zeros((4, 3, 3))}, "A must have shape"),
        ({"C": np.zeros((3, 2))}, "C must have shape"),
        ({"Q": np.diag([1.0, 1.0, -1.0])}, "Q must be positive semi-definite"),
        ({"R": np.array([[1.0, 0.3], [0.0, 1.0]])}, "R must be symmetric"),
        ({"initial_cov": np.eye(2)}, "initial_cov must have shape"),
        ({"mask": np.ones(4, bool)}, "mask must be a bool array"),
        ({"mask": np.ones(5, int)}, "mask must be a bool array"),
        ({"y": np.array([[0.0, np.nan]] + [[0.0, 0.0]] * 4)}, "not finite at observed step 0"),
        ({"A": np.full((3, 3), np.inf)}, "A must be finite"),
    ],
)
def test_bad_inputs_raise_value_error(change, match):
    args = {
        "y": np.zeros((5, 2)), "A": np.eye(3), "C": np.ones((2, 3)), "Q": np.eye(3), "R": np.eye(2),
        "initial_mean": np.zeros(3), "initial_cov": np.eye(3), "mask": None,
    }
    args.update(change)
    with pytest.raises(ValueError, match=match):
        kalman_filter(**args)


def test_sampler_rejects_bad_num_steps():
    with pytest.raises(ValueError, match="num_steps"):
        sample_lgssm(jax.random.key(0), np.eye(2), np.eye(2), np.eye(2), np.eye(2), np.zeros(2), np.eye(2), 0)

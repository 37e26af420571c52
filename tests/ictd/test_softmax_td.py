"""Weighted softmax TD reference (eq. 11-12), kernels (eq. 4, 104, App. F.6), operator form (eq. 24-28),
each against a plain NumPy float64 transcription of the formula."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.ictd import softmax_td as st


def np_entry(L, i, j, kind, tau):
    """h~ at source i < n, target j (module docstring), one entry."""
    n = L.shape[0] - 1
    s = L[i, j] / tau
    if kind == "softmax":
        return np.exp(s) / sum(np.exp(L[m, j] / tau) for m in range(n))
    if kind == "relu":
        return max(s, 0.0)
    if kind == "elu1":
        return s + 1.0 if s > 0 else np.exp(s)
    if kind == "rbf":
        return np.exp(-(L[i, i] + L[j, j] - L[i, j] - L[j, i]) / tau / 2.0)
    return s  # linear


def np_kernel(L, kind, tau=1.0, rho=0.0):
    """K[i, j] entry by entry (i < n sources, row n masked), mixed with rho * identity as eq. (104)."""
    n = L.shape[0] - 1
    K = np.zeros_like(L)
    for j in range(n + 1):
        for i in range(n):
            K[i, j] = (1 - rho) * np_entry(L, i, j, kind, tau) + rho * (i == j)
    return K


def np_weighted_td(X, R, gamma, iters, kind, tau=1.0, alpha=None, v0=None):
    """The update below eq. (12) with double loops; g(S_j, S_i) = <x_j, x_i>."""
    n = len(R)
    K = np_kernel(X @ X.T, kind, tau)
    v = np.zeros(n + 1) if v0 is None else np.array(v0, float)
    out = [v.copy()]
    for t in range(iters):
        a = 1.0 if alpha is None else alpha[t]
        delta = [R[k - 1] + gamma * v[k] - v[k - 1] for k in range(1, n + 1)]  # eq. (11)
        v = np.array([v[j] + a * sum(delta[k - 1] * K[k - 1, j] for k in range(1, n + 1)) for j in range(n + 1)])
        out.append(v)
    return np.array(out)


def visiting_trajectory(rng, m, n, d, scale=1.0):
    """A trajectory (states (n+1,), features (m, d), r (m,)) whose first m states are a permutation of S."""
    states = np.concatenate([rng.permutation(m), rng.integers(0, m, n + 1 - m)])
    features = rng.uniform(-1, 1, (m, d)) * scale
    return states, features, rng.uniform(-1, 1, m)


@pytest.mark.parametrize("kind", st.KERNELS)
@pytest.mark.parametrize("tau, rho", [(1.0, 0.0), (0.7, 0.3), (2.5, 1.0)])
def test_kernel_weights_match_formula(x64, kind, tau, rho):
    rng = np.random.default_rng(0)
    L = rng.normal(size=(7, 7))  # not symmetric: general A
    K = np.asarray(st.kernel_weights(L, kind, tau, rho))
    np.testing.assert_allclose(K, np_kernel(L, kind, tau, rho), rtol=1e-13, atol=1e-14)
    assert np.all(K[-1] == 0.0)  # mask eq. (2)


@pytest.mark.parametrize("kind", st.KERNELS)
def test_mask_and_rho_one(x64, kind):
    L = np.random.default_rng(1).normal(size=(6, 6)) * 3
    assert np.all(np.asarray(st.kernel_weights(L, kind, 1.3, 0.4))[-1] == 0.0)
    K = np.asarray(st.kernel_weights(L, kind, 1.0, 1.0))
    np.testing.assert_array_equal(K[:5, :5], np.eye(5))  # rho = 1: identity on the context
    assert np.all(K[:, 5] == 0.0) and np.all(K[5] == 0.0)  # the query is never a source


def test_softmax_columns_sum_to_one_and_large_tau_is_uniform(x64):
    L = np.random.default_rng(2).normal(size=(9, 9)) * 5
    K = np.asarray(st.kernel_weights(L, "softmax"))
    np.testing.assert_allclose(K.sum(axis=0), 1.0, rtol=1e-14)
    K_hot = np.asarray(st.kernel_weights(L, "softmax", tau=1e9))
    np.testing.assert_allclose(K_hot[:8], 1.0 / 8, rtol=1e-7)
    assert not np.allclose(K[:8], 1.0 / 8, atol=1e-2)


def test_log_kappa_scores_give_normalised_kernel_td(x64):
    """g = log kappa: weights kappa / sum kappa (the remark after eq. 12), and the TD run is normalised eq. (10)."""
    rng = np.random.default_rng(3)
    n, gamma, iters = 12, 0.8, 6
    kappa = rng.uniform(0.05, 3.0, (n + 1, n + 1))  # kappa[i, j] = kappa(S_j, S_i) > 0
    K = np.asarray(st.kernel_weights(np.log(kappa), "softmax"))
    np.testing.assert_allclose(K[:n], kappa[:n] / kappa[:n].sum(axis=0), rtol=1e-13)
    R = rng.normal(size=n)
    vs = np.asarray(st.td_with_weights(K, R, gamma, iters))
    v = np.zeros(n + 1)
    for t in range(iters):  # v(S_j) += sum_k delta_k kappa(S_j, S_{k-1}) / sum_m kappa(S_j, S_{m-1})
        delta = R + gamma * v[1:] - v[:-1]
        v = v + np.array([sum(delta[k] * kappa[k, j] for k in range(n)) / kappa[:n, j].sum() for j in range(n + 1)])
        np.testing.assert_allclose(vs[t + 1], v, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kind", st.KERNELS)
def test_weighted_softmax_td_matches_loops(x64, kind):
    rng = np.random.default_rng(4)
    n, d, iters = 9, 3, 5
    X, R = rng.uniform(-1, 1, (n + 1, d)) / np.sqrt(d), rng.normal(size=n)
    alpha, v0 = rng.uniform(0.2, 1.0, iters), rng.normal(size=n + 1)
    out = np.asarray(st.weighted_softmax_td(X, R, 0.9, iters, kind, tau=1.4, alpha=alpha, v0=v0))
    assert out.shape == (iters + 1, n + 1)
    np.testing.assert_allclose(out, np_weighted_td(X, R, 0.9, iters, kind, 1.4, alpha, v0), rtol=1e-12, atol=1e-12)


def test_linear_kernel_is_batch_linear_td(x64):
    """Derivation in the module docstring: v_t(S_j) = <w_t, x_j> for the linear kernel."""
    rng = np.random.default_rng(5)
    n, d, iters, tau = 15, 4, 8, 3.0
    X, R = rng.uniform(-1, 1, (n + 1, d)) / 2, rng.normal(size=n)
    alpha = rng.uniform(0.3, 1.0, iters)
    vs = st.weighted_softmax_td(X, R, 0.9, iters, "linear", tau=tau, alpha=alpha)
    ws = np.asarray(st.batch_linear_td(X, R, 0.9, iters, tau=tau, alpha=alpha))
    np.testing.assert_allclose(np.asarray(vs), ws @ X.T, rtol=1e-12, atol=1e-12)
    w = np.zeros(d)  # the weight recursion itself, written out
    for t in range(iters):
        w = w + alpha[t] / tau * sum((R[k] + 0.9 * X[k + 1] @ w - X[k] @ w) * X[k] for k in range(n))
    np.testing.assert_allclose(ws[-1], w, rtol=1e-12)

def test_tabular_fixed_point_is_converged_batch_linear_td_with_one_hot_features(x64):
    """LSTD on S_0..S_t = batch TD(0) with one-hot features run to convergence; a never-visited state keeps 0."""
    rng = np.random.default_rng(3)
    m, t, gamma = 5, 40, 0.5
    P = rng.dirichlet(np.ones(m), size=m)
    r = rng.uniform(-1, 1, m)
    states = [0]
    for _ in range(t):
        states.append(rng.choice(m, p=P[states[-1]]))
    states = np.where(np.array(states) == m - 1, 0, states)  # make one state unvisited
    w = st.batch_linear_td(np.eye(m)[states], r[states[:-1]], gamma, 3000, alpha=1.0 / t)[-1]
    v = st.tabular_td_fixed_point(jnp.asarray(states), r, t, gamma, m)
    np.testing.assert_allclose(np.asarray(v), np.asarray(w), atol=1e-8)
    assert float(v[m - 1]) == 0.0 and np.abs(np.asarray(v)).max() > 0.1


@pytest.mark.parametrize("kind", st.KERNELS)
def test_operator_form_matches_td(x64, kind):
    """Iterating T_hat (eq. 25-26) on S reproduces weighted softmax TD at the trajectory states."""
    rng = np.random.default_rng(6)
    m, n, d, gamma, iters = 5, 30, 3, 0.9, 10
    states, features, r = visiting_trajectory(rng, m, n, d, scale=0.6)
    X, R = features[states], r[states[:-1]]  # R_k = r(S_{k-1})
    K = st.kernel_weights(st.feature_scores(X), kind)
    M_hat, P_hat = (np.asarray(a) for a in st.operator_form(jnp.asarray(states), K, m))
    Kn = np.asarray(K)
    first = [int(np.argmax(states == s)) for s in range(m)]
    M_ref = np.array([[sum(Kn[k - 1, first[s]] * (states[k - 1] == t) for k in range(1, n + 1)) for t in range(m)]
                      for s in range(m)])
    P_ref = np.array([[sum(Kn[k - 1, first[s]] * (states[k] == t) for k in range(1, n + 1)) for t in range(m)]
                      for s in range(m)])
    np.testing.assert_allclose(M_hat, M_ref, rtol=1e-13, atol=1e-14)  # eq. (24)
    np.testing.assert_allclose(P_hat, P_ref, rtol=1e-13, atol=1e-14)
    vs = np.asarray(st.weighted_softmax_td(X, R, gamma, iters, kind))
    v = np.zeros(m)
    for t in range(iters):
        v = np.asarray(st.apply_operator(v, M_hat, P_hat, r, gamma))
        np.testing.assert_allclose(vs[t + 1], v[states], rtol=1e-11, atol=1e-12)
    if kind == "softmax":
        np.testing.assert_allclose(M_hat.sum(axis=1), 1.0, rtol=1e-13)  # softmax weights over k sum to 1
        np.testing.assert_allclose(P_hat.sum(axis=1), 1.0, rtol=1e-13)


def test_operator_form_rejects_unvisited_states_and_rho(x64):
    rng = np.random.default_rng(7)
    states, features, _ = visiting_trajectory(rng, 4, 10, 2)
    K = st.kernel_weights(st.feature_scores(features[states]), "softmax")
    with pytest.raises(ValueError, match="visits every state"):
        st.operator_form(jnp.asarray(states), K, 6)
    with pytest.raises(ValueError, match="not a function"):
        st.operator_form(jnp.asarray(states), st.kernel_weights(st.feature_scores(features[states]), rho=0.5), 4)
    with pytest.raises(ValueError, match="integers"):
        st.operator_form(jnp.asarray(states, float), K, 4)


def test_population_kernel_is_empirical_kernel_at_exact_frequencies(x64):
    """If the context visits state s exactly c_s times, M_hat (eq. 24) equals M_pi (eq. 27) with mu = c/n."""
    rng = np.random.default_rng(8)
    m, d = 4, 3
    counts = np.array([3, 1, 4, 2])
    ctx = rng.permutation(np.repeat(np.arange(m), counts))
    states = np.concatenate([ctx, [ctx[0]]])
    features = rng.normal(size=(m, d))
    K = st.kernel_weights(st.feature_scores(features[states]), "softmax")
    M_hat, _ = st.operator_form(jnp.asarray(states), K, m)
    mu = counts / counts.sum()
    M_pi = np.asarray(st.population_kernel(features, mu))
    np.testing.assert_allclose(np.asarray(M_hat), M_pi, rtol=1e-13)
    G = np.exp(features @ features.T) * mu[None, :]
    np.testing.assert_allclose(M_pi, G / G.sum(axis=1, keepdims=True), rtol=1e-13)


def test_diagonal_margin(x64):
    gamma = 0.9
    M = np.array([[0.97, 0.03], [0.02, 0.98]])
    assert float(st.diagonal_margin(M, gamma)) == pytest.approx(0.97 - 0.95)
    assert bool(st.assumption_5_1_holds(M, gamma))
    assert not bool(st.assumption_5_1_holds(np.array([[0.9, 0.1], [0.0, 1.0]]), gamma))
    # separated features (orthogonal, large norm) make M_pi diagonal-dominant; small ones do not
    mu = np.full(5, 0.2)
    assert bool(st.assumption_5_1_holds(st.population_kernel(4.0 * np.eye(5), mu), gamma))
    assert not bool(st.assumption_5_1_holds(st.population_kernel(0.1 * np.eye(5), mu), gamma))


def test_jit_and_vmap(x64):
    rng = np.random.default_rng(9)
    X, R = rng.normal(size=(4, 6, 2)), rng.normal(size=(4, 5))
    f = jax.jit(jax.vmap(lambda x, r: st.weighted_softmax_td(x, r, 0.5, 3, "rbf")))
    out = f(X, R)
    assert out.shape == (4, 4, 6) and out.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(out[2]), np_weighted_td(X[2], R[2], 0.5, 3, "rbf"), rtol=1e-12)


def test_bad_inputs(x64):
    L = np.zeros((4, 4))
    X, R = np.zeros((5, 2)), np.zeros(4)
    with pytest.raises(ValueError, match="unknown kernel"):
        st.kernel_weights(L, "gelu")
    with pytest.raises(ValueError, match="square"):
        st.kernel_weights(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="square"):
        st.kernel_weights(np.zeros((1, 1)))
    for tau in (0.0, -1.0, np.nan):
        with pytest.raises(ValueError, match="tau"):
            st.kernel_weights(L, tau=tau)
    for rho in (-0.1, 1.5):
        with pytest.raises(ValueError, match="rho"):
            st.kernel_weights(L, rho=rho)
    for gamma in (1.0, -0.1, 2.0):
        with pytest.raises(ValueError, match="gamma"):
            st.weighted_softmax_td(X, R, gamma, 3)
        with pytest.raises(ValueError, match="gamma"):
            st.diagonal_margin(np.eye(2), gamma)
    with pytest.raises(ValueError, match="rewards"):
        st.weighted_softmax_td(X, np.zeros(5), 0.9, 3)
    with pytest.raises(ValueError, match="features_traj"):
        st.weighted_softmax_td(np.zeros(5), R, 0.9, 3)
    with pytest.raises(ValueError, match="NaN"):
        st.weighted_softmax_td(X, np.array([0, np.nan, 0, 0]), 0.9, 3)
    with pytest.raises(ValueError, match="alpha"):
        st.weighted_softmax_td(X, R, 0.9, 3, alpha=np.ones(2))
    with pytest.raises(ValueError, match="v0"):
        st.weighted_softmax_td(X, R, 0.9, 3, v0=np.zeros(4))
    with pytest.raises(ValueError, match="num_iters"):
        st.weighted_softmax_td(X, R, 0.9, -1)
    with pytest.raises(ValueError, match="mu"):
        st.population_kernel(np.eye(3), np.array([0.5, 0.6, 0.1]))
    with pytest.raises(ValueError, match="shape"):
        st.population_kernel(np.eye(3), np.ones(2) / 2)
    with pytest.raises(ValueError, match="square"):
        st.diagonal_margin(np.ones((2, 3)), 0.9)
    with pytest.raises(ValueError, match="M_hat"):
        st.apply_operator(np.zeros(3), np.eye(2), np.eye(2), np.zeros(3), 0.9)

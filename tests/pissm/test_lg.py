"""LG variant (App. G.1): with K = 1 or one-hot weights it is the plain Kalman filter; with state-dependent
weights it equals a float64 NumPy loop that mixes the base matrices from the previous filtered mean (eq. 199)
and runs the textbook Kalman recursion (eq. 18-21); gradients reach every trained parameter and match finite
differences; Q and R get none unless learned; vmap over sequences; bad inputs raise ValueError."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.kalman import kalman_filter, sample_lgssm
from memlab.pissm.lg import LGVariant

M, N = 3, 2


def spd(rng, n, scale):
    B = rng.normal(size=(n, n))
    return scale * (B @ B.T / n + 0.5 * np.eye(n))


def make_model(K, seed=0, **kwargs):
    rng = np.random.default_rng(seed)
    A = np.stack([0.95 * np.linalg.qr(rng.normal(size=(M, M)))[0] for _ in range(K)])
    C = rng.normal(size=(K, N, M))
    model = LGVariant(
        M, N, K, Q=spd(rng, M, 0.1), R=spd(rng, N, 0.3), A=A, C=C, key=jax.random.key(seed),
        initial_mean=rng.normal(size=M), initial_cov=spd(rng, M, 1.0), **kwargs,
    )
    return model, rng


def numpy_reference(model, y, mask):
    """Textbook filter in float64 NumPy; alpha_t from an independent NumPy evaluation of the MLP."""
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    layers = [(f64(layer.weight), f64(layer.bias)) for layer in model.mixer.layers]
    Q, R, P = (f64(S) @ f64(S).T for S in (model.Q_sqrt, model.R_sqrt, model.initial_cov_sqrt))
    m = f64(model.initial_mean)
    out = {"means": [], "covs": [], "log_liks": [], "weights": []}
    for y_t, observed in zip(y, mask):
        h = np.maximum(layers[0][0] @ m + layers[0][1], 0.0)
        logits = layers[1][0] @ h + layers[1][1]
        alpha = np.exp(logits - logits.max())
        alpha /= alpha.sum()
        A = np.tensordot(alpha, f64(model.A), 1)
        C = np.tensordot(alpha, f64(model.C), 1)
        m, P = A @ m, A @ P @ A.T + Q  # eq. (18)
        log_lik = 0.0
        if observed:
            S = C @ P @ C.T + R
            K = P @ C.T @ np.linalg.inv(S)  # eq. (19)
            e = y_t - C @ m
            log_lik = -0.5 * (N * np.log(2 * np.pi) + np.linalg.slogdet(S)[1] + e @ np.linalg.solve(S, e))
            m, P = m + K @ e, P - K @ S @ K.T  # eq. (20), (21)
        for k, v in zip(out, (m, P, log_lik, alpha)):
            out[k].append(v)
    return {k: np.array(v) for k, v in out.items()}


def test_one_mode_is_the_plain_kalman_filter(x64):
    model, rng = make_model(K=1)
    y = rng.normal(size=(12, N))
    mask = rng.random(12) < 0.7
    out = eqx.filter_jit(lambda m, y, mask: m(y, mask))(model, y, mask)
    Q, R, P0 = model.covariances()
    ref = kalman_filter(y, model.A[0], model.C[0], Q, R, model.initial_mean, P0, mask)
    assert out.means.dtype == jnp.float64
    np.testing.assert_array_equal(out.weights, 1.0)
    for name in ("means", "covariances", "predicted_means", "predicted_covariances", "log_likelihoods"):
        np.testing.assert_allclose(getattr(out, name), getattr(ref, name), rtol=0, atol=1e-12, err_msg=name)


def test_one_hot_weights_give_the_kalman_filter_of_that_mode(x64):
    model, rng = make_model(K=3)
    chosen = 2
    last = model.mixer.layers[-1]
    bias = jnp.full(3, -1e3).at[chosen].set(1e3)
    model = eqx.tree_at(lambda m: (m.mixer.layers[-1].weight, m.mixer.layers[-1].bias), model,
                        (jnp.zeros_like(last.weight), bias))
    y = rng.normal(size=(10, N))
    out = model(y)
    Q, R, P0 = model.covariances()
    ref = kalman_filter(y, model.A[chosen], model.C[chosen], Q, R, model.initial_mean, P0)
    np.testing.assert_array_equal(out.weights, np.eye(3)[[chosen] * 10])
    np.testing.assert_allclose(out.means, ref.means, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out.log_likelihoods, ref.log_likelihoods, rtol=0, atol=1e-12)


def test_state_dependent_mixture_equals_a_numpy_reference(x64):
    model, rng = make_model(K=4, seed=1)
    # scale the MLP up so that the weights really move with the filtered mean
    model = eqx.tree_at(lambda m: m.mixer.layers[0].weight, model, 5 * model.mixer.layers[0].weight)
    y = 2 * rng.normal(size=(15, N))
    mask = rng.random(15) < 0.8
    out = model(y, mask)
    ref = numpy_reference(model, y, mask)
    weights = np.asarray(out.weights)
    assert np.ptp(weights, axis=0).max() > 0.1  # the mixture changes over time
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(weights, ref["weights"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(out.means, ref["means"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(out.covariances, ref["covs"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(out.log_likelihoods, ref["log_liks"], rtol=0, atol=1e-10)


def total_log_likelihood(model, y):
    return jnp.sum(model(y).log_likelihoods)


@pytest.mark.parametrize("learn_noise", [False, True])
def test_gradients_reach_trained_parameters_and_match_finite_differences(x64, learn_noise):
    model, rng = make_model(K=3, seed=2, learn_noise=learn_noise)
    y = rng.normal(size=(8, N))
    grads = eqx.filter_jit(eqx.filter_grad(total_log_likelihood))(model, y)
    for name in ("A", "C", "initial_mean"):
        assert np.all(np.isfinite(getattr(grads, name))) and np.abs(getattr(grads, name)).max() > 1e-6, name
    assert np.abs(grads.mixer.layers[0].weight).max() > 1e-8
    for name in ("Q_sqrt", "initial_cov_sqrt"):  # learned like pi-SSM's Q and prior
        assert np.abs(getattr(grads, name)).max() > 1e-6, name
    R_grad = float(np.abs(grads.R_sqrt).max())
    assert (R_grad > 1e-6) if learn_noise else (R_grad == 0.0)
    # directional finite difference along a random direction in every trained array (R only if learned)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    direction = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(rng.normal(size=x.shape)) for x in leaves])
    if not learn_noise:
        direction = eqx.tree_at(lambda m: m.R_sqrt, direction, jnp.zeros_like(direction.R_sqrt))

    @jax.jit
    def along(s):
        moved = jax.tree_util.tree_map(lambda p, d: p + s * d, params, direction)
        return total_log_likelihood(eqx.combine(moved, static), y)

    h = 1e-6
    numeric = (along(h) - along(-h)) / (2 * h)
    g_leaves = jax.tree_util.tree_leaves(eqx.partition(grads, eqx.is_inexact_array)[0])
    analytic = sum(jnp.vdot(g, d) for g, d in zip(g_leaves, jax.tree_util.tree_leaves(direction)))
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6)


def test_vmap_over_sequences_equals_one_call_per_sequence():
    model, rng = make_model(K=3, seed=3)
    Q, R, P0 = (np.asarray(x) for x in model.covariances())
    keys = jax.random.split(jax.random.key(0), 4)
    ys = jax.jit(jax.vmap(lambda k: sample_lgssm(k, model.A[0], model.C[0], Q, R, model.initial_mean, P0, 20)[1]))(keys)
    batched = eqx.filter_jit(lambda m, ys: jax.vmap(m)(ys))(model, ys)
    call = eqx.filter_jit(lambda m, y: m(y))
    for i in range(4):
        single = call(model, ys[i])
        np.testing.assert_allclose(batched.means[i], single.means, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(batched.log_likelihoods[i], single.log_likelihoods, rtol=1e-5, atol=1e-5)


def test_bad_inputs_raise_value_error():
    model, _ = make_model(K=2)
    with pytest.raises(ValueError, match="y must have shape"):
        model(np.zeros((5, N + 1)))
    with pytest.raises(ValueError, match="y must have shape"):
        model(np.zeros((2, 5, N)))
    with pytest.raises(ValueError, match="mask must be a bool array"):
        model(np.zeros((5, N)), np.ones(4, bool))
    with pytest.raises(ValueError, match="not finite"):
        model(np.full((5, N), np.nan))
    with pytest.raises(ValueError, match="num_modes"):
        LGVariant(M, N, 0, Q=np.eye(M), R=np.eye(N), key=jax.random.key(0))
    with pytest.raises(ValueError, match="Q must have shape"):
        LGVariant(M, N, 2, Q=np.eye(N), R=np.eye(N), key=jax.random.key(0))
    with pytest.raises(ValueError, match="R must be positive semi-definite"):
        LGVariant(M, N, 2, Q=np.eye(M), R=-np.eye(N), key=jax.random.key(0))
    with pytest.raises(ValueError, match="A must have shape"):
        LGVariant(M, N, 2, Q=np.eye(M), R=np.eye(N), A=np.zeros((3, M, M)), key=jax.random.key(0))

"""Transformer constructions (eq. 13-23) against the plain weighted softmax TD reference: Theorem 1 (App. F.6),
the invariant (37), Lemma 1, linear attention eq. (6), differentiability, bad inputs."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.ictd import softmax_td as st
from memlab.ictd import transformer as tf

D_FEAT, N_CTX, LAYERS, GAMMA, TRIALS = 8, 20, 10, 0.9, 50  # App. F.6
THEOREM_TOL, LEMMA_TOL = 1e-10, 1e-12


def random_prompt(key, d=D_FEAT, n=N_CTX, scale=None):
    """Features ~ U(-1, 1)^d * scale (default 1/sqrt(d), so ||x||^2 ~ 1/3), rewards ~ U(-1, 1)."""
    kx, kr = jax.random.split(key)
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    return jax.random.uniform(kx, (n + 1, d), minval=-1, maxval=1) * scale, jax.random.uniform(kr, (n,), minval=-1)


@functools.cache
def kind_results(kind):
    """Everything the Theorem 1 / Lemma 1 tests need for one kernel, from one jit-compiled vmap over trials.

    Called inside the x64 fixture (float64). Returns a dict of NumPy arrays with a leading trial axis.
    """
    V, A = tf.theta_star(D_FEAT)
    D = D_FEAT + 3

    def run(Z0, Vs, As, form, alphas=None, tau=1.0, rho=0.0):
        return tf.forward(Z0, Vs, As, GAMMA, None if Vs.ndim == 3 else LAYERS, form, kind, tau, rho, alphas)

    def one(key):
        kp, ku, ka, kv, kA = jax.random.split(key, 5)
        X, R = random_prompt(kp)
        Z0 = tf.make_prompt(X, R)
        out = {"X": X, "R": R, "tsm": run(Z0, V, A, "tsm"), "dual": run(Z0, V, A, "dual"),
               "y": st.weighted_softmax_td(X, R, GAMMA, LAYERS, kind)}
        # App. F.6 features U(-1, 1)^8: unnormalised kernels grow geometrically with alpha = 1
        Xu, Ru = random_prompt(ku, scale=1.0)
        out.update(unit_v=tf.readout(run(tf.make_prompt(Xu, Ru), V, A, "tsm")),
                   unit_y=st.weighted_softmax_td(Xu, Ru, GAMMA, LAYERS, kind))
        # eq. (104) tau, rho and per-layer learning rates alpha_l (V_l -> alpha_l V_l)
        alphas = jax.random.uniform(ka, (LAYERS,), minval=0.2, maxval=1.5)
        out.update(var=run(Z0, V, A, "tsm", alphas, 1.7, 0.35), var_dual=run(Z0, V, A, "dual", alphas, 1.7, 0.35),
                   var_y=st.weighted_softmax_td(X, R, GAMMA, LAYERS, kind, tau=1.7, alpha=alphas, rho=0.35))
        # Lemma 1 beyond theta*: its proof needs only that V's last row is its only non-zero row and the
        # invariant of (37); a random point of Theta^Looped (eq. 32), u = (1, 1, -1) + noise, A = diag(B, 0)
        u = jnp.array([1.0, 1.0, -1.0]) + 0.3 * jax.random.normal(kv, (LAYERS, 3))
        Vr = jnp.zeros((LAYERS, D, D)).at[:, -1, D_FEAT:].set(u)
        B = jnp.eye(D_FEAT) + 0.3 * jax.random.normal(kA, (LAYERS, D_FEAT, D_FEAT))
        Ar = jnp.zeros((LAYERS, D, D)).at[:, :D_FEAT, :D_FEAT].set(B)
        out.update(rand=run(Z0, Vr, Ar, "tsm", alphas), rand_dual=run(Z0, Vr, Ar, "dual", alphas))
        return out

    res = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(11), TRIALS))
    return {k: np.asarray(v) for k, v in res.items()}


def check_invariant_37(Zs, ys, X, R):
    """Every layer: rows 0..d unchanged (eq. 13), row d+2 = v_l(S_j), row d+1 = gamma v_l(S_{j+1}), 0 at the query."""
    d = X.shape[-1]
    np.testing.assert_array_equal(Zs[:, :, :d], np.broadcast_to(np.swapaxes(X, 1, 2)[:, None], Zs[:, :, :d].shape))
    np.testing.assert_array_equal(Zs[:, :, d, :-1], np.broadcast_to(R[:, None], Zs[:, :, d, :-1].shape))
    assert np.all(Zs[:, :, d, -1] == 0.0)
    np.testing.assert_allclose(Zs[:, :, d + 2], ys, rtol=0, atol=THEOREM_TOL)
    np.testing.assert_allclose(Zs[:, :, d + 1, :-1], GAMMA * ys[:, :, 1:], rtol=0, atol=THEOREM_TOL)
    assert np.all(Zs[:, :, d + 1, -1] == 0.0)


@pytest.mark.parametrize("kind", st.KERNELS)
@pytest.mark.parametrize("form", ["tsm", "dual"])
def test_theorem1_all_kernels(x64, kind, form):
    """App. F.6: d = 8, n = 20, L = 10, gamma = 0.9, alpha = 1, 50 trials; |v_l(S_n) - y_l| <= 1e-10 every layer,
    and the last two rows of every Z_l have the form (37). Features U(-1, 1)^8 / sqrt(8) (see kind_results)."""
    r = kind_results(kind)
    Zs, ys = r[form], r["y"]
    assert Zs.shape == (TRIALS, LAYERS + 1, D_FEAT + 3, N_CTX + 1) and Zs.dtype == np.float64
    v, y = Zs[:, :, -1, -1], ys[:, :, -1]
    err = np.abs(v - y)
    print(f"Theorem 1 {form}/{kind}: max log10 |v_l(S_n) - y_l| = {np.log10(max(err.max(), 1e-300)):.1f}, "
          f"max |y_l| = {np.abs(y).max():.3g}")
    assert err.max() <= THEOREM_TOL
    assert np.abs(y[:, -1] - y[:, 0]).max() > 0.1  # the values do move
    check_invariant_37(Zs, ys, r["X"], r["R"])


@pytest.mark.parametrize("kind", st.KERNELS)
def test_theorem1_unit_cube_features_relative(x64, kind):
    """Features U(-1, 1)^8 (values reach ~1e11 for relu/elu1/linear): exact to rounding relative to their size."""
    r = kind_results(kind)
    scale = 1.0 + np.abs(r["unit_y"]).max(axis=(1, 2))[:, None]
    assert np.all(np.abs(r["unit_v"] - r["unit_y"][:, :, -1]) / scale <= 1e-12)


@pytest.mark.parametrize("kind", st.KERNELS)
def test_theorem1_with_tau_rho_and_layer_rates(x64, kind):
    """Theorem 1 only uses the mask: it holds for eq. (104)'s tau, rho and per-layer alpha_l, both forms."""
    r = kind_results(kind)
    for form in ("var", "var_dual"):
        check_invariant_37(r[form], r["var_y"], r["X"], r["R"])


@pytest.mark.parametrize("kind", st.KERNELS)
def test_lemma1_dual_equals_tsm(x64, kind):
    """Lemma 1: dual-head (18) and single-head + TSM (23) agree at every layer (per-layer alphas included)."""
    r = kind_results(kind)
    assert np.abs(r["tsm"] - r["dual"]).max() <= LEMMA_TOL
    assert np.abs(r["var"] - r["var_dual"]).max() <= LEMMA_TOL
    scale = 1.0 + np.abs(r["rand"]).max(axis=(1, 2, 3))
    assert np.all(np.isfinite(r["rand"]))
    assert np.all(np.abs(r["rand"] - r["rand_dual"]).max(axis=(1, 2, 3)) / scale <= LEMMA_TOL)
    assert np.abs(r["rand"][:, -1, -1] - r["tsm"][:, -1, -1]).max() > 1e-3  # a different point of Theta^Looped


def test_lemma1_needs_the_invariant(x64):
    """The two layers differ on a prompt whose row d+1 is not gamma * (row d+2) Pi: the test can fail."""
    X, R = random_prompt(jax.random.key(15))
    Z = tf.make_prompt(X, R).at[-2, 3].set(1.0)
    V, A = tf.theta_star(D_FEAT)
    assert np.abs(np.asarray(tf.dual_head_layer(Z, V, A, GAMMA) - tf.single_head_tsm_layer(Z, V, A, GAMMA))).max() > 0.5


def test_linear_attention_is_batch_linear_td_and_differs_from_softmax(x64):
    X, R = random_prompt(jax.random.key(16))
    V, A = tf.theta_star(D_FEAT)
    Z0 = tf.make_prompt(X, R)
    alphas = jnp.linspace(1.0, 0.5, LAYERS)
    lin = tf.readout(tf.forward(Z0, V, A, GAMMA, LAYERS, kind="linear", tau=2.0, alphas=alphas))
    ws = st.batch_linear_td(X, R, GAMMA, LAYERS, tau=2.0, alpha=alphas)
    np.testing.assert_allclose(lin, ws @ X[-1], rtol=1e-12, atol=1e-13)  # <w_l, x_n>
    soft = tf.readout(tf.forward(Z0, V, A, GAMMA, LAYERS, kind="softmax", tau=2.0, alphas=alphas))
    assert np.abs(np.asarray(lin - soft))[1:].min() > 1e-3


def test_prompt_shift_and_parameters(x64):
    X, R = np.arange(12.0).reshape(4, 3), np.array([10.0, 20.0, 30.0])
    Z0 = np.asarray(tf.make_prompt(X, R))
    expected = np.vstack([X.T, [10, 20, 30, 0], np.zeros((2, 4))])  # eq. (13)
    np.testing.assert_array_equal(Z0, expected)
    Pi = np.asarray(tf.shift_matrix(3))
    M = np.arange(8.0).reshape(2, 4)
    np.testing.assert_array_equal(M @ Pi, [[1, 2, 3, 0], [5, 6, 7, 0]])  # eq. (16): left shift, right pad 0
    V, A = (np.asarray(a) for a in tf.theta_star(3, alpha=0.5))
    assert np.count_nonzero(V[:-1]) == 0 and list(V[-1]) == [0, 0, 0, 0.5, 0.5, -0.5]  # eq. (15)
    np.testing.assert_array_equal(A, np.diag([1, 1, 1, 0, 0, 0]))
    U, W = (np.asarray(a) for a in tf.tsm_matrices(3, 0.9))
    np.testing.assert_array_equal(U, np.diag([1, 1, 1, 1, 0, 1]))  # eq. (22), 0-based row d+1 cleared
    assert W[4, 5] == 0.9 and np.count_nonzero(W) == 1


def test_shared_parameters_equal_stacked(x64):
    X, R = random_prompt(jax.random.key(17))
    rng = np.random.default_rng(0)
    V, A = rng.normal(size=(11, 11)) * 0.1, rng.normal(size=(11, 11)) * 0.1
    shared = tf.forward(tf.make_prompt(X, R), V, A, GAMMA, num_layers=3, kind="elu1")
    stacked = tf.forward(tf.make_prompt(X, R), np.stack([V] * 3), np.stack([A] * 3), GAMMA, kind="elu1")
    assert shared.shape == (4, 11, 21)
    np.testing.assert_array_equal(np.asarray(shared), np.asarray(stacked))
    Z = tf.make_prompt(X, R)
    for l in range(3):  # the scan is the layer function applied L times
        Z = tf.single_head_tsm_layer(Z, V, A, GAMMA, "elu1")
        np.testing.assert_allclose(shared[l + 1], Z, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("kind", ["softmax", "rbf"])
def test_differentiable_in_V_and_A(x64, kind):
    """jax.grad of the readout through the scan matches central differences (what pretrain.py needs)."""
    X, R = random_prompt(jax.random.key(18), d=3, n=6)
    Z0 = tf.make_prompt(X, R)
    rng = np.random.default_rng(1)
    V, A = rng.normal(size=(2, 6, 6)) * 0.3, rng.normal(size=(2, 6, 6)) * 0.3

    def out(V, A, gamma):
        return tf.readout(tf.forward(Z0, V, A, gamma, form="tsm", kind=kind, tau=1.2)[-1])

    gV, gA = jax.jit(jax.grad(out, argnums=(0, 1)))(V, A, 0.9)  # gamma traced under jit
    out = jax.jit(out)
    eps = 1e-6
    for idx in [(0, 5, 3), (1, 5, 4), (1, 4, 0), (0, 2, 5)]:
        E = np.zeros_like(V)
        E[idx] = eps
        fd_V = (out(V + E, A, 0.9) - out(V - E, A, 0.9)) / (2 * eps)
        fd_A = (out(V, A + E, 0.9) - out(V, A - E, 0.9)) / (2 * eps)
        assert float(gV[idx]) == pytest.approx(float(fd_V), rel=1e-6, abs=1e-9)
        assert float(gA[idx]) == pytest.approx(float(fd_A), rel=1e-6, abs=1e-9)
    assert np.abs(np.asarray(gA)).max() > 1e-3


def test_float32_default(x64):
    with jax.enable_x64(False):
        X, R = random_prompt(jax.random.key(19))
        V, A = tf.theta_star(D_FEAT)
        Zs = tf.forward(tf.make_prompt(X, R), V, A, GAMMA, LAYERS)
        assert Zs.dtype == jnp.float32
        np.testing.assert_allclose(tf.readout(Zs), st.weighted_softmax_td(X, R, GAMMA, LAYERS)[:, -1], atol=1e-5)


def test_bad_inputs(x64):
    X, R = np.zeros((5, 2)), np.zeros(4)
    Z0 = tf.make_prompt(X, R)
    V, A = tf.theta_star(2)
    with pytest.raises(ValueError, match="unknown kernel"):
        tf.forward(Z0, V, A, 0.9, 2, kind="tanh")
    with pytest.raises(ValueError, match="unknown form"):
        tf.forward(Z0, V, A, 0.9, 2, form="triple")
    for gamma in (1.0, -0.5):
        with pytest.raises(ValueError, match="gamma"):
            tf.forward(Z0, V, A, gamma, 2)
        with pytest.raises(ValueError, match="gamma"):
            tf.dual_head_layer(Z0, V, A, gamma)
        with pytest.raises(ValueError, match="gamma"):
            tf.single_head_tsm_layer(Z0, V, A, gamma)
    with pytest.raises(ValueError, match="tau"):
        tf.forward(Z0, V, A, 0.9, 2, tau=0.0)
    with pytest.raises(ValueError, match="rho"):
        tf.forward(Z0, V, A, 0.9, 2, rho=1.2)
    with pytest.raises(ValueError, match="num_layers"):
        tf.forward(Z0, V, A, 0.9)
    with pytest.raises(ValueError, match="num_layers"):
        tf.forward(Z0, jnp.stack([V] * 3), jnp.stack([A] * 3), 0.9, num_layers=2)
    with pytest.raises(ValueError, match="alphas"):
        tf.forward(Z0, V, A, 0.9, 3, alphas=np.ones(2))
    with pytest.raises(ValueError, match="V and A"):
        tf.forward(Z0, np.zeros((4, 4)), np.zeros((4, 4)), 0.9, 2)
    with pytest.raises(ValueError, match="V and A"):
        tf.single_head_tsm_layer(Z0, V, np.zeros((5, 4)), 0.9)
    with pytest.raises(ValueError, match="Z0"):
        tf.forward(np.zeros((3, 5)), V, A, 0.9, 2)
    with pytest.raises(ValueError, match="NaN"):
        tf.forward(Z0.at[0, 0].set(jnp.nan), V, A, 0.9, 2)
    with pytest.raises(ValueError, match="rewards"):
        tf.make_prompt(X, np.zeros(5))
    with pytest.raises(ValueError, match="n must be"):
        tf.shift_matrix(0)
    with pytest.raises(ValueError, match="d must be"):
        tf.theta_star(0)


def test_eq1_attention_equals_the_V_A_reparameterisation(x64):
    """Attn_{W_v, W_q, W_k}(Z) of eq. (1) = V Z softmax(Z^T A Z + M) with V = W_v, A = W_k^T W_q (section 2.1)."""
    k = jax.random.split(jax.random.key(3), 4)
    D, n, width = 7, 9, 5
    Z = jax.random.normal(k[0], (D, n + 1))
    W_v, W_k, W_q = (jax.random.normal(kk, shape) for kk, shape in zip(k[1:], [(D, D), (width, D), (width, D)]))
    out = tf.attention(Z, W_v, W_k, W_q)
    S = np.asarray(Z).T @ np.asarray(W_k).T @ np.asarray(W_q) @ np.asarray(Z)
    S[-1, :] = -np.inf  # eq. (2): the query row of the score matrix is masked
    K = np.exp(S - S.max(axis=0)) / np.exp(S - S.max(axis=0)).sum(axis=0)  # column-wise softmax
    np.testing.assert_allclose(out, np.asarray(W_v) @ np.asarray(Z) @ K, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out, np.asarray(W_v @ Z @ tf.attention_matrix(Z, W_k.T @ W_q)), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="W_k and W_q"):
        tf.attention(Z, W_v, W_k, W_q[:, :-1])


def test_shift_columns_is_right_multiplication_by_pi():
    X = jax.random.normal(jax.random.key(0), (2, 5, 7))
    np.testing.assert_array_equal(tf.shift_columns(X), X @ tf.shift_matrix(6))

"""LRU, causal softmax / linear attention and gated DeltaNet against plain step-by-step loops in float64 NumPy."""

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from memlab.layers.attention import CausalLinearAttention, CausalSoftmaxAttention, feature_map, rotary
from memlab.layers.deltanet import GatedDeltaNet
from memlab.layers.lru import LRU

L, D = 7, 8


def _x(seed=0):
    return jax.random.normal(jax.random.key(seed), (L, D))


def _np(a):
    return np.asarray(a, np.float64)


def _heads(layer, x):
    """q, k, v (heads, L, d_h) in float64 from the layer's own projection weights."""
    proj = layer.proj
    qkv = _np(x) @ _np(proj.qkv.weight).T
    if getattr(layer, "conv_weight", None) is not None:  # gated DeltaNet's short convolution, then silu
        w = _np(layer.conv_weight)  # (3 D, K); w[:, -1] multiplies the current token
        conv = np.array([sum(w[:, -1 - j] * qkv[t - j] for j in range(w.shape[1]) if t >= j) for t in range(L)])
        qkv = conv / (1 + np.exp(-conv))
    h = proj.heads
    return [np.moveaxis(qkv[:, i * D:(i + 1) * D].reshape(L, h, D // h), 1, 0) for i in range(3)]


def _merge(layer, o):
    return np.moveaxis(o, 0, 1).reshape(L, D) @ _np(layer.proj.out.weight).T


@pytest.mark.parametrize("method", ["sequential", "parallel"])
def test_lru_is_its_recurrence(method):
    layer = LRU(D, 5, key=jax.random.key(1), r_min=0.5)
    x = _x()
    lam = np.exp(-np.exp(_np(layer.nu_log)) + 1j * np.exp(_np(layer.theta_log)))
    B = (_np(layer.B_re) + 1j * _np(layer.B_im)) * np.exp(_np(layer.gamma_log))[:, None]
    C = _np(layer.C_re) + 1j * _np(layer.C_im)
    h, ys = np.zeros(5, complex), []
    for u in _np(x):
        h = lam * h + B @ u
        ys.append((C @ h).real + _np(layer.D) * u)
    np.testing.assert_allclose(layer(x, method=method), np.array(ys), rtol=1e-4, atol=1e-5)
    assert np.all(np.abs(lam) < 0.99 + 1e-6) and np.all(np.abs(lam) >= 0.5 - 1e-6)
    assert layer.state_size() == 10


def _rotate(x, base=10_000.0):
    """RoPE as rotation matrices: pair i of position t turned by t base^(-2i/d) (x (heads, L, d), float64)."""
    out = np.empty_like(x)
    d = x.shape[-1]
    for t in range(x.shape[1]):
        for i in range(d // 2):
            a = t * base ** (-2 * i / d)
            rotation = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
            out[:, t, 2 * i:2 * i + 2] = x[:, t, 2 * i:2 * i + 2] @ rotation.T
    return out


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("positions", [True, False])
def test_softmax_attention_is_causal_softmax_attention(heads, positions):
    layer = CausalSoftmaxAttention(D, heads, key=jax.random.key(2), positions=positions)
    x = _x(1)
    q, k, v = _heads(layer, x)
    if positions:
        q, k = _rotate(q), _rotate(k)
    o = np.zeros_like(q)
    for h in range(heads):
        for t in range(L):
            s = q[h, t] @ k[h, :t + 1].T / np.sqrt(q.shape[-1])
            w = np.exp(s - s.max())
            o[h, t] = (w / w.sum()) @ v[h, :t + 1]
    np.testing.assert_allclose(layer(x), _merge(layer, o), rtol=1e-4, atol=1e-5)
    assert layer.state_size(10) == 2 * D * 10


def test_rotary_scores_depend_on_relative_position_only():
    q = jnp.broadcast_to(jax.random.normal(jax.random.key(0), (1, 1, 6)), (1, 20, 6))
    k = jnp.broadcast_to(jax.random.normal(jax.random.key(1), (1, 1, 6)), (1, 20, 6))
    scores = np.asarray((rotary(q) @ jnp.swapaxes(rotary(k), -1, -2))[0])
    np.testing.assert_allclose(scores[5, 2], scores[15, 12], rtol=1e-5)
    np.testing.assert_allclose(np.diag(scores), scores[0, 0], rtol=1e-5)
    assert abs(scores[5, 2] - scores[5, 4]) > 1e-3  # and they do depend on it


@pytest.mark.parametrize("heads, normalise", [(1, True), (2, True), (2, False)])
def test_linear_attention_is_its_recurrence(heads, normalise):
    layer = CausalLinearAttention(D, heads, key=jax.random.key(3), normalise=normalise)
    x = _x(2)
    q, k, v = _heads(layer, x)
    q, k = _np(feature_map(q)), _np(feature_map(k))
    o = np.zeros_like(v)
    for h in range(heads):
        S, z = np.zeros((D // heads, D // heads)), np.zeros(D // heads)
        for t in range(L):
            S, z = S + np.outer(v[h, t], k[h, t]), z + k[h, t]
            o[h, t] = S @ q[h, t] / (z @ q[h, t] if normalise else 1.0)
    np.testing.assert_allclose(layer(x), _merge(layer, o), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("heads, decay, delta, features, short_conv", [
    (1, True, True, "l2", 0), (2, True, True, "l2", 0), (2, False, True, "l2", 0), (2, True, False, "l2", 0),
    (1, False, False, "l2", 0), (1, False, False, "elu+1", 0), (2, True, False, "elu+1", 0), (1, True, True, "l2", 4),
    (2, True, True, "l2", 3)])
def test_gated_deltanet_is_the_gated_delta_rule(heads, decay, delta, features, short_conv):
    """The layer and its members without decay (DeltaNet) or delta term (gated linear attention) or both, with
    elu + 1 features in place of unit q and k, and with the short convolution in front."""
    layer = GatedDeltaNet(D, heads, key=jax.random.key(4), decay=decay, delta=delta, features=features,
                          short_conv=short_conv)
    x = _x(3)
    q, k, v = _heads(layer, x)
    if features == "l2":
        unit = lambda a: a / (np.linalg.norm(a, axis=-1, keepdims=True) + 1e-6)  # noqa: E731
        q, k = unit(q), unit(k)
    else:
        elu1 = lambda a: np.where(a > 0, a + 1.0, np.exp(a))  # noqa: E731
        q, k = elu1(q), elu1(k)
    gates = _np(x) @ _np(layer.gates.weight).T + _np(layer.gates.bias)
    alpha = np.exp(-np.logaddexp(0.0, gates[:, :heads])) if decay else np.ones((L, heads))
    beta = 1 / (1 + np.exp(-gates[:, -heads:]))
    o = np.zeros_like(v)
    for h in range(heads):
        S = np.zeros((D // heads, D // heads))
        for t in range(L):
            k_t = k[h, t]
            erase = np.eye(len(k_t)) - beta[t, h] * np.outer(k_t, k_t) if delta else np.eye(len(k_t))
            S = alpha[t, h] * S @ erase + beta[t, h] * np.outer(v[h, t], k_t)
            o[h, t] = S @ q[h, t]
    np.testing.assert_allclose(layer(x), _merge(layer, o), rtol=1e-4, atol=1e-5)
    assert layer.state_size() == heads * (D // heads) ** 2 + max(short_conv - 1, 0) * 3 * D


def test_gated_deltanet_without_a_short_convolution_keeps_its_parameters():
    """The option adds a parameter only when asked for: the layers without one have the leaves (and the numbers)
    they had, so their stored checkpoints load."""
    plain, conv = (GatedDeltaNet(D, 1, key=jax.random.key(4), short_conv=k) for k in (0, 4))
    assert plain.conv_weight is None and conv.conv_weight.shape == (3 * D, 4)
    assert len(jax.tree.leaves(conv)) == len(jax.tree.leaves(plain)) + 1
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(eqx.tree_at(lambda m: m.conv_weight, conv, None))):
        np.testing.assert_array_equal(a, b)
    for bad in (1, -2, 2.5, 2.0, "4", True):
        with pytest.raises(ValueError, match="short_conv must be 0"):
            GatedDeltaNet(D, 1, key=jax.random.key(0), short_conv=bad)


@pytest.mark.parametrize("length,chunk,decay,delta", [(37, 16, 1.0, True), (64, 64, 1.0, True), (64, 8, 30.0, True),
                                                     (5, 8, 1.0, True), (37, 16, 1.0, False), (64, 8, 30.0, False)])
def test_chunked_gated_delta_rule_is_the_recurrence(x64, length, chunk, decay, delta):
    """The chunkwise form (padding, strong decay within a chunk) equals the step-by-step scan, values and
    gradients, in float64."""
    from memlab.layers.deltanet import gated_delta_rule, gated_delta_rule_chunked

    ks = jax.random.split(jax.random.key(length), 5)
    q, k = (jax.random.normal(key, (length, 6)) for key in ks[:2])
    k = k / jnp.linalg.norm(k, axis=-1, keepdims=True)
    v = jax.random.normal(ks[2], (length, 4))
    log_alpha = -decay * jax.nn.softplus(jax.random.normal(ks[3], (length,)))
    beta = jax.nn.sigmoid(jax.random.normal(ks[4], (length,)))
    args = (q, k, v, log_alpha, beta)

    def plain(q, k, v, log_alpha, beta):
        return gated_delta_rule(q, k, v, jnp.exp(log_alpha), beta, delta)

    def chunked(*a):
        return gated_delta_rule_chunked(*a, chunk=chunk, delta=delta)

    np.testing.assert_allclose(chunked(*args), plain(*args), rtol=0, atol=1e-12)
    grads = [jax.grad(lambda *a, f=f: jnp.sum(jnp.sin(f(*a))), argnums=range(5))(*args) for f in (plain, chunked)]
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-11)


@pytest.mark.parametrize("n", [1, 2, 5, 16, 17, 37, 64])
def test_solve_unit_lower_equals_scipys_triangular_solve(x64, n):
    """The solve by the recursive inverse against scipy's LAPACK one (float64, a system like the chunk's: unit
    diagonal, below it entries up to 1 in size), and its gradient against JAX's triangular solve's."""
    from memlab.layers.deltanet import solve_unit_lower

    rng = np.random.default_rng(n)
    system = np.eye(n) + np.tril(rng.uniform(-1, 1, (n, n)), -1) + np.triu(rng.normal(size=(n, n)), 1)  # upper: unread
    rhs = rng.normal(size=(n, 3))
    expected = scipy.linalg.solve_triangular(system, rhs, lower=True, unit_diagonal=True)
    np.testing.assert_allclose(solve_unit_lower(jnp.asarray(system), jnp.asarray(rhs)), expected, rtol=1e-12,
                               atol=1e-12 * np.abs(expected).max())

    def loss(solve, system, rhs):
        return jnp.sum(jnp.sin(solve(system, rhs)))

    lapack = partial(jax.scipy.linalg.solve_triangular, lower=True, unit_diagonal=True)
    ours, theirs = (jax.grad(loss, argnums=(1, 2))(f, jnp.asarray(system), jnp.asarray(rhs))
                    for f in (solve_unit_lower, lapack))
    for a, b in zip(ours, theirs, strict=True):
        b = np.tril(b, -1) if b.shape == (n, n) else b  # JAX's solve leaves the unread diagonal a gradient too
        a = np.tril(a, -1) if a.shape == (n, n) else a
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11 * np.abs(b).max())


def test_solve_unit_lower_keeps_float32_accuracy_on_a_chunk_of_identical_keys():
    """beta = 0.99, alpha = 1, one key repeated over a 64-step chunk: every entry below the diagonal 0.99, where a
    power series of the strictly lower part loses 5e-4; the solve stays at LAPACK's float32 accuracy."""
    from memlab.layers.deltanet import solve_unit_lower

    n = 64
    system = np.eye(n) + 0.99 * np.tril(np.ones((n, n)), -1)
    rhs = np.random.default_rng(0).normal(size=(n, 8))
    expected = scipy.linalg.solve_triangular(system, rhs, lower=True, unit_diagonal=True)
    ours = np.asarray(solve_unit_lower(jnp.asarray(system, jnp.float32), jnp.asarray(rhs, jnp.float32)), float)
    assert np.abs(ours - expected).max() < 1e-6 * np.abs(expected).max()


def test_delta_rule_writes_a_value_it_can_read_back():
    """With beta = 1 and alpha = 1, reading with the key just written returns its value exactly."""
    from memlab.layers.deltanet import gated_delta_rule

    keys = jnp.eye(4)[jnp.array([0, 1, 0])]
    values = jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    o = gated_delta_rule(keys, keys, values, jnp.ones(3), jnp.ones(3))
    np.testing.assert_allclose(o, values, atol=1e-6)  # the third write replaces the first, not adds to it


def test_deltanet_features_other_than_unit_keys_need_no_delta_rule():
    with pytest.raises(ValueError, match="needs delta=False"):
        GatedDeltaNet(D, 1, key=jax.random.key(0), features="elu+1")
    with pytest.raises(ValueError, match="features must be one of"):
        GatedDeltaNet(D, 1, key=jax.random.key(0), delta=False, features="relu")


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="multiple of heads"):
        CausalSoftmaxAttention(6, 4, key=jax.random.key(0))
    with pytest.raises(ValueError, match="r_max must be a finite number"):
        LRU(4, 4, key=jax.random.key(0), r_max=1.0)


@pytest.mark.parametrize("heads, short_conv, features, delta", [(2, 3, "l2", True), (4, 5, "elu+1", False)])
def test_gated_deltanet_step_with_a_short_convolution_is_the_layer(x64, heads, short_conv, features, delta):
    """Several heads and the convolution's window in the state: ``step`` scanned from ``init_state()`` gives the
    layer's chunkwise output (float64, to rounding)."""
    layer = GatedDeltaNet(D, heads, key=jax.random.key(5), short_conv=short_conv, features=features, delta=delta)
    x = jnp.asarray(_x(6), jnp.float64)
    _, y = jax.lax.scan(lambda state, x_t: layer.step(state, x_t), layer.init_state(), x)
    np.testing.assert_allclose(y, layer(x), rtol=1e-10, atol=1e-10)

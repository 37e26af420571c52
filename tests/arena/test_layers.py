"""The arena's layers: every one maps (L, width) -> (L, width) causally; the trainable LOF with an HMM's own
matrices is that HMM's exact filter, the trainable ALF with a permutation backbone is memlab.belief's ALF."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.arena.hmm import random_hmm
from memlab.arena.layers import LAYERS, AdaptiveLogitFilter, LogitFilter, make_layer, state_size
from memlab.belief import ALF, alf_filter, log_belief


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_is_causal_and_keeps_the_shape(name):
    width, length, t = 8, 12, 7
    layer = make_layer(name, width, jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (length, width))
    changed = x.at[t].add(1.0)
    y, y_changed = layer(x), layer(changed)
    assert y.shape == (length, width) and bool(jnp.all(jnp.isfinite(y)))
    np.testing.assert_allclose(y[:t], y_changed[:t], atol=1e-6)  # nothing before t sees step t
    assert float(jnp.max(jnp.abs(y[t:] - y_changed[t:]))) > 1e-6  # and step t is seen


def test_logit_filter_with_an_hmms_matrices_is_its_exact_filter():
    hmm = random_hmm(3, 5, 4)
    ys = jax.random.randint(jax.random.PRNGKey(4), (40,), 0, 4)
    layer = LogitFilter(4, 5, key=jax.random.PRNGKey(5))
    # E (S, N): log E^T y for one-hot y is the emission Linear with weight (log E)^T and no bias
    parts = (jnp.log(hmm.T), jnp.log(hmm.pi0), jnp.log(hmm.E).T, jnp.zeros(5))
    layer = eqx.tree_at(lambda m: (m.transition_logits, m.initial_logits, m.emission.weight, m.emission.bias), layer,
                        parts)
    np.testing.assert_allclose(layer.log_beliefs(jax.nn.one_hot(ys, 4)), log_belief(hmm, ys).logits, atol=1e-4)


def _with_alf_matrices(layer, T, E, delta):
    """The layer with transition T (a column-stochastic matrix), emission log E^T (no bias) and delta."""
    parts = (jnp.log(T), jnp.log(delta) - jnp.log1p(-delta), jnp.log(E).T, jnp.zeros(T.shape[0]))
    return eqx.tree_at(lambda m: (m.transition_logits, m.delta_logit, m.emission.weight, m.emission.bias), layer,
                       parts)


def test_alf_with_a_permutation_backbone_is_memlab_belief_alf():
    hmm = random_hmm(3, 5, 4)
    P = np.eye(5)[:, [3, 0, 4, 1, 2]]  # a permutation of order 6 (a 2-cycle and a 3-cycle)
    ys = jax.random.randint(jax.random.PRNGKey(4), (40,), 0, 4)
    layer = _with_alf_matrices(AdaptiveLogitFilter(4, 5, key=jax.random.PRNGKey(5)), jnp.asarray(P, jnp.float32),
                               hmm.E, 0.3)
    alf = ALF.time_invariant(P, hmm.E, np.float32(0.3), w0=np.zeros(5))
    np.testing.assert_allclose(layer.logits(jax.nn.one_hot(ys, 4)), alf_filter(alf, ys).logits, atol=1e-5)


def test_alf_with_a_stochastic_transition_is_the_linear_recurrence():
    """The relaxed backbone (any column-stochastic T) against a float64 loop of w_t = (1 - delta) T w + delta l_t."""
    hmm = random_hmm(4, 5, 3)
    x = jax.random.normal(jax.random.PRNGKey(6), (30, 3))
    layer = _with_alf_matrices(AdaptiveLogitFilter(3, 5, key=jax.random.PRNGKey(7)), hmm.T, hmm.E, 0.2)
    T, log_E = np.asarray(hmm.T, np.float64), np.log(np.asarray(hmm.E, np.float64))
    w, expected = np.zeros(5), []
    for x_t in np.asarray(x, np.float64):
        w = 0.8 * T @ w + 0.2 * (x_t @ log_E)
        expected.append(w)
    np.testing.assert_allclose(layer.logits(x), np.array(expected), atol=1e-5)
    assert float(AdaptiveLogitFilter(3, 5, key=jax.random.PRNGKey(8)).delta) == pytest.approx(0.1)  # the PPO ALF's


@pytest.mark.parametrize("name", sorted(set(LAYERS) - {"attention"}))
def test_the_recurrent_form_equals_the_layer_and_holds_the_state_it_is_counted_with(name, x64):
    """``step`` scanned from ``init_state()`` gives ``layer(x)`` (float64, to rounding; gated DeltaNet's layer
    runs the chunkwise form, linear attention's the parallel one), and its state is ``state_size`` numbers."""
    width, length = 6, 23
    layer = make_layer(name, width, jax.random.PRNGKey(2))
    x = jax.random.normal(jax.random.PRNGKey(3), (length, width))
    state, y = jax.lax.scan(lambda state, x_t: layer.step(state, x_t), layer.init_state(), x)
    np.testing.assert_allclose(y, layer(x), rtol=1e-10, atol=1e-10)
    numbers = sum(a.size * (2 if jnp.iscomplexobj(a) else 1) for a in jax.tree.leaves(state))
    assert numbers == state_size(name, width, length)


# the registry's state sizes before the layers told their own (arena cells stored with them): the same numbers;
# and what each layer added since counts (gated-deltanet-conv: its S and the convolution's last 3 projections)
REGISTERED_STATE_SIZES = {
    "lru": lambda d, L: 2 * d, "lru-slow-modes": lambda d, L: 2 * d, "s5": lambda d, L: 2 * (d // 2 + d % 2),
    "mamba": lambda d, L: 2 * d * (16 + 3),
    "gru": lambda d, L: d, "lstm": lambda d, L: 2 * d, "attention": lambda d, L: 2 * d * L,
    "linear-attention": lambda d, L: d * d + d, "lof": lambda d, L: d, "alf": lambda d, L: d,
    "gated-deltanet": lambda d, L: d * d, "gated-deltanet-conv": lambda d, L: d * d + 3 * 3 * d,
    "unnormalised-linear-attention": lambda d, L: d * d,
    "deltanet": lambda d, L: d * d, "gated-linear-attention": lambda d, L: d * d,
    "l2-linear-attention": lambda d, L: d * d, "beta-linear-attention": lambda d, L: d * d,
}


def test_every_layer_tells_its_state_size_as_the_registry_counted_it():
    """memlab's layers say their state themselves (a ``state_size(length)`` method or ``init_state()``), and say
    what the registry's callables said, at several widths and lengths: the ``state`` of stored arena cells holds."""
    from memlab.arena.layers import MEMLAB_LAYERS

    assert set(REGISTERED_STATE_SIZES) == set(MEMLAB_LAYERS)
    assert all(LAYERS[name].state_size is None for name in MEMLAB_LAYERS)
    for name, registered in REGISTERED_STATE_SIZES.items():
        for width in (1, 3, 8, 17, 64):
            for length in (1, 32, 256):
                assert state_size(name, width, length) == registered(width, length), (name, width, length)


def test_a_registered_layer_tells_its_state_or_is_told_it(monkeypatch):
    """A layer with a recurrent form needs no state_size: its init_state() is counted; a layer that cannot tell
    takes the registry's callable, and without one its state size is a ValueError naming the way out."""
    from memlab.arena.layers import register_layer

    class Mean(eqx.Module):
        proj: eqx.nn.Linear

        def init_state(self):
            return jnp.zeros(()), jnp.zeros(self.proj.out_features)

        def step(self, state, x):
            count, total = state[0] + 1, state[1] + self.proj(x)
            return (count, total), total / count

        def __call__(self, x):
            return jax.lax.scan(self.step, self.init_state(), x)[1]

    for name in ("test-mean", "test-cumsum", "test-untold"):
        monkeypatch.delitem(LAYERS, name, raising=False)
    register_layer("test-mean", lambda width, key: Mean(eqx.nn.Linear(width, width, key=key)))
    assert state_size("test-mean", 4, 100) == 5
    cumsum = lambda width, key: lambda x: jnp.cumsum(x, 0)  # noqa: E731 -- no state_size, no recurrent form
    register_layer("test-cumsum", cumsum, state_size=lambda width, length: width)
    assert state_size("test-cumsum", 4, 100) == 4
    register_layer("test-untold", cumsum)
    with pytest.raises(ValueError, match="cannot tell its state size.*state_size=lambda width, length"):
        state_size("test-untold", 4, 100)

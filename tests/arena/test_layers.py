"""The arena's layers: every one maps (L, width) -> (L, width) causally; the trainable LOF with an HMM's own
matrices is that HMM's exact filter."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.arena.hmm import random_hmm
from memlab.arena.layers import LAYERS, LogitFilter, make_layer
from memlab.belief import log_belief


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
    np.testing.assert_allclose(layer.log_beliefs(jax.nn.one_hot(ys, 4)), log_belief(hmm, ys), atol=1e-4)

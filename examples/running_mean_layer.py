"""A memory layer of your own in the arena: `memlab run arena.leaderboard --plugin examples/running_mean_layer.py
--layers running-mean,gru,mamba` trains it beside memlab's layers and scores it against the optimal predictor."""

import equinox as eqx
import jax
import jax.numpy as jnp

from memlab.arena import register_layer


class RunningMean(eqx.Module):
    """The running mean of a linear map of the inputs: one sequence (L, width) -> (L, width)."""

    proj: eqx.nn.Linear

    def __call__(self, x):
        return jnp.cumsum(jax.vmap(self.proj)(x), 0) / jnp.arange(1, x.shape[0] + 1)[:, None]


# no state_size method and no init_state / step: the layer cannot tell its state, so the registry is told (a layer
# that can tell is registered without it)
register_layer("running-mean", lambda width, key: RunningMean(eqx.nn.Linear(width, width, key=key)),
               state_size=lambda width, length: width)

"""The PPO agent: a recurrent memory and two separate MLP decoders on its features (App. E.2.1, Table 1).

    features = memory.step(h, obs, prev_action, start)
    logits   = actor(features)     (A,)  categorical over env.num_actions   [128, 128], LeakyReLU
    value    = critic(features)    ()                                       [128, 128], LeakyReLU

Initialisation: orthogonal weights with gain sqrt(2) in the hidden layers, 0.01 in the actor's output layer (a
nearly uniform first policy) and 1 in the critic's, zero biases. The paper does not give it. sqrt(2) is PureJaxRL's
feed-forward PPO (ppo.py); its recurrent PPO (ppo_rnn.py, which Lu et al. 2023 build on) draws the hidden layer
after the memory with gain 2 instead. memlab keeps sqrt(2) for every hidden layer (both decoders have two hidden
layers here, Table 1's [128, 128], where ppo_rnn.py has one), and every RingWorld result was computed with it.
LeakyReLU has slope 0.01 for negative inputs (JAX's and Flax's default). Every leaf of an :class:`Agent` is an
array (the activation is code, not a field), so a training state holding one can be vmapped over seeds.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.rl.memory import Memory

__all__ = ["MLP", "Agent", "make_agent"]


class MLP(eqx.Module):
    """Linear layers with LeakyReLU between them: (in,) -> (out,)."""

    layers: tuple[eqx.nn.Linear, ...]

    def __init__(self, key: Array, sizes: tuple[int, ...], out_gain: float):
        keys = jax.random.split(key, len(sizes) - 1)
        layers = []
        for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
            gain = out_gain if i == len(sizes) - 2 else math.sqrt(2.0)
            k_lin, k_orth = jax.random.split(k)
            linear = eqx.nn.Linear(n_in, n_out, key=k_lin)
            weight = jax.nn.initializers.orthogonal(gain)(k_orth, (n_out, n_in), jnp.float32)
            layers.append(eqx.tree_at(lambda lin: (lin.weight, lin.bias), linear,
                                      (weight, jnp.zeros((n_out,), jnp.float32))))
        self.layers = tuple(layers)

    def __call__(self, x: Array) -> Array:
        for layer in self.layers[:-1]:
            x = jax.nn.leaky_relu(layer(x))
        return self.layers[-1](x)


class Agent(eqx.Module):
    memory: Memory
    actor: MLP
    critic: MLP

    def heads(self, features: Array) -> tuple[Array, Array]:
        """features (F,) -> (logits (A,), value ())."""
        return self.actor(features), self.critic(features)[0]


def make_agent(key: Array, memory: Memory, num_actions: int, actor_layers: tuple[int, ...],
               critic_layers: tuple[int, ...]) -> Agent:
    """An :class:`Agent` around ``memory`` with freshly initialised decoders."""
    k_actor, k_critic = jax.random.split(key)
    features = memory.num_features
    return Agent(memory,
                 MLP(k_actor, (features, *actor_layers, num_actions), out_gain=0.01),
                 MLP(k_critic, (features, *critic_layers, 1), out_gain=1.0))

"""PPO with a recurrent memory (Schulman et al. 2017), in the PureJaxRL style (Lu et al. 2023, ``ppo_rnn.py``).

``make_train(config, env, env_params, make_memory, optimizer=None)`` returns a :class:`PPO` whose
``init(key) -> TrainState``, ``update(state) -> (state, metrics)``, ``update_chunk(state, n)`` and
``train(key) -> TrainResult`` are pure and jittable; they vmap over seeds (``jax.vmap(ppo.init)(keys)``,
``jax.vmap(partial(ppo.update_chunk, num_updates=n))(states)``). One update is a rollout, GAE and ``epochs`` passes
of minibatches split along the environment axis, so a memory trains by BPTT over the whole unroll (:class:`PPO`
says each step and every metric).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax import Array

from memlab.rl.agent import Agent, make_agent
from memlab.rl.config import PPOConfig
from memlab.rl.gae import gae
from memlab.rl.memory import Memory
from memlab.rl.rollout import Actors, Transition, bootstrap_value, rollout

__all__ = ["PPO", "Batch", "TrainResult", "TrainState", "evaluate", "make_train", "ppo_loss", "raw_key_data"]


class TrainState(NamedTuple):
    agent: Agent  # memory, actor, critic (all arrays, trained or not)
    opt_state: Any  # the optimizer's state for the trained arrays
    actors: Actors  # environment states, observations, memory hidden states, running episode returns
    last_return: Array  # () the last reported mean episodic return (the placeholder when none finished)
    key: Array  # (2,) uint32 raw key data (serialisable)
    update: Array  # () int32 updates done


class TrainResult(NamedTuple):
    """What a whole training run returns (``PPO.train``, ``train_with_checkpoints``): the final ``state``
    (``state.agent`` the trained agent) and ``metrics``, every metric of every update, arrays with the updates on the
    last axis (:class:`PPO` names them)."""

    state: TrainState
    metrics: dict


class Batch(NamedTuple):
    """One update's data, environment-major: leaves (N, ...)."""

    memory_state: Any  # (N, ...) hidden state at the start of the unroll
    transitions: Transition  # leaves (N, L, ...)
    advantages: Array  # (N, L)
    targets: Array  # (N, L)


def trainable_spec(agent: Agent):
    """The ``eqx.partition`` filter of the optimised arrays: inexact arrays of the decoders, and of the memory
    only when it is trainable."""
    memory_trains = agent.memory.trainable
    return Agent(jax.tree.map(lambda x: memory_trains and eqx.is_inexact_array(x), agent.memory),
                 jax.tree.map(eqx.is_inexact_array, agent.actor), jax.tree.map(eqx.is_inexact_array, agent.critic))


def evaluate(agent: Agent, memory_state, transitions: Transition) -> tuple[Array, Array]:
    """Logits (n, L, A) and values (n, L) of stored unrolls under ``agent``: BPTT through ``memory.sequence``
    from ``memory_state`` (n, ...) for a trainable memory, the stored features otherwise."""
    if agent.memory.trainable:
        def features_of(h, obs, prev_actions, starts):
            return agent.memory.sequence(h, obs, prev_actions, starts)[1]

        features = jax.vmap(features_of)(memory_state, transitions.obs, transitions.prev_action, transitions.start)
    else:
        features = jax.lax.stop_gradient(transitions.features)
    # one vmap over the flattened (n * L, F) batch: XLA then emits plain matrix products (a nested vmap made
    # the gradient step markedly slower on CPU)
    logits, values = jax.vmap(agent.heads)(features.reshape(-1, features.shape[-1]))
    return logits.reshape(*features.shape[:-1], -1), values.reshape(features.shape[:-1])


def ppo_loss(params: Agent, static: Agent, batch: Batch, config: PPOConfig) -> tuple[Array, dict]:
    """The PPO loss of one minibatch and its parts."""
    t = batch.transitions
    logits, values = evaluate(eqx.combine(params, static), batch.memory_state, t)
    log_probs = jax.nn.log_softmax(logits)
    log_ratio = jnp.take_along_axis(log_probs, t.action[..., None], axis=-1)[..., 0] - t.log_prob
    ratio = jnp.exp(log_ratio)
    adv = (batch.advantages - batch.advantages.mean()) / (batch.advantages.std() + 1e-8)
    clipped_ratio = jnp.clip(ratio, 1.0 - config.clip_eps, 1.0 + config.clip_eps)
    policy_loss = -jnp.mean(jnp.minimum(ratio * adv, clipped_ratio * adv))
    value_error = jnp.square(values - batch.targets)
    if config.clip_value_loss:
        clipped_values = t.value + jnp.clip(values - t.value, -config.clip_eps, config.clip_eps)
        value_error = jnp.maximum(value_error, jnp.square(clipped_values - batch.targets))
    value_loss = 0.5 * jnp.mean(value_error)
    entropy = -jnp.mean(jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1))
    loss = policy_loss + config.value_coef * value_loss - config.entropy_coef * entropy
    parts = {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy,
             "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
             "clip_fraction": jnp.mean((jnp.abs(ratio - 1.0) > config.clip_eps).astype(jnp.float32))}
    return loss, parts


def _optimise(config: PPOConfig, optimiser, agent: Agent, opt_state, batch: Batch, key: Array):
    """``epochs`` x ``minibatches`` optimizer steps on ``batch`` -> (agent, opt_state, mean loss parts)."""
    params, static = eqx.partition(agent, trainable_spec(agent))
    n, m = config.num_envs, config.minibatches

    def minibatch_step(carry, minibatch):
        params, opt_state = carry
        (_, parts), grads = jax.value_and_grad(ppo_loss, has_aux=True)(params, static, minibatch, config)
        updates, opt_state = optimiser.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), {**parts, "grad_norm": optax.tree.norm(grads)}

    def epoch(carry, key):
        order = jax.random.permutation(key, n)
        minibatches = jax.tree.map(lambda x: x[order].reshape(m, n // m, *x.shape[1:]), batch)
        return jax.lax.scan(minibatch_step, carry, minibatches)

    (params, opt_state), parts = jax.lax.scan(epoch, (params, opt_state), jax.random.split(key, config.epochs))
    return eqx.combine(params, static), opt_state, jax.tree.map(jnp.mean, parts)


def _update(config: PPOConfig, env, env_params, optimiser, state: TrainState) -> tuple[TrainState, dict]:
    key, k_rollout, k_epochs = jax.random.split(jax.random.wrap_key_data(state.key), 3)
    agent = state.agent
    actors, transitions, return_sum, count = rollout(agent, env, env_params, state.actors, k_rollout, config.unroll)
    last_value = bootstrap_value(agent, actors)
    advantages, targets = gae(transitions.reward, transitions.value, transitions.done, last_value,
                              config.gamma, config.gae_lambda)  # (L, N)
    env_major = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), (transitions, advantages, targets))
    batch = Batch(state.actors.memory_state, *env_major)
    agent, opt_state, parts = _optimise(config, optimiser, agent, state.opt_state, batch, k_epochs)
    episode_return = jnp.where(count > 0, return_sum / jnp.maximum(count, 1), state.last_return)
    metrics = {"episode_return": episode_return, "episodes": count,
               "env_steps": (state.update + 1) * (config.num_envs * config.unroll), **parts}
    if hasattr(agent.memory, "diagnostics"):
        metrics.update({f"memory_{name}": value for name, value in agent.memory.diagnostics().items()})
    new_state = TrainState(agent, opt_state, actors, episode_return, jax.random.key_data(key), state.update + 1)
    return new_state, metrics


def raw_key_data(key: Array) -> Array:
    """Raw uint32 data of a typed key (``jax.random.key``) or a raw one (``jax.random.PRNGKey``)."""
    return jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else jnp.asarray(key)


def _init(config: PPOConfig, env, env_params, make_memory, optimiser, key: Array) -> TrainState:
    key = jax.random.wrap_key_data(raw_key_data(key))
    k_memory, k_agent, k_env, k_train = jax.random.split(key, 4)
    agent = make_agent(k_agent, make_memory(k_memory), env.num_actions, config.actor_layers, config.critic_layers)
    opt_state = optimiser.init(eqx.filter(agent, trainable_spec(agent)))
    n = config.num_envs
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_env, n), env_params)
    memory_state = jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), agent.memory.init_state())
    actors = Actors(env_state, obs, jnp.zeros((n,), jnp.int32), jnp.ones((n,), bool), memory_state,
                    jnp.zeros((n,), jnp.float32))
    return TrainState(agent, opt_state, actors, jnp.zeros((), jnp.float32), jax.random.key_data(k_train),
                      jnp.zeros((), jnp.int32))


@dataclasses.dataclass(frozen=True)
class PPO:
    """The pure functions of one PPO run; none is jitted here.

    One ``update`` (everything inside one ``jit``: scans over time, epochs and minibatches, no Python loop):

    1. rollout of ``unroll`` steps in ``num_envs`` environments (:mod:`memlab.rl.rollout`), remembering the
       memory's hidden state at the start of the unroll;
    2. GAE (:mod:`memlab.rl.gae`) bootstrapped from the value of the observation after the unroll;
    3. ``epochs`` passes, each over ``minibatches`` minibatches taken ALONG THE ENVIRONMENT AXIS (a random split
       of the environments; each keeps its whole unroll) so the memory can be trained by BPTT over the full
       unroll: ``memory.sequence`` re-runs from the stored initial state with the stored starts. For a fixed
       memory (``trainable=False``) the rollout's features are used instead, under ``stop_gradient``, and the
       memory's arrays are not among the optimised parameters.

    Loss = clipped surrogate + value_coef * value loss - entropy_coef * entropy (PureJaxRL's, see
    :mod:`memlab.rl.config`), global-norm clipping, Adam (or the ``optimizer`` given to :func:`make_train`). Only
    inexact arrays are optimised (``eqx.partition``).

    Metrics of an update (scalars): ``episode_return`` (mean return of the episodes that finished during the
    unroll; when none finished it repeats the last reported mean, 0.0 before the first finished episode, so it is
    never NaN: read it together with ``episodes``), ``episodes`` (their count), ``env_steps`` (cumulative), and the
    means over all epochs and minibatches of ``loss``, ``policy_loss``, ``value_loss``, ``entropy``, ``approx_kl``
    (the estimator mean((r - 1) - log r), r the probability ratio), ``clip_fraction`` and ``grad_norm`` (before
    clipping). A memory with a ``diagnostics()`` method (returning a dict of scalars) adds ``memory_<name>``,
    measured after the update.
    """

    config: PPOConfig
    init: Callable[[Array], TrainState]  # key -> state
    update: Callable[[TrainState], tuple[TrainState, dict]]  # one rollout + optimisation

    def update_chunk(self, state: TrainState, num_updates: int = 1) -> tuple[TrainState, dict]:
        """``num_updates`` (static) updates in one scan; metrics stacked to (num_updates,)."""
        return jax.lax.scan(lambda s, _: self.update(s), state, None, length=num_updates)

    def train(self, key: Array) -> TrainResult:
        """The whole run, ``config.num_updates`` updates, in one scan."""
        return TrainResult(*self.update_chunk(self.init(key), self.config.num_updates))


def make_train(config: PPOConfig, env, env_params, make_memory: Callable[[Array], Memory], *,
               optimizer: optax.GradientTransformation | None = None) -> PPO:
    """PPO for ``env`` (gymnax 1.0 API with auto-reset: ``reset(key, params)``, ``step(key, state, action,
    params)`` -> (obs, state, reward, terminated, truncated, info); ``num_actions``; float vector observations)
    with the memory ``make_memory(key)``. Every leaf of the memory must be an array (or a static field).
    ``optimizer``: the update of every minibatch step; default Table 1's, global-norm clipping at
    ``config.max_grad_norm`` then Adam at ``config.learning_rate`` with ``config.adam_eps``."""
    config.validate()
    optimiser = optimizer if optimizer is not None else optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.learning_rate, eps=config.adam_eps))
    return PPO(config,
               init=lambda key: _init(config, env, env_params, make_memory, optimiser, key),
               update=lambda state: _update(config, env, env_params, optimiser, state))

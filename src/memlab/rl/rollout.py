"""Collecting one unroll: ``lax.scan`` over time, every step vmapped over the environments.

At step t each environment's memory gets ``(h, obs_t, prev_action_t, start_t)``: ``start_t`` says ``obs_t`` is
the first observation of an episode (True at the very first step and after every done) and ``prev_action_t``
is the action that led to ``obs_t`` (0 at a start). The environment auto-resets (gymnax 1.0 API), so after a
done the returned observation is already the next episode's first. ``done_t = terminated_t | truncated_t``
ends the episode at transition t (see :mod:`memlab.rl.gae` for how it enters the advantages).

Episodic returns are accumulated per environment across unrolls; an episode counts in the update during
whose unroll it FINISHED (its return may include rewards of earlier unrolls).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import Array

from memlab.rl.agent import Agent

__all__ = ["Actors", "Transition", "bootstrap_value", "rollout", "select_action"]


class Actors(NamedTuple):
    """What carries over between steps (and unrolls) for N environments; leaves have leading axis N."""

    env_state: Any
    obs: Array  # (N, O) the observation the agent acts on next
    prev_action: Array  # (N,) int32, the action that led to obs (0 at a start)
    start: Array  # (N,) bool, obs is the first observation of an episode
    memory_state: Any  # (N, ...) the memory's hidden state before it sees obs
    episode_return: Array  # (N,) reward so far in the running episode


class Transition(NamedTuple):
    """One step of every environment: leaves (N, ...); a rollout stacks them to (L, N, ...)."""

    obs: Array
    prev_action: Array
    start: Array
    action: Array  # (N,) int32
    log_prob: Array  # (N,) log pi(action | history) under the rollout's parameters
    value: Array  # (N,)
    reward: Array  # (N,)
    done: Array  # (N,) bool: the episode ended at this transition
    features: Array | None  # (N, F) memory features, stored only for a fixed (trainable=False) memory


def select_action(agent: Agent, key: Array, actors: Actors) -> tuple[Any, Array, Array, Array, Array, Array]:
    """Memory step and policy for every environment: -> (memory_state, features, logits, action, log_prob,
    value) with leading axis N."""
    memory_state, features = jax.vmap(agent.memory.step)(actors.memory_state, actors.obs, actors.prev_action,
                                                         actors.start)
    logits, value = jax.vmap(agent.heads)(features)  # (N, A), (N,)
    action = jax.random.categorical(key, logits).astype(jnp.int32)
    log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=1)[:, 0]
    return memory_state, features, logits, action, log_prob, value


def bootstrap_value(agent: Agent, actors: Actors) -> Array:
    """The critic's value (N,) of the observations the agent would act on next (after an unroll); the memory
    state this step produces is discarded (the next unroll takes the same step again)."""
    _, features = jax.vmap(agent.memory.step)(actors.memory_state, actors.obs, actors.prev_action, actors.start)
    return jax.vmap(agent.heads)(features)[1]


def rollout(agent: Agent, env, env_params, actors: Actors, key: Array, unroll: int
            ) -> tuple[Actors, Transition, Array, Array]:
    """``unroll`` steps of every environment.

    **Returns:** ``(actors, transitions, finished_return_sum, finished_count)``: the carry after the unroll,
    the transitions stacked to (L, N, ...), and the summed returns and number of the episodes that finished.
    """
    store_features = not agent.memory.trainable
    num_envs = actors.obs.shape[0]

    def step(carry, key):
        actors, return_sum, count = carry
        k_act, k_env = jax.random.split(key)
        memory_state, features, _, action, log_prob, value = select_action(agent, k_act, actors)
        obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_env, num_envs), actors.env_state, action, env_params)
        done = jnp.logical_or(terminated, truncated)
        reward = jnp.asarray(reward, jnp.float32)
        episode_return = actors.episode_return + reward
        transition = Transition(actors.obs, actors.prev_action, actors.start, action, log_prob, value, reward,
                                done, features if store_features else None)
        actors = Actors(env_state, obs, jnp.where(done, 0, action), done, memory_state,
                        jnp.where(done, 0.0, episode_return))
        carry = (actors, return_sum + jnp.sum(jnp.where(done, episode_return, 0.0)),
                 count + jnp.sum(done, dtype=jnp.int32))
        return carry, transition

    init = (actors, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))
    (actors, return_sum, count), transitions = jax.lax.scan(step, init, jax.random.split(key, unroll))
    return actors, transitions, return_sum, count

"""PPO with a recurrent memory: config checks, the episodic-return metric, rollout/update consistency, resume
bit-identity, seeds under vmap, learning to the known optimum, and BPTT through a trainable memory.

The environments below are tiny gymnax-1.0-style tasks (auto-reset) with known optimal returns:
  MatchEnv   fully observed: the observation is a one-hot cue redrawn every step, reward 1/H when the action
             names it; optimum 1, uniform policy 0.5.
  RecallEnv  needs memory: the cue is shown at the first step only (then zeros), reward 1/H for naming it at
             every step; optimum 1, a memoryless agent (1 + (H - 1)/2)/H.
  CountEnv   reward t + 1 at the (t + 1)-th step of an episode of H steps, whatever the action: every episode
             returns H (H + 1) / 2, so the metric's counting is checked exactly.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from memlab import progress
from memlab.rl import Memory, ObservationMemory, PPOConfig, evaluate, make_train, metrics_path, train_with_checkpoints
from memlab.rl.rollout import rollout


class EnvState(NamedTuple):
    cue: jax.Array  # () int32
    t: jax.Array  # () int32, steps taken in the episode


@dataclasses.dataclass(frozen=True)
class CueEnv:
    """Base of the test tasks: a binary cue, episodes of ``horizon`` steps, auto-reset."""

    horizon: int = 4
    num_actions: int = 2

    @property
    def obs_size(self) -> int:
        return 3

    def observe(self, state: EnvState) -> jax.Array:
        return jnp.concatenate([jax.nn.one_hot(state.cue, 2), (state.t == 0)[None].astype(jnp.float32)])

    def reset(self, key, params=None):
        state = EnvState(jax.random.bernoulli(key).astype(jnp.int32), jnp.zeros((), jnp.int32))
        return self.observe(state), state

    def next_cue(self, key, state: EnvState) -> jax.Array:
        return state.cue

    def reward(self, state: EnvState, action) -> jax.Array:
        return (action == state.cue).astype(jnp.float32) / self.horizon

    def step(self, key, state: EnvState, action, params=None):
        k_cue, k_reset = jax.random.split(key)
        reward = self.reward(state, action)
        done = state.t + 1 >= self.horizon
        stepped = EnvState(self.next_cue(k_cue, state), state.t + 1)
        _, fresh = self.reset(k_reset)
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, stepped)
        return self.observe(state), state, reward, done, jnp.zeros((), bool), {}


class MatchEnv(CueEnv):
    def next_cue(self, key, state):
        return jax.random.bernoulli(key).astype(jnp.int32)


class RecallEnv(CueEnv):
    def observe(self, state):
        first = (state.t == 0).astype(jnp.float32)
        return jnp.concatenate([jax.nn.one_hot(state.cue, 2) * first, first[None]])


class CountEnv(CueEnv):
    def reward(self, state, action):
        return (state.t + 1).astype(jnp.float32)


class LinearRNN(Memory):
    """h_t = A h_{t-1} + B [obs_t, onehot(prev_action_t)] (h reset to 0 at a start); features [h_t, obs_t]."""

    A: jax.Array
    B: jax.Array
    num_actions: int = eqx.field(static=True)

    def __init__(self, key, obs_size: int, num_actions: int, hidden: int = 8):
        k_a, k_b = jax.random.split(key)
        self.A = 0.5 * jnp.eye(hidden) + 0.1 * jax.random.normal(k_a, (hidden, hidden)) / hidden**0.5
        self.B = jax.random.normal(k_b, (hidden, obs_size + num_actions)) / (obs_size + num_actions) ** 0.5
        self.num_actions = num_actions

    @property
    def num_features(self) -> int:
        return self.A.shape[0] + self.B.shape[1] - self.num_actions

    def init_state(self):
        return jnp.zeros(self.A.shape[0])

    def step(self, h, obs, prev_action, start):
        h = jnp.where(start, 0.0, h)
        h = self.A @ h + self.B @ jnp.concatenate([obs, jax.nn.one_hot(prev_action, self.num_actions)])
        return h, jnp.concatenate([h, obs])

    def diagnostics(self):
        return {"max_abs_A": jnp.max(jnp.abs(self.A))}


TINY = PPOConfig(num_envs=4, unroll=8, total_steps=4 * 8 * 3, epochs=2, minibatches=2, learning_rate=1e-3,
                 actor_layers=(16,), critic_layers=(16,))


def observation_memory(env):
    return lambda key: ObservationMemory(env.obs_size)


def linear_rnn(env):
    return lambda key: LinearRNN(key, env.obs_size, env.num_actions)


# ---------------------------------------------------------------- config


def test_defaults_are_table_1():
    c = PPOConfig()
    assert (c.learning_rate, c.num_envs, c.unroll, c.total_steps, c.epochs, c.minibatches) == \
           (5e-5, 64, 1024, 30_000_000, 30, 8)
    assert (c.gamma, c.gae_lambda, c.clip_eps, c.entropy_coef, c.value_coef, c.max_grad_norm) == \
           (0.99, 1.0, 0.2, 0.0, 1.0, 0.5)
    assert c.actor_layers == c.critic_layers == (128, 128)
    assert c.num_updates == 30_000_000 // (64 * 1024) == 457
    assert c.envs_per_minibatch == 8


@pytest.mark.parametrize("field, value, match", [
    ("num_envs", 0, "num_envs"), ("unroll", 2.0, "unroll"), ("minibatches", 3, "multiple of minibatches"),
    ("total_steps", 100, "less than one update"), ("learning_rate", 0.0, "learning_rate"),
    ("gamma", 1.5, "gamma"), ("gae_lambda", -0.1, "gae_lambda"), ("clip_eps", float("nan"), "clip_eps"),
    ("entropy_coef", -1.0, "entropy_coef"), ("actor_layers", (), "actor_layers"),
    ("critic_layers", (128, 0), "critic_layers"), ("max_grad_norm", True, "max_grad_norm"),
    ("clip_value_loss", 1, "clip_value_loss"),
])
def test_config_rejects(field, value, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(PPOConfig(), **{field: value})


# ---------------------------------------------------------------- metrics and consistency


def test_episode_return_metric_counts_finished_episodes():
    """Episodes of 5 steps returning 1+2+3+4+5 = 15, unrolls of 2: they finish during the 3rd, 5th, 8th, ...
    unroll (step 5, 10, 15, ...), and the count is 0 in between with the last mean repeated (0 at first)."""
    env = CountEnv(horizon=5)
    config = dataclasses.replace(TINY, num_envs=2, unroll=2, minibatches=1, total_steps=2 * 2 * 8)
    ppo = make_train(config, env, None, observation_memory(env))
    _, metrics = jax.jit(ppo.train)(jax.random.key(0))
    finished = np.array([0, 0, 2, 0, 2, 0, 0, 2])  # steps 5, 10, 15 fall in unrolls 3, 5, 8 (1-based)
    np.testing.assert_array_equal(metrics["episodes"], finished)
    np.testing.assert_array_equal(metrics["episode_return"], [0, 0, 15, 15, 15, 15, 15, 15])
    np.testing.assert_array_equal(metrics["env_steps"], 4 * np.arange(1, 9))
    assert all(np.all(np.isfinite(v)) for v in metrics.values())


@pytest.mark.parametrize("make_memory", [observation_memory, linear_rnn])
def test_update_recomputes_the_rollout(make_memory):
    """At the rollout's parameters, re-running the stored unrolls (BPTT through memory.sequence from the stored
    initial state and starts, or the stored features) gives back the rollout's log-probabilities and values."""
    env = RecallEnv(horizon=3)
    ppo = make_train(TINY, env, None, make_memory(env))
    state = ppo.init(jax.random.key(1))

    @jax.jit
    def recompute(agent, actors, key):
        actors_after, t, _, _ = rollout(agent, env, None, actors, key, 11)
        env_major = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), t)
        return actors_after, t, env_major, evaluate(agent, actors.memory_state, env_major)

    actors = recompute(state.agent, state.actors, jax.random.key(2))[0]  # mid-stream: memory states not initial
    _, t, env_major, (logits, values) = recompute(state.agent, actors, jax.random.key(3))
    log_probs = jnp.take_along_axis(jax.nn.log_softmax(logits), env_major.action[..., None], -1)[..., 0]
    assert bool(jnp.any(t.start[1:]))  # episodes start inside the unroll
    np.testing.assert_allclose(values, env_major.value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_probs, env_major.log_prob, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(t.prev_action[1:], jnp.where(t.done[:-1], 0, t.action[:-1]))
    np.testing.assert_array_equal(t.start[1:], t.done[:-1])


def test_trainable_memory_gets_finite_gradients_and_logs_diagnostics():
    env = RecallEnv(horizon=3)
    ppo = make_train(TINY, env, None, linear_rnn(env))
    state = ppo.init(jax.random.key(3))
    new_state, metrics = jax.jit(ppo.update)(state)
    assert all(np.isfinite(np.asarray(v)).all() for v in metrics.values())
    assert float(metrics["grad_norm"]) > 0
    moved = jnp.abs(new_state.agent.memory.A - state.agent.memory.A).max()
    assert 0 < float(moved) < 1.0 and bool(jnp.all(jnp.isfinite(new_state.agent.memory.B)))
    np.testing.assert_allclose(metrics["memory_max_abs_A"], jnp.abs(new_state.agent.memory.A).max())


def test_fixed_memory_arrays_are_not_trained():
    """A memory with trainable=False keeps its arrays (here a LinearRNN declared fixed)."""
    class FixedRNN(LinearRNN):
        trainable = False

    env = RecallEnv(horizon=3)
    ppo = make_train(TINY, env, None, lambda key: FixedRNN(key, env.obs_size, env.num_actions))
    state = ppo.init(jax.random.key(4))
    new_state, _ = jax.jit(ppo.update)(state)
    np.testing.assert_array_equal(new_state.agent.memory.A, state.agent.memory.A)
    assert float(jnp.abs(new_state.agent.actor.layers[0].weight - state.agent.actor.layers[0].weight).max()) > 0


# ---------------------------------------------------------------- seeds, checkpoints, learning


RESUME_CONFIG = dataclasses.replace(TINY, total_steps=4 * 8 * 5)  # 5 updates: chunks of 2, 2, 1


def _resume_run(path, key, **kwargs):
    env = RecallEnv(horizon=3)
    return train_with_checkpoints(RESUME_CONFIG, env, None, linear_rnn(env), key, path, **kwargs)


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory):
    """An uninterrupted run of two seeds at once (vmapped init and update_chunk) in chunks of 2 updates."""
    keys = jax.random.split(jax.random.key(6), 2)
    return keys, *_resume_run(tmp_path_factory.mktemp("whole") / "whole.eqx", keys, chunk_updates=2)


def test_vmap_over_seeds_matches_single_runs(tmp_path, two_seeds):
    keys, states, metrics = two_seeds
    assert metrics["loss"].shape == (2, 5)
    assert not np.allclose(states.agent.memory.A[0], states.agent.memory.A[1])
    single, single_metrics = _resume_run(tmp_path / "single.eqx", keys[1], chunk_updates=5)
    assert single_metrics["loss"].shape == (5,)
    np.testing.assert_allclose(states.agent.memory.A[1], single.agent.memory.A, rtol=1e-5, atol=1e-6)
    for name in ("episode_return", "value_loss"):
        np.testing.assert_allclose(metrics[name][1], single_metrics[name], rtol=1e-4)


def test_chunks_report_to_memlabs_progress_channel_only_where_one_is_open(tmp_path, two_seeds):
    """Without a ``progress`` function, each chunk's end goes to memlab.progress (the last one always): silent in a
    library call, a line per chunk at most every REPORT_EVERY_S in a run that shows its cells' progress."""
    keys, _, metrics = two_seeds
    lines = []
    with progress.cell_running("ppo"), progress.sending_to(lines.append):
        _resume_run(tmp_path / "ck", keys, chunk_updates=2)
    assert lines == [f"cell ppo: update 5/5, episode return {np.mean(metrics['episode_return'][:, -1]):.4g}"]


class Interrupt(Exception):
    pass


def _stop_after_first_chunk(done, total, metrics):
    raise Interrupt


def test_resume_is_bit_identical(tmp_path, two_seeds):
    """Stopped after the first chunk, then resumed by a fresh train_with_checkpoints: the same bits as the
    uninterrupted run. The path has no suffix, as the cell store's checkpoints do."""
    keys, whole_state, whole_metrics = two_seeds
    with pytest.raises(Interrupt):
        _resume_run(tmp_path / "checkpoint", keys, chunk_updates=2, progress=_stop_after_first_chunk)
    with np.load(metrics_path(tmp_path / "checkpoint")) as saved:
        assert saved["loss"].shape == (2, 2)  # the first chunk's checkpoint
    calls = []
    state, metrics = _resume_run(tmp_path / "checkpoint", keys, chunk_updates=2,
                                 progress=lambda done, total, m: calls.append((done, total)))
    assert calls == [(4, 5), (5, 5)]
    for a, b in zip(jax.tree.leaves(whole_state), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(a, b)
    assert metrics.keys() == whole_metrics.keys()
    for name in metrics:
        np.testing.assert_array_equal(metrics[name], whole_metrics[name])


def test_resume_refuses_another_run(tmp_path):
    env = RecallEnv(horizon=3)
    config = dataclasses.replace(TINY, total_steps=4 * 8)
    train_with_checkpoints(config, env, None, linear_rnn(env), jax.random.key(7), tmp_path / "ck.eqx", 1)
    with pytest.raises(ValueError, match="another run"):
        train_with_checkpoints(config, env, None, linear_rnn(env), jax.random.key(8), tmp_path / "ck.eqx", 1)


def test_ppo_learns_the_fully_observed_task():
    """MatchEnv with the observation as memory: the uniform policy returns 0.5, the optimum is 1."""
    env = MatchEnv(horizon=4)
    config = PPOConfig(num_envs=16, unroll=32, total_steps=16 * 32 * 25, epochs=4, minibatches=2,
                       learning_rate=3e-3, gae_lambda=0.95, actor_layers=(32,), critic_layers=(32,))
    ppo = make_train(config, env, None, observation_memory(env))
    _, metrics = jax.jit(ppo.train)(jax.random.key(0))
    returns = np.asarray(metrics["episode_return"])
    assert 0.35 < returns[0] < 0.65
    assert returns[-3:].mean() > 0.95, returns


def test_bptt_learns_the_memory_task():
    """RecallEnv (H = 4) with a trainable linear RNN trained through the whole unroll: a memoryless agent
    cannot return more than (1 + 3 / 2) / 4 = 0.625; with memory the optimum is 1."""
    env = RecallEnv(horizon=4)
    config = PPOConfig(num_envs=16, unroll=32, total_steps=16 * 32 * 60, epochs=4, minibatches=2,
                       learning_rate=3e-3, gae_lambda=0.95, actor_layers=(32,), critic_layers=(32,))
    ppo = make_train(config, env, None, linear_rnn(env))
    _, metrics = jax.jit(ppo.train)(jax.random.key(0))
    returns = np.asarray(metrics["episode_return"])
    assert returns[0] < 0.6
    assert returns[-5:].mean() > 0.95, returns


def test_the_optimizer_is_an_argument_whose_default_is_table_1s_clipped_adam(optimizer_is_used):
    env = RecallEnv(horizon=4)

    def train(optimizer):
        ppo = make_train(TINY, env, None, linear_rnn(env), optimizer=optimizer)
        return jax.jit(ppo.train)(jax.random.key(0)).state.agent

    default = optax.chain(optax.clip_by_global_norm(TINY.max_grad_norm), optax.adam(TINY.learning_rate,
                                                                                   eps=TINY.adam_eps))
    optimizer_is_used(train, default, optax.sgd(1e-2))

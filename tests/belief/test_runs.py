"""RingWorld agents: the memory registry, a saved agent's round trip, playing episodes, and (slow) PPO with the
true state reaching the fully informed optimum."""

import dataclasses

import jax
import numpy as np
import pytest

from memlab.belief import ringworld as rw
from memlab.belief.runs import MEMORIES, load_agent, make_memory, play, ringworld_for, train_agent
from memlab.rl import PPOConfig

TINY = PPOConfig(num_envs=4, unroll=16, total_steps=4 * 16 * 2, epochs=1, minibatches=2)


@pytest.mark.parametrize("name", MEMORIES)
def test_every_memory_builds_and_steps(name):
    env = ringworld_for(name, episode_length=10)
    params = env.default_params
    memory = make_memory(name, jax.random.key(0), env, params)
    obs, _ = env.reset(jax.random.key(1), params)
    h, features = memory.step(memory.init_state(), obs, np.int32(0), np.bool_(True))
    assert features.shape == (memory.num_features,) and np.all(np.isfinite(features))
    assert memory.trainable == (name.startswith(("s5", "deep-alf")))


def test_bad_memory_name_raises():
    with pytest.raises(ValueError, match="memory"):
        ringworld_for("lstm")
    env = rw.RingWorld()
    with pytest.raises(ValueError, match="memory"):
        make_memory("alf ", jax.random.key(0), env, env.default_params)


def test_saved_agent_round_trip_and_play(tmp_path):
    out = train_agent(TINY, "alf", jax.random.key(0), tmp_path / "alf.eqx", 1, episode_length=10)
    assert out.metrics["episode_return"].shape == (2,)
    agent = load_agent(TINY, "alf", out.agent, episode_length=10)
    env = rw.RingWorld(episode_length=10)
    episodes = play(agent, env, env.default_params, jax.random.key(2), 3)
    assert episodes["state"].shape == (3, 10) and episodes["features"].shape == (3, 10, 12)
    assert np.all(episodes["start"][:, 0]) and not np.any(episodes["start"][:, 1:])
    assert np.all(episodes["obs"][:, 0] == 0)  # the null observation
    np.testing.assert_allclose(episodes["features"][:, 0], 0.0)  # the ALF's w_0
    returns = np.asarray(episodes["reward"]).sum(axis=1)
    assert np.all(np.abs(returns) <= 1 + 1e-6)
    again = train_agent(TINY, "alf", jax.random.key(0), tmp_path / "alf.eqx", 1, episode_length=10)  # resumed
    assert again.agent == out.agent


@pytest.mark.slow
def test_ppo_with_the_true_state_approaches_the_fully_informed_optimum(tmp_path):
    """A memoryless agent on the fully observed ring should come close to the DP optimum (0.942 for K = 100)."""
    config = dataclasses.replace(PPOConfig(), learning_rate=5e-4, num_envs=16, unroll=256, epochs=4, minibatches=4,
                                 total_steps=16 * 256 * 300)
    out = train_agent(config, "true-state", jax.random.key(0), tmp_path / "true.eqx", 50)
    env = rw.RingWorld()
    ceiling = rw.optimal_return(env, env.default_params)
    final = float(np.mean(out.metrics["episode_return"][-20:]))
    assert final > ceiling - 0.1, (final, ceiling)

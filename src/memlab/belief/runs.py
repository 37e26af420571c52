"""The belief study's runs: RingWorld's PPO agents by memory name (section 6.2, App. E.2: the memories of Figs.
3, 9 and 10) and one training run of one.

Memories (``MEMORIES``): the fixed filters built from the environment's own matrices — 'lof', 'lof-softmax' (eq. 7),
'alf', 'alf-softmax' (eq. 46, delta = 0.1) — the learned ones — 's5-12', 's5-256' (one S5 layer after a two-layer
MLP encoder of the 4-dim observation, hidden 12 or 256, Table 2), 's5-12-prev-action' (S5-12 also fed the
previous action one-hot and the start flag, as Lu et al.'s runner feeds its S5: the LOF/ALF memories see the
previous action through the action-dependent transition, today's S5-12 does not) and Deep ALF (eq. 202) with the five
initialisations of App. E.2.2 ('deep-alf-informed', 'deep-alf-random-e', 'deep-alf-random-delta',
'deep-alf-random-lambda', 'deep-alf-all-random'; Fig. 3's "Deep ALF" is the all-random one) — and 'true-state',
a memoryless agent on the fully observed ring, whose return approaches the fully informed optimum.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from memlab.belief.deep_alf import INITIALISATIONS, DeepALF
from memlab.belief.memories import LogitFilterMemory
from memlab.belief.ringworld import RingWorld, RingWorldParams
from memlab.checks import check_choice
from memlab.rl import Memory, ObservationMemory, PPOConfig, S5Memory, make_agent, train_with_checkpoints
from memlab.store import cell

FIXED = ("lof", "lof-softmax", "alf", "alf-softmax")
S5_SIZES = {"s5-12": 12, "s5-256": 256, "s5-12-prev-action": 12}
DEEP_ALF = tuple(f"deep-alf-{init}" for init in INITIALISATIONS)
MEMORIES = (*FIXED, *S5_SIZES, *DEEP_ALF, "true-state")
LABELS = {"lof": "LOF", "lof-softmax": "LOF + softmax", "alf": "ALF", "alf-softmax": "ALF + softmax",
          "s5-12": "S5-12", "s5-256": "S5-256", "s5-12-prev-action": "S5-12 + previous action",
          "deep-alf-informed": "Deep ALF (informed)",
          "deep-alf-random-e": "Deep ALF (random E)", "deep-alf-random-delta": "Deep ALF (random δ)",
          "deep-alf-random-lambda": "Deep ALF (random Λ)", "deep-alf-all-random": "Deep ALF (all random)",
          "true-state": "true state (fully observed)"}


def ringworld_for(memory: str, epsilon: float = 0.05, episode_length: int = 100) -> RingWorld:
    """The environment an agent with ``memory`` acts in (the fully observed ring for 'true-state')."""
    check_choice("memory", memory, MEMORIES)
    return RingWorld(epsilon, episode_length, fully_observed=memory == "true-state")


def make_memory(name: str, key: jax.Array, env: RingWorld, params: RingWorldParams) -> Memory:
    """The memory called ``name`` for ``env``; traceable in ``key`` (PPO builds it inside jit)."""
    check_choice("memory", name, MEMORIES)
    if name in FIXED:
        build = LogitFilterMemory.lof if name.startswith("lof") else LogitFilterMemory.alf
        args = (params.hmm,) if name.startswith("lof") else (np.asarray(params.P), params.hmm)
        return build(*args, softmax=name.endswith("softmax"))
    if name in S5_SIZES:
        fed_action = name.endswith("prev-action")
        return S5Memory(env.obs_size, S5_SIZES[name], key=key, method="sequential",  # faster than the parallel
                        # scan on a CPU (benchmarks/bench_ringworld.py); both forms are tested equal
                        num_actions=env.num_actions if fed_action else None, start_input=fed_action)
    if name in DEEP_ALF:
        return DeepALF.init(key, np.asarray(params.P), np.asarray(params.E), name.removeprefix("deep-alf-"))
    return ObservationMemory(env.obs_size)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainedAgent:
    """One PPO agent trained on RingWorld: ``metrics``, metric name -> (num_updates,) its value after every update
    (``episode_return``, the losses, the memory's own ``memory_*`` diagnostics), and the ``agent`` as bytes
    (``eqx.tree_serialise_leaves``; rebuild with :func:`load_agent`)."""

    metrics: dict[str, list[float]]
    agent: bytes


@cell("belief.ppo-agent", result=TrainedAgent)
def train_agent(config: PPOConfig, memory: str, key: jax.Array, checkpoint: str | Path, chunk_updates: int = 10,
                epsilon: float = 0.05, episode_length: int = 100, progress=None) -> TrainedAgent:
    """Train one PPO agent with ``memory`` on RingWorld (a cell of the return figures); resumes from
    ``checkpoint``."""
    env = ringworld_for(memory, epsilon, episode_length)
    params = env.default_params
    Path(checkpoint).parent.mkdir(parents=True, exist_ok=True)
    state, metrics = train_with_checkpoints(config, env, params, lambda k: make_memory(memory, k, env, params), key,
                                            checkpoint, chunk_updates, progress)
    return TrainedAgent(metrics=metrics, agent=agent_bytes(state.agent))


def agent_bytes(agent) -> bytes:
    """The agent's leaves as bytes (what a cell returns; JSON-safe through the runner's base64)."""
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, agent)
    return buffer.getvalue()


def load_agent(config: PPOConfig, memory: str, data: bytes, epsilon: float = 0.05, episode_length: int = 100):
    """The agent saved by ``train_agent`` (its skeleton rebuilt from the config and memory name)."""
    env = ringworld_for(memory, epsilon, episode_length)
    params = env.default_params
    key_memory, key_agent = jax.random.split(jax.random.key(0))
    skeleton = make_agent(key_agent, make_memory(memory, key_memory, env, params), env.num_actions,
                          config.actor_layers, config.critic_layers)
    return eqx.tree_deserialise_leaves(io.BytesIO(data), skeleton)


def play(agent, env: RingWorld, params: RingWorldParams, key: jax.Array, num_episodes: int) -> dict:
    """Run a trained agent for ``num_episodes`` whole episodes (actions sampled from its policy), vmapped.

    Returns arrays (num_episodes, K): ``obs`` (…, O) the observation acted on (null at k = 0), ``state`` x_k, the
    true state behind it, ``action`` a_k, ``prev_action`` a_{k-1} (0 at k = 0), ``start``, ``features`` (…, F)
    the memory's output, ``reward`` r(x_{k+1}), ``next_state`` x_{k+1}.
    """
    K = env.episode_length

    def episode(key):
        key_reset, key_run = jax.random.split(key)
        obs, state = env.reset(key_reset, params)
        carry = (obs, state, agent.memory.init_state(), jnp.int32(0), jnp.bool_(True))

        def step(carry, key):
            obs, state, h, prev_action, start = carry
            key_action, key_env = jax.random.split(key)
            h, features = agent.memory.step(h, obs, prev_action, start)
            logits, _ = agent.heads(features)
            action = jax.random.categorical(key_action, logits).astype(jnp.int32)
            obs_next, state_next, reward, _, _, info = env.step(key_env, state, action, params)
            out = dict(obs=obs, state=state.x, action=action, prev_action=prev_action, start=start,
                       features=features, reward=reward, next_state=info["next_state"])
            return (obs_next, state_next, h, action, jnp.bool_(False)), out

        return jax.lax.scan(step, carry, jax.random.split(key_run, K))[1]

    return jax.jit(jax.vmap(episode))(jax.random.split(key, num_episodes))

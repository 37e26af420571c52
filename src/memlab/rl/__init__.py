"""``memlab.rl`` -- PPO with a pluggable recurrent memory (PureJaxRL style); knows no study.

A memory implements :class:`memlab.rl.memory.Memory`; an environment follows the gymnax 1.0 API with auto-reset.
``make_train(config, env, env_params, make_memory, optimizer=None)`` gives pure ``init`` / ``update`` /
``update_chunk`` and ``train(key) -> TrainResult(state, metrics)``; ``train_with_checkpoints`` runs them in chunks
with atomic, resumable checkpoints and returns the same ``TrainResult``.
"""

from memlab.rl.agent import MLP, Agent, make_agent
from memlab.rl.checkpoint import load_checkpoint, metrics_path, save_checkpoint, train_with_checkpoints
from memlab.rl.config import PPOConfig
from memlab.rl.gae import gae
from memlab.rl.memory import Memory, ObservationMemory
from memlab.rl.ppo import PPO, TrainResult, TrainState, evaluate, make_train, ppo_loss
from memlab.rl.rollout import Actors, Transition, rollout
from memlab.rl.s5_memory import S5Memory

__all__ = [
    "MLP",
    "PPO",
    "Actors",
    "Agent",
    "Memory",
    "ObservationMemory",
    "PPOConfig",
    "S5Memory",
    "TrainResult",
    "TrainState",
    "Transition",
    "evaluate",
    "gae",
    "load_checkpoint",
    "make_agent",
    "make_train",
    "metrics_path",
    "ppo_loss",
    "rollout",
    "save_checkpoint",
    "train_with_checkpoints",
]

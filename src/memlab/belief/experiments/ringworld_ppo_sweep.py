"""The config of ``belief.ringworld-returns`` and ``belief.deep-alf-inits`` (the memories of Figs. 3, 9 and 10,
Table 1's PPO and its reduced presets) and their sweep: a PPO training cell per (memory, seed) and the QMDP
reference cell."""

from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np

from memlab.belief import ringworld as rw
from memlab.belief.runs import MEMORIES, train_agent
from memlab.checks import check_choices, check_int, check_real
from memlab.rl import PPOConfig
from memlab.store import CHECKPOINT, cell

PAPER = "linear-recurrent-memory-pomdp"
FIG3 = ("lof", "lof-softmax", "alf", "alf-softmax", "s5-12", "s5-256", "deep-alf-all-random")
FIG9 = ("deep-alf-informed", "alf", "lof-softmax")
FIG10 = ("deep-alf-informed", "deep-alf-random-e", "deep-alf-random-delta", "deep-alf-random-lambda",
         "deep-alf-all-random", "s5-12", "s5-256")
# quick: 1/16 of Table 1's samples per update, 4 of its 30 epochs, 80 of its 457 updates, a 10x learning rate
FIG9_10 = tuple(dict.fromkeys(FIG9 + FIG10))
# quick profiles leave S5-256 out, as paper-core does: its cells cost many times S5-12's, close to half of
# belief.ringworld-returns' quick run on their own (and most of the paper profile's machine time)
QUICK_PPO = PPOConfig(learning_rate=5e-4, num_envs=16, unroll=256, total_steps=16 * 256 * 80, epochs=4,
                      minibatches=4)
TINY_PPO = PPOConfig(num_envs=4, unroll=32, total_steps=4 * 32 * 3, epochs=1, minibatches=2)


@dataclasses.dataclass(frozen=True)
class RingWorldPPOConfig:
    seed: int = 0
    memories: tuple[str, ...] = FIG3
    seeds: int = 8
    # (memory, seeds) where a memory runs another number of seeds than ``seeds`` (paper-core); seeds 0..n-1
    seed_counts: tuple[tuple[str, int], ...] = ()
    ppo: PPOConfig = PPOConfig()  # Table 1
    epsilon: float = 0.05
    episode_length: int = 100
    chunk_updates: int = 10  # updates between checkpoints
    tail: int = 100  # the last-updates panel of Figs. 9b / 10b and the "final return" of the claims
    qmdp_episodes: int = 20_000  # Monte-Carlo episodes of the QMDP reference line (4,000 gave 0.565 ± 0.002)

    def validate(self):
        check_choices("memories", self.memories, MEMORIES)
        check_int("seeds", self.seeds)
        for memory, count in self.seed_counts:
            check_choices("seed_counts", (memory,), self.memories)
            check_int(f"seed_counts[{memory!r}]", count)
        check_int("qmdp_episodes", self.qmdp_episodes)
        check_int("chunk_updates", self.chunk_updates)
        check_int("tail", self.tail)
        check_real("epsilon", self.epsilon, 0.0, 0.5)
        check_int("episode_length", self.episode_length)
        self.ppo.validate()

    def seeds_of(self, memory: str) -> int:
        """How many seeds ``memory`` runs (``seed_counts``, else ``seeds``)."""
        return dict(self.seed_counts).get(memory, self.seeds)


def sweep_cells(cfg: RingWorldPPOConfig, run) -> dict:
    """Cell '<memory>-<s>' trains seed s of ``memory`` from the key stream ('ppo', memory, s); cell 'qmdp'
    simulates the QMDP reference policy."""
    cells = {f"{m}-{s}": partial(train_agent, cfg.ppo, m, run.key_for("ppo", m, s), CHECKPOINT, cfg.chunk_updates,
                                 cfg.epsilon, cfg.episode_length)
             for m in cfg.memories for s in range(cfg.seeds_of(m))}
    qmdp = partial(_qmdp_cell, cfg.epsilon, cfg.episode_length, cfg.qmdp_episodes, run.key_for("qmdp"))
    return {**cells, "qmdp": qmdp}


@dataclasses.dataclass(frozen=True, kw_only=True)
class QMDPReturns:
    """``returns``: (episodes,) Monte-Carlo episode returns of the QMDP policy."""

    returns: list[float]


@cell("belief.qmdp", result=QMDPReturns)
def _qmdp_cell(epsilon: float, episode_length: int, episodes: int, key) -> QMDPReturns:
    env = rw.RingWorld(epsilon, episode_length)
    return QMDPReturns(returns=np.asarray(rw.qmdp_returns(env, env.default_params, key, episodes)))

"""What the PPO runs of ``belief.ringworld-returns`` / ``belief.deep-alf-inits`` show: per memory its return curves
and :class:`MemoryStats`, and the reference returns (ceiling, floor, QMDP)."""

from __future__ import annotations

import dataclasses

import numpy as np

from memlab.belief import ringworld as rw
from memlab.belief.experiments.ringworld_ppo_sweep import RingWorldPPOConfig


@dataclasses.dataclass(frozen=True)
class MemoryStats:
    """One memory's returns over its seeds (results.json: one entry of ``memories``).

    **Fields:**
    - ``tail_mean``: float, the mean over seeds of each seed's mean episodic return over the last ``cfg.tail``
      updates (the "final return" of the claims).
    - ``tail_std``: float, the standard deviation over seeds of those per-seed means.
    - ``tail_per_seed``: list of floats (seeds,), the per-seed means.
    - ``half_ceiling_update``: int or None, the first update (1-based) at which the mean curve over seeds reaches
      floor + (ceiling - floor) / 2; None if it never does.
    - ``learning_std``: float, the standard deviation over seeds of the return, averaged over the learning phase:
      the first ``LEARNING_SHARE`` of the updates (Fig. 3's shaded bands, which the paper's "varies across seeds"
      reads).
    - ``diagnostics``: dict, memory diagnostic name (``memory_`` prefix removed) -> its value at the last update,
      mean over seeds; empty for memories that report none.
    """

    tail_mean: float
    tail_std: float
    tail_per_seed: list[float]
    half_ceiling_update: int | None
    diagnostics: dict[str, float]
    learning_std: float


LEARNING_SHARE = 60 / 457  # the first 60 of Table 1's 457 updates, and the same share of a smaller run's


@dataclasses.dataclass(frozen=True)
class ReturnsStats:
    """What the PPO runs of ``belief.ringworld-returns`` / ``belief.deep-alf-inits`` show.

    **Fields:**
    - ``curves``: dict, memory -> episodic return (seeds, updates), one row per seed.
    - ``stats``: dict, memory -> :class:`MemoryStats`.
    - ``ceiling``: float, expected return of the fully informed optimal policy (DP with the true state).
    - ``floor``: float, expected return of uniformly random actions.
    - ``qmdp``: float, mean Monte-Carlo return of QMDP on the exact belief.
    """

    curves: dict[str, np.ndarray]
    stats: dict[str, MemoryStats]
    ceiling: float
    floor: float
    qmdp: float


def analyse(cfg: RingWorldPPOConfig, cells: dict) -> ReturnsStats:
    """Cells '<memory>-<s>' and 'qmdp' -> per memory its return curves and :class:`MemoryStats`, and the
    reference returns."""
    env = rw.RingWorld(cfg.epsilon, cfg.episode_length)
    ceiling, floor = rw.optimal_return(env, env.default_params), rw.random_return(env, env.default_params)
    curves, stats = {}, {}
    for m in cfg.memories:
        runs = [cells[f"{m}-{s}"].metrics for s in range(cfg.seeds_of(m))]
        R = np.array([r["episode_return"] for r in runs], dtype=float)  # (seeds, updates)
        tail = R[:, -min(cfg.tail, R.shape[1]):].mean(axis=1)
        half = np.flatnonzero(R.mean(axis=0) >= floor + 0.5 * (ceiling - floor))
        diag = {k.removeprefix("memory_"): float(np.mean([r[k][-1] for r in runs])) for k in runs[0]
                if k.startswith("memory_")}
        curves[m] = R
        learning = R[:, :max(1, round(LEARNING_SHARE * R.shape[1]))]
        stats[m] = MemoryStats(tail_mean=float(tail.mean()), tail_std=float(tail.std()),
                               tail_per_seed=tail.tolist(),
                               half_ceiling_update=int(half[0]) + 1 if half.size else None, diagnostics=diag,
                               learning_std=float(learning.std(axis=0).mean()))
    return ReturnsStats(curves, stats, ceiling, floor, float(np.mean(cells["qmdp"].returns)))

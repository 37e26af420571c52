"""The arena's training step per layer on the CPU: the wall time of 10 Adam steps on hmm-mess3
(``memlab.arena.train.make_training``, one jitted chunk of ``eval_every`` = 10 steps and its held-out loss on 8
sequences), for every layer of the quick leaderboard, beside Mamba's (the reference: a row's speed-up is Mamba's time
over the row's, how many times slower Mamba's step is). Mamba runs its selective scan as the native kernel
(``memlab.layers.native``) and, in one more row, as the ``lax.scan`` it had before (issue 49's before and after).

At the quick leaderboard's sizes (width 32, depth 1, batch 32 sequences of 64 steps), timed twice, each in a fresh
process: with the XLA flags quick profiles compile with (optimisation level 1 and XLA:CPU's older elemental fusion
emitter, ``memlab.compile_cache.QUICK_FLAGS``: what a quick leaderboard cell runs) and with XLA's defaults; and at
the paper profile's sizes (width 64, depth 2, its training batch and length) with XLA's defaults, what a paper cell
runs. No output is compared between layers (they train different models): max_abs_diff is 0 by construction.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from timing import compiled, isolated, side_by_side  # benchmarks/timing.py (run.py puts benchmarks/ on sys.path)

from memlab.arena.experiments.leaderboard import PAPER, QUICK
from memlab.compile_cache import QUICK_FLAGS

TASK, STEPS = "hmm-mess3", 10
MAMBA_LAX_SCAN = "mamba, lax.scan selective scan (before the native kernel)"
LAYERS = ("mamba", "lru", "s5", "gru", "lstm", "attention", "linear-attention", "gated-deltanet", "lof")
PROFILES = {"quick": QUICK, "paper": PAPER}  # the model's width and depth, the training batch and length
QUICK_XLA, DEFAULT_XLA = "quick profile's XLA flags", "XLA's default flags"
FLAGS = {QUICK_XLA: " ".join(f"--{name}={value}" for name, value in QUICK_FLAGS.items()), DEFAULT_XLA: ""}
RUNS = (("quick", QUICK_XLA), ("quick", DEFAULT_XLA), ("paper", DEFAULT_XLA))  # each profile with the flags it runs


def arena_step_rows(profile: str, flags_name: str) -> list[dict]:
    """One side-by-side table: every layer's 10 training steps at ``profile``'s sizes, in this process (its XLA flags
    already set)."""
    from memlab.arena import TrainConfig, make_task
    from memlab.arena.train import make_training

    cfg = PROFILES[profile]
    task = make_task(TASK)
    config = TrainConfig(steps=STEPS, batch=cfg.train.batch, length=cfg.train.length, eval_every=STEPS)
    held_out = task.sample(jax.random.key(1), 8, config.length)
    implementations = []
    for layer, native_scan in [(layer, True) for layer in LAYERS] + [("mamba", False)]:
        training = make_training(task, layer, cfg.width, cfg.depth, config, held_out)
        state, chunk_keys = training.init(jax.random.key(0))
        run = compiled(training.run, state, chunk_keys, native_scan=native_scan)

        def ten_steps(run=run, state=state, chunk_keys=chunk_keys):
            jax.block_until_ready(run(state, chunk_keys))
            return jnp.zeros(())  # nothing to compare across layers (module docstring)

        implementations.append((layer if native_scan else MAMBA_LAX_SCAN, ten_steps))
    return side_by_side(f"arena, {profile} sizes: {STEPS} Adam steps ({flags_name})", implementations,
                        reference="mamba", extra={"width": cfg.width, "depth": cfg.depth, "batch": config.batch,
                                                  "L": config.length})


def run() -> list[dict]:
    rows = []
    for profile, flags_name in RUNS:
        rows += isolated(arena_step_rows, profile, flags_name, env={"XLA_FLAGS": FLAGS[flags_name]})
    return rows


if __name__ == "__main__":
    for r in run():
        print(r)

"""Training in chunks of updates with an atomic checkpoint after each, so a killed run resumes where it stopped.

The checkpoint (:mod:`memlab.checkpoints`) holds the whole :class:`~memlab.rl.ppo.TrainState` (parameters, Adam
state, environment states, memory hidden states, RNG key, update counter, running episode returns) and every metric
of every update so far (last axis: updates); metrics written ahead of the state are cut back to the state's update
counter on resume. Resumed runs are bit-identical to
uninterrupted ones with the same ``chunk_updates`` (same compiled programs, same key stream).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import jax
import numpy as np
from jax import Array

from memlab import checkpoints
from memlab import progress as progress_lines
from memlab.checks import check_int
from memlab.rl.config import PPOConfig
from memlab.rl.memory import Memory
from memlab.rl.ppo import TrainResult, TrainState, make_train, raw_key_data

__all__ = ["load_checkpoint", "metrics_path", "save_checkpoint", "train_with_checkpoints"]

metrics_path, save_checkpoint = checkpoints.metrics_path, checkpoints.save_checkpoint


def load_checkpoint(path: str | Path, like: TrainState, identity: str) -> tuple[TrainState, dict[str, np.ndarray]]:
    """The state and metrics saved at ``path``, the metrics cut back to the state's update counter; ``like`` gives
    the state's structure (e.g. ``jax.eval_shape`` of ``init``). ValueError if the checkpoint belongs to another run
    (``identity``) or its metrics are missing or cover fewer updates than its state."""
    state, metrics = checkpoints.load_checkpoint(path, like, identity)
    done = int(np.ravel(state.update)[0])
    if any(value.shape[-1] < done for value in metrics.values()):
        raise ValueError(f"checkpoint {path}: its metrics cover fewer updates than its state ({done}); move it away "
                         "to restart")
    return state, {name: value[..., :done] for name, value in metrics.items()}


def _identity(config: PPOConfig, key: Array) -> str:
    return json.dumps({"config": dataclasses.asdict(config), "key": np.asarray(raw_key_data(key)).tolist()})


def train_with_checkpoints(config: PPOConfig, env, env_params, make_memory: Callable[[Array], Memory], key: Array,
                           path: str | Path, chunk_updates: int,
                           progress: Callable[[int, int, dict], None] | None = None) -> TrainResult:
    """All ``config.num_updates`` updates, ``chunk_updates`` per jitted call, checkpointing after each chunk;
    resumes from ``path`` when it exists.

    ``key``: one key, or a batch of keys (leading axis S) to train S seeds at once (vmapped; metrics then have
    shape (S, updates)). ``progress(updates_done, num_updates, metrics)`` is called after every checkpoint (default:
    a line with the last update's episode return to memlab's progress channel, where a run opened one). Under
    a time limit (``memlab.deadline``) it stops with ``OutOfTime`` before a chunk that would not finish in time.

    **Returns:** a :class:`~memlab.rl.ppo.TrainResult` ``(state, metrics)``, metrics as NumPy arrays with the updates
    on the last axis.
    """
    check_int("chunk_updates", chunk_updates)
    ppo = make_train(config, env, env_params, make_memory)
    raw_key = raw_key_data(key)
    batched = raw_key.ndim == 2
    init = jax.vmap(ppo.init) if batched else ppo.init
    identity = _identity(config, key)
    with checkpoints.owned(path) as path:
        return TrainResult(*_train_chunks(ppo, config, raw_key, batched, init, identity, path, chunk_updates, progress))


def _train_chunks(ppo, config, raw_key, batched, init, identity, path, chunk_updates, progress):
    if path.exists():
        state, metrics = load_checkpoint(path, jax.eval_shape(init, raw_key), identity)
    else:
        state, metrics = jax.jit(init)(raw_key), {}
    total = config.num_updates
    chunks = {}  # compiled chunk function per chunk length (the last chunk may be shorter)
    # under a time limit no chunk starts that would overrun (by the last one's wall time): OutOfTime there leaves
    # the last checkpoint to resume from
    for done, stop in progress_lines.training_chunks(int(np.ravel(state.update)[0]), total, chunk_updates, True):
        n = stop - done
        if n not in chunks:
            chunk = partial(ppo.update_chunk, num_updates=n)
            chunks[n] = jax.jit(jax.vmap(chunk) if batched else chunk)
        state, new = chunks[n](state)
        new = {name: np.asarray(value) for name, value in new.items()}
        metrics = new if not metrics else {k: np.concatenate([metrics[k], new[k]], axis=-1) for k in metrics}
        save_checkpoint(path, state, metrics, identity)
        if progress is not None:
            progress(stop, total, metrics)
        else:  # memlab.progress: a line every so often while a run shows the cells' progress, else nothing
            progress_lines.training_step(stop, total, {"episode return": metrics["episode_return"][..., -1]},
                                         "update")
    return state, metrics


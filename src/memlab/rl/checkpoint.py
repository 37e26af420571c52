"""Training in chunks of updates with an atomic checkpoint after each, so a killed run resumes where it stopped.

Two files (each written to a temporary file in the same folder, then ``os.replace``):
  ``path``                  ``eqx.tree_serialise_leaves`` of the whole :class:`~memlab.rl.ppo.TrainState`
                            (parameters, Adam state, environment states, memory hidden states, RNG key, update
                            counter, running episode returns);
  ``path + ".metrics.npz"`` every metric of every update so far (last axis: updates) and the run's identity
                            (config and key), so resuming a different run is refused.
The metrics are written before the state; if a run dies between the two, the metrics hold a chunk more than the
state and are cut back to the state's update counter on resume. Resumed runs are bit-identical to
uninterrupted ones with the same ``chunk_updates`` (same compiled programs, same key stream).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import io
import json
import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
from jax import Array

from memlab import deadline
from memlab.checks import check_int
from memlab.files import atomic_write_bytes
from memlab.rl.config import PPOConfig
from memlab.rl.memory import Memory
from memlab.rl.ppo import TrainState, make_train, raw_key_data

__all__ = ["load_checkpoint", "metrics_path", "save_checkpoint", "train_with_checkpoints"]

_IDENTITY = "__run__"


def metrics_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".metrics.npz")


def save_checkpoint(path: str | Path, state: TrainState, metrics: dict[str, np.ndarray], identity: str) -> None:
    """Write ``metrics`` (with ``identity``), then ``state``, each atomically."""
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(value) for name, value in metrics.items()}, **{_IDENTITY: np.str_(identity)})
    atomic_write_bytes(metrics_path(path), buffer.getvalue())
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, state)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | Path, like: TrainState, identity: str) -> tuple[TrainState, dict[str, np.ndarray]]:
    """The state and metrics saved at ``path``; ``like`` gives the state's structure (e.g. ``jax.eval_shape`` of
    ``init``). ValueError if the checkpoint belongs to another run (``identity``) or its metrics are missing."""
    with open(path, "rb") as f:  # a file object: given a path without a suffix, equinox would read path + ".eqx"
        state = eqx.tree_deserialise_leaves(f, like)
    if not metrics_path(path).exists():
        raise ValueError(f"checkpoint {path} has no metrics file {metrics_path(path)}")
    with np.load(metrics_path(path), allow_pickle=False) as saved:
        metrics = {name: saved[name] for name in saved.files}
    if str(metrics.pop(_IDENTITY)) != identity:
        raise ValueError(f"checkpoint {path} belongs to another run (config or key differ); move it away to restart")
    done = int(np.ravel(state.update)[0])
    if any(value.shape[-1] < done for value in metrics.values()):
        raise ValueError(f"checkpoint {path}: its metrics cover fewer updates than its state ({done}); move it away "
                         "to restart")
    return state, {name: value[..., :done] for name, value in metrics.items()}


@contextlib.contextmanager
def _owned(path: Path):
    """``path`` while this process holds its lock file; if another process is training the same checkpoint (two
    experiments of ``memlab reproduce`` asking for one cell), a private path beside it, so neither overwrites the
    other's files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield path.with_name(f"{path.name}.{os.getpid()}")
            return
        yield path


def _identity(config: PPOConfig, key: Array) -> str:
    return json.dumps({"config": dataclasses.asdict(config), "key": np.asarray(raw_key_data(key)).tolist()})


def train_with_checkpoints(config: PPOConfig, env, env_params, make_memory: Callable[[Array], Memory], key: Array,
                           path: str | Path, chunk_updates: int,
                           progress: Callable[[int, int, dict], None] | None = None
                           ) -> tuple[TrainState, dict[str, np.ndarray]]:
    """All ``config.num_updates`` updates, ``chunk_updates`` per jitted call, checkpointing after each chunk;
    resumes from ``path`` when it exists.

    ``key``: one key, or a batch of keys (leading axis S) to train S seeds at once (vmapped; metrics then have
    shape (S, updates)). ``progress(updates_done, num_updates, metrics)`` is called after every checkpoint. Under
    a time limit (``memlab.deadline``) it stops with ``OutOfTime`` before a chunk that would not finish in time.

    **Returns:** ``(state, metrics)``, metrics as NumPy arrays with the updates on the last axis.
    """
    check_int("chunk_updates", chunk_updates)
    ppo = make_train(config, env, env_params, make_memory)
    raw_key = raw_key_data(key)
    batched = raw_key.ndim == 2
    init = jax.vmap(ppo.init) if batched else ppo.init
    identity = _identity(config, key)
    with _owned(Path(path)) as path:
        return _train_chunks(ppo, config, raw_key, batched, init, identity, path, chunk_updates, progress)


def _train_chunks(ppo, config, raw_key, batched, init, identity, path, chunk_updates, progress):
    if path.exists():
        state, metrics = load_checkpoint(path, jax.eval_shape(init, raw_key), identity)
    else:
        state, metrics = jax.jit(init)(raw_key), {}
    done, total = int(np.ravel(state.update)[0]), config.num_updates
    chunks = {}  # compiled chunk function per chunk length (the last chunk may be shorter)
    chunk_seconds = 0.0  # the last chunk's wall time: a run with a time limit stops when the next would overrun
    while done < total:
        deadline.check(chunk_seconds)  # memlab.deadline: OutOfTime here leaves the last checkpoint to resume from
        start = time.perf_counter()
        n = min(chunk_updates, total - done)
        if n not in chunks:
            chunk = partial(ppo.update_chunk, num_updates=n)
            chunks[n] = jax.jit(jax.vmap(chunk) if batched else chunk)
        state, new = chunks[n](state)
        new = {name: np.asarray(value) for name, value in new.items()}
        metrics = new if not metrics else {k: np.concatenate([metrics[k], new[k]], axis=-1) for k in metrics}
        save_checkpoint(path, state, metrics, identity)
        done += n
        chunk_seconds = time.perf_counter() - start
        if progress is not None:
            progress(done, total, metrics)
    return state, metrics


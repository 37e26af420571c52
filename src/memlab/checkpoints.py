"""A training run's checkpoint: its state (any pytree of arrays) and its metrics so far, each written atomically,
so a killed run resumes where it stopped (PPO's :mod:`memlab.rl.checkpoint`, the arena's leaderboard cells).

Two files:
  ``path``                  ``eqx.tree_serialise_leaves`` of the state;
  ``path + ".metrics.npz"`` every metric so far (last axis: time) and the run's identity (a string: its config and
                            keys), so resuming a different run is refused.
The metrics are written before the state: if a run dies between the two, the metrics hold more than the state has
done, and the caller cuts them back to the state's own counter.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
from collections.abc import Iterator
from pathlib import Path

import equinox as eqx
import numpy as np

from memlab.files import atomic_write_bytes

__all__ = ["load_checkpoint", "metrics_path", "owned", "save_checkpoint"]

_IDENTITY = "__run__"


def metrics_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".metrics.npz")


def save_checkpoint(path: str | Path, state, metrics: dict[str, np.ndarray], identity: str) -> None:
    """Write ``metrics`` (with ``identity``), then ``state``, each atomically."""
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(value) for name, value in metrics.items()}, **{_IDENTITY: np.str_(identity)})
    atomic_write_bytes(metrics_path(path), buffer.getvalue())
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, state)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | Path, like, identity: str) -> tuple[object, dict[str, np.ndarray]]:
    """The state and metrics saved at ``path`` (the metrics as written: they may run ahead of the state, see the
    module docstring); ``like`` gives the state's structure (e.g. ``jax.eval_shape`` of the run's init). ValueError
    if the checkpoint belongs to another run (``identity``) or its metrics are missing."""
    with open(path, "rb") as f:  # a file object: given a path without a suffix, equinox would read path + ".eqx"
        state = eqx.tree_deserialise_leaves(f, like)
    if not metrics_path(path).exists():
        raise ValueError(f"checkpoint {path} has no metrics file {metrics_path(path)}")
    with np.load(metrics_path(path), allow_pickle=False) as saved:
        metrics = {name: saved[name] for name in saved.files}
    if str(metrics.pop(_IDENTITY)) != identity:
        raise ValueError(f"checkpoint {path} belongs to another run (config or key differ); move it away to restart")
    return state, metrics


@contextlib.contextmanager
def owned(path: str | Path) -> Iterator[Path]:
    """``path`` while this process holds its lock file; if another process is training the same checkpoint (two
    experiments of ``memlab reproduce`` asking for one cell), a private path beside it, so neither overwrites the
    other's files."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield path.with_name(f"{path.name}.{os.getpid()}")
            return
        yield path

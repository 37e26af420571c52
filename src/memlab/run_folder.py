"""The run folder: its lock, and the config.json that binds it to one experiment and config.

A run holds ``out_dir/.memlab.lock`` (``fcntl.flock``: the kernel frees it with the process) while it writes to the
folder, so two identical runs never both compute every cell; config.json, written before the first cell, makes a
later run with another config refuse the folder instead of mixing results.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from memlab.files import atomic_write_text, dumps

__all__ = ["LOCK", "SetupError", "bind_folder", "holds_work", "locked", "read_config"]


class SetupError(ValueError):
    """Bad profile, invalid config or unusable output folder: raised before the experiment starts."""


LOCK = ".memlab.lock"  # in the run folder while a run writes to it (fcntl.flock: the kernel frees it with the process)


def holds_work(out_dir: Path) -> bool:
    """Whether a run folder holds something computed: results, a finished cell or a checkpoint."""
    return (out_dir / "results.json").exists() or any(
        (out_dir / sub).is_dir() and any((out_dir / sub).iterdir()) for sub in ("cells", "checkpoints"))


def bind_folder(out_dir: Path, header: dict) -> None:
    """Write config.json into ``out_dir`` (created before, locked by :func:`locked`), or check that an existing
    one holds the same config. A config.json beside no computed work (a run that stopped before its first cell)
    is replaced: it binds nothing."""
    config_path = out_dir / "config.json"
    try:
        if config_path.exists():
            old = read_config(config_path)
            same = {k: old.get(k) for k in ("experiment", "config")} == {k: header[k] for k in ("experiment", "config")}
            if not same and holds_work(out_dir):
                raise SetupError(
                    f"output folder {out_dir} holds a run of a different config; pick another --out or delete "
                    "the folder"
                )
        atomic_write_text(config_path, dumps(header))
    except OSError as e:
        raise SetupError(f"cannot write to output folder {out_dir}: {e.strerror or e}") from e


def read_config(path: Path) -> dict:
    """An existing config.json; SetupError if it is damaged."""
    advice = "pick another --out or delete the folder"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # not JSON, not UTF-8
        raise SetupError(f"{path} is damaged ({e}); {advice}") from e
    if not isinstance(config, dict):
        raise SetupError(f"{path} is damaged (not a JSON object); {advice}")
    return config


@contextlib.contextmanager
def locked(out_dir: Path) -> Iterator[None]:
    """Create ``out_dir`` and hold its lock while the run writes to it: SetupError if another process holds it (two
    identical runs would both compute every cell) or if the folder is not empty and holds no memlab run (its files
    are the user's, e.g. their own results.json)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if not (out_dir / "config.json").exists() and any(p.name != LOCK for p in out_dir.iterdir()):
            raise SetupError(f"output folder {out_dir} is not empty and holds no memlab run (no config.json); "
                             "pick a new or empty folder for --out")
        lock = open(out_dir / LOCK, "a+", encoding="utf-8")  # noqa: SIM115  (closed below, which frees the lock)
    except OSError as e:
        raise SetupError(f"cannot write to output folder {out_dir}: {e.strerror or e}") from e
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            raise SetupError(f"another memlab run (process {holder}) is writing to {out_dir}; wait for it to "
                             "finish or pick another --out") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield  # closing the file frees the lock; a process that dies frees it too

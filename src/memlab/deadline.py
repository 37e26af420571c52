"""The wall-clock deadline of a run with a time limit (``memlab run --time-limit``), as seen inside a cell.

The driver sets it (``Settings.deadline``, seconds since the epoch, so it means the same in every worker process
and on every machine of a cluster whose clocks agree); :func:`memlab.worker.compute_cell` installs it around
each cell. A cell that saves its progress (a ``CHECKPOINT`` argument) calls :func:`check` after each save and
stops with :class:`OutOfTime` when its next piece of work would not finish in time; the runner then counts the
cell as unfinished, not failed, and the same command resumes it from its checkpoint.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

__all__ = ["OutOfTime", "check", "remaining", "until"]

_deadline: list[float | None] = [None]


class OutOfTime(Exception):
    """A cell stopped (its progress saved) because the run's time limit came."""


@contextlib.contextmanager
def until(deadline: float | None) -> Iterator[None]:
    """Install ``deadline`` (epoch seconds; None: no limit) for the code inside."""
    previous, _deadline[0] = _deadline[0], deadline
    try:
        yield
    finally:
        _deadline[0] = previous


def remaining() -> float:
    """Seconds left before the deadline (inf without one)."""
    return float("inf") if _deadline[0] is None else _deadline[0] - time.time()


def check(next_seconds: float = 0.0) -> None:
    """Raise :class:`OutOfTime` if work of ``next_seconds`` started now would end after the deadline."""
    if next_seconds > remaining():
        raise OutOfTime(f"{next_seconds:.0f} s of work left {max(remaining(), 0.0):.0f} s before the time limit")

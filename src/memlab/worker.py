"""One cell, computed wherever it lands: the driver's settings it runs under, its outcome, the time it may start by.

Every executor (:mod:`memlab.executors`) computes a cell through :func:`compute_cell`, in the driver's process, a
pool worker or a Ray task alike: it applies the driver's JAX settings (x64, the compile cache, the time limit) and
returns the cell's record or its traceback, so the numbers do not depend on where a cell ran.
"""

from __future__ import annotations

import dataclasses
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping

import jax
import numpy as np

from memlab import compile_cache, deadline, progress
from memlab.files import cell_text
from memlab.store import result_types

__all__ = ["Cells", "OUT_OF_TIME", "Outcome", "Scheduled", "Settings", "compute_cell", "named_cells", "peak_rss_mb",
           "pickled", "compute_pickled", "start_pool_worker"]

OUT_OF_TIME = "out of time"  # the error of a cell that did not start, or stopped at a checkpoint, at the time limit


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One finished cell: ``text`` is its record (``files.cell_text``) or ``error`` the traceback it raised
    (``OUT_OF_TIME``: it did not start, or saved its progress and stopped, because the time limit came); or, with
    ``progress``, a line a running cell reported (``memlab.progress``), which ends nothing."""

    name: str
    text: str | None = None
    error: str | None = None
    progress: str | None = None

    @property
    def out_of_time(self) -> bool:
        return self.error == OUT_OF_TIME


@dataclasses.dataclass(frozen=True)
class Scheduled:
    """A cell under a time limit: it may start while the time left exceeds its expected duration.

    ``deadline``: epoch seconds (None: no limit). ``seconds``: the compute times of the sweep's finished cells, a
    list the driver extends as cells finish (shared in this process; a worker gets it as it was at dispatch);
    their median is the expected duration. ``checkpoints``: the cell saves its progress and stops itself in time
    (``memlab.deadline``), so it may start whenever time is left. ``cut_short``: the sweep's cells that stopped at
    the limit (the driver's list, like ``seconds``): once one has, no cell starts, since a checkpointing cell's first
    piece of work has no measured time to be refused by and would run past the limit.
    """

    compute: Callable[[], Mapping]
    deadline: float | None = None
    seconds: list[float] = dataclasses.field(default_factory=list)
    checkpoints: bool = False
    cut_short: list[str] = dataclasses.field(default_factory=list)

    @property
    def start_by(self) -> float | None:
        """The latest wall-clock time the cell may start at (None: any time)."""
        if self.deadline is not None and self.cut_short:
            return 0.0  # the time limit has stopped a cell of this sweep: it is up for new ones
        if self.deadline is None or self.checkpoints or not self.seconds:
            return self.deadline
        return self.deadline - float(np.median(self.seconds))

    def __call__(self) -> Mapping:
        return self.compute()


@dataclasses.dataclass(frozen=True)
class Settings:
    """The driver's JAX settings at the time of a sweep, applied wherever its cells run."""

    x64: bool
    cache_dir: str | None
    cache_min_compile_secs: float
    deadline: float | None = None  # epoch seconds of the run's time limit (memlab.deadline)
    cell_progress: bool = False  # the driver shows the cells' own progress lines: workers send them

    @classmethod
    def of_driver(cls, deadline: float | None = None, cell_progress: bool = False) -> Settings:
        return cls(bool(jax.config.jax_enable_x64), jax.config.jax_compilation_cache_dir,
                   float(jax.config.jax_persistent_cache_min_compile_time_secs), deadline, cell_progress)


_applied_cache: list[str | None] = []  # the compile cache a worker process was configured with


def _configure_worker(settings: Settings) -> None:
    if settings.cache_dir and not _applied_cache:
        compile_cache.enable(settings.cache_dir, settings.cache_min_compile_secs)
        _applied_cache.append(settings.cache_dir)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (the kernel's high-water mark, ``ru_maxrss``).

    It never decreases, so after a cell it bounds that cell's peak from above (earlier cells of the same
    process and the compiled programs it keeps count too).
    """
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


def compute_cell(cell: Callable[[], Mapping], settings: Settings, name: str = "?") -> tuple[str | None, str | None]:
    """Run the cell ``name`` where it lands; (record, None) or (None, traceback), or (None, OUT_OF_TIME) if it is
    past the cell's ``start_by`` (:class:`Scheduled`) or the cell stopped at the deadline. Its progress lines go
    through the channel open in this process (``memlab.progress``). Ctrl-C is not caught."""
    start_by = getattr(cell, "start_by", None)
    if start_by is not None and time.time() > start_by:
        return None, OUT_OF_TIME
    start, compiled_before = time.perf_counter(), compile_cache.seconds_compiling()
    try:
        with jax.enable_x64(settings.x64), deadline.until(settings.deadline), progress.cell_running(name):
            result = cell()
        declared = result_types(getattr(cell, "compute", cell))  # a Scheduled cell, or the cell itself
        if declared is not None and not isinstance(result, declared):
            raise TypeError(f"cell {name!r} returned a {type(result).__name__}; its cell function declares "
                            f"{' or '.join(k.__name__ for k in declared)} (store.cell's result)")
        return cell_text(result, time.perf_counter() - start, peak_rss_mb(),
                         compile_cache.seconds_compiling() - compiled_before), None
    except deadline.OutOfTime:
        return None, OUT_OF_TIME
    except Exception:
        return None, traceback.format_exc()


_pool_sink: list[Callable[[str], None] | None] = [None]  # where a pool worker sends its cells' progress lines


def start_pool_worker(send: Callable[[str], None] | None) -> None:
    """A pool worker's initializer: Ctrl-C is the driver's (it stops the pool); progress lines go to ``send``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _pool_sink[0] = send


def compute_pickled(blob: bytes, settings: Settings, name: str = "?",
                    send: Callable[[str], None] | None = None) -> tuple[str | None, str | None]:
    """A worker's entry point: unpickle the cell, configure JAX, compute; the cell's progress lines go to ``send``
    (default: the pool's, :func:`start_pool_worker`) if the driver shows them."""
    import cloudpickle

    _configure_worker(settings)
    try:
        cell = cloudpickle.loads(blob)
    except Exception:
        return None, traceback.format_exc()
    send = send or _pool_sink[0]
    with progress.sending_to(send if settings.cell_progress else None):
        return compute_cell(cell, settings, name)


Cells = Mapping[str, Callable[[], Mapping]] | Iterable[tuple[str, Callable[[], Mapping]]]


def named_cells(cells: Cells) -> Iterator[tuple[str, Callable[[], Mapping]]]:
    """(name, cell) pairs, taken one at a time: from a mapping, or as they come from an iterable of pairs (a
    sweep's: it claims each cell in the cell store as it is taken, ``CellCache._take``)."""
    return iter(cells.items()) if isinstance(cells, Mapping) else iter(cells)


def pickled(cells: Cells) -> Iterator[tuple[str, bytes | None, str | None]]:
    """(name, blob, None), or (name, None, why) for a cell that cannot travel to a worker."""
    import cloudpickle

    for name, cell in named_cells(cells):
        try:
            yield name, cloudpickle.dumps(cell), None
        except Exception as e:
            yield name, None, f"cell {name!r} cannot be sent to a worker ({type(e).__name__}: {e}); " \
                              "a cell must be a picklable function of the config and a key"

"""Progress a person can watch: a sweep's bar or its log lines, and a long cell's own progress.

The driver shows a sweep (:class:`SweepDisplay`): on a terminal a rich bar on stderr with the time elapsed and the
time remaining; when stdout is not a terminal (a cluster job, ``| tee log``, ``> log``) also one plain line per
finished cell on stdout (experiment, cell, seconds, finished/total), flushed as it is written, so a log grows while
the run works.

A running cell speaks through a channel the driver opens (:func:`sending_to`): in the driver's process for cells
computed there, through a queue from a pool worker or a Ray task (:mod:`memlab.executors`). Library calls open
none, so they stay silent. What a cell says:

- where it trains, the step or epoch and its loss (or return) between chunks of training (:func:`training_step`),
  at most every :data:`REPORT_EVERY_S` seconds and at the last one: PPO on RingWorld and the arena's checkpointed
  training in chunks between checkpoints, pi-SSM's, recall's and ictd's training cells in chunks of epochs sized to
  take about :data:`CHUNK_S` seconds each (:func:`training_chunks`);
- every cell that has said nothing for :data:`HEARTBEAT_S` seconds: that it is still running, and for how long
  (:func:`cell_running`).

A chunk is one compiled program, called once per chunk with the training state (the carry of its loop) and the
step it runs to, so the chunks cost no compile beyond the first: the same epochs, the same numbers as the one
program they replaced (tests/test_training_chunks.py: bit for bit under the XLA flags ``memlab run`` compiles
with; at optimisation level 0, the tests' own, the start of a run computed in a program of its own may round
differently in the last bit).

The library's training functions also take ``callback(step, metrics)`` (``make_train`` of every study, ``pissm.fit``,
the arena's ``make_training``), evaluated after each epoch or chunk inside the jitted loop by
``jax.debug.callback``. The cells do not use it, for two reasons a caller should know: a program with a host
callback is compiled anew in every process (JAX's persistent compile cache keeps none), and XLA may fuse the loop
differently around the callback, so the numbers can differ from the silent program's in the last bits (measured:
identical at XLA's default flags, ~1e-7 relative at optimisation level 0 for ictd's and the arena's training).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping

import jax.numpy as jnp
import numpy as np

from memlab import deadline

__all__ = ["CHUNK_S", "HEARTBEAT_S", "REPORT_EVERY_S", "SweepDisplay", "cell_running", "run_in_chunks", "sending_to",
           "training_chunks", "training_step"]

REPORT_EVERY_S = 15.0  # a training cell's progress line at most this often (and its last step)
HEARTBEAT_S = 60.0  # a cell silent this long says it is still running
CHUNK_S = 5.0  # the wall time a chunk of training aims at where its length is free (training_chunks)


# ---------------------------------------------------------------- the channel a cell's progress goes through

_channel: dict = {"sink": None, "cell": None, "last": -np.inf}


@contextlib.contextmanager
def sending_to(sink: Callable[[str], None] | None) -> Iterator[None]:
    """Send the progress lines of the cells computed in this process to ``sink`` (None: nowhere) inside the block."""
    previous, _channel["sink"] = _channel["sink"], sink
    try:
        yield
    finally:
        _channel["sink"] = previous


def _send(text: str, now: float) -> None:
    sink = _channel["sink"]
    if sink is not None:
        _channel["last"] = now
        sink(f"cell {_channel['cell'] or '?'}: {text}")


@contextlib.contextmanager
def cell_running(name: str) -> Iterator[None]:
    """The cell ``name`` runs in this process inside the block: its lines are named after it, and while a channel is
    open a heartbeat says every :data:`HEARTBEAT_S` seconds of silence that it still runs."""
    previous = _channel["cell"]
    _channel.update(cell=name, last=time.monotonic())
    stop = threading.Event()
    heartbeat = threading.Thread(target=_heartbeat, args=(stop, time.monotonic()), daemon=True)
    if _channel["sink"] is not None:
        heartbeat.start()
    try:
        yield
    finally:
        stop.set()
        if heartbeat.is_alive():
            heartbeat.join()
        _channel["cell"] = previous


def _heartbeat(stop: threading.Event, start: float) -> None:
    while not stop.wait(max(0.0, _channel["last"] + HEARTBEAT_S - time.monotonic())):
        now = time.monotonic()
        if now - _channel["last"] >= HEARTBEAT_S:
            _send(f"running, {(now - start) / 60:.0f} min so far", now)


def _number(value) -> str:
    value = np.asarray(value)
    if value.size != 1:  # several seeds at once: their mean
        value = np.mean(value)
    return f"{value.item():.4g}" if np.issubdtype(value.dtype, np.floating) else str(value.item())


def training_step(done: int, total: int, metrics: Mapping[str, float] | None = None, unit: str = "step") -> None:
    """Report that the cell running here has finished ``done`` of ``total`` ``unit``s (``metrics``: scalars, or
    one per seed, shown as their mean), at most every :data:`REPORT_EVERY_S` seconds and at the last one; nothing
    where no channel is open."""
    if _channel["sink"] is None:
        return
    now, done = time.monotonic(), int(np.max(np.asarray(done)))
    if now - _channel["last"] < REPORT_EVERY_S and done < total:
        return
    shown = ", ".join(f"{name} {_number(value)}" for name, value in (metrics or {}).items())
    _send(f"{unit} {done}/{total}" + (f", {shown}" if shown else ""), now)


def training_chunks(done: int, total: int, size: int | None = None, time_limit: bool = False
                    ) -> Iterator[tuple[int, int]]:
    """The chunks ``(start, stop)`` of a training run from step ``done`` to ``total``, one compiled chunk program
    called once per chunk by the loop that takes them, which reports between chunks (:func:`training_step`).

    ``size``: steps per chunk (the last may be shorter); None: sized from the last chunk's wall time so that a chunk
    takes about :data:`CHUNK_S` seconds (the first is one step), for a chunk program whose length is an argument.
    ``time_limit``: before each chunk, ``memlab.deadline.check`` with the last chunk's wall time (a run that saves
    a checkpoint after each chunk stops with ``OutOfTime`` before one that would not finish in time)."""
    seconds = 0.0
    n = 1 if size is None else size
    while done < total:
        if time_limit:
            deadline.check(seconds)
        start, stop = time.perf_counter(), min(total, done + n)
        yield done, stop
        seconds = time.perf_counter() - start
        if size is None:  # steps that take about CHUNK_S by the last chunk's pace
            n = max(1, int(CHUNK_S * (stop - done) / max(seconds, 1e-9)))
        done = stop


def run_in_chunks(loop, run: Callable, total: int, report: Callable):
    """An epoch loop run to ``total`` epochs in chunks (:func:`training_chunks`, sized by wall time): ``loop =
    run(loop, stop)`` per chunk (one compiled program, ``stop`` traced), then ``report(loop, stop) -> (epochs run,
    metrics)`` shown as :func:`training_step`; a chunk that ran fewer epochs than asked (a run stopped early, e.g. at
    a failure) ends the loop. Returns the loop."""
    for _, stop in training_chunks(0, total):
        loop = run(loop, jnp.asarray(stop))
        ran, metrics = report(loop, stop)
        training_step(ran, total, metrics, "epoch")
        if ran < stop:
            break
    return loop


# ---------------------------------------------------------------- the driver's display of a sweep


class SweepDisplay:
    """How the driver shows one sweep (module docstring): ``advance(name, seconds, verb)`` for a cell that ended,
    ``line(text)`` for a cell's own progress; ``check()`` is called at each (a Ctrl-C is noticed there).

    ``enabled`` False (``--no-progress``): nothing is shown. ``terminal``: whether stdout is a terminal (None: ask
    it); off a terminal every finished cell is one line on stdout.
    """

    def __init__(self, origin: str, label: str, total: int, done: int = 0, enabled: bool = True,
                 check: Callable[[], None] = lambda: None, terminal: bool | None = None):
        self.origin, self.label, self.total, self.done = origin, label, total, done
        self.enabled, self.check = enabled, check
        self.plain = enabled and not (sys.stdout.isatty() if terminal is None else terminal)
        self._bar = self._task = None

    def __enter__(self) -> SweepDisplay:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       TextColumn("left"), TimeRemainingColumn())
            self._bar = Progress(*columns, console=Console(stderr=True), transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total, completed=self.done)
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
            self._bar = None

    @property
    def columns(self) -> list[str]:
        """The kinds of the bar's columns while it shows (rich's column classes by name); [] without a bar."""
        return [] if self._bar is None else [type(c).__name__ for c in self._bar.columns]

    def advance(self, name: str, seconds: float | None = None, verb: str = "finished") -> None:
        """A cell ended (``verb``: finished, failed, found in the store): one more on the bar and, off a terminal,
        a line."""
        self.check()
        self.done += 1
        if self._bar is not None:
            self._bar.advance(self._task, 1)
        if self.plain:
            took = f" in {seconds:.1f} s" if seconds is not None else ""
            self._print(f"memlab: {self.origin}: cell {name} {verb}{took} ({self.done}/{self.total}, {self.label})")

    def line(self, text: str) -> None:
        """A cell's own progress line: above the bar on a terminal, on stdout off one."""
        if not self.enabled:
            return
        if self.plain or self._bar is None:
            self._print(f"memlab: {self.origin}: {text}")
        else:
            self._bar.console.print(f"memlab: {self.origin}: {text}", markup=False, highlight=False)

    @staticmethod
    def _print(text: str) -> None:
        print(text, flush=True)

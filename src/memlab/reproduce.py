"""``memlab reproduce``: every experiment's profile, several at once, each in its own ``memlab run`` process.

Experiments are independent, so ``jobs`` of them run side by side (``make reproduce`` uses both cores this way);
each writes its usual folder ``<out>/<name>/<profile>/`` and a log ``<out>/<name>/<profile>.log``. Experiments
start longest first, so that no core is left with a long one at the end: by the time an earlier run left in
results.json, else by the table ``reproduce_costs.json`` (written by ``benchmarks/reproduce_costs.py`` from a
measured run), else in the order given. One that fails does not stop the others; the caller sees its exit code and
log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from memlab.checks import check_int
from memlab.devices import default_devices, host_devices_flags

__all__ = ["COSTS", "Finished", "memlab_run", "reproduce"]

COSTS = Path(__file__).with_name("reproduce_costs.json")  # {profile: {"seconds": {name: wall seconds}, ...}}


@dataclasses.dataclass(frozen=True)
class Finished:
    """One experiment's run: its name, exit code (None: not started, the time limit had come), wall time and log."""

    name: str
    returncode: int | None
    seconds: float
    log: Path


def _previous_seconds(out: Path, name: str, profile: str) -> float | None:
    try:
        return float(json.loads((out / name / profile / "results.json").read_text(encoding="utf-8"))["elapsed_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def expected_seconds(names: Sequence[str], profile: str, out: Path) -> dict[str, float]:
    """Each experiment's expected wall time: its last run's in ``out``, else :data:`COSTS`' for the profile, else 0."""
    try:
        table = json.loads(COSTS.read_text(encoding="utf-8")).get(profile, {}).get("seconds", {})
    except (OSError, ValueError, AttributeError):
        table = {}
    previous = {name: _previous_seconds(out, name, profile) for name in names}
    return {name: previous[name] if previous[name] is not None else float(table.get(name, 0.0)) for name in names}


def memlab_run(name: str, profile: str, out: Path, time_limit: float | None = None) -> list[str]:
    """The command that runs one experiment: ``memlab run NAME --profile PROFILE --out OUT --no-progress`` (and
    ``--time-limit SECONDS``)."""
    limit = [] if time_limit is None else ["--time-limit", f"{time_limit:.0f}"]
    return [sys.executable, "-m", "memlab.cli", "run", name, "--profile", profile, "--out", str(out), "--no-progress",
            *limit]


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt while inside (main thread only): its default would end this process and
    leave the experiments it started running on their own."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _heed_sigint() -> None:
    """In each experiment's process before it starts: SIGINT, the driver's "stop, keeping your finished cells"
    (a Ctrl-C), gets its default action back. A shell starts a background job (``memlab reproduce ... &``) with
    SIGINT ignored, children inherit that, and Python then installs no Ctrl-C handler: the driver's SIGINT did
    nothing and it had to kill every experiment after 30 s."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def reproduce(names: Sequence[str], profile: str, jobs: int, out: Path,
              on_finish: Callable[[Finished], None] = lambda f: None,
              command: Callable[..., list[str]] = memlab_run, time_limit: float | None = None) -> list[Finished]:
    """Run ``command(name, profile, out/name/profile, seconds_left)`` (default :func:`memlab_run`) for every name,
    at most ``jobs`` at a time; returns the runs in the order they finished. Ctrl-C, or SIGTERM (``kill``, a
    cluster's scheduler), stops every running experiment (their finished cells are kept; none is left running).
    ``time_limit`` (seconds): each run gets the time that is left as its own limit, and no run starts once it is up
    (those are returned with returncode None)."""
    check_int("jobs", jobs)
    deadline = None if time_limit is None else time.time() + time_limit
    env = {**os.environ, "XLA_FLAGS": host_devices_flags(default_devices(jobs))}  # the cores shared among the jobs
    expected = expected_seconds(names, profile, out)
    queue = sorted(names, key=lambda name: -expected[name])  # stable: the order given where nothing is known
    running: dict[str, tuple[subprocess.Popen, float, Path]] = {}
    finished: list[Finished] = []
    with _sigterm_as_interrupt():
        try:
            while queue or running:
                while queue and len(running) < jobs:
                    name = queue.pop(0)
                    log = out / name / f"{profile}.log"
                    left = None if deadline is None else deadline - time.time()
                    if left is not None and left < 1:
                        finished.append(Finished(name, None, 0.0, log))
                        on_finish(finished[-1])
                        continue
                    log.parent.mkdir(parents=True, exist_ok=True)
                    with log.open("w", encoding="utf-8") as f:
                        process = subprocess.Popen(command(name, profile, out / name / profile, left), stdout=f,
                                                   stderr=subprocess.STDOUT, env=env, preexec_fn=_heed_sigint)
                        running[name] = (process, time.perf_counter(), log)
                for name, (process, start, log) in list(running.items()):
                    if process.poll() is not None:
                        del running[name]
                        finished.append(Finished(name, process.returncode, time.perf_counter() - start, log))
                        on_finish(finished[-1])
                time.sleep(0.2)
        except KeyboardInterrupt:  # each run stops as on its own Ctrl-C: finished cells kept
            for process, _, _ in running.values():
                process.send_signal(signal.SIGINT)
            for process, _, _ in running.values():
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()  # reaped: no zombie outlives the driver
            raise
    return finished

"""``memlab reproduce``: every experiment's profile, several at once, each in its own ``memlab run`` process.

Experiments are independent, so ``jobs`` of them run side by side (``make reproduce`` uses both cores this way);
each writes its usual folder ``<out>/<name>/<profile>/`` and a log ``<out>/<name>/<profile>.log``. Experiments
start longest first, so that no core is left with a long one at the end: by the time an earlier run left in
results.json, else by the table ``reproduce_costs.json`` (written by ``benchmarks/reproduce_costs.py`` from a
measured run), else in the order given. One that fails does not stop the others; the caller sees its exit code and
log.

An experiment is one process, so a long one could hold one core while the others sit idle at the end. When a job
slot is free and no experiment is waiting, an experiment whose cells each keep one core busy (``splittable``: the
profile is among its ``pool_profiles``) gets a helper run: the same ``memlab run`` with the same cell store and a
scratch ``--out``. Runs sharing a store split its cells (each claims a cell as it starts it, ``memlab.cell_cache``),
so the helper takes the cells the experiment's own run has not reached and that run reads them from the store; the
helper's folder is deleted when it ends. A helper is stopped when the experiment's own run ends (every cell is then
stored). Each run's CPU time (its process and the processes it waited for) is recorded beside its wall time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from memlab.checks import check_int
from memlab.devices import default_devices, host_devices_flags

__all__ = ["COSTS", "HELPER_MIN_S", "Finished", "memlab_run", "reproduce"]

COSTS = Path(__file__).with_name("reproduce_costs.json")  # {profile: {"seconds": {name: wall seconds}, ...}}
# a helper run first pays its own start (Python, JAX, the experiment's set-up and held-out data): none is started for
# an experiment expected to end within this many seconds per run of it (one past its expected time gets one: a free
# core costs nothing, and its own estimate was wrong)
HELPER_MIN_S = 30.0


@dataclasses.dataclass(frozen=True)
class Finished:
    """One experiment's run: its name, exit code (None: not started, the time limit had come), wall time and log;
    ``cpu_seconds``: the CPU time of its process and of its ``helpers`` (helper runs) together (None: not known)."""

    name: str
    returncode: int | None
    seconds: float
    log: Path
    cpu_seconds: float | None = None
    helpers: int = 0


@dataclasses.dataclass
class _Job:
    """A running ``memlab run``: an experiment's own run, or a helper of it (``scratch``: the helper's own folder,
    deleted when it ends)."""

    name: str
    process: subprocess.Popen
    start: float
    log: Path
    scratch: Path | None = None
    cpu_seconds: float | None = None
    slot: int = 0  # which of the ``jobs`` slots, and so which share of the cores (:func:`core_shares`), it holds

    def ended(self) -> bool:
        """Whether the process has ended; if so it is reaped here with its CPU time (``os.wait4``: user + system
        seconds of the process and of the children it waited for)."""
        if self.process.returncode is not None:
            return True
        pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
        if pid == 0:
            return False
        self.process.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_seconds = usage.ru_utime + usage.ru_stime
        return True

    def stop(self) -> None:
        """SIGINT (the run's own Ctrl-C: its finished cells kept), SIGKILL after 30 s; reaped either way."""
        self.process.send_signal(signal.SIGINT)
        deadline = time.time() + 30
        while not self.ended():
            if time.time() > deadline:
                self.process.kill()
            time.sleep(0.05)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _previous_seconds(out: Path, name: str, profile: str) -> float | None:
    try:
        return float(json.loads((out / name / profile / "results.json").read_text(encoding="utf-8"))["elapsed_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def results_stamp(out: Path, name: str, profile: str) -> tuple[int, int] | None:
    """Which ``results.json`` experiment ``name`` has under ``out`` (inode, mtime), or None. A run writes it atomically,
    as a new file, only when it finishes: so a run finished when the stamp changed. Compared with the stamp taken
    before, not with the clock: a file system stamps with a coarse clock that can lag time.time() by a tick."""
    try:
        stat = (out / name / profile / "results.json").stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def expected_seconds(names: Sequence[str], profile: str, out: Path) -> dict[str, float]:
    """Each experiment's expected wall time: its last run's in ``out``, else :data:`COSTS`' for the profile, else 0."""
    try:
        table = json.loads(COSTS.read_text(encoding="utf-8")).get(profile, {}).get("seconds", {})
    except (OSError, ValueError, AttributeError):
        table = {}
    previous = {name: _previous_seconds(out, name, profile) for name in names}
    return {name: previous[name] if previous[name] is not None else float(table.get(name, 0.0)) for name in names}


def memlab_run(name: str, profile: str, out: Path, time_limit: float | None = None,
               store: Path | None = None) -> list[str]:
    """The command that runs one experiment: ``memlab run NAME --profile PROFILE --out OUT --no-progress`` (and
    ``--time-limit SECONDS``, ``--store STORE``)."""
    limit = [] if time_limit is None else ["--time-limit", f"{time_limit:.0f}"]
    return [sys.executable, "-m", "memlab.cli", "run", name, "--profile", profile, "--out", str(out), "--no-progress",
            *limit, *([] if store is None else ["--store", str(store)])]


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


def core_shares(jobs: int) -> list[set[int]] | None:
    """The cores each of ``jobs`` slots runs its experiment on: this process's cores dealt out, len // jobs to a
    slot (with more jobs than cores, slots share cores in turn); None where the OS sets no affinity (macOS).

    A process pinned to its share sizes JAX's thread pool to it: unpinned, every process kept a pool as large as the
    machine, and two experiments side by side on the 2-core machine contended for each other's core (a Gated
    DeltaNet leaderboard cell ran 2-3x slower beside another job than alone)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None
    per = max(1, len(cores) // jobs)
    return [{cores[(slot * per + i) % len(cores)] for i in range(per)} for slot in range(jobs)]


def _heed_sigint() -> None:
    """In each experiment's process before it starts: SIGINT, the driver's "stop, keeping your finished cells"
    (a Ctrl-C), gets its default action back. A shell starts a background job (``memlab reproduce ... &``) with
    SIGINT ignored, children inherit that, and Python then installs no Ctrl-C handler: the driver's SIGINT did
    nothing and it had to kill every experiment after 30 s."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _to_help(running: list[_Job], splittable: Collection[str], expected: dict[str, float],
             deadline: float | None) -> str | None:
    """The splittable experiment a free slot should help, or None: one past its expected time (or with none known)
    first, its time left unknown, fewest runs of it first; else the one with the most expected time left per run
    of it, if that is at least :data:`HELPER_MIN_S`. None within HELPER_MIN_S of the ``deadline``."""
    if deadline is not None and deadline - time.time() < HELPER_MIN_S:
        return None
    now, candidates = time.perf_counter(), {}
    for job in running:
        if job.scratch is None and job.name in splittable:
            runs = sum(j.name == job.name for j in running)
            left = expected.get(job.name, 0.0) - (now - job.start)
            if left <= 0 or left / runs >= HELPER_MIN_S:
                candidates[job.name] = (left <= 0, -runs if left <= 0 else left / runs)
    return max(candidates, key=candidates.get) if candidates else None


def reproduce(names: Sequence[str], profile: str, jobs: int, out: Path,
              on_finish: Callable[[Finished], None] = lambda f: None,
              command: Callable[..., list[str]] = memlab_run, time_limit: float | None = None,
              splittable: Collection[str] = ()) -> list[Finished]:
    """Run ``command(name, profile, out/name/profile, seconds_left)`` (default :func:`memlab_run`) for every name,
    at most ``jobs`` at a time; returns the runs in the order they finished. Ctrl-C, or SIGTERM (``kill``, a
    cluster's scheduler), stops every running experiment (their finished cells are kept; none is left running).
    ``time_limit`` (seconds): each run gets the time that is left as its own limit, and no run starts once it is up
    (those are returned with returncode None). ``splittable``: the experiments that may get helper runs (module
    docstring), each ``command(name, profile, scratch/name/profile, seconds_left, store=out/"cells")``, the store
    of the runs in ``out/<name>/<profile>`` (``runner.default_store``)."""
    check_int("jobs", jobs)
    deadline = None if time_limit is None else time.time() + time_limit
    env = {**os.environ, "XLA_FLAGS": host_devices_flags(default_devices(jobs))}  # the cores shared among the jobs
    expected = expected_seconds(names, profile, out)
    queue = sorted(names, key=lambda name: -expected[name])  # stable: the order given where nothing is known
    running: list[_Job] = []
    helpers: dict[str, list[_Job]] = {}  # every helper started, by experiment
    helpable = set(splittable)  # less those a helper ended by itself in (all cells done, or it failed): none again
    finished: list[Finished] = []

    shares = core_shares(jobs)

    def start(name: str, log: Path, left: float | None, scratch: Path | None = None) -> _Job:  # a helper: scratch
        store = {} if scratch is None else {"store": out / "cells"}
        slot = min(set(range(jobs)) - {job.slot for job in running})
        return _start(name, command(name, profile, (scratch or out) / name / profile, left, **store), log, env,
                      None if shares is None else shares[slot], slot, scratch)

    with _sigterm_as_interrupt():
        try:
            while queue or running:
                while len(running) < jobs and (queue or (helped := _to_help(running, helpable, expected, deadline))):
                    left = None if deadline is None else deadline - time.time()
                    if not queue:  # a free slot and nothing waiting: a helper, in a folder of its own
                        scratch = Path(tempfile.mkdtemp(prefix=f"memlab-{helped}-helper-"))
                        log = out / helped / f"{profile}.helper-{len(helpers.setdefault(helped, [])) + 1}.log"
                        running.append(start(helped, log, left, scratch))
                        helpers[helped].append(running[-1])
                        continue
                    name = queue.pop(0)
                    log = out / name / f"{profile}.log"
                    if left is not None and left < 1:
                        finished.append(Finished(name, None, 0.0, log))
                        on_finish(finished[-1])
                        continue
                    running.append(start(name, log, left))
                for job in [job for job in running if job.ended()]:
                    running.remove(job)
                    if job.scratch is not None:  # a helper that ended by itself
                        shutil.rmtree(job.scratch, ignore_errors=True)
                        helpable.discard(job.name)
                        continue
                    finished.append(_end_of(job, helpers.get(job.name, []), running))
                    on_finish(finished[-1])
                time.sleep(0.2)
        except KeyboardInterrupt:  # each run stops as on its own Ctrl-C: finished cells kept
            _stop_all(running)
            raise
    return finished


def _start(name: str, argv: list[str], log: Path, env: dict, cores: set[int] | None, slot: int,
           scratch: Path | None) -> _Job:
    """Start ``argv``, its output to ``log``, on ``cores`` (None: wherever the OS puts it) in job slot ``slot``."""
    log.parent.mkdir(parents=True, exist_ok=True)

    def in_child() -> None:  # before the experiment's process starts
        _heed_sigint()
        if cores is not None:
            os.sched_setaffinity(0, cores)

    with log.open("w", encoding="utf-8") as f:
        process = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env, preexec_fn=in_child)
    return _Job(name, process, time.perf_counter(), log, scratch, slot=slot)


def _stop_all(running: list[_Job]) -> None:
    """SIGINT to every run at once, then each waited for (SIGKILL after 30 s): no zombie outlives the driver."""
    for job in running:
        job.process.send_signal(signal.SIGINT)
    for job in running:
        try:
            job.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            job.process.kill()
            job.process.wait()
        if job.scratch is not None:
            shutil.rmtree(job.scratch, ignore_errors=True)


def _end_of(job: _Job, helpers: list[_Job], running: list[_Job]) -> Finished:
    """An experiment's own run has ended: its helpers still running are stopped (every cell is stored by now) and
    taken off ``running``; returns the run's :class:`Finished`, with their CPU time added to its own."""
    for helper in helpers:
        if helper in running:
            helper.stop()
            running.remove(helper)
    times = [j.cpu_seconds for j in (job, *helpers)]
    return Finished(job.name, job.process.returncode, time.perf_counter() - job.start, job.log,
                    None if None in times else sum(times), len(helpers))

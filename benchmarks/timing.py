"""What every benchmark shares: wall time after a warm-up run, and side-by-side rows against peer libraries.

A side-by-side row (``side_by_side``) is one implementation of one workload::

    {"workload": ..., "implementation": ..., "seconds": the median of its rounds, "seconds_q25", "seconds_q75",
     "reference": <the peer it is compared with>,
     "speedup": the reference's median / this median  (> 1: faster than the peer), "speedup_q25", "speedup_q75"
     (quartiles of the per-round ratios), "max_abs_diff": max |output - reference output|  (every benchmark is also a
     cross-check), "rounds", and the machine's load while it ran: "load1_before", "load1_after", "other_cpus",
     "unreliable"}

Peers come from the optional ``bench`` extra (``pip install -e ".[bench]"``, which ``make bench`` does); a workload
whose peer is not installed is timed for memlab alone and its row says which package would add the comparison.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import importlib.metadata
import multiprocessing
import os
import resource
import time
import zlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import numpy as np

PEER_PACKAGES = ("dynamax", "mambapy", "filterpy", "torch")
# side_by_side runs at least ROUNDS rounds, and more (up to MAX_ROUNDS) while they are short: the best of 3 calls
# of 10-20 ms varied 1.3-2.3x between two runs of the same code on the same day
ROUNDS, SHORT_ROUNDS_SECONDS, MAX_ROUNDS = 7, 3.0, 21
# a row is unreliable when other processes used more than this many CPUs on average while it ran, or the one-minute
# load average moved by more than LOAD_CHANGE_MAX
OTHER_CPUS_MAX, LOAD_CHANGE_MAX = 0.25, 0.5


def _block(out):
    """Wait for JAX outputs; NumPy / torch outputs are ready when returned (CPU)."""
    for leaf in jax.tree_util.tree_leaves(out):
        if hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()
    return out


def timed(fn, repeats: int = 1, warm_up: bool = True) -> float:
    """Median wall time in seconds of ``fn()`` (blocked until ready) over ``repeats`` runs, after one warm-up call
    (compilation) unless the caller has just made it (``warm_up=False``)."""
    if warm_up:
        _block(fn())
    seconds = []
    for _ in range(repeats):
        t = time.perf_counter()
        _block(fn())
        seconds.append(time.perf_counter() - t)
    return float(np.median(seconds))


def compiled(fn: Callable, *args, native_scan: bool = True) -> Callable:
    """``jax.jit(fn)`` compiled for ``args`` now; with ``native_scan=False`` traced with Mamba's selective scan in
    JAX rather than the native kernel (``memlab.layers.native.disabled``), to time the two side by side."""
    from memlab.layers import native

    with contextlib.nullcontext() if native_scan else native.disabled():
        return jax.jit(fn).lower(*args).compile()


def isolated(fn: Callable[..., list[dict]], *args, env: dict[str, str] | None = None, **kwargs) -> list[dict]:
    """``fn(*args, **kwargs)`` in a fresh Python process (spawned, with this one's environment and XLA_FLAGS, and
    ``env`` on top: variables read at process start, as glibc's ``GLIBC_TUNABLES`` or a device count).

    A workload that allocates and frees a lot (dynamax's parallel HMM filter: about 1 GB) was once seen to slow
    every filter timed after it in the same process about 2x (docs/benchmarks.md, "Isolation"; bench_heap.py did
    not see it again), so every workload that could leave such a heap behind runs alone and no row's time depends
    on what ran before it. ``fn`` must be a module-level function
    of a module Python can import by name (run.py registers the bench_* scripts under their names)."""
    saved = {name: os.environ.get(name) for name in env or {}}
    os.environ.update(env or {})  # a spawned process starts with this process's environment
    try:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(fn, *args, **kwargs).result()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def peer(module: str):
    """The peer module if the ``bench`` extra provides it, else None."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def peer_versions() -> dict[str, str | None]:
    """Installed version of every peer package (None if absent), for the results JSON."""
    versions = {}
    for name in PEER_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _as_numpy(out) -> np.ndarray:
    out = out.detach().numpy() if hasattr(out, "detach") else out  # torch tensors
    return np.asarray(out, dtype=np.float64)


def side_by_side(workload: str, implementations: Sequence[tuple[str, Callable[[], object]]],
                 reference: str | None = None, rounds: int = ROUNDS, missing: str | None = None,
                 extra: dict | None = None) -> list[dict]:
    """Time every ``(name, fn)`` of one workload on identical inputs; compare outputs and times with ``reference``.

    The protocol (docs/benchmarks.md, "Reading the tables"): each implementation's first call is its warm-up (and
    the output compared); then ``rounds`` rounds (at least ``ROUNDS``; more, up to ``MAX_ROUNDS``, while the rounds
    so far took under ``SHORT_ROUNDS_SECONDS``), each calling every implementation once in a freshly shuffled order,
    so neither a drifting machine nor the heap one call leaves behind favours a fixed position. A row reports the
    median and the quartiles of its rounds, the speed-up as the ratio of medians with the quartiles of the per-round
    ratios (the rounds are paired), and the machine's load (:class:`Load`): ``unreliable`` when other processes
    used the CPU meanwhile.

    ``fn()`` returns the output to compare (a JAX / NumPy array or a torch tensor, same shape for all). ``reference``
    names one of the implementations (default: the last one, by convention the peer); if it is absent because its
    package is missing, pass ``missing`` (e.g. "pip install -e '.[bench]' adds dynamax") and the rows carry that
    note instead of a ratio. ``extra`` is merged into every row (sizes etc.).
    """
    names = [name for name, _ in implementations]
    if reference is not None and reference not in names:
        raise ValueError(f"reference {reference!r} is not one of the implementations {names}")
    reference = reference if reference is not None else (names[-1] if missing is None else None)
    load = Load.start()
    outputs = {name: _as_numpy(_block(fn())) for name, fn in implementations}  # the first calls are the warm-ups
    seconds: dict[str, list[float]] = {name: [] for name in names}
    order = np.random.default_rng(zlib.crc32(workload.encode()))  # a fixed shuffle per workload: reruns compare
    rounds, done, start = max(rounds, ROUNDS), 0, time.perf_counter()
    while done < rounds:
        for i in order.permutation(len(implementations)):
            name, fn = implementations[i]
            seconds[name].append(timed(fn, warm_up=False))
        done += 1
        if done == ROUNDS and time.perf_counter() - start < SHORT_ROUNDS_SECONDS:  # short calls are the noisiest
            rounds = min(MAX_ROUNDS, max(rounds, int(ROUNDS * SHORT_ROUNDS_SECONDS / (time.perf_counter() - start))))
    machine = load.stop()
    rows = []
    for name in names:
        times = np.asarray(seconds[name])
        row = {"workload": workload, "implementation": name, **(extra or {}), **_quartiles("seconds", times),
               "rounds": done, **machine}
        if reference is None:
            row["reference"] = f"(none: {missing})" if missing else "(none)"
        else:
            row["reference"] = reference
            row["speedup"] = float(np.median(seconds[reference]) / np.median(times))
            if name != reference:
                ratios = _quartiles("speedup", np.asarray(seconds[reference]) / times)
                row["speedup_q25"], row["speedup_q75"] = ratios["speedup_q25"], ratios["speedup_q75"]
            a, b = outputs[name], outputs[reference]
            diff = np.where(a == b, 0.0, np.abs(a - b))  # equal infinities (log 0 = -inf) count as agreement
            row["max_abs_diff"] = float(np.max(diff, initial=0.0))
        rows.append(row)
    return rows


def _quartiles(name: str, values: np.ndarray) -> dict[str, float]:
    """``name`` (the median), ``name_q25`` and ``name_q75`` of ``values``."""
    q25, median, q75 = (float(q) for q in np.quantile(values, (0.25, 0.5, 0.75)))
    return {name: median, f"{name}_q25": q25, f"{name}_q75": q75}


class Load(NamedTuple):
    """What else ran on the machine while a row was timed.

    ``other_cpus``: the CPU time every other process used during the row, in CPUs (1.0 = one core busy all along),
    from the system-wide busy time (/proc/stat) minus this process's own; ``load1_before`` / ``load1_after``: the
    one-minute load average around the row (it lags by about a minute, so it tells what ran before the row as
    well). A row is ``unreliable`` when others used more than ``OTHER_CPUS_MAX`` CPUs or the load average moved by
    more than ``LOAD_CHANGE_MAX``. Off Linux (no /proc/stat) only the load average is recorded."""

    wall: float
    busy: float | None
    own: float
    load1: float

    @classmethod
    def start(cls) -> Load:
        return cls(time.perf_counter(), _system_busy_seconds(), _own_cpu_seconds(), os.getloadavg()[0])

    def stop(self) -> dict:
        wall, busy, own, load1 = time.perf_counter() - self.wall, _system_busy_seconds(), _own_cpu_seconds(), \
            os.getloadavg()[0]
        row = {"load1_before": round(self.load1, 2), "load1_after": round(load1, 2)}
        unreliable = abs(load1 - self.load1) > LOAD_CHANGE_MAX
        if busy is not None and self.busy is not None:
            others = max(0.0, (busy - self.busy) - (own - self.own)) / wall
            row["other_cpus"] = round(others, 2)
            unreliable = unreliable or others > OTHER_CPUS_MAX
        return {**row, "unreliable": bool(unreliable)}


def _system_busy_seconds() -> float | None:
    """CPU seconds every process on the machine has used since boot (Linux's /proc/stat), None elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in f.readline().split()[1:9])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

"""Run the benchmarks: every ``benchmarks/bench_*.py`` exposes ``run() -> list[dict]`` (one dict per table row).

Usage: ``python benchmarks/run.py [NAME ...]`` (NAME is the part after ``bench_``; default: all).
Runs with one JAX CPU device per core, as ``memlab run`` gives a cell (``memlab.devices``; set
``XLA_FLAGS=--xla_force_host_platform_device_count=1`` for one). Prints one table per benchmark and writes
``benchmarks/results/<NAME>.json`` atomically, with the machine and the versions of memlab's stack and of the peer
libraries timed beside it (the ``bench`` extra: ``make bench`` installs it; without it every workload is timed for
memlab alone).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

import jax
from rich.console import Console
from rich.table import Table
from timing import peer_versions  # benchmarks/timing.py (python puts the script's folder on sys.path)

from memlab.devices import default_devices, use_host_devices
from memlab.runner import atomic_write_text, to_jsonable

HERE = Path(__file__).resolve().parent
STACK = ("memlab", "jax", "jaxlib", "equinox", "optax", "numpy", "scipy")
CONSOLE = Console(width=160)
sys.path.insert(0, str(HERE))  # the bench_*.py modules import the shared helpers in timing.py


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # under its own name, so timing.isolated can run its functions in a new process
    spec.loader.exec_module(module)
    return module


def _table(name: str, rows: list[dict]) -> Table:
    table = Table(title=name)
    columns = list(dict.fromkeys(k for row in rows for k in row))  # first-seen order
    for column in columns:
        table.add_column(column)
    for row in rows:
        cells = [row.get(c, "") for c in columns]
        table.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in cells))
    return table


def machine_info() -> dict:
    """The machine and the versions of memlab's stack and of the peers, stored with every benchmark's rows."""
    return {"python": platform.python_version(), "platform": platform.platform(), "processor": platform.processor(),
            "cpus": os.cpu_count(), "devices": [str(d) for d in jax.devices()],
            "versions": {name: importlib.metadata.version(name) for name in STACK} | peer_versions()}


def print_rows(name: str, rows: list[dict]) -> None:
    """One table per row shape (rows with the same columns share a table)."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(row)
    for group in groups.values():
        CONSOLE.print(_table(name, group))


def write_rows(name: str, rows: list[dict], machine: dict) -> None:
    doc = {"benchmark": name, "date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": machine, "rows": rows}
    out = atomic_write_text(HERE / "results" / f"{name}.json", json.dumps(to_jsonable(doc), indent=2) + "\n")
    CONSOLE.print(f"wrote {out.relative_to(HERE.parent)}", markup=False)


def main(argv: list[str]) -> int:
    # as `memlab run` computes a cell alone on this machine: one CPU device per core (memlab.devices), unless
    # XLA_FLAGS names a count (XLA_FLAGS=--xla_force_host_platform_device_count=1 times one device)
    use_host_devices(default_devices(), override=False)
    paths = {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}
    unknown = [n for n in argv if n not in paths]
    if unknown:
        known = ", ".join(paths) or "(none)"
        print(f"benchmarks: error: unknown benchmark(s) {unknown}; known: {known}", file=sys.stderr)
        return 2
    if not paths:
        CONSOLE.print("no benchmarks yet (add benchmarks/bench_<name>.py with run() -> list[dict])", markup=False)
        return 0
    machine = machine_info()
    missing = [name for name, version in peer_versions().items() if version is None]
    if missing:
        CONSOLE.print(f"peer libraries not installed ({', '.join(missing)}): their comparisons are skipped; "
                      "`make bench` (or pip install -e '.[bench]') adds them", markup=False)
    for name in argv or list(paths):
        rows = _load(paths[name]).run()
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError(f"benchmarks/bench_{name}.py: run() must return a list of dicts")
        print_rows(name, rows)
        write_rows(name, rows, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

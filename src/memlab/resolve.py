"""Which stored cells the current code still finds: a run of an experiment's profile against a cell store that
computes nothing (``NothingComputed``), so its cells are only looked up.

What it is for: a stored cell is found by its digest (``store.describe``), which the code computes from the cell's
declared name, version and arguments. A change that alters the digest of a committed cell (a cell's arguments, its
version) orphans hours of paper-scale work without an error. ``stored_origins`` lists the (experiment, profile)
runs that first computed the cells of a store, and ``resolved_digests`` which digests a profile's run finds today;
``lost_cells`` lists the stored cells that no such run finds. ``python -m memlab.resolve STORE`` prints them (exit
1 if any): tests/test_store_committed.py holds every committed cell of ``paper-results/cells`` to it.

Run it at the XLA flags the cells were computed with (the paper runs: XLA's defaults, ``XLA_FLAGS`` unset): a
driver that computes arrays before its sweeps (data sets, task sets) computes them in round-off under other flags,
and its cells' digests follow.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from memlab import catalog
from memlab.executors import Executor
from memlab.runner import CellsFailed, TimeLimitReached, run_experiment
from memlab.worker import Outcome

__all__ = ["NOT_STORED", "NothingComputed", "lost_cells", "resolved_digests", "runs_to_resolve", "stored_origins"]

NOT_STORED = "not in the cell store (memlab.resolve: nothing is computed)"
NO_WAIT_S = 1e-3  # the time limit of a run that only looks its cells up


class NothingComputed(Executor):
    """An executor that computes no cell: every cell sent to it fails with ``NOT_STORED``, so a sweep ends after
    looking its cells up (and the run stops there: a later sweep may need this one's results)."""

    name = "nothing-computed"

    def run(self, cells, settings) -> Iterator[Outcome]:
        for name in (cells if isinstance(cells, Mapping) else dict(cells)):
            yield Outcome(name, error=NOT_STORED)


def stored_origins(store: str | Path) -> dict[tuple[str, str], set[str]]:
    """(experiment, profile) -> the digests of the cells that run first computed, for every record in ``store``
    (``<store>/<function>/<digest>.json``; its ``origin`` is 'experiment/profile/cell')."""
    origins: dict[tuple[str, str], set[str]] = {}
    for path in sorted(Path(store).glob("*/*.json")):
        entry = json.loads(path.read_text(encoding="utf-8"))
        experiment, profile, _ = entry["origin"].split("/")
        origins.setdefault((experiment, profile), set()).add(entry["digest"])
    return origins


def resolved_digests(experiment: str, profile: str, store: str | Path, overrides: Sequence[str] = ()) -> set[str]:
    """The digests of the cells of ``experiment``'s ``profile`` (with ``overrides``, ``--set`` style) that ``store``
    holds under today's digests: the run looks every cell up, computes none, and stops after the first sweep with a
    cell it did not find. Its output folder is temporary (the found cells are copied there with their digests)."""
    with tempfile.TemporaryDirectory() as out:
        try:  # a time limit already past: a cell another run is computing (claimed, not stored) is not waited for
            run_experiment(catalog.EXPERIMENTS[experiment], profile, out_dir=Path(out) / "run", progress=False,
                           executor=NothingComputed(), store=store, overrides=overrides, time_limit=NO_WAIT_S)
        except (CellsFailed, TimeLimitReached):
            pass  # a sweep with cells not stored: the ones found are what this asks for
        return {p.read_text(encoding="utf-8").strip() for p in (Path(out) / "run" / "cells").glob("*.digest")}


def runs_to_resolve(store: str | Path, skip: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str, tuple]]:
    """(experiment, profile, overrides) of every run that asks for cells of ``store``: every stored origin and every
    run folder ``<experiment>/<profile>/results.json`` beside the store, without overrides and, for a folder
    regenerated with ``--set`` (a restricted profile), with the overrides its results.json records; not those in
    ``skip``, nor an experiment or profile that no longer exists (it finds nothing: its cells are listed lost)."""
    store, skip = Path(store), set(skip)
    runs = set(stored_origins(store)) | {(p.parent.parent.name, p.parent.name)
                                         for p in store.parent.glob("*/*/results.json")}
    listed = []
    for experiment, profile in sorted(runs - skip):
        if experiment not in catalog.EXPERIMENTS or profile not in catalog.EXPERIMENTS[experiment].profiles:
            continue
        listed.append((experiment, profile, ()))
        document = store.parent / experiment / profile / "results.json"
        overrides = json.loads(document.read_text(encoding="utf-8"))["overrides"] if document.exists() else []
        if overrides:
            listed.append((experiment, profile, tuple(overrides)))
    return listed


def lost_cells(store: str | Path, skip: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """The records of ``store`` (path -> origin) that no run of :func:`runs_to_resolve` finds today; the records first
    computed by a run in ``skip`` are not checked."""
    store, skip = Path(store), set(skip)
    found: set[str] = set()
    for experiment, profile, overrides in runs_to_resolve(store, skip):
        found |= resolved_digests(experiment, profile, store, overrides)
    lost = {}
    for path in sorted(store.glob("*/*.json")):
        entry = json.loads(path.read_text(encoding="utf-8"))
        if entry["digest"] not in found and tuple(entry["origin"].split("/")[:2]) not in skip:
            lost[str(path)] = entry["origin"]
    return lost


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m memlab.resolve STORE [--skip EXPERIMENT/PROFILE ...]``: print the stored cells no run finds."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m memlab.resolve", description=main.__doc__)
    parser.add_argument("store")
    parser.add_argument("--skip", action="append", default=[], metavar="EXPERIMENT/PROFILE")
    args = parser.parse_args(argv)
    if not Path(args.store).is_dir():
        parser.error(f"no cell store at {args.store} (a folder of <function>/<digest>.json records)")
    if any("/" not in s for s in args.skip):
        parser.error(f"--skip takes EXPERIMENT/PROFILE, got {next(s for s in args.skip if '/' not in s)!r}")
    skip = [tuple(s.split("/", 1)) for s in args.skip]
    lost = lost_cells(args.store, skip)
    for path, origin in lost.items():
        print(f"{path}\t{origin}")
    print(f"{len(lost)} stored cells not found", file=sys.stderr)
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())

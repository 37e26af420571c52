"""The cells of a run: finding finished ones (cell store, run folder), claiming, computing and saving the rest.

A :class:`CellCache` is what :meth:`memlab.runner.Run.sweep` hands a grid of cells to. It reads a finished cell from
the cell store (:mod:`memlab.store`) under its digest, else from the run folder's ``cells/<name>.json``; claims each
unfinished cell in the store just before it starts, so runs sharing a store split the work; hands the cells to the
run's executor and writes each result (atomically) as it arrives; and keeps what the run's results.json says about
its cells (:meth:`CellCache.summary`). docs/architecture.md, "The experiment contract", tells the whole protocol.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from memlab import progress
from memlab.executors import Executor
from memlab.files import CellRecord, atomic_write_text, check_name, read_cell, software_versions
from memlab.interrupt import StickyInterrupt
from memlab.store import CellStore, DamagedRecord, cell_digest, takes_checkpoint, typed_result, with_checkpoint
from memlab.worker import Scheduled, Settings

__all__ = ["CLAIM_POLL_S", "CellCache", "CellsFailed", "TimeLimitReached"]

CLAIM_POLL_S = 1.0  # how often a run waiting for another run's cells looks for them in the store


class CellsFailed(RuntimeError):
    """Cells of a sweep raised; every other cell finished and is kept. ``failures`` maps name -> traceback."""

    def __init__(self, label: str, total: int, failures: Mapping[str, str]):
        self.failures = dict(failures)
        names = ", ".join(self.failures)
        super().__init__(f"{len(self.failures)} of {total} cells of '{label}' failed: {names} (tracebacks above); "
                         "the other cells are kept; rerun the same command to retry the failed ones")


class TimeLimitReached(Exception):
    """The run's time limit came before every cell of a sweep finished; the finished ones are kept and cells that
    checkpoint saved their progress, so the same command resumes."""

    def __init__(self, label: str, finished: int, total: int):
        self.finished, self.total = finished, total
        super().__init__(f"time limit reached in '{label}': {finished} of {total} cells finished; "
                         "the same command resumes")


class CellCache:
    """The cells of one run folder ``out_dir`` (cells named ``<origin>/<name>`` in the store, ``origin`` being
    'experiment/profile') and what is known of them.

    Attributes, as results.json's ``cells`` reports them: ``computed`` (by this invocation), ``resumed`` (finished
    by an earlier invocation of this run), ``reused_from`` (name -> the 'experiment/profile/cell' that first
    computed it), ``stored`` (name -> digest of the cells kept in the store), ``seconds`` (compute time of every
    cell of the run, also of resumed ones), ``peak_rss_mb`` (peak resident memory of the process that computed each
    cell, up to its end), ``software`` (the library versions that computed each cell,
    ``files.software_versions``), ``compile_seconds`` (the part of each cell's time spent compiling).
    """

    def __init__(self, out_dir: Path, origin: str, store: CellStore | None, executor: Executor,
                 deadline: float | None, interrupt: StickyInterrupt, progress: bool = True):
        self.out_dir, self.origin, self.store, self.executor = Path(out_dir), origin, store, executor
        self.deadline, self.show_progress, self._interrupt = deadline, progress, interrupt
        self.computed = 0
        self.resumed = 0
        self.reused_from: dict[str, str] = {}
        self.stored: dict[str, str] = {}
        self.seconds: dict[str, float | None] = {}
        self.peak_rss_mb: dict[str, float | None] = {}
        self.software: dict[str, dict | None] = {}
        self.compile_seconds: dict[str, float | None] = {}

    def summary(self) -> dict:
        """results.json's ``cells``."""
        return {"computed": self.computed, "resumed": self.resumed, "reused": len(self.reused_from),
                "reused_from": self.reused_from, "store": self.stored, "seconds": self.seconds,
                "compile_seconds": self.compile_seconds, "peak_rss_mb": self.peak_rss_mb, "software": self.software}

    def compute(self, cells: Mapping[str, Callable[[], Any]], label: str) -> dict[str, Any]:
        """:meth:`memlab.runner.Run.sweep`: ``{name: result}`` in the order of ``cells``, the finished ones read
        (:meth:`_find`: the store, else the run folder), the rest computed by the executor and saved as each
        arrives; :class:`CellsFailed` or :class:`TimeLimitReached` once every other cell has ended."""
        results, todo, digests = self._look_up(cells, label)
        self._interrupt.check()
        failures, out_of_time = {}, []
        seconds = [self.seconds[n] for n in results if self.seconds[n] is not None]  # grows as cells end
        settings = Settings.of_driver(self.deadline, self.show_progress)
        with self._display(len(cells), label, done=len(results)) as display, \
                progress.sending_to(display.line if self.show_progress else None):
            pending = todo
            while pending:  # another run sharing the store may hold some cells: compute the rest, then wait
                claims, theirs = {}, {}
                taken = self._take(pending, digests, results, display, claims, theirs, seconds, out_of_time)
                try:
                    with contextlib.closing(self.executor.run(taken, settings)) as outcomes:
                        for outcome in outcomes:
                            self._record(outcome, pending, digests, results, seconds, failures, out_of_time, display)
                            if outcome.name in claims and outcome.progress is None:
                                claims.pop(outcome.name).release()
                finally:
                    for claim in claims.values():
                        claim.release()
                pending = self._wait_for_others(label, theirs, digests, results, display, out_of_time)
        if failures:
            raise CellsFailed(label, len(cells), failures)
        if out_of_time:
            raise TimeLimitReached(label, len(cells) - len(out_of_time), len(cells))
        self._warn_other_software(label, list(cells))
        return {name: results[name] for name in cells}

    def _record(self, outcome, pending: dict, digests: dict, results: dict, seconds: list, failures: dict,
                out_of_time: list, display: progress.SweepDisplay) -> None:
        """One message of the executor: a cell's progress line, or its end (saved, failed or out of time)."""
        if outcome.progress is not None:
            display.line(outcome.progress)
            return
        if outcome.out_of_time:  # not finished: the bar keeps counting only the cells that are
            out_of_time.append(outcome.name)
            display.check()  # a Ctrl-C swallowed inside a cell stops the sweep here
        elif outcome.error is not None:
            failures[outcome.name] = outcome.error
            print(f"memlab: cell {outcome.name!r} failed:\n{outcome.error}", file=sys.stderr)
            display.advance(outcome.name, verb="failed")
        else:
            self._save(outcome.name, pending[outcome.name], digests[outcome.name], outcome.text)
            results[outcome.name] = self._keep(outcome.name, pending[outcome.name], read_cell(outcome.text))
            seconds.append(self.seconds[outcome.name])
            self.computed += 1
            display.advance(outcome.name, self.seconds[outcome.name])

    def _look_up(self, cells: Mapping[str, Callable[[], Mapping]], label: str) -> tuple[dict, dict, dict]:
        """Check a sweep's cells and find the finished ones: (results of those, the cells to compute, digests)."""
        if not isinstance(cells, Mapping):
            raise ValueError(f"sweep '{label}': cells must map names to functions, got {type(cells).__name__}")
        results, todo, digests = {}, {}, {}
        for name, compute in cells.items():
            check_name("cell", name)
            if name in self.seconds:
                raise ValueError(f"cell name {name!r} used twice in one run; each cell needs its own name")
            if not callable(compute):
                raise ValueError(f"cell {name!r}: expected a zero-argument function, got {type(compute).__name__}")
            self.seconds[name] = None
            digest = digests[name] = cell_digest(compute) if self.store is not None else None
            found = self._find(name, compute, digest)
            if found is not None:
                results[name] = self._keep(name, compute, found)
            else:
                todo[name] = compute
        return results, todo, digests

    def _take(self, pending: dict, digests: dict, results: dict, display, claims: dict, theirs: dict,
              seconds: list, out_of_time: list) -> Iterator[tuple[str, Scheduled]]:
        """The ``pending`` cells as the executor takes them, each claimed in the store (:meth:`CellStore.claim`,
        kept in ``claims``) just before it starts, so another run sharing the store takes the cells this one has
        not reached instead of waiting for them. A cell another live run holds goes to ``theirs``; one stored
        since the sweep began is read into ``results`` instead."""
        for name, compute in pending.items():
            digest = digests[name]
            if digest is not None:
                claim = self.store.claim(digest)
                if claim is None:
                    theirs[name] = compute
                    continue
                if self._stored_since(compute, digest):
                    found = self._find(name, compute, digest)
                    claim.release()
                    results[name] = self._keep(name, compute, found)
                    display.advance(name, verb="found in the store")
                    continue
                claims[name] = claim
            yield name, Scheduled(self._located(name, compute, digest), self.deadline, seconds,
                                  takes_checkpoint(compute), out_of_time)

    def _stored_since(self, compute: Callable, digest: str) -> bool:
        """Whether a cell not found when the sweep began is in the store now (written by another run); a damaged
        file was reported then and counts as absent, without a second warning."""
        try:
            return self.store.get(compute, digest) is not None
        except DamagedRecord:
            return False

    def _wait_for_others(self, label: str, theirs: dict, digests: dict, results: dict, display,
                         out_of_time: list) -> dict:
        """Wait for the cells another run holds: each is read from the store once stored; one whose holder let
        go without storing it (the other run failed or stopped) is returned, for this run to compute. At the time
        limit the rest count as out of time."""
        if theirs:
            print(f"memlab: sweep '{label}': waiting for {len(theirs)} cell(s) another run sharing the cell store "
                  f"is computing ({self.store.root / 'claims'})", file=sys.stderr)
        theirs = dict(theirs)
        while theirs:
            self._interrupt.check()
            if self.deadline is not None and time.time() >= self.deadline:
                out_of_time.extend(theirs)
                return {}
            for name, compute in list(theirs.items()):
                if self._stored_since(compute, digests[name]):
                    results[name] = self._keep(name, compute, self._find(name, compute, digests[name]))
                    del theirs[name]
                    display.advance(name, verb="found in the store")
            free = {n: c for n, c in theirs.items() if self.store.is_free(digests[n])}
            if free:
                return free
            if theirs:
                time.sleep(CLAIM_POLL_S)
        return {}

    def _origin(self, name: str) -> str:
        return f"{self.origin}/{name}"

    def _find(self, name: str, compute: Callable, digest: str | None) -> CellRecord | None:
        """A finished cell: from the store under its digest (then copied into the run folder), else from the run
        folder's copy if that copy was made for the same digest (its ``<name>.digest`` beside it) or the cell has
        no digest; noted as resumed (computed by this run) or reused (first computed for another experiment or
        profile). A run-folder copy made for another digest (the cell's code version, arguments or jax changed) is
        stale and ignored; one from before the store (no digest beside it) resumes this run but is not filed."""
        path = self._cell_path(name)
        entry = self._stored(compute, digest)
        if entry is not None:
            self.stored[name] = digest
            if entry["origin"] == self._origin(name):
                self.resumed += 1
            else:
                self.reused_from[name] = entry["origin"]
            text = json.dumps(entry["record"])
            if not (path.exists() and self._made_for(name) == digest):
                self._write_copy(name, text, digest)
            else:  # a copy for this digest stays untouched, unless it is damaged: then the store's replaces it
                self._repair_copy(name, text, digest)
            return read_cell(text)
        if not path.exists():
            return None
        made_for = self._made_for(name)
        if digest is not None and made_for is not None and made_for != digest:
            print(f"memlab: cell {name!r}: {path} was computed for other code, arguments or jax; recomputing",
                  file=sys.stderr)
            return None
        try:
            text = path.read_text(encoding="utf-8")
            record = read_cell(text)
        except (ValueError, UnicodeDecodeError) as e:  # one damaged file costs one cell, not the run
            print(f"memlab: {DamagedRecord(path, str(e))}; recomputing the cell", file=sys.stderr)
            return None
        if digest is not None and made_for is not None:
            self.store.put(compute, digest, text, self._origin(name))  # the store was lost
            self.stored[name] = digest
        self.resumed += 1
        return record

    def _repair_copy(self, name: str, text: str, digest: str) -> None:
        """Rewrite the run folder's copy of a stored cell from the store if it is no valid record (edited, damaged)."""
        path = self._cell_path(name)
        try:
            read_cell(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            print(f"memlab: {DamagedRecord(path, str(e))}; repaired from the cell store", file=sys.stderr)
            self._write_copy(name, text, digest)

    def _stored(self, compute: Callable, digest: str | None) -> dict | None:
        """The store's entry of a cell, or None (no digest, not stored, or a damaged file, which is then replaced:
        by the run folder's copy or by the recomputed cell)."""
        if digest is None:
            return None
        try:
            return self.store.get(compute, digest)
        except DamagedRecord as e:
            print(f"memlab: {e}; replacing it", file=sys.stderr)
            return None

    def _write_copy(self, name: str, text: str, digest: str | None) -> None:
        """The run folder's copy of a cell record and, for a stored cell, the digest it was computed for."""
        atomic_write_text(self._cell_path(name), text)
        if digest is not None:
            atomic_write_text(self._digest_path(name), digest + "\n")

    def _digest_path(self, name: str) -> Path:
        return self.out_dir / "cells" / f"{name}.digest"

    def _made_for(self, name: str) -> str | None:
        """The digest the run folder's copy of a cell was computed for (None: no record of it)."""
        path = self._digest_path(name)
        try:
            return path.read_text(encoding="utf-8").strip() if path.exists() else None
        except UnicodeDecodeError:  # a damaged record names no digest: the copy is recomputed, never trusted
            return ""

    def _located(self, name: str, compute: Callable, digest: str | None) -> Callable:
        """The cell with its CHECKPOINT argument made a path: in the store (shared) or in the run folder."""
        folder = self.store.checkpoint_dir(digest) if digest is not None else self.out_dir / "checkpoints" / name
        return with_checkpoint(compute, folder / "checkpoint")

    def _save(self, name: str, compute: Callable, digest: str | None, text: str) -> None:
        """The run folder's copy first: it is what resumes this run; then the store's, which others reuse."""
        self._write_copy(name, text, digest)
        if digest is not None:
            self.store.put(compute, digest, text, self._origin(name))
            self.stored[name] = digest

    def _keep(self, name: str, compute: Callable, record: CellRecord) -> Any:
        """Note a finished cell's time, memory and software; return its result as the type its cell declares
        (``store.typed_result``; a dict for a cell that declares none)."""
        self.seconds[name], self.peak_rss_mb[name] = record.seconds, record.peak_rss_mb
        self.software[name] = record.software
        self.compile_seconds[name] = record.compile_seconds
        return typed_result(compute, record.result)

    def _warn_other_software(self, label: str, names: list[str]) -> None:
        """A warning on stderr when cells of this sweep were computed by other library versions than this process
        has (a resumed folder from before an upgrade, or workers that differ): their numbers may not be what this
        installation computes."""
        here = software_versions()
        other = {n: self.software[n] for n in names if self.software[n] not in (None, here)}
        if other:
            versions = sorted({", ".join(f"{k} {v}" for k, v in s.items()) for s in other.values()})
            print(f"memlab: sweep '{label}': {len(other)} of {len(names)} cells were computed with "
                  f"{'; '.join(versions)} (this process: {', '.join(f'{k} {v}' for k, v in here.items())}); delete "
                  f"their files under {self.out_dir / 'cells'}{self._store_words()} to recompute them",
                  file=sys.stderr)

    def _store_words(self) -> str:
        return "" if self.store is None else \
            f" and in the cell store {self.store.root} (<module.function>/<digest>.json; results.json: cells.store)"

    def _cell_path(self, name: str) -> Path:
        return self.out_dir / "cells" / f"{name}.json"

    def _display(self, total: int, label: str, done: int = 0) -> progress.SweepDisplay:
        """The sweep's bar (rich, on stderr) and, off a terminal, its lines (memlab.progress); checks for Ctrl-C."""
        return progress.SweepDisplay(self.origin, label, total, done, self.show_progress, self._interrupt.check)

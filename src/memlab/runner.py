"""What every experiment shares: output folder, config, named keys, sweeps of resumable cells, writers.

An :class:`Experiment` names a frozen config dataclass per profile and a ``run(config, run)`` function.
:func:`run_experiment` gives that function a :class:`Run` bound to an output folder ``out/<experiment>/<profile>/``
(config.json, results.json, summary.md, figures and tables, the finished cells). The shape of every experiment:
cells -> :meth:`Run.sweep` -> analysis -> figures -> claims -> summary. The folder's files and how a sweep runs,
resumes and stops in time: docs/architecture.md, "The experiment contract".
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import fcntl
import io
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from memlab import compile_cache
from memlab.claims import BY, claim_status
from memlab.executors import Executor, LocalExecutor, Scheduled, Settings, peak_rss_mb
from memlab.files import (
    CellRecord,
    atomic_write_bytes,
    atomic_write_text,
    dumps,
    markdown_table,
    read_cell,
    software_versions,
    to_jsonable,
)
from memlab.interrupt import StickyInterrupt
from memlab.keys import check_seed, key_for
from memlab.overrides import apply_overrides
from memlab.store import CellStore, DamagedRecord, cell_digest, takes_checkpoint, with_checkpoint

__all__ = [
    "CellsFailed",
    "Experiment",
    "Run",
    "SetupError",
    "TimeLimitReached",
    "atomic_write_bytes",
    "atomic_write_text",
    "default_out_dir",
    "default_store",
    "run_experiment",
    "to_jsonable",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+,-]*$")  # experiment, cell and profile names


class SetupError(ValueError):
    """Bad profile, invalid config or unusable output folder: raised before the experiment starts."""


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


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise ValueError(f"invalid {kind} name {name!r}; expected letters, digits and . _ = + , - (no '/' or '..')")


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One experiment: a name, the paper figure/table it reproduces, configs per profile, and ``run``.

    ``profiles`` maps a profile name to a frozen config dataclass instance with an int field ``seed``;
    it must contain ``"quick"`` and ``"paper"`` (and may contain ``"tiny"`` for tests).
    ``run(config, run: Run) -> dict`` returns the results that go into results.json. ``pool_profiles``: the
    profiles whose cells each keep about one core busy (XLA on small arrays), are long enough that a worker's own
    compiles do not matter, and whose numbers do not depend on the cell's device count: ``memlab run`` computes
    their cells one per core in a process pool unless told otherwise. ``quick_flags``: the XLA flags of
    :data:`memlab.compile_cache.QUICK_FLAGS` its quick and tiny profiles compile with (default: all).
    """

    name: str
    paper_ref: str
    paper: str
    description: str
    profiles: Mapping[str, Any]
    run: Callable[[Any, Run], dict]
    pool_profiles: tuple[str, ...] = ()
    quick_flags: tuple[str, ...] = tuple(compile_cache.QUICK_FLAGS)

    def __post_init__(self):
        _check_name("experiment", self.name)
        unknown = set(self.quick_flags) - set(compile_cache.QUICK_FLAGS)
        if unknown:
            raise ValueError(f"experiment {self.name!r}: quick_flags {sorted(unknown)} are not among "
                             f"{list(compile_cache.QUICK_FLAGS)}")
        missing = {"quick", "paper"} - set(self.profiles)
        if missing:
            raise ValueError(f"experiment {self.name!r} lacks profile(s) {sorted(missing)}; "
                             "'quick' and 'paper' are required")
        for profile, config in self.profiles.items():
            _check_name("profile", profile)
            fields = {f.name: f for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else {}
            if not fields or not config.__dataclass_params__.frozen or "seed" not in fields:
                raise ValueError(
                    f"experiment {self.name!r}, profile {profile!r}: config must be a frozen dataclass with an int "
                    "field 'seed'"
                )


# ---------------------------------------------------------------- one run of one experiment


class Run:
    """What ``Experiment.run`` gets: the output folder, the config, the seed, named keys, the sweep, writers.

    Attributes: ``out_dir``, ``config``, ``experiment``, ``profile``, ``seed``, ``executor``, ``store`` (the
    :class:`~memlab.store.CellStore`, None: cells only in the run folder), ``deadline`` (epoch seconds of the time
    limit, or None), ``cells_computed``, ``cells_skipped`` (finished by an earlier invocation of this run),
    ``cells_reused`` (name -> the 'experiment/profile/cell' that first computed it), ``cell_store`` (name -> digest
    of the cells kept in the store), ``cell_seconds`` (compute time of every cell of the run, also of resumed ones),
    ``cell_peak_rss_mb`` (peak resident memory of the process that computed each cell, up to its end),
    ``cell_software`` (the library versions that computed each cell, ``files.software_versions``),
    ``cell_compile_seconds`` (the part of each cell's time spent compiling), ``claims``.
    """

    def __init__(self, out_dir: Path, config: Any, profile: str, seed: int, progress: bool = True,
                 interrupt: StickyInterrupt | None = None, executor: Executor | None = None,
                 experiment: str = "experiment", store: CellStore | None = None, deadline: float | None = None):
        self.out_dir = Path(out_dir)
        self.config = config
        self.experiment = experiment
        self.store = store
        self.deadline = deadline
        self.cells_reused: dict[str, str] = {}
        self.cell_store: dict[str, str] = {}
        self.profile = profile
        self.seed = seed
        self.show_progress = progress
        self.executor = executor or LocalExecutor()
        self.cells_computed = 0
        self.cells_skipped = 0
        self.cell_seconds: dict[str, float | None] = {}
        self.cell_peak_rss_mb: dict[str, float | None] = {}
        self.cell_software: dict[str, dict | None] = {}
        self.cell_compile_seconds: dict[str, float | None] = {}
        self.claims: list[dict] = []
        self.blank_panels: list[str] = []  # 'figure.png: panel title' for every panel that shows nothing
        self._interrupt = interrupt or StickyInterrupt()

    @property
    def key(self) -> jax.Array:
        """``jax.random.key(seed)``: the root of every random draw of the run (prefer :meth:`key_for`)."""
        return key_for(self.seed)

    def key_for(self, *names: str | int) -> jax.Array:
        """The key of the named stream ``names`` (strings and ints) under the run's seed: the same names always
        give the same key (``memlab.keys.key_for``), e.g. ``run.key_for("tasks", m)``."""
        return key_for(self.seed, *names)

    def _path(self, filename: str | Path) -> Path:
        rel = Path(filename)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise ValueError(f"output file name must be relative to the run folder, without '..'; "
                             f"got {str(filename)!r}")
        return self.out_dir / rel

    # ------------------------------------------------------------ sweeps

    def sweep(self, cells: Mapping[str, Callable[[], Mapping]], label: str) -> dict[str, dict]:
        """Compute a grid of independent cells; returns ``{name: result}`` in the order of ``cells``.

        ``cells`` maps a cell name (letters, digits, ``. _ = + , -``; unique within the run) to a zero-argument
        function returning a dict of arrays, numbers, strings, lists, dicts or ``bytes`` -- a pure function of
        the config and a named key, since it may run in another process or on another machine. Build it as
        ``functools.partial(f, *args)`` of a module-level ``f`` and it also goes to the cell store
        (``memlab.store``), where any experiment asking for the same function and arguments finds it. A
        finished cell is read from the store, else from the run folder's ``cells/<name>.json`` (``_find``).
        Unfinished cells go to the run's executor and each is written (atomically) as it arrives. Results are
        JSON round-tripped (arrays come back as lists), so fresh and resumed runs see the same values. Ctrl-C
        stops the sweep and keeps the finished cells; cells that raise are reported with their traceback while the
        others finish, then :class:`CellsFailed` is raised; at the run's time limit :class:`TimeLimitReached` is
        raised once the running cells have finished or stopped.
        """
        if not isinstance(cells, Mapping):
            raise ValueError(f"sweep '{label}': cells must map names to functions, got {type(cells).__name__}")
        results, todo, digests = {}, {}, {}
        for name, compute in cells.items():
            _check_name("cell", name)
            if name in self.cell_seconds:
                raise ValueError(f"cell name {name!r} used twice in one run; each cell needs its own name")
            if not callable(compute):
                raise ValueError(f"cell {name!r}: expected a zero-argument function, got {type(compute).__name__}")
            self.cell_seconds[name] = None
            digest = digests[name] = cell_digest(compute) if self.store is not None else None
            found = self._find(name, compute, digest)
            if found is not None:
                results[name] = self._keep(name, found)
            else:
                todo[name] = compute
        self._interrupt.check()
        failures, out_of_time = {}, []
        seconds = [self.cell_seconds[n] for n in results if self.cell_seconds[n] is not None]  # grows as cells end
        with self._progress(len(cells), label, done=len(results)) as advance:
            pending = todo
            while pending:  # another run sharing the store may hold some cells: compute the rest, then wait
                claims, theirs = {}, {}
                taken = self._take(pending, digests, results, advance, claims, theirs, seconds)
                try:
                    with contextlib.closing(self.executor.run(taken, Settings.of_driver(self.deadline))) as outcomes:
                        for outcome in outcomes:
                            if outcome.out_of_time:
                                out_of_time.append(outcome.name)
                            elif outcome.error is not None:
                                failures[outcome.name] = outcome.error
                                print(f"memlab: cell {outcome.name!r} failed:\n{outcome.error}", file=sys.stderr)
                            else:
                                self._save(outcome.name, pending[outcome.name], digests[outcome.name], outcome.text)
                                results[outcome.name] = self._keep(outcome.name, read_cell(outcome.text))
                                seconds.append(self.cell_seconds[outcome.name])
                                self.cells_computed += 1
                            if outcome.name in claims:
                                claims.pop(outcome.name).release()
                            advance()  # a Ctrl-C swallowed inside a cell stops the sweep here
                finally:
                    for claim in claims.values():
                        claim.release()
                pending = self._wait_for_others(label, theirs, digests, results, advance, out_of_time)
        if failures:
            raise CellsFailed(label, len(cells), failures)
        if out_of_time:
            raise TimeLimitReached(label, len(cells) - len(out_of_time), len(cells))
        self._warn_other_software(label, list(cells))
        return {name: results[name] for name in cells}

    def _take(self, pending: dict, digests: dict, results: dict, advance, claims: dict, theirs: dict,
              seconds: list) -> Iterator[tuple[str, Scheduled]]:
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
                    results[name] = self._keep(name, found)
                    advance()
                    continue
                claims[name] = claim
            yield name, Scheduled(self._located(name, compute, digest), self.deadline, seconds,
                                  takes_checkpoint(compute))

    def _stored_since(self, compute: Callable, digest: str) -> bool:
        """Whether a cell not found when the sweep began is in the store now (written by another run); a damaged
        file was reported then and counts as absent, without a second warning."""
        try:
            return self.store.get(compute, digest) is not None
        except DamagedRecord:
            return False

    def _wait_for_others(self, label: str, theirs: dict, digests: dict, results: dict, advance,
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
                    results[name] = self._keep(name, self._find(name, compute, digests[name]))
                    del theirs[name]
                    advance()
            free = {n: c for n, c in theirs.items() if self.store.is_free(digests[n])}
            if free:
                return free
            if theirs:
                time.sleep(CLAIM_POLL_S)
        return {}

    def _origin(self, name: str) -> str:
        return f"{self.experiment}/{self.profile}/{name}"

    def _find(self, name: str, compute: Callable, digest: str | None) -> CellRecord | None:
        """A finished cell: from the store under its digest (then copied into the run folder), else from the run
        folder's copy if that copy was made for the same digest (its ``<name>.digest`` beside it) or the cell has
        no digest; noted as resumed (computed by this run) or reused (first computed for another experiment or
        profile). A run-folder copy made for another digest (the cell's code version, arguments or jax changed) is
        stale and ignored; one from before the store (no digest beside it) resumes this run but is not filed."""
        path = self._cell_path(name)
        entry = self._stored(compute, digest)
        if entry is not None:
            self.cell_store[name] = digest
            if entry["origin"] == self._origin(name):
                self.cells_skipped += 1
            else:
                self.cells_reused[name] = entry["origin"]
            text = json.dumps(entry["record"])
            if not (path.exists() and self._made_for(name) == digest):  # a copy for this digest stays untouched
                self._write_copy(name, text, digest)
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
            self.cell_store[name] = digest
        self.cells_skipped += 1
        return record

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
            self.cell_store[name] = digest

    def _keep(self, name: str, record: CellRecord) -> dict:
        """Note a finished cell's time, memory and software; return its result."""
        self.cell_seconds[name], self.cell_peak_rss_mb[name] = record.seconds, record.peak_rss_mb
        self.cell_software[name] = record.software
        self.cell_compile_seconds[name] = record.compile_seconds
        return record.result

    def _warn_other_software(self, label: str, names: list[str]) -> None:
        """A warning on stderr when cells of this sweep were computed by other library versions than this process
        has (a resumed folder from before an upgrade, or workers that differ): their numbers may not be what this
        installation computes."""
        here = software_versions()
        other = {n: self.cell_software[n] for n in names if self.cell_software[n] not in (None, here)}
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

    @contextlib.contextmanager
    def _progress(self, total: int, description: str, done: int = 0) -> Iterator[Callable[[int], None]]:
        """Yields ``advance(n=1)``; a rich progress bar on stderr unless disabled; checks for Ctrl-C."""
        if not self.show_progress:
            yield lambda n=1: self._interrupt.check()
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
            task = bar.add_task(description, total=total, completed=done)

            def advance(n=1):
                self._interrupt.check()
                bar.advance(task, n)

            yield advance

    # ------------------------------------------------------------ writers

    def save_json(self, filename: str, obj: Any) -> Path:
        """Write ``obj`` as strict JSON (see module docstring for NaN/inf)."""
        return atomic_write_text(self._path(filename), dumps(obj))

    def save_csv(self, filename: str, header: list[str], rows: Iterable[Sequence]) -> Path:
        """Write a CSV table; every row must have ``len(header)`` entries. Floats are written exactly (repr)."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(header)
        for i, row in enumerate(rows):
            row = to_jsonable(list(row), strict=False)
            if len(row) != len(header):
                raise ValueError(f"{filename}: row {i} has {len(row)} entries, header has {len(header)}")
            writer.writerow(row)
        return atomic_write_text(self._path(filename), buf.getvalue())

    def save_table(self, filename: str, header: list[str], rows: Iterable[Sequence],
                   fmt: str | Mapping[str, str] = ".4g") -> str:
        """Write the CSV ``filename`` (exact values) and return the same table as Markdown for summary.md
        (floats formatted by ``fmt``: one format spec, or one per column name; ``|`` escaped)."""
        rows = [list(row) for row in rows]
        self.save_csv(filename, header, rows)
        return markdown_table(header, rows, fmt)

    def save_figure(self, fig, filename: str) -> Path:
        """Save a matplotlib figure as PNG (dpi 150) atomically, then close it. A panel that shows nothing (all its
        data NaN and no word of why: ``plots.blank_panels``) is listed in results.json's ``blank_panels``."""
        import matplotlib.pyplot as plt

        from memlab.plots import blank_panels

        if not str(filename).endswith(".png"):
            raise ValueError(f"figure file name must end in .png; got {filename!r}")
        self.blank_panels += [f"{filename}: {panel}" for panel in blank_panels(fig)]
        buf = io.BytesIO()
        try:
            fig.savefig(buf, format="png", dpi=150)
        finally:
            plt.close(fig)
        return atomic_write_bytes(self._path(filename), buf.getvalue())

    def write_text(self, filename: str, text: str) -> Path:
        return atomic_write_text(self._path(filename), text)

    def write_summary(self, markdown: str) -> Path:
        """Write summary.md: the paper's numbers beside ours. Relative image links are rewritten by `memlab report`."""
        return self.write_text("summary.md", markdown)

    def claim(self, id: str, claim: str, paper: str, ours: str, holds: bool, *, explained: str = "",
              missing: str = "", by: str = "paper") -> None:
        """Record one claim of the paper; ``holds`` must be computed from this run's numbers (bool or numpy bool).
        ``explained``: for a claim memlab is known to depart from, the experiment or figure that shows why (a
        failing claim is then 'differs', not a failure: :mod:`memlab.claims`). ``missing``: what the claim names
        that this run did not run (e.g. "S5-256 not run"); the claim is then undecided, never holds. ``by``:
        "paper", or "memlab" for memlab's own check that the paper does not state (reports count them apart)."""
        if not isinstance(holds, (bool, np.bool_)):
            raise ValueError(f"claim {id!r}: holds must be a bool computed from the run, got {type(holds).__name__}")
        if by not in BY:
            raise ValueError(f"claim {id!r}: by must be one of {', '.join(BY)}, got {by!r}")
        for field, value in (("id", id), ("claim", claim), ("paper", paper), ("ours", ours)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"claim {id!r}: {field} must be a non-empty string, got {value!r}")
        for field, value in (("explained", explained), ("missing", missing)):
            if not isinstance(value, str):
                raise ValueError(f"claim {id!r}: {field} must be a string, got {type(value).__name__}")
        if any(c["id"] == id for c in self.claims):
            raise ValueError(f"claim id {id!r} recorded twice")
        self.claims.append({"id": id, "claim": claim, "paper": paper, "ours": ours,
                            "holds": bool(holds) and not missing,
                            "status": claim_status(bool(holds), self.profile, explained, missing),
                            **({"explained": explained} if explained else {}),
                            **({"missing": missing} if missing else {}), **({"by": by} if by != "paper" else {})})


# ---------------------------------------------------------------- running


def default_out_dir(exp: Experiment, profile: str) -> Path:
    """``out/<experiment name>/<profile>`` relative to the current directory."""
    return Path("out") / exp.name / profile


def default_store(exp: Experiment, out_dir: str | Path) -> Path:
    """The cell store shared by the runs beside ``out_dir``: ``<root>/cells`` for a folder ``<root>/<experiment
    name>/<profile>`` (the default layout, also ``memlab reproduce``'s), else ``cells`` beside ``out_dir``."""
    out_dir = Path(out_dir)
    root = out_dir.parent.parent if out_dir.parent.name == exp.name else out_dir.parent
    return root / "cells"


def _resolve_config(exp: Experiment, profile: str, seed: int | None, overrides: Sequence[str] = (),
                    data_dir: str | Path | None = None) -> Any:
    if profile not in exp.profiles:
        raise SetupError(f"unknown profile {profile!r} for experiment {exp.name!r}; known: {', '.join(exp.profiles)}")
    try:
        config = apply_overrides(exp.profiles[profile], overrides)
    except ValueError as e:
        raise SetupError(str(e)) from e
    if data_dir is not None:  # before validate(), which may check the folder
        if "data_dir" not in {f.name for f in dataclasses.fields(config)}:
            raise SetupError(f"experiment {exp.name!r} reads no external data; drop --data-dir")
        config = dataclasses.replace(config, data_dir=str(data_dir))
    try:  # before anything is written: a seed key_for refuses would leave a config.json behind
        config = dataclasses.replace(config, seed=check_seed(config.seed if seed is None else seed))
    except ValueError as e:
        raise SetupError(str(e)) from e
    if hasattr(config, "validate"):
        try:
            config.validate()
        except ValueError as e:
            raise SetupError(f"invalid config for {exp.name} ({profile}): {e}") from e
    return config


CLAIM_POLL_S = 1.0  # how often a run waiting for another run's cells looks for them in the store
LOCK = ".memlab.lock"  # in the run folder while a run writes to it (fcntl.flock: the kernel frees it with the process)


def _holds_work(out_dir: Path) -> bool:
    """Whether a run folder holds something computed: results, a finished cell or a checkpoint."""
    return (out_dir / "results.json").exists() or any(
        (out_dir / sub).is_dir() and any((out_dir / sub).iterdir()) for sub in ("cells", "checkpoints"))


def _bind_folder(out_dir: Path, header: dict) -> None:
    """Write config.json into ``out_dir`` (created before, locked by :func:`_locked`), or check that an existing
    one holds the same config. A config.json beside no computed work (a run that stopped before its first cell)
    is replaced: it binds nothing."""
    config_path = out_dir / "config.json"
    try:
        if config_path.exists():
            old = _read_config(config_path)
            same = {k: old.get(k) for k in ("experiment", "config")} == {k: header[k] for k in ("experiment", "config")}
            if not same and _holds_work(out_dir):
                raise SetupError(
                    f"output folder {out_dir} holds a run of a different config; pick another --out or delete "
                    "the folder"
                )
        atomic_write_text(config_path, dumps(header))
    except OSError as e:
        raise SetupError(f"cannot write to output folder {out_dir}: {e.strerror or e}") from e


def _read_config(path: Path) -> dict:
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
def _locked(out_dir: Path) -> Iterator[None]:
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


def run_peak_rss_mb(cell_peaks: Mapping[str, float | None]) -> float:
    """Peak resident memory of a run (MB): this process's high-water mark or a cell's, whichever is larger."""
    return round(max([peak_rss_mb(), *(p for p in cell_peaks.values() if p is not None)]), 1)


def run_experiment(
    exp: Experiment,
    profile: str = "quick",
    seed: int | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    data_dir: str | Path | None = None,
    executor: Executor | None = None,
    store: str | Path | None | bool = None,
    time_limit: float | None = None,
    overrides: Sequence[str] = (),
) -> Path:
    """Run ``exp`` with the config of ``profile`` (``seed`` replaces its seed) and return the output folder.

    ``data_dir`` sets the config's ``data_dir`` field (experiments on external data, e.g. NCLT); SetupError
    if the experiment reads no external data. ``executor`` computes the sweeps' cells (default: in this
    process); the caller owns it (``close()`` it when done). ``store``: the cell store's folder (None: the
    default, :func:`default_store`; False: no store, every cell in the run folder). ``time_limit``: seconds from
    now after which no cell starts that would not finish in time (cells that checkpoint stop at a checkpoint);
    :class:`TimeLimitReached` then says how many cells finished. ``overrides``: ``field=value`` changes to the
    profile's config (``memlab.overrides``).

    Raises :class:`SetupError` (a ValueError naming the problem) before anything is written for an unknown
    profile, an invalid config or seed, an unusable output folder (not writable, holding other files than a memlab
    run, or locked by another run writing to it), or a folder that holds a run of a different config;
    :class:`CellsFailed` when cells raised. Finished cells of an interrupted run (KeyboardInterrupt propagates) are
    skipped when the same command is run again.
    """
    config = _resolve_config(exp, profile, seed, overrides, data_dir)
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(exp, profile)
    if store is not False:
        store = CellStore(default_store(exp, out_dir) if store is None or store is True else store)
    if time_limit is not None and not time_limit > 0:
        raise SetupError(f"time limit must be a positive number of seconds, got {time_limit!r}")
    deadline = None if time_limit is None else time.time() + float(time_limit)
    header = to_jsonable({"experiment": exp.name, "profile": profile, "config": config})
    interrupt = StickyInterrupt()
    with interrupt.installed(), _locked(out_dir):  # before config.json exists: from then on a Ctrl-C cannot be lost
        _bind_folder(out_dir, header)
        run = Run(out_dir, config, profile, config.seed, progress=progress, interrupt=interrupt, executor=executor,
                  experiment=exp.name, store=store or None, deadline=deadline)
        start = time.perf_counter()
        results = exp.run(config, run)
        interrupt.check()
        if not (isinstance(results, Mapping) or dataclasses.is_dataclass(results) and not isinstance(results, type)):
            raise TypeError(f"{exp.name}: run() must return its results as a dict or a dataclass instance, got "
                            f"{type(results).__name__}")
        document = {
            "experiment": exp.name,
            "profile": profile,
            "overrides": list(overrides),  # --set changes to the profile's config (e.g. a paper profile restricted)
            "paper_ref": exp.paper_ref,
            "config": header["config"],
            "results": results,
            "claims": run.claims,
            "blank_panels": run.blank_panels,
            "elapsed_s": round(time.perf_counter() - start, 3),  # this invocation only (a resumed run skips cells)
            "executor": run.executor.name,
            "cpu_devices": jax.local_device_count(),  # of this process (memlab.devices; cells elsewhere: theirs)
            # the largest of this process's peak and every cell's (also cells computed elsewhere or resumed)
            "peak_rss_mb": run_peak_rss_mb(run.cell_peak_rss_mb),
            "software": software_versions(),  # of this process; each cell's own below (None: not recorded)
            "cell_store": None if run.store is None else str(run.store.root),
            "cells": {"computed": run.cells_computed, "resumed": run.cells_skipped,
                      "reused": len(run.cells_reused), "reused_from": run.cells_reused, "store": run.cell_store,
                      "seconds": run.cell_seconds, "compile_seconds": run.cell_compile_seconds,
                      "peak_rss_mb": run.cell_peak_rss_mb, "software": run.cell_software},
        }
        atomic_write_text(out_dir / "results.json", dumps(document))
    return out_dir

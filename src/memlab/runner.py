"""What every experiment shares: output folder, config, named keys, sweeps of resumable cells, writers.

An :class:`Experiment` names a frozen config dataclass per profile and a ``run(config, run)`` function.
:func:`run_experiment` gives that function a :class:`Run` bound to an output folder ``out/<experiment>/<profile>/``
(config.json, results.json, summary.md, figures and tables, the finished cells). The shape of every experiment:
cells -> :meth:`Run.sweep` -> analysis -> figures -> claims -> summary. The folder's files and how a sweep runs,
resumes and stops in time: docs/architecture.md, "The experiment contract".
"""

from __future__ import annotations

import csv
import dataclasses
import io
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from memlab import compile_cache
from memlab.cell_cache import CellCache, CellsFailed, TimeLimitReached
from memlab.claims import BY, claim_status
from memlab.executors import Executor, LocalExecutor
from memlab.files import (
    atomic_write_bytes,
    atomic_write_text,
    check_name,
    dumps,
    markdown_table,
    software_versions,
    to_jsonable,
)
from memlab.interrupt import StickyInterrupt
from memlab.keys import check_seed, key_for
from memlab.overrides import apply_overrides
from memlab.run_folder import SetupError, bind_folder, locked
from memlab.store import CellStore
from memlab.worker import peak_rss_mb

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
    "resolve_config",
    "run_experiment",
    "to_jsonable",
]

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
        check_name("experiment", self.name)
        unknown = set(self.quick_flags) - set(compile_cache.QUICK_FLAGS)
        if unknown:
            raise ValueError(f"experiment {self.name!r}: quick_flags {sorted(unknown)} are not among "
                             f"{list(compile_cache.QUICK_FLAGS)}")
        missing = {"quick", "paper"} - set(self.profiles)
        if missing:
            raise ValueError(f"experiment {self.name!r} lacks profile(s) {sorted(missing)}; "
                             "'quick' and 'paper' are required")
        for profile, config in self.profiles.items():
            check_name("profile", profile)
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
    :class:`~memlab.store.CellStore`, None: cells only in the run folder), ``cells`` (the
    :class:`~memlab.cell_cache.CellCache`: which cells were computed, resumed or reused, and each one's time, memory
    and software), ``claims``, ``blank_panels``, ``overrides`` (the ``--set`` changes to the profile's config).
    """

    def __init__(self, out_dir: Path, config: Any, profile: str, seed: int, progress: bool = True,
                 interrupt: StickyInterrupt | None = None, executor: Executor | None = None,
                 experiment: str = "experiment", store: CellStore | None = None, deadline: float | None = None,
                 overrides: Sequence[str] = ()):
        self.out_dir = Path(out_dir)
        self.overrides = list(overrides)
        self.config = config
        self.experiment = experiment
        self.profile = profile
        self.seed = seed
        self.executor = executor or LocalExecutor()
        self.cells = CellCache(self.out_dir, f"{experiment}/{profile}", store, self.executor, deadline,
                               interrupt or StickyInterrupt(), progress)
        self.claims: list[dict] = []
        self.blank_panels: list[str] = []  # 'figure.png: panel title' for every panel that shows nothing

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

    @property
    def store(self) -> CellStore | None:
        """The cell store the run's cells go to (None: only the run folder)."""
        return self.cells.store

    def sweep(self, cells: Mapping[str, Callable[[], Any]], label: str) -> dict[str, Any]:
        """Compute a grid of independent cells; returns ``{name: result}`` in the order of ``cells``.

        ``cells`` maps a cell name (letters, digits, ``. _ = + , -``; unique within the run) to a zero-argument
        function returning a dict of arrays, numbers, strings, lists, dicts or ``bytes`` -- a pure function of
        the config and a named key, since it may run in another process or on another machine. Build it as
        ``functools.partial(f, *args)`` of a module-level ``f`` (declared with ``memlab.store.cell``) and it also
        goes to the cell store, where any experiment asking for the same function and arguments finds it; ``f``
        returns the result type it declares, a frozen dataclass of those values, and the sweep gives each result
        back as that type (``store.typed_result``). Finished
        cells are read, the rest computed by the run's executor and written as each arrives
        (:class:`~memlab.cell_cache.CellCache`). Results are JSON round-tripped (arrays come back as lists), so
        fresh and resumed runs see the same values. Ctrl-C stops the sweep and keeps the finished cells; cells
        that raise are reported with their traceback while the others finish, then :class:`CellsFailed` is
        raised; at the run's time limit :class:`TimeLimitReached` is raised once the running cells have finished
        or stopped.
        """
        return self.cells.compute(cells, label)

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
        """Write summary.md: the paper's numbers beside ours. Relative image links are rewritten by `memlab report`.
        A run with ``--set`` changes says so under the summary's title."""
        if self.overrides:
            title, _, rest = markdown.partition("\n") if markdown.startswith("# ") else ("", "", markdown)
            note = f"*The {self.profile} profile with --set {', '.join(f'`{o}`' for o in self.overrides)}.*"
            markdown = "\n\n".join(part for part in (title, note, rest.lstrip("\n")) if part)
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


def default_out_dir(exp: Experiment, profile: str, overrides: Sequence[str] = ()) -> Path:
    """``out/<experiment name>/<profile>`` relative to the current directory; with ``--set`` changes the folder
    carries them, ``out/<experiment name>/<profile>+<field=value>+...`` (``/`` in a value as ``_``), so a changed
    config never lands in the profile's own folder and its name says what changed."""
    return Path("out") / exp.name / "+".join([profile, *(o.strip().replace("/", "_") for o in overrides)])


def default_store(exp: Experiment, out_dir: str | Path) -> Path:
    """The cell store shared by the runs beside ``out_dir``: ``<root>/cells`` for a folder ``<root>/<experiment
    name>/<profile>`` (the default layout, also ``memlab reproduce``'s), else ``cells`` beside ``out_dir``."""
    out_dir = Path(out_dir)
    root = out_dir.parent.parent if out_dir.parent.name == exp.name else out_dir.parent
    return root / "cells"


def resolve_config(exp: Experiment, profile: str, seed: int | None, overrides: Sequence[str] = (),
                   data_dir: str | Path | None = None) -> Any:
    """The config a run of ``exp``'s ``profile`` uses (``seed``: None for the profile's; ``overrides``, ``data_dir``
    as :func:`run_experiment` takes them), validated; :class:`SetupError` naming the problem otherwise."""
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


def run_peak_rss_mb(cell_peaks: Mapping[str, float | None]) -> float:
    """Peak resident memory of a run (MB): this process's high-water mark or a cell's, whichever is larger."""
    return round(max([peak_rss_mb(), *(p for p in cell_peaks.values() if p is not None)]), 1)


def _results_document(exp: Experiment, run: Run, overrides: list[str], config: dict, results: Any,
                      elapsed: float) -> dict:
    """results.json: the run's config, results, claims and figures' blank panels, and how its cells were computed."""
    return {
        "experiment": exp.name,
        "profile": run.profile,
        "overrides": overrides,  # --set changes to the profile's config (e.g. a paper profile restricted)
        "paper_ref": exp.paper_ref,
        "config": config,
        "results": results,
        "claims": run.claims,
        "blank_panels": run.blank_panels,
        "elapsed_s": round(elapsed, 3),  # this invocation only (a resumed run skips cells)
        "executor": run.executor.name,
        "cpu_devices": jax.local_device_count(),  # of this process (memlab.devices; cells elsewhere: theirs)
        # the largest of this process's peak and every cell's (also cells computed elsewhere or resumed)
        "peak_rss_mb": run_peak_rss_mb(run.cells.peak_rss_mb),
        "software": software_versions(),  # of this process; each cell's own below (None: not recorded)
        "cell_store": None if run.store is None else str(run.store.root),
        "cells": run.cells.summary(),
    }


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
    config = resolve_config(exp, profile, seed, overrides, data_dir)
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(exp, profile, overrides)
    if store is not False:
        store = CellStore(default_store(exp, out_dir) if store is None or store is True else store)
    if time_limit is not None and not time_limit > 0:
        raise SetupError(f"time limit must be a positive number of seconds, got {time_limit!r}")
    deadline = None if time_limit is None else time.time() + float(time_limit)
    header = to_jsonable({"experiment": exp.name, "profile": profile, "config": config})
    interrupt = StickyInterrupt()
    with interrupt.installed(), locked(out_dir):  # before config.json exists: from then on a Ctrl-C cannot be lost
        bind_folder(out_dir, header)
        run = Run(out_dir, config, profile, config.seed, progress=progress, interrupt=interrupt, executor=executor,
                  experiment=exp.name, store=store or None, deadline=deadline, overrides=overrides)
        start = time.perf_counter()
        results = exp.run(config, run)
        interrupt.check()
        if not (isinstance(results, Mapping) or dataclasses.is_dataclass(results) and not isinstance(results, type)):
            raise TypeError(f"{exp.name}: run() must return its results as a dict or a dataclass instance, got "
                            f"{type(results).__name__}")
        elapsed = time.perf_counter() - start
        document = _results_document(exp, run, list(overrides), header["config"], results, elapsed)
        atomic_write_text(out_dir / "results.json", dumps(document))
    return out_dir

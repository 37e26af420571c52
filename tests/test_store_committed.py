"""Every cell committed in paper-results/cells is still found by the current code (issue 48): hours of paper-scale
work must not be orphaned silently by a change to a cell's arguments, its version or its digest.

``python -m memlab.resolve`` runs each (experiment, profile) that first computed a stored cell, and each committed
run folder, against the store computing nothing; together they must ask for every stored digest. It runs in a
process of its own at XLA's default flags, as the paper runs did (the tests compile with others, and a driver's
arrays, hence its cells' digests, follow the flags in round-off). A cell no profile asks for any more fails here:
keep a profile that asks for it, or bump the cell's version and delete the record on purpose.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "paper-results" / "cells"
# runs whose drivers take minutes before their first sweep (Navier-Stokes data at the paper's layout: 4 min on one
# core): their cells are checked by the slow test only
SLOW_TO_RESOLVE = ("pissm.table1/paper-core-lorenz-navier-stokes",)


def _lost(skip: tuple[str, ...]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    command = [sys.executable, "-m", "memlab.resolve", str(STORE), *(f"--skip={s}" for s in skip)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.first
@pytest.mark.skipif(not STORE.is_dir(), reason="no committed cell store in this checkout")
def test_every_committed_cell_is_found_by_the_current_code():
    done = _lost(SLOW_TO_RESOLVE)
    assert done.returncode == 0, done.stdout[:2000] + done.stderr[-2000:]


@pytest.mark.skipif(not STORE.is_dir(), reason="no committed cell store in this checkout")
def test_every_committed_result_is_read_back_as_its_cells_declared_type():
    """A record's result is the type its cell declares (``store.typed_result``; a ``ResultMismatch`` otherwise):
    a change to a result type that older records do not fit fails here, not in the middle of a paper run."""
    import importlib

    from memlab.files import read_cell
    from memlab.store import result_types, typed_result

    src = ROOT / "src" / "memlab"
    cells = {}
    for path in sorted(src.rglob("*.py")):
        module = importlib.import_module(".".join(("memlab", *path.relative_to(src).with_suffix("").parts))
                                         .removesuffix(".__init__"))
        cells |= {f.cell_name: f for f in vars(module).values() if callable(f)
                  and isinstance(getattr(f, "cell_name", None), str)}
    read = 0
    for path in sorted(STORE.glob("*/*.json")):
        entry = json.loads(path.read_text())
        if entry.get("function") in cells:
            result = typed_result(cells[entry["function"]], read_cell(json.dumps(entry["record"])).result)
            assert isinstance(result, result_types(cells[entry["function"]])), path
            read += 1
    assert read > 600


@pytest.mark.slow
@pytest.mark.skipif(not STORE.is_dir(), reason="no committed cell store in this checkout")
def test_every_committed_cell_is_found_including_the_slow_runs():
    done = _lost(())
    assert done.returncode == 0, done.stdout[:2000] + done.stderr[-2000:]


def test_a_cell_whose_profile_is_gone_is_listed_lost(tmp_path):
    """A record whose origin names no experiment or profile of today's code is lost (not an error of the check)."""
    from memlab.resolve import lost_cells

    record = {"digest": "0" * 32, "origin": "no.such-experiment/paper/cell-0", "function": "x", "record": {}}
    (tmp_path / "cells" / "x").mkdir(parents=True)
    (tmp_path / "cells" / "x" / f"{'0' * 32}.json").write_text(json.dumps(record))
    assert lost_cells(tmp_path / "cells") == {str(tmp_path / "cells" / "x" / f"{'0' * 32}.json"):
                                               "no.such-experiment/paper/cell-0"}


def test_resolve_refuses_a_missing_store_and_a_bad_skip_in_one_line(tmp_path, capsys):
    from memlab.resolve import main

    for argv, words in (([str(tmp_path / "none")], "no cell store"), ([str(tmp_path), "--skip", "x"], "--skip")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2 and words in capsys.readouterr().err


def test_a_cell_another_run_is_computing_is_not_waited_for(tmp_path, fake_lab):
    """memlab.resolve beside a live run sharing the store (the paper queue): a cell that run has claimed and not yet
    stored is simply not found; the look-up does not wait for it (it waited without end before)."""
    import concurrent.futures
    import shutil

    from memlab.resolve import resolved_digests
    from memlab.runner import run_experiment
    from memlab.store import CellStore

    store = tmp_path / "cells"
    run_experiment(fake_lab.experiments["fake.means"], "tiny", out_dir=tmp_path / "run", progress=False, store=store)
    records = sorted(store.glob("*/*.json"))
    held = records[0].stem
    records[0].unlink()
    shutil.rmtree(store / "claims", ignore_errors=True)
    claim = CellStore(store).claim(held)  # as the other run holds the cell while it computes it
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        found = pool.submit(resolved_digests, "fake.means", "tiny", store).result(timeout=60)
    finally:
        claim.release()  # before the pool is joined: a look-up that waits for the claim then ends
        pool.shutdown()
    assert found == {p.stem for p in records[1:]} and held not in found


def test_every_committed_run_folder_binds_to_its_profile_today():
    """A committed folder with results is rerun by its command (paper-results/README.md) only while its config.json
    is the config today's code makes from its experiment, profile, seed and overrides: otherwise the run stops with
    'holds a run of a different config'. A profile that changes (a new field) rewrites its folders from the store.
    A folder without results.json binds nothing on a fresh clone (no cells are committed there) and is left out."""
    from memlab.catalog import EXPERIMENTS
    from memlab.files import to_jsonable
    from memlab.runner import resolve_config

    checked, stale = 0, []
    for path in sorted((ROOT / "paper-results").glob("**/config.json")):
        if not (path.parent / "results.json").exists():
            continue
        header = json.loads(path.read_text())
        overrides = json.loads((path.parent / "results.json").read_text()).get("overrides", [])
        config = resolve_config(EXPERIMENTS[header["experiment"]], header["profile"], header["config"]["seed"],
                                overrides, header["config"].get("data_dir"))
        checked += 1
        if to_jsonable(config) != header["config"]:
            stale.append(str(path.parent.relative_to(ROOT)))
    assert checked > 30 and stale == []

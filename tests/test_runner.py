"""Tests for memlab.runner: output files, JSON conversion, seeds, resume, atomic writes, setup errors."""

import csv
import dataclasses
import json
import os
import re
import signal
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab import files, runner
from memlab.keys import key_for
from memlab.runner import (
    Run,
    SetupError,
    atomic_write_text,
    run_experiment,
    to_jsonable,
)


@pytest.fixture
def exp(fake_lab):
    return fake_lab.experiments["fake.means"]


def _results(out):
    doc = json.loads((out / "results.json").read_text())
    doc.pop("elapsed_s")
    doc.pop("cells")  # computed / resumed counts, compute times and memory differ between runs
    doc.pop("peak_rss_mb")
    return doc


def _strict_load(path):
    def bad(token):
        raise AssertionError(f"{path} holds the non-JSON token {token}")

    return json.loads(path.read_text(), parse_constant=bad)


def test_run_writes_every_file(exp, fake_lab, tmp_path):
    out = run_experiment(exp, "tiny", out_dir=tmp_path / "o", progress=False)
    assert out == tmp_path / "o"
    for name in ["config.json", "results.json", "summary.md", "means.png", "figs/hist.png", "means.csv"]:
        assert (out / name).is_file(), name
    assert sorted(p.name for p in (out / "cells").glob("*.json")) == [f"cell-{i}.json" for i in range(4)]
    assert (out / "means.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    doc = _strict_load(out / "results.json")
    assert set(doc) == {"experiment", "profile", "paper_ref", "config", "results", "claims", "elapsed_s", "executor",
                        "cells", "peak_rss_mb", "software", "cpu_devices", "cell_store", "blank_panels", "overrides"}
    assert doc["overrides"] == []  # the profile as it is (--set changes are listed here)
    assert doc["cpu_devices"] == 1  # conftest.py: one CPU device in the tests
    assert doc["executor"] == "local" and doc["cells"]["computed"] == 4 and doc["cells"]["resumed"] == 0
    assert set(doc["cells"]["seconds"]) == set(doc["cells"]["peak_rss_mb"]) == {f"cell-{i}" for i in range(4)}
    assert doc["software"] == files.software_versions() and len(doc["cells"]["software"]) == 4 and \
        all(v == doc["software"] for v in doc["cells"]["software"].values())
    cell_peaks = list(doc["cells"]["peak_rss_mb"].values())
    assert 10 < min(cell_peaks) <= max(cell_peaks) <= doc["peak_rss_mb"]  # MB; a JAX process holds far more than 10
    assert (doc["experiment"], doc["profile"], doc["paper_ref"]) == ("fake.means", "tiny", "Fig. 0")
    assert doc["config"] == {"seed": 0, "n_cells": 4, "size": 3}
    np.testing.assert_allclose(doc["results"]["means"], fake_lab.reference_means(0, 4), rtol=1e-6)
    assert doc["results"]["not_a_number"] == "NaN" and doc["results"]["inf"] == "Infinity"
    assert [c["id"] for c in doc["claims"]] == ["means-finite", "cells-enough"]
    assert [c["holds"] for c in doc["claims"]] == [True, False]  # numpy bool became a JSON bool
    assert _strict_load(out / "config.json")["config"] == doc["config"]

    with open(out / "means.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["cell", "mean"]
    np.testing.assert_array_equal([float(r[1]) for r in rows[1:]], doc["results"]["means"])
    assert not list(out.rglob("*.tmp")), "atomic writes left temporary files"


def test_same_seed_same_numbers_and_seed_override(exp, fake_lab, tmp_path):
    a = _results(run_experiment(exp, "tiny", out_dir=tmp_path / "a", progress=False))
    b = _results(run_experiment(exp, "tiny", out_dir=tmp_path / "b", progress=False))
    assert a == b
    c = _results(run_experiment(exp, "tiny", seed=7, out_dir=tmp_path / "c", progress=False))
    assert c["config"]["seed"] == 7
    np.testing.assert_allclose(c["results"]["means"], fake_lab.reference_means(7, 4), rtol=1e-6)
    assert c["results"]["means"] != a["results"]["means"]


def test_interrupt_then_resume_matches_uninterrupted_run(exp, fake_lab, tmp_path):
    out = tmp_path / "o"
    fake_lab.STATE["interrupt_after"] = 2
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp, "tiny", out_dir=out, progress=False)
    assert sorted(p.name for p in (out / "cells").glob("*.json")) == ["cell-0.json", "cell-1.json"]
    assert not (out / "results.json").exists()
    assert not list(out.rglob("*.tmp"))

    fake_lab.STATE["interrupt_after"] = None
    run_experiment(exp, "tiny", out_dir=out, progress=False)
    run = fake_lab.last_run()
    assert (run.cells.resumed, run.cells.computed) == (2, 2)
    assert fake_lab.STATE["computed"] == 4  # every cell computed exactly once over both runs
    assert _results(out) == _results(run_experiment(exp, "tiny", out_dir=tmp_path / "fresh", progress=False))


def test_ctrl_c_swallowed_by_a_callback_still_stops_the_run(exp, fake_lab, tmp_path, capfd):
    """A SIGINT that lands in a callback whose exceptions Python ignores (JAX's gc callback did this in CI)
    must still stop the run at the next cell, silently, keeping the finished cells."""
    out = tmp_path / "o"
    fake_lab.STATE["swallowed_sigint_in"] = 1
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # xdist workers ignore SIGINT
    try:
        with pytest.raises(KeyboardInterrupt):
            run_experiment(exp, "tiny", out_dir=out, progress=False)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "handler restored"
    finally:
        signal.signal(signal.SIGINT, previous)
    assert fake_lab.STATE["computed"] == 2, "stopped right after the cell that got the signal"
    assert sorted(p.name for p in (out / "cells").glob("*.json")) == ["cell-0.json", "cell-1.json"]
    assert not (out / "results.json").exists()
    err = capfd.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err

    fake_lab.STATE["swallowed_sigint_in"] = None
    run_experiment(exp, "tiny", out_dir=out, progress=False)
    assert (fake_lab.last_run().cells.resumed, fake_lab.last_run().cells.computed) == (2, 2)


def test_same_config_resumes_and_different_config_is_refused(exp, fake_lab, tmp_path):
    out = tmp_path / "o"
    run_experiment(exp, "tiny", out_dir=out, progress=False)
    run_experiment(exp, "tiny", out_dir=out, progress=False)
    assert (fake_lab.last_run().cells.resumed, fake_lab.last_run().cells.computed) == (4, 0)
    with pytest.raises(ValueError, match=f"{out}.*different config.*--out"):
        run_experiment(exp, "tiny", seed=1, out_dir=out, progress=False)
    assert json.loads((out / "config.json").read_text())["config"]["seed"] == 0  # untouched


def test_setup_errors_name_the_problem(exp, tmp_path):
    with pytest.raises(SetupError, match="unknown profile 'huge'.*known: tiny, quick, paper"):
        run_experiment(exp, "huge", out_dir=tmp_path / "o")
    with pytest.raises(ValueError, match="invalid config.*n_cells must be >= 1"):
        run_experiment(exp, "broken", out_dir=tmp_path / "o")
    for seed in (-1, 2**32, 2**64, 1.0):  # 2**32 would alias seed 0
        with pytest.raises(ValueError, match=re.escape("seed must be an int in [0, 2**32)")):
            run_experiment(exp, "tiny", seed=seed, out_dir=tmp_path / "o")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match=f"cannot write to output folder {blocker / 'sub'}"):
        run_experiment(exp, "tiny", out_dir=blocker / "sub", progress=False)
    assert not (tmp_path / "o").exists()  # nothing written before the checks


def test_progress_bar_enabled_runs(exp, tmp_path, capsys):
    run_experiment(exp, "tiny", out_dir=tmp_path / "o", progress=True)
    assert "fake cells" in capsys.readouterr().err


def test_atomic_write_failure_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "f.txt"
    atomic_write_text(path, "old")

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", fail)
    with pytest.raises(OSError):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_run_checks_cells_claims_and_file_names(fake_lab, tmp_path):
    run = Run(tmp_path, fake_lab.FakeConfig(), "tiny", 0, progress=False)
    with pytest.raises(ValueError, match="invalid cell name"):
        run.sweep({"a/b": dict}, "bad")
    with pytest.raises(ValueError, match="zero-argument function"):
        run.sweep({"not-callable": {"x": 1}}, "bad")
    with pytest.raises(runner.CellsFailed, match="1 of 1 cells of 'lists' failed: list"):
        run.sweep({"list": lambda: [1, 2]}, "lists")
    nan = run.sweep({"nan": lambda: {"x": np.array([np.nan, 1.0])}, "nan2": lambda: {"x": np.nan}}, "nan")
    assert nan["nan"]["x"][1] == 1.0 and np.isnan(nan["nan2"]["x"])  # cells keep NaN exactly
    with pytest.raises(ValueError, match="used twice"):
        run.sweep({"nan": dict}, "again")
    with pytest.raises(ValueError, match="holds must be a bool"):
        run.claim("c", "claim", "Fig. 1", "0.1", holds=1)
    run.claim("c", "claim", "Fig. 1", "0.1", holds=np.bool_(True))
    assert run.claims == [{"id": "c", "claim": "claim", "paper": "Fig. 1", "ours": "0.1", "holds": True,
                          "status": "holds"}]
    assert type(run.claims[0]["holds"]) is bool
    with pytest.raises(ValueError, match="recorded twice"):
        run.claim("c", "claim", "Fig. 1", "0.1", holds=True)
    with pytest.raises(ValueError, match="without '..'"):
        run.write_text("../escape.txt", "x")
    with pytest.raises(ValueError, match="row 0 has 1 entries"):
        run.save_csv("t.csv", ["a", "b"], [[1]])
    with pytest.raises(ValueError, match=r"\.png"):
        run.save_figure(None, "f.pdf")


def test_sweep_returns_cells_in_order_and_reads_finished_ones(fake_lab, tmp_path):
    order = []

    def cell(i):
        order.append(i)
        return {"i": i, "blob": b"\x00\xff" * i}

    run = Run(tmp_path, fake_lab.FakeConfig(), "tiny", 0, progress=False)
    first = run.sweep({f"c{i}": partial(cell, i) for i in (3, 1, 2)}, "first")
    assert list(first) == ["c3", "c1", "c2"] and [r["i"] for r in first.values()] == [3, 1, 2]
    assert first["c2"]["blob"] == b"\x00\xff\x00\xff"
    again = Run(tmp_path, fake_lab.FakeConfig(), "tiny", 0, progress=False)
    second = again.sweep({f"c{i}": partial(cell, i) for i in (1, 2, 3, 4)}, "second")
    assert second == {"c1": first["c1"], "c2": first["c2"], "c3": first["c3"], "c4": {"i": 4, "blob": b"\x00\xff" * 4}}
    assert order == [3, 1, 2, 4] and (again.cells.resumed, again.cells.computed) == (3, 1)
    assert set(again.cells.seconds) == {"c1", "c2", "c3", "c4"}
    # a cell file of memlab <= 0.1 (the bare result) carries no checksum of its content: recomputed, not trusted
    (tmp_path / "cells" / "old.json").write_text('{"i": 7}')
    assert again.sweep({"old": partial(cell, 0)}, "old")["old"] == {"i": 0, "blob": b""}
    assert again.cells.peak_rss_mb["c4"] > 10


def _current_rss_mb() -> float:
    status = open("/proc/self/status").read()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024  # kB


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the current RSS from Linux's /proc")
def test_cell_records_the_peak_memory_of_its_process(fake_lab, tmp_path):
    def big():  # touches 400 MB on top of what the process holds: the high-water mark must include it
        block = np.ones(50 * 2**20)
        return {"sum": float(block.sum())}

    run = Run(tmp_path, fake_lab.FakeConfig(), "tiny", 0, progress=False)
    resident = _current_rss_mb()
    run.sweep({"big": big}, "big")
    assert run.cells.peak_rss_mb["big"] >= resident + 0.95 * 400
    record = files.read_cell((tmp_path / "cells" / "big.json").read_text())
    assert record.peak_rss_mb == run.cells.peak_rss_mb["big"] and record.result == {"sum": 50.0 * 2**20}


def test_cell_records_its_compile_time_date_and_machine(fake_lab, tmp_path):
    import jax
    import jax.numpy as jnp

    def compiles():  # a program no other test compiles (its constant is new): XLA compiles it here
        return {"y": float(jax.jit(lambda x: jnp.sin(x) * 1.2345678)(1.0))}

    def plain():
        return {"y": 1.0}

    run = Run(tmp_path, fake_lab.FakeConfig(), "tiny", 0, progress=False)
    run.sweep({"compiles": compiles, "plain": plain}, "c")
    assert 0 < run.cells.compile_seconds["compiles"] <= run.cells.seconds["compiles"]
    assert run.cells.compile_seconds["plain"] == 0
    text = (tmp_path / "cells" / "compiles.json").read_text()
    assert files.read_cell(text).compile_seconds == run.cells.compile_seconds["compiles"]
    raw = json.loads(text)  # when and where it finished, for the clusters page's table
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", raw["finished"])
    assert f", {os.cpu_count()} CPUs, " in raw["machine"]


def test_a_failing_cell_is_reported_and_the_others_are_kept(exp, fake_lab, tmp_path, capsys):
    out = tmp_path / "o"
    fake_lab.STATE["fail_cell"] = 1
    with pytest.raises(runner.CellsFailed, match="1 of 4 cells of 'fake cells' failed: cell-1") as failure:
        run_experiment(exp, "tiny", out_dir=out, progress=False)
    assert "RuntimeError: cell 1 was told to fail" in failure.value.failures["cell-1"]
    err = capsys.readouterr().err
    assert "memlab: cell 'cell-1' failed:" in err and "Traceback" in err and "told to fail" in err
    assert sorted(p.name for p in (out / "cells").glob("*.json")) == ["cell-0.json", "cell-2.json", "cell-3.json"]
    assert not (out / "results.json").exists()
    fake_lab.STATE["fail_cell"] = None
    run_experiment(exp, "tiny", out_dir=out, progress=False)
    assert (fake_lab.last_run().cells.resumed, fake_lab.last_run().cells.computed) == (3, 1)


def test_key_streams_are_named_and_stable(fake_lab, tmp_path):
    run = Run(tmp_path, fake_lab.FakeConfig(), "tiny", 5, progress=False)
    data = jax.random.key_data
    assert np.array_equal(data(run.key_for()), data(jax.random.key(5))) and np.array_equal(data(run.key),
                                                                                          data(jax.random.key(5)))
    assert np.array_equal(data(run.key_for("tasks", 3)), data(key_for(5, "tasks", 3)))
    assert np.array_equal(data(key_for(5, 3)), data(jax.random.fold_in(jax.random.key(5), 3)))
    streams = [key_for(5, *names) for names in [("tasks",), ("tasks", 0), ("tasks", 1), ("trajectories",), (0,),
                                                ("tasks", "0")]]
    assert len({tuple(np.asarray(data(k)).tolist()) for k in streams}) == len(streams)
    for bad in (-1, 2**32, 1.5, True, None):
        with pytest.raises(ValueError, match="strings and ints"):
            key_for(0, bad)


def test_save_table_writes_csv_and_returns_markdown(fake_lab, tmp_path):
    run = Run(tmp_path, fake_lab.FakeConfig(), "tiny", 0, progress=False)
    markdown = run.save_table("t.csv", ["model", "mse", "n"], [("a|b", 0.123456789, 3), ("c", np.float32(2.5), 4)],
                              fmt={"mse": ".3f"})
    assert markdown == "| model | mse | n |\n| --- | --- | --- |\n| a\\|b | 0.123 | 3 |\n| c | 2.500 | 4 |\n"
    with open(tmp_path / "t.csv") as f:
        assert list(csv.reader(f)) == [["model", "mse", "n"], ["a|b", "0.123456789", "3"], ["c", "2.5", "4"]]


def test_experiment_checks_profiles(fake_lab):
    good = fake_lab.make_experiment()
    with pytest.raises(ValueError, match="lacks profile.*paper"):
        dataclasses.replace(good, profiles={"quick": fake_lab.FakeConfig()})

    @dataclasses.dataclass
    class Mutable:
        seed: int = 0

    with pytest.raises(ValueError, match="frozen dataclass"):
        dataclasses.replace(good, profiles={"quick": Mutable(), "paper": Mutable()})
    with pytest.raises(ValueError, match="invalid experiment name"):
        dataclasses.replace(good, name="a/b")
    with pytest.raises(ValueError, match="quick_flags .'xla_fast'. are not among"):
        dataclasses.replace(good, quick_flags=("xla_fast",))


def test_to_jsonable_converts_arrays_scalars_and_nonfinite(fake_lab):
    obj = {"cfg": fake_lab.FakeConfig(), "t": (1, 2), "a": jnp.arange(3), "i": np.int64(4), "b": np.bool_(False),
           "f": [np.float32(0.5), -np.inf, np.nan], 3: None}
    assert to_jsonable(obj) == {"cfg": {"seed": 0, "n_cells": 4, "size": 3}, "t": [1, 2], "a": [0, 1, 2], "i": 4,
                                "b": False, "f": [0.5, "-Infinity", "NaN"], "3": None}
    loose = to_jsonable(obj, strict=False)
    assert loose["f"][1] == -np.inf and np.isnan(loose["f"][2])
    with pytest.raises(TypeError, match="cannot convert object"):
        to_jsonable({"x": object()})


def test_cells_record_their_software_and_a_resume_from_other_versions_is_flagged(fake_lab, tmp_path, capsys):
    run = Run(tmp_path, fake_lab.FakeConfig(), "tiny", 0, progress=False)
    run.sweep({"a": lambda: {"x": 1.0}, "b": lambda: {"x": 2.0}}, "first")
    here = files.software_versions()
    assert run.cells.software == {"a": here, "b": here} and set(here) == {"jax", "jaxlib", "numpy"}
    assert "computed with" not in capsys.readouterr().err
    # cell b as an older jax wrote it (jax 0.10.2 miscompiled, tests/test_backend.py)
    path = tmp_path / "cells" / "b.json"
    record = json.loads(path.read_text())
    record["software"] = {**here, "jax": "0.10.2", "jaxlib": "0.10.2"}
    path.write_text(json.dumps(record | {"sha256": files.content_digest(record)}))
    again = Run(tmp_path, fake_lab.FakeConfig(), "tiny", 0, progress=False)
    resumed = again.sweep({"a": lambda: {"x": 9.0}, "b": lambda: {"x": 9.0}}, "again")
    assert resumed == {"a": {"x": 1.0}, "b": {"x": 2.0}}  # kept (the warning says how to recompute)
    err = capsys.readouterr().err
    assert "1 of 2 cells were computed with jax 0.10.2, jaxlib 0.10.2" in err and str(tmp_path / "cells") in err
    assert again.cells.software["b"]["jax"] == "0.10.2"


@dataclasses.dataclass(frozen=True)
class _TypedResults:
    means: list
    label: str


@pytest.mark.parametrize("returned, written", [(_TypedResults([0.5, 1.5], "x"), {"means": [0.5, 1.5], "label": "x"}),
                                               ([1, 2], None)])
def test_run_returns_a_dict_or_a_dataclass(fake_lab, tmp_path, returned, written):
    """An experiment's run() may return its typed results (a dataclass instance): results.json holds its fields."""
    exp = dataclasses.replace(fake_lab.experiments["fake.means"], run=lambda cfg, run: returned)
    if written is None:
        with pytest.raises(TypeError, match="dict or a dataclass instance, got list"):
            run_experiment(exp, "tiny", out_dir=tmp_path / "o", progress=False)
        return
    out = run_experiment(exp, "tiny", out_dir=tmp_path / "o", progress=False)
    assert json.loads((out / "results.json").read_text())["results"] == written


def test_compile_share_counts_only_cells_that_recorded_both_times():
    assert files.compile_share([(10.0, 4.0), (30.0, 6.0), (50.0, None), (None, None)]) == 0.25
    assert files.compile_share([(10.0, None)]) is None and files.compile_share([(0.0, 0.0)]) is None

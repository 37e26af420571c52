"""Tests for memlab.store and the runner's use of it: a cell computed once serves every experiment and profile that
asks for it; the time limit stops a run between cells, or a checkpointing cell at its checkpoint, and resumes."""

import dataclasses
import json
import time
import typing
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from memlab import cell_cache, cli, deadline, files
from memlab.keys import key_for
from memlab.runner import Experiment, TimeLimitReached, run_experiment
from memlab.store import (
    CHECKPOINT,
    CellStore,
    ResultMismatch,
    cell,
    cell_digest,
    describe,
    takes_checkpoint,
    typed_result,
    with_checkpoint,
)


def add(a, b=2, scale=1.0):
    return {"x": (a + b) * scale}


@dataclasses.dataclass(frozen=True)
class Sizes:
    n: int
    lr: float


def test_digest_names_function_arguments_and_key_and_nothing_else():
    base = cell_digest(partial(add, 1, 2))
    assert base == cell_digest(partial(add, 1)) == cell_digest(partial(add, a=1, b=2, scale=1.0))  # defaults, names
    assert base != cell_digest(partial(add, 1, 3)) and base != cell_digest(partial(add, 1, 2, 1.0000001))
    k0, k1 = key_for(0, "ppo", "alf", 0), key_for(0, "ppo", "alf", 1)
    assert cell_digest(partial(add, k0)) == cell_digest(partial(add, key_for(0, "ppo", "alf", 0)))
    assert cell_digest(partial(add, k0)) != cell_digest(partial(add, k1))
    assert cell_digest(partial(add, Sizes(3, 0.1))) != cell_digest(partial(add, Sizes(3, 0.2)))
    assert cell_digest(partial(add, np.arange(3.0))) != cell_digest(partial(add, np.arange(3.0) + 1e-12))
    assert cell_digest(partial(add, np.zeros(3, np.float32))) != cell_digest(partial(add, np.zeros(3, np.float64)))
    # the checkpoint's path is the runner's business, not the result's
    assert cell_digest(partial(add, 1, CHECKPOINT)) != base
    assert describe(partial(add, 1, CHECKPOINT))["arguments"][1] == "CHECKPOINT"
    assert set(describe(partial(add, 1))["libraries"]) == {"jax", "jaxlib"}
    assert cell_digest(lambda: {"x": 1}) is None  # not describable: kept in the run folder only
    assert cell_digest(partial(add, object())) is None


def test_xlas_optimisation_level_and_fusion_emitters_are_in_the_digest_only_where_set(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    default = cell_digest(partial(add, 1, 2))
    assert "xla_backend_optimization_level" not in describe(partial(add, 1, 2))
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=1")
    assert describe(partial(add, 1, 2))["xla_backend_optimization_level"] == 1
    level_1 = cell_digest(partial(add, 1, 2))
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=1 --xla_cpu_use_fusion_emitters=false")
    assert describe(partial(add, 1, 2))["xla_cpu_use_fusion_emitters"] == "false"
    older_emitter = cell_digest(partial(add, 1, 2))
    monkeypatch.delenv("XLA_FLAGS")
    assert len({level_1, older_emitter, default}) == 3
    assert default == cell_digest(partial(add, 1, 2))  # the device count is not in it


def test_a_named_cell_keeps_its_digest_when_it_moves_and_a_new_version_is_a_new_cell():
    def named(a):
        return {"a": a}

    assert cell_digest(partial(named, 1)) is None  # a local function: not describable
    cell("fake.named", result=Draws)(named)
    before = cell_digest(partial(named, 1))
    named.__module__, named.__qualname__ = "somewhere.else", "moved"  # e.g. a file moved by a refactor
    assert cell_digest(partial(named, 1)) == before and describe(partial(named, 1))["function"] == "fake.named"
    cell("fake.named", version=2, result=Draws)(named)
    assert cell_digest(partial(named, 1)) != before
    with pytest.raises(ValueError, match="cell name"):
        cell("a/b", result=Draws)


def test_a_cell_keeps_its_digest_when_its_config_class_is_renamed_or_moved():
    """What a cell computes from, not what things are called: a config (dataclass) or a data set (NamedTuple) of a
    new name and module, fields renamed, or the cell's parameters renamed, with the same values in the same places,
    is the same cell; other values are another."""
    from memlab.pissm.data.splits import Dataset
    from memlab.pissm.train import TrainConfig

    @dataclasses.dataclass(frozen=True)
    class Renamed(TrainConfig):
        pass

    Renamed.__module__, Renamed.__qualname__ = "memlab.elsewhere", "RenamedTrainConfig"
    config = TrainConfig(epochs=3)
    same = Renamed(**{f.name: getattr(config, f.name) for f in dataclasses.fields(config)})
    assert cell_digest(partial(add, config, 1)) == cell_digest(partial(add, same, 1))
    assert cell_digest(partial(add, config, 1)) != cell_digest(partial(add, TrainConfig(epochs=4), 1))
    Moved = typing.NamedTuple("Moved", [(f"renamed_{name}", object) for name in Dataset._fields])  # fields too
    data = Dataset(*range(len(Dataset._fields)))
    assert cell_digest(partial(add, data, 1)) == cell_digest(partial(add, Moved(*data), 1))

    def renamed(first, second=2, factor=1.0):  # add's parameters renamed: the same values in the same places
        return {}

    renamed.__module__, renamed.__qualname__ = add.__module__, add.__qualname__
    assert cell_digest(partial(renamed, config, 1)) == cell_digest(partial(add, config, 1))
    assert cell_digest(partial(renamed, config, second=3)) == cell_digest(partial(add, config, 3))


def test_a_field_added_to_a_config_keeps_every_digest_stored_before_it_while_at_its_default():
    """``added_field``: at its default the config is described and written as before the field existed; set, it is
    another cell; two added fields set to the same value are two cells."""
    from memlab.files import added_field, to_jsonable

    @dataclasses.dataclass(frozen=True)
    class Before:
        steps: int = 5

    @dataclasses.dataclass(frozen=True)
    class After:
        steps: int = 5
        warmup: int | None = added_field(None)
        decay: int | None = added_field(None)

    before = cell_digest(partial(add, Before(), 1))
    assert cell_digest(partial(add, After(), 1)) == before
    assert cell_digest(partial(add, After(warmup=0), 1)) not in (before, cell_digest(partial(add, After(), 1)))
    assert cell_digest(partial(add, After(warmup=2), 1)) != cell_digest(partial(add, After(decay=2), 1))
    assert to_jsonable(After()) == to_jsonable(Before()) == {"steps": 5}
    assert to_jsonable(After(decay=0)) == {"steps": 5, "decay": 0}


def test_checkpoint_placeholder_becomes_a_path():
    cell = partial(add, 1, CHECKPOINT)
    assert takes_checkpoint(cell) and not takes_checkpoint(partial(add, 1))
    assert with_checkpoint(cell, Path("/x/y")).args == (1, "/x/y")


def test_identical_cells_are_computed_once_across_experiments_and_profiles(fake_lab, tmp_path):
    means, other = fake_lab.experiments["fake.means"], fake_lab.experiments["fake.other"]
    run_experiment(means, "tiny", out_dir=tmp_path / "fake.means" / "tiny", progress=False)
    assert fake_lab.STATE["computed"] == 4
    run_experiment(other, "tiny", out_dir=tmp_path / "fake.other" / "tiny", progress=False)
    assert fake_lab.STATE["computed"] == 4  # the other experiment asks for the same cells: none computed again
    run_experiment(means, "quick", out_dir=tmp_path / "fake.means" / "quick", progress=False)
    assert fake_lab.STATE["computed"] == 6  # quick has 6 cells, 4 of them tiny's

    other_doc = json.loads((tmp_path / "fake.other" / "tiny" / "results.json").read_text())
    assert other_doc["cell_store"] == str(tmp_path / "cells")  # one store beside the experiment folders
    assert other_doc["cells"]["computed"] == 0 and other_doc["cells"]["reused"] == 4
    assert other_doc["cells"]["reused_from"]["cell-2"] == "fake.means/tiny/cell-2"
    quick = json.loads((tmp_path / "fake.means" / "quick" / "results.json").read_text())
    assert (quick["cells"]["computed"], quick["cells"]["reused"]) == (2, 4)
    tiny = json.loads((tmp_path / "fake.means" / "tiny" / "results.json").read_text())
    assert quick["results"]["means"][:4] == tiny["results"]["means"] == other_doc["results"]["means"]
    assert set(quick["cells"]["store"]) == {f"cell-{i}" for i in range(6)}


def test_a_run_folder_copy_resumes_only_the_digest_it_was_made_for(fake_lab, tmp_path, capsys):
    exp, other = fake_lab.experiments["fake.means"], fake_lab.experiments["fake.other"]
    # from before the store: it resumes its own run, but nothing vouches for it, so it is not filed for others
    run_experiment(exp, "tiny", out_dir=tmp_path / "old", progress=False, store=False)
    run_experiment(exp, "tiny", out_dir=tmp_path / "old", progress=False)
    assert fake_lab.STATE["computed"] == 4 and not list((tmp_path / "cells").rglob("*.json"))
    # made under the store: a copy whose digest no longer matches (here: another version of the cell's code) is
    # stale, recomputed, and the new result filed
    run_experiment(exp, "tiny", out_dir=tmp_path / "new", progress=False)
    assert fake_lab.STATE["computed"] == 8
    fake_cell = fake_lab.make_experiment.__globals__["fake_cell"]  # conftest's cell function
    fake_cell.cell_name, fake_cell.cell_version = "fake.cell", 1
    try:
        for entry in (tmp_path / "cells").rglob("*.json"):  # the store lost, the run folder kept
            entry.unlink()
        run_experiment(exp, "tiny", out_dir=tmp_path / "new", progress=False)
        assert fake_lab.STATE["computed"] == 12 and "was computed for other code" in capsys.readouterr().err
        run_experiment(other, "tiny", out_dir=tmp_path / "other", progress=False)
        assert fake_lab.STATE["computed"] == 12  # from the store, filed under the new digest
    finally:
        del fake_cell.cell_name, fake_cell.cell_version


def test_a_damaged_store_record_is_recomputed_with_one_warning_line(fake_lab, tmp_path, capsys):
    out = tmp_path / "o"
    assert cli.main(["run", "fake.means", "--profile", "tiny", "--out", str(out), "--no-progress"]) == 0
    damaged = next((tmp_path / "cells").rglob("*.json"))
    damaged.write_text("{not json")
    for p in (out / "cells").glob("*.json"):
        p.unlink()
    capsys.readouterr()
    assert cli.main(["run", "fake.means", "--profile", "tiny", "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err == f"memlab: cell file {damaged} is damaged (not valid JSON (Expecting property name enclosed in " \
                  "double quotes: line 1 column 2 (char 1))); replacing it\n"
    assert fake_lab.last_run().cells.computed == 1 and json.loads(damaged.read_text())["record"]["result"]


def _edit_result(path: Path, stored: bool) -> float:
    """Change one number of a cell record in place (still valid JSON, still a record); returns the new number."""
    entry = json.loads(path.read_text())
    record = entry["record"] if stored else entry
    result = record["result"]
    key = next(k for k, v in result.items() if isinstance(v, float))
    result[key] += 1000.0
    path.write_text(json.dumps(entry))
    return result[key]


def test_an_edited_number_in_a_stored_cell_is_never_used(fake_lab, tmp_path, capsys):
    """A number edited inside a stored record (valid JSON) no longer matches the record's checksum: one warning
    line, the cell recomputed and its record replaced; the run's results are the true ones."""
    out = tmp_path / "o"
    assert cli.main(["run", "fake.means", "--profile", "tiny", "--out", str(out), "--no-progress"]) == 0
    truth = json.loads((out / "results.json").read_text())["results"]
    edited = sorted((tmp_path / "cells").rglob("*.json"))[0]
    number = _edit_result(edited, stored=True)
    capsys.readouterr()
    assert cli.main(["run", "fake.means", "--profile", "tiny", "--out", str(tmp_path / "p"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err == f"memlab: cell file {edited} is damaged (its content does not match its checksum (edited or " \
                  "damaged since it was written)); replacing it\n"
    assert fake_lab.last_run().cells.computed == 1
    assert json.loads((tmp_path / "p" / "results.json").read_text())["results"] == truth
    assert number not in json.loads(edited.read_text())["record"]["result"].values()


def test_a_damaged_run_folder_copy_is_repaired_from_the_store_and_never_filed(fake_lab, tmp_path, capsys):
    out = tmp_path / "o"
    assert cli.main(["run", "fake.means", "--profile", "tiny", "--out", str(out), "--no-progress"]) == 0
    truth = json.loads((out / "results.json").read_text())["results"]
    copy = out / "cells" / "cell-0.json"
    _edit_result(copy, stored=False)
    capsys.readouterr()
    assert cli.main(["run", "fake.means", "--profile", "tiny", "--out", str(out), "--no-progress"]) == 0
    assert capsys.readouterr().err == f"memlab: cell file {copy} is damaged (its content does not match its " \
        "checksum (edited or damaged since it was written)); repaired from the cell store\n"
    assert fake_lab.last_run().cells.computed == 0
    assert json.loads((out / "results.json").read_text())["results"] == truth
    files.read_cell(copy.read_text())  # a valid record again
    # the store lost, the damaged copy kept: it is recomputed, not filed into the new store
    _edit_result(copy, stored=False)
    for entry in (tmp_path / "cells").rglob("*.json"):
        entry.unlink()
    assert cli.main(["run", "fake.means", "--profile", "tiny", "--out", str(out), "--no-progress"]) == 0
    assert "recomputing the cell" in capsys.readouterr().err and fake_lab.last_run().cells.computed == 1
    assert json.loads((out / "results.json").read_text())["results"] == truth


@pytest.mark.parametrize("text", ['{"memlab_cell": 1, "seconds": 1.0, "result": {"x": 1.0}}', '{"x": 1.0}'])
def test_a_record_without_a_checksum_is_refused(text):
    with pytest.raises(ValueError, match="without the checksum of its content"):
        files.read_cell(text)
    record = json.loads(files.cell_text({"x": 1.0}, 1.0))
    assert record["sha256"] == files.content_digest(record) and files.read_cell(json.dumps(record)).result == {"x": 1.0}


def test_a_checkpoint_in_use_by_another_process_is_not_shared(tmp_path):
    from memlab.checkpoints import owned as _owned

    path = tmp_path / "cells" / "checkpoints" / "abc" / "checkpoint"
    with _owned(path) as first, _owned(path) as second:  # a second lock on the same file is refused, as in another
        assert first == path and second != path and second.parent == path.parent


def test_the_time_limit_starts_no_cell_that_would_not_finish(fake_lab, tmp_path, capsys):
    exp, out = fake_lab.experiments["fake.means"], tmp_path / "o"
    run_experiment(exp, "tiny", out_dir=tmp_path / "warm", progress=False, store=False)  # compiles out of the way
    fake_lab.STATE.update(sleep=0.5, computed=0)
    # cell-0 starts at once, cell-1 at 0.5 s (0.5 s of work, 0.75 s left), cell-2 at 1.0 s would end at 1.5 s
    with pytest.raises(TimeLimitReached, match="2 of 4 cells finished; the same command resumes"):
        run_experiment(exp, "tiny", out_dir=out, progress=False, time_limit=1.25)
    assert sorted(p.name for p in (out / "cells").glob("*.json")) == ["cell-0.json", "cell-1.json"]
    assert fake_lab.STATE["computed"] == 2 and not (out / "results.json").exists()
    # the command line: exit 0, one line saying what finished
    assert cli.main(["run", "fake.means", "--profile", "tiny", "--out", str(out), "--no-progress",
                     "--time-limit", "1h"]) == 0
    assert fake_lab.last_run().cells.resumed == 2 and fake_lab.STATE["computed"] == 4
    assert (out / "results.json").exists()
    capsys.readouterr()
    assert cli.main(["run", "fake.means", "--profile", "quick", "--out", str(tmp_path / "q"), "--no-progress",
                     "--time-limit", "0.5s"]) == 0  # cells 0-3 come from the store (0.5 s each): none fits
    assert capsys.readouterr().err == ("memlab: time limit reached in 'fake cells': 4 of 6 cells finished; "
                                       "the same command resumes\n")


@pytest.mark.parametrize("bad", ["0", "-5m", "soon", "5x"])
def test_time_limit_must_be_a_duration(fake_lab, bad, capsys):
    assert cli.main(["run", "fake.means", "--time-limit", bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith("memlab: error: argument --time-limit:") and err.count("\n") == 1


def test_parse_duration():
    assert [cli.parse_duration(t) for t in ("90", "2h30m", "90m", "45s", "1.5h", "1h 5s")] == \
        [90.0, 9000.0, 5400.0, 45.0, 5400.0, 3605.0]


def steps_cell(total: int, step_seconds: float, checkpoint: str) -> dict:
    """A cell that checkpoints after every step and stops when the next step would not finish in time."""
    path = Path(checkpoint)
    done = int(path.read_text()) if path.exists() else 0
    runs = json.loads(path.with_suffix(".runs").read_text()) if path.with_suffix(".runs").exists() else []
    starts = [*runs, done]  # the step each invocation started from
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".runs").write_text(json.dumps(starts))
    while done < total:
        deadline.check(step_seconds)
        time.sleep(step_seconds)
        done += 1
        path.write_text(str(done))
    return {"done": done, "started_at": starts}


def _steps_run(config, run):
    cells = run.sweep({"steps": partial(steps_cell, config.total, config.step_seconds, CHECKPOINT)}, "steps")
    return cells["steps"]


@dataclasses.dataclass(frozen=True)
class StepsConfig:
    seed: int = 0
    total: int = 6
    step_seconds: float = 0.25


@dataclasses.dataclass(frozen=True, kw_only=True)
class Draws:
    """A typed cell result: a field with a default is one that older records lack."""

    values: list[float]
    label: str
    note: str = "none"


@cell("test.draws", result=Draws)
def draws_cell(n: int) -> Draws:
    return Draws(values=np.arange(n, dtype=np.float32), label=f"n={n}")


@cell("test.draws-untyped", result=Draws)
def untyped_cell(n: int) -> Draws:
    return {"values": list(range(n)), "label": "a dict"}


def _draws_run(config, run):
    return run.sweep({"draws": partial(draws_cell, config.total)}, "draws")["draws"]


def _draws_experiment() -> Experiment:
    profiles = {"quick": StepsConfig(total=3), "paper": StepsConfig(total=3)}
    return Experiment("fake.draws", "Fig. 0", "fake-paper", "draws", profiles, _draws_run)


def test_a_sweep_gives_a_cell_result_back_as_its_declared_type_stored_as_todays_dict(tmp_path):
    exp = _draws_experiment()
    runs = []
    for out in ("computed", "from-the-store"):
        run_experiment(exp, "quick", out_dir=tmp_path / out, progress=False)
        runs.append(json.loads((tmp_path / out / "results.json").read_text()))
    assert (runs[0]["cells"]["computed"], runs[1]["cells"]["computed"]) == (1, 0)
    assert runs[0]["results"] == runs[1]["results"] == {"values": [0.0, 1.0, 2.0], "label": "n=3", "note": "none"}
    entry = json.loads(next((tmp_path / "cells" / "test.draws").glob("*.json")).read_text())
    assert list(entry["record"]["result"]) == ["values", "label", "note"]  # the fields, in order: the stored dict
    stored = partial(draws_cell, 3)
    assert typed_result(stored, entry["record"]["result"]) == Draws(values=[0.0, 1.0, 2.0], label="n=3")


def test_a_stored_result_whose_keys_are_not_its_types_fields_is_one_clear_error(tmp_path):
    stored = partial(draws_cell, 3)
    assert typed_result(stored, {"values": [], "label": "x"}).note == "none"  # an older record: the default
    with pytest.raises(ResultMismatch, match=r"cell test\.draws: a stored result has the key 'extra'.*Draws"):
        typed_result(stored, {"values": [], "label": "x", "extra": 1})
    with pytest.raises(ResultMismatch, match=r"cell test\.draws: a stored result lacks the key 'label'"):
        typed_result(stored, {"values": []})
    assert typed_result(partial(add, 1), {"x": 3}) == {"x": 3}  # a cell without a declared type: its dict
    two_shapes = cell("test.two-shapes", result=(Draws, Sizes))(lambda: None)  # the first type that fits
    assert typed_result(two_shapes, {"n": 2, "lr": 0.5}) == Sizes(2, 0.5)
    with pytest.raises(ResultMismatch, match=r"lacks the key 'lr'.*Sizes"):  # the nearest type is named
        typed_result(two_shapes, {"n": 2})
    # through a sweep: a record in the store without a field the type requires stops the run, naming both
    exp = _draws_experiment()
    CellStore(tmp_path / "cells").put(stored, cell_digest(stored), files.cell_text({"values": [1.0]}, 0.1),
                                      "fake.draws/quick/draws")
    with pytest.raises(ValueError, match=r"cell test\.draws: a stored result lacks the key 'label'"):
        run_experiment(exp, "quick", out_dir=tmp_path / "o", progress=False)


def test_a_cell_declares_its_result_type_and_returns_it():
    from memlab.worker import Settings, compute_cell

    text, error = compute_cell(partial(untyped_cell, 2), Settings.of_driver(), "u")
    assert text is None and "returned a dict; its cell function declares Draws" in error
    for result in (dict, Draws(values=[], label="x"), (Draws, dict), None):
        with pytest.raises(ValueError, match="frozen dataclass"):
            cell("test.bad", result=result)


def test_a_cell_without_a_result_type_is_refused_where_it_is_declared():
    with pytest.raises(TypeError, match="result"):
        @cell("test.no-result")
        def no_result(n: int) -> dict:
            return {"n": n}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Modes:
    """A field stored under a key that is no Python name (``stored_as``)."""

    rule: float
    free_flight: float = dataclasses.field(metadata={"stored_as": "free-flight"})


def _two_steps_run(config, run):
    cells = {f"steps-{total}": partial(steps_cell, total, config.step_seconds, CHECKPOINT) for total in (6, 5)}
    return run.sweep(cells, "steps")["steps-6"]


def test_once_a_cell_stops_at_the_time_limit_no_other_cell_starts(tmp_path):
    """A checkpointing cell's first piece of work has no measured time to refuse it by: after the first cell
    stopped at the limit, the second would otherwise start and run past it."""
    exp = Experiment("fake.two-steps", "Fig. 0", "fake-paper", "steps",
                     {"quick": StepsConfig(), "paper": StepsConfig()}, _two_steps_run)
    with pytest.raises(TimeLimitReached, match="0 of 2 cells finished"):
        run_experiment(exp, "quick", out_dir=tmp_path / "o", progress=False, time_limit=0.6)
    started = list((tmp_path / "cells" / "checkpoints").rglob("checkpoint.runs"))
    assert len(started) == 1 and json.loads(started[0].read_text()) == [0]


def test_a_field_stored_under_another_key_is_written_and_read_under_that_key():
    stored = cell("test.modes", result=Modes)(lambda: None)
    record = files.read_cell(files.cell_text(Modes(rule=0.5, free_flight=0.25), 0.1))
    assert list(record.result) == ["rule", "free-flight"]
    assert typed_result(stored, record.result) == Modes(rule=0.5, free_flight=0.25)
    with pytest.raises(ResultMismatch, match="has the key 'free_flight'"):  # the field's name is not its key
        typed_result(stored, {"rule": 0.5, "free_flight": 0.25})


def test_a_checkpointing_cell_stops_at_the_time_limit_and_resumes_from_its_checkpoint(tmp_path):
    exp = Experiment("fake.steps", "Fig. 0", "fake-paper", "steps", {"quick": StepsConfig(), "paper": StepsConfig()},
                     _steps_run)
    out = tmp_path / "o"
    with pytest.raises(TimeLimitReached, match="0 of 1 cells finished"):
        run_experiment(exp, "quick", out_dir=out, progress=False, time_limit=0.6)  # 2 of 6 steps fit
    checkpoints = list((tmp_path / "cells" / "checkpoints").rglob("checkpoint"))
    assert len(checkpoints) == 1 and checkpoints[0].read_text() == "2"
    run_experiment(exp, "quick", out_dir=out, progress=False)
    result = json.loads((out / "results.json").read_text())["results"]
    assert result == {"done": 6, "started_at": [0, 2]}  # resumed from step 2, not from 0
    assert not (tmp_path / "cells" / "checkpoints" / checkpoints[0].parent.name).exists()  # gone once finished
    entry = json.loads(next((tmp_path / "cells").glob("*.steps_cell/*.json")).read_text())
    assert entry["origin"] == "fake.steps/quick/steps" and entry["function"].endswith("steps_cell")
    assert CellStore(tmp_path / "cells").root == tmp_path / "cells"


# ---------------------------------------------------------------- two runs that share the store at the same time


def _sweep_beside_another_run(tmp_path, fake_lab, monkeypatch, other_stores: bool):
    """A sweep of cells 'a' (which another run holds) and 'b'; the other run stores 'a' with a value add() would
    never give (-1), or lets go of it without storing it, half a second in."""
    import threading

    from memlab.files import cell_text
    from memlab.runner import Run

    monkeypatch.setattr(cell_cache, "CLAIM_POLL_S", 0.05)
    store = CellStore(tmp_path / "cells")
    shared = partial(add, 1)
    holder = store.claim(cell_digest(shared))
    assert holder is not None and store.claim(cell_digest(shared)) is None and not store.is_free(cell_digest(shared))

    def other_run():
        time.sleep(0.5)
        if other_stores:
            store.put(shared, cell_digest(shared), cell_text({"x": -1}, 1.0), "other/quick/a")
        holder.release()

    thread = threading.Thread(target=other_run)
    thread.start()
    run = Run(tmp_path / "out", fake_lab.FakeConfig(), "quick", 0, progress=False, store=store, experiment="mine")
    results = run.sweep({"a": shared, "b": partial(add, 5)}, "pair")
    thread.join()
    return run, results, store


def test_a_cell_another_run_is_computing_is_waited_for_and_read_not_computed_again(tmp_path, fake_lab, monkeypatch):
    run, results, store = _sweep_beside_another_run(tmp_path, fake_lab, monkeypatch, other_stores=True)
    assert results == {"a": {"x": -1}, "b": {"x": 7}}  # 'a' is the other run's record, 'b' computed here
    assert run.cells.computed == 1 and run.cells.reused_from == {"a": "other/quick/a"}
    assert not any((store.root / "claims").iterdir())  # every claim released, its file removed


def test_a_cell_whose_holder_lets_go_without_storing_it_is_computed_here(tmp_path, fake_lab, monkeypatch):
    run, results, store = _sweep_beside_another_run(tmp_path, fake_lab, monkeypatch, other_stores=False)
    assert results == {"a": {"x": 3}, "b": {"x": 7}} and run.cells.computed == 2 and not run.cells.reused_from
    assert store.get(partial(add, 1), cell_digest(partial(add, 1)))["origin"] == "mine/quick/a"


def test_a_claim_ends_with_its_process(tmp_path):
    import subprocess
    import sys

    store, digest = CellStore(tmp_path / "cells"), "0" * 32
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from memlab.store import CellStore; "
                               f"c = CellStore({str(store.root)!r}).claim({digest!r}); print(c is not None, "
                               "flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "True" and not store.is_free(digest)
    finally:
        holder.kill()  # no release: the kernel frees the lock with the process
        holder.wait()
    assert store.is_free(digest)


def taken_by_another_run(root, other, value):
    """A cell that, while it runs, lets 'another run' claim cell ``other``, store ``value`` for it and let go."""
    from memlab.files import cell_text

    store = CellStore(root)
    claim = store.claim(cell_digest(other))
    assert claim is not None, "the sweep claimed a cell it had not started"
    store.put(other, cell_digest(other), cell_text({"x": value}, 1.0), "other/quick/b")
    claim.release()
    return {"x": 0}


def test_a_sweep_claims_each_cell_as_it_starts_so_another_run_takes_the_rest(tmp_path, fake_lab):
    """Two runs sharing the store split a sweep's cells: while this run computes 'a', another run takes 'b' (not yet
    claimed) and stores it; this run then reads 'b' instead of computing it, and goes on to 'c'."""
    from memlab.runner import Run

    store = CellStore(tmp_path / "cells")
    b = partial(add, 1)
    run = Run(tmp_path / "out", fake_lab.FakeConfig(), "quick", 0, progress=False, store=store, experiment="mine")
    results = run.sweep({"a": partial(taken_by_another_run, str(store.root), b, -1), "b": b, "c": partial(add, 5)},
                        "three")
    assert results == {"a": {"x": 0}, "b": {"x": -1}, "c": {"x": 7}}
    assert run.cells.computed == 2 and run.cells.reused_from == {"b": "other/quick/b"}
    assert not any((store.root / "claims").iterdir())

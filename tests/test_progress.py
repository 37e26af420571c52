"""memlab.progress: a line per finished cell off a terminal, the bar's time remaining, a long cell's own progress
through every executor, and training callbacks that report without changing a number."""

import re
import time
from functools import partial

import numpy as np
import pytest

from memlab import progress
from memlab.runner import Run, TimeLimitReached, run_experiment

CELL_LINE = re.compile(r"^memlab: fake\.means/tiny: cell cell-(\d) finished in \d+\.\d s \((\d)/4, fake cells\)$")


def test_off_a_terminal_every_finished_cell_is_one_line_on_stdout(fake_lab, tmp_path, capsys):
    run_experiment(fake_lab.experiments["fake.means"], "tiny", out_dir=tmp_path / "o", store=False)
    lines = capsys.readouterr().out.splitlines()
    matches = [CELL_LINE.match(line) for line in lines]
    assert all(matches), lines
    assert [(m[1], m[2]) for m in matches] == [("0", "1"), ("1", "2"), ("2", "3"), ("3", "4")]
    # a resumed run says nothing of the cells it did not compute, and no progress at all with progress=False
    (tmp_path / "o" / "results.json").unlink()
    run_experiment(fake_lab.experiments["fake.means"], "tiny", out_dir=tmp_path / "o", store=False)
    run_experiment(fake_lab.experiments["fake.means"], "tiny", out_dir=tmp_path / "p", store=False, progress=False)
    assert capsys.readouterr().out == ""


def test_the_bar_shows_the_time_remaining_and_counts_only_finished_cells(fake_lab, tmp_path, capsys):
    shown = progress.SweepDisplay("e/p", "cells", 3, enabled=True, terminal=True)
    with shown:
        columns = shown.columns
        shown.advance("a", 1.0)
    assert "TimeRemainingColumn" in columns and shown.done == 1
    assert capsys.readouterr().out == ""  # on a terminal: the bar only
    # at the time limit the bar shows the cells that finished, as the message does (1 of 3, not 3/3)
    run_experiment(fake_lab.experiments["fake.means"], "tiny", out_dir=tmp_path / "warm", progress=False, store=False)
    fake_lab.STATE.update(sleep=0.6, computed=0)
    with pytest.raises(TimeLimitReached, match="1 of 4 cells finished"):
        run_experiment(fake_lab.experiments["fake.means"], "tiny", out_dir=tmp_path / "o", store=False,
                       time_limit=0.9)
    out = capsys.readouterr()
    assert [CELL_LINE.match(line)[2] for line in out.out.splitlines()] == ["1"]
    assert "1/4" in out.err and "4/4" not in out.err


def test_training_lines_come_at_most_every_interval_and_at_the_end(monkeypatch):
    lines = []
    progress.training_step(1, 5, {"loss": 1.0})  # no channel open (a library call): nothing, no error
    with progress.cell_running("seed=0"), progress.sending_to(lines.append):  # the channel after: no heartbeat
        start = time.monotonic()  # the cell's start: its first line comes an interval later
        clock = iter(start + np.array([1.0, 16.0, 17.0, 32.0, 33.0]))
        monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
        for step in range(1, 6):
            progress.training_step(step, 5, {"loss": 1.0 / step, "seed losses": [1.0, 3.0]}, "epoch")
    assert lines == ["cell seed=0: epoch 2/5, loss 0.5, seed losses 2", "cell seed=0: epoch 4/5, loss 0.25, "
                     "seed losses 2", "cell seed=0: epoch 5/5, loss 0.2, seed losses 2"]


def test_a_silent_cell_says_it_still_runs(monkeypatch):
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.2)
    lines = []
    with progress.sending_to(lines.append), progress.cell_running("slow"):
        time.sleep(0.5)
    with progress.cell_running("alone"):  # no channel: no thread, no line
        time.sleep(0.3)
    assert lines[:2] == ["cell slow: running, 0 min so far"] * 2 and len(lines) <= 3


def reporting_cell(steps: int) -> dict:
    """A cell that reports each of its steps (the lines are thinned to the last one and the first)."""
    for step in range(1, steps + 1):
        progress.training_step(step, steps, {"loss": 0.5})
    return {"steps": steps}


@pytest.mark.parametrize("executor_name", ["local", "processes", "ray"])
def test_a_cells_own_progress_reaches_the_driver(executor_name, request, tmp_path, capsys):
    executor = None if executor_name == "local" else request.getfixturevalue(
        {"processes": "process_pool", "ray": "ray_cluster"}[executor_name])
    run = Run(tmp_path, None, "paper", 0, executor=executor, experiment="e")
    run.sweep({"slow": partial(reporting_cell, 3)}, "cells")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "memlab: e/paper: cell slow: step 3/3, loss 0.5"  # steps 1, 2 came within the interval
    assert lines[1].startswith("memlab: e/paper: cell slow finished in") and len(lines) == 2
    quiet = Run(tmp_path / "q", None, "paper", 0, executor=executor, experiment="e", progress=False)
    quiet.sweep({"slow": partial(reporting_cell, 3)}, "cells")
    assert capsys.readouterr().out == ""

"""Every experiment's tiny run finished on another executor gives the local run's numbers (``make test-slow``).

``make test`` does this for one experiment of each study (``conftest.ELSEWHERE``, inside ``check_tiny_run``); here
the others (``not_elsewhere``): the tiny run through the CLI, then a copy of it with one cell of each cell function
removed finished by the process pool or the Ray cluster (``conftest._finish_elsewhere``): each experiment's cells
travel to another process and compute the same numbers there.
"""

from __future__ import annotations

import json

import pytest

from memlab import cli


@pytest.mark.slow
def test_a_tiny_run_finished_on_another_executor_gives_the_same_numbers(not_elsewhere, tmp_path, finish_elsewhere):
    out = tmp_path / not_elsewhere
    assert cli.main(["run", not_elsewhere, "--profile", "tiny", "--out", str(out), "--no-progress"]) == 0
    finish_elsewhere(not_elsewhere, out, json.loads((out / "results.json").read_text()), tmp_path)

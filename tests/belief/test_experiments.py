"""The belief experiments end to end, through the command line, on their tiny profiles."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from memlab import cli
from memlab.catalog import EXPERIMENTS

BELIEF = sorted(name for name in EXPERIMENTS if name.startswith("belief."))


def test_every_issue_experiment_is_registered():
    assert {"belief.error-vs-epsilon", "belief.error-vs-time", "belief.logit-trace",
            "belief.exact-linear-filter"} <= set(BELIEF)


@pytest.mark.parametrize("name", BELIEF)
def test_tiny_profile_writes_the_contract(name, tmp_path, check_tiny_run):
    """The contract, a resume that computes nothing, and the same numbers from worker processes and Ray."""
    check_tiny_run(name, tmp_path)
    out = tmp_path / name
    results = json.loads((out / "results.json").read_text())
    assert results["experiment"] == name and results["profile"] == "tiny"
    assert json.loads((out / "config.json").read_text())["config"]["seed"] == 0
    assert results["claims"], "every experiment tests at least one claim of the paper"
    for claim in results["claims"]:
        assert {"id", "claim", "paper", "ours", "holds", "status"} <= set(claim) and isinstance(claim["holds"], bool)
    summary = (out / "summary.md").read_text()
    pngs = list(out.glob("*.png"))
    assert pngs and all(p.name in summary for p in pngs), "the summary shows every figure"
    assert list(out.glob("*.csv"))


def test_same_seed_same_numbers_and_seed_matters(tmp_path):
    name = "belief.error-vs-epsilon"
    runs = {}
    for tag, seed in (("a", 3), ("b", 3), ("c", 4)):
        out = tmp_path / tag
        argv = ["run", name, "--profile", "tiny", "--seed", str(seed), "--out", str(out), "--no-progress"]
        assert cli.main(argv) == 0
        runs[tag] = json.loads((out / "results.json").read_text())["results"]["p"]
    assert runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]


def test_interrupted_sweep_resumes_from_its_cells(tmp_path):
    """Ctrl-C a real sweep in a subprocess once it has started its cells (one line, exit 130, no results, no
    half-written files); the rerun completes it. Then delete some cells: a rerun recomputes exactly those and
    keeps the others byte for byte. (The interrupt and the resume are checked separately: with a warm compile
    cache the 12 quick cells can all finish between two polls, so "some cells finished at Ctrl-C" is a race.)"""
    out = tmp_path / "sweep"
    cells = out / "cells"
    # `memlab run belief.error-vs-epsilon --profile quick` with 1000 runs per cell instead of 4000 (the same 12 cells)
    light_quick = """
        import dataclasses, sys
        from memlab import catalog, cli
        exp = catalog.EXPERIMENTS["belief.error-vs-epsilon"]
        quick = dataclasses.replace(exp.profiles["quick"], num_runs=1000)
        catalog.EXPERIMENTS[exp.name] = dataclasses.replace(exp, profiles={**exp.profiles, "quick": quick})
        sys.exit(cli.main(["run", exp.name, "--profile", "quick", "--out", sys.argv[1], "--no-progress"]))
    """
    cmd = [sys.executable, "-c", textwrap.dedent(light_quick), str(out)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # xdist workers ignore SIGINT and a child inherits that (Python then installs no KeyboardInterrupt handler)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 300
    while not (out / "config.json").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    total = 12  # cells of the quick profile
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert len(list(cells.glob("*.json"))) < total
    assert not (out / "results.json").exists()
    assert not list(out.rglob("*.tmp")), "no half-written files"

    rerun = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert len(list(cells.glob("*.json"))) == total
    names = sorted(p.name for p in cells.glob("*.json"))
    kept = {name: (cells / name).read_bytes() for name in names[::2]}
    for name in names[1::2]:
        (cells / name).unlink()
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in cells.glob("*.json")) == names
    for name, content in kept.items():
        assert (cells / name).read_bytes() == content, "finished cells are kept, not recomputed"
    assert len(json.loads((out / "results.json").read_text())["results"]["p"]) == total


@pytest.mark.parametrize("argv, message", [
    (["run", "belief.error-vs-epsilonn"], "unknown experiment"),
    (["run", "belief.error-vs-time", "--profile", "huge"], "unknown profile"),
])
def test_bad_command_lines_fail_with_one_line(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_unwritable_output_folder(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert cli.main(["run", "belief.logit-trace", "--profile", "tiny", "--out", str(blocker / "x")]) == 2
    err = capsys.readouterr().err
    assert "cannot write to output folder" in err and "Traceback" not in err


def test_config_validation_names_the_problem():
    from memlab.belief.experiments.error_epsilon import ErrorVsEpsilonConfig
    from memlab.belief.experiments.logit_trace import LogitTraceConfig

    with pytest.raises(ValueError, match="schedule"):
        ErrorVsEpsilonConfig(schedules=("sqrt", "cubic")).validate()
    with pytest.raises(ValueError, match="inv_eps"):
        ErrorVsEpsilonConfig(inv_eps_min=300).validate()
    with pytest.raises(ValueError, match="deltas"):
        LogitTraceConfig(deltas=(0.3, 0.1)).validate()


@pytest.mark.slow
@pytest.mark.parametrize("name", BELIEF)
def test_paper_profile_reproduces_every_claim(name, tmp_path):
    """Paper sizes (Fig. 1: 23 x 20,000 runs x 1,000 steps): every claim the experiment tests holds."""
    from memlab.runner import run_experiment

    out = run_experiment(EXPERIMENTS[name], profile="paper", out_dir=tmp_path, progress=False)
    claims = json.loads((out / "results.json").read_text())["claims"]
    assert claims and all(c["holds"] for c in claims), [c for c in claims if not c["holds"]]


def test_the_previous_action_ablation_reads_the_share_of_s5s_gap_it_closes():
    from memlab.belief.experiments.ringworld_ppo_stats import MemoryStats
    from memlab.belief.experiments.ringworld_ppo_summary import previous_action_ablation

    def stats(**tails):
        return {m.replace("_", "-"): MemoryStats(tail_mean=v, tail_std=0.01, tail_per_seed=[v],
                                                 half_ceiling_update=None, diagnostics={}, learning_std=0.01)
                for m, v in tails.items()}

    line = previous_action_ablation(stats(s5_12=0.30, s5_12_prev_action=0.40, alf=0.50, lof=0.45))
    assert "ends at 0.400" in line and "ALF, ends at 0.500" in line and "closes 50% of S5-12's gap" in line
    assert previous_action_ablation(stats(s5_12=0.30, alf=0.5)) == ""


def test_fig3_claims_naming_a_memory_not_run_are_undecided():
    """paper-core and quick have no S5-256: every claim that names it is undecided (``missing``), never holds, and
    its part without S5-256 is decided as a claim of its own; with S5-256 run, nothing is missing."""
    from memlab.belief.experiments.ringworld_ppo_claims import returns_claims
    from memlab.belief.experiments.ringworld_ppo_stats import MemoryStats, ReturnsStats

    class Claims:
        def __init__(self):
            self.made = {}

        def claim(self, id, claim, paper, ours, holds, *, missing="", by="paper"):
            self.made[id] = (ours, holds, missing)

    def claims(**tails):
        stats = {m.replace("_", "-"): MemoryStats(tail_mean=v, tail_std=0.01, tail_per_seed=[v],
                                                  half_ceiling_update=None, diagnostics={}, learning_std=0.01)
                 for m, v in tails.items()}
        run = Claims()
        returns_claims(None, ReturnsStats(curves={}, stats=stats, ceiling=0.9, floor=-0.1, qmdp=0.5), run)
        return run.made

    made = claims(alf=0.55, lof_softmax=0.56, deep_alf_all_random=0.47, s5_12=0.40)
    assert made["all-random-deep-alf-above-s5-12"][1:] == (True, "")
    for id in ("learned-below-alf-and-lof-softmax", "s5-256-above-s5-12", "s5-256-matches-deep-alf"):
        ours, holds, missing = made[id]
        assert not holds and missing == "S5-256 not run" and "S5-256 not run" in ours, id
    assert made["s5-12-and-deep-alf-below-alf-and-lof-softmax"][1:] == (True, "")
    assert not claims(alf=0.55, lof_softmax=0.56, deep_alf_all_random=0.57, s5_12=0.40)[
        "s5-12-and-deep-alf-below-alf-and-lof-softmax"][1]
    full = claims(alf=0.55, lof_softmax=0.56, deep_alf_all_random=0.47, s5_12=0.40, s5_256=0.58)
    assert not full["learned-below-alf-and-lof-softmax"][1] and full["s5-256-above-s5-12"][1]
    assert all(missing == "" for _, _, missing in full.values())

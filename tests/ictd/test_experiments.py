"""The ictd experiments are registered with the catalog and run through the command line."""

from __future__ import annotations

import json

from memlab import cli
from memlab.catalog import EXPERIMENTS

ISSUE_EXPERIMENTS = {"ictd.verify", "ictd.msve-vs-context", "ictd.depth-convergence", "ictd.pretrain",
                     "ictd.mask-relaxation", "ictd.neu"}


def test_every_issue_experiment_is_registered_with_its_profiles():
    assert ISSUE_EXPERIMENTS <= set(EXPERIMENTS)
    for name in ISSUE_EXPERIMENTS:
        exp = EXPERIMENTS[name]
        assert {"quick", "paper", "tiny"} <= set(exp.profiles), name
        assert exp.paper == "softmax-transformers-in-context-td"


def test_list_shows_them(capsys):
    assert cli.main(["list", "--names"]) == 0
    assert ISSUE_EXPERIMENTS <= set(capsys.readouterr().out.split())


def test_cli_runs_a_tiny_profile(tmp_path):
    out = tmp_path / "verify"
    assert cli.main(["run", "ictd.verify", "--profile", "tiny", "--out", str(out), "--no-progress"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["experiment"] == "ictd.verify" and results["claims"]
    assert all(isinstance(c["holds"], bool) for c in results["claims"])

"""The recall experiments are registered and run end to end (tiny profile), resumably."""

from __future__ import annotations

import pytest

from memlab.catalog import EXPERIMENTS

ISSUE_EXPERIMENTS = {"recall.rate", "recall.sweep", "recall.context-limit", "recall.attention-vs-s6"}


def test_every_issue_experiment_is_registered_with_its_profiles():
    assert ISSUE_EXPERIMENTS <= set(EXPERIMENTS)
    for name in ISSUE_EXPERIMENTS:
        exp = EXPERIMENTS[name]
        assert {"quick", "paper", "tiny"} <= set(exp.profiles), name
        assert exp.paper == "mamba-measure-valued-recall"


def test_paper_profiles_use_the_paper_sizes():
    rate = EXPERIMENTS["recall.rate"].profiles["paper"]
    assert (rate.alphas, rate.sample_sizes, rate.context_lengths, rate.num_val, rate.epochs) == (
        (0.75, 1.0), (4, 8, 16, 32, 64), (5000,), 2000, 30)
    sweep = EXPERIMENTS["recall.sweep"].profiles["paper"]
    assert (sweep.alphas, sweep.context_lengths, sweep.students, sweep.num_val, sweep.epochs) == (
        (0.5, 0.75, 1.0, 2.0), (500, 1000, 2000), ("mamba-2",), 500, 120)
    assert len(sweep.alphas) * len(sweep.context_lengths) * len(sweep.sample_sizes) == 60


@pytest.mark.parametrize("name", sorted(ISSUE_EXPERIMENTS))
def test_tiny_profile_runs_and_resumes(name, tmp_path, check_tiny_run):
    check_tiny_run(name, tmp_path)

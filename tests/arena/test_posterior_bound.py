"""The leaderboard's bound on policy-eval: the posterior predictor scored on the layers' own held-out batch."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from memlab.arena.experiments import leaderboard
from memlab.arena.experiments.leaderboard import LeaderboardConfig
from memlab.arena.experiments.posterior_bound import PredictorScore, bound_note, gap_and_standard_error
from memlab.arena.policy_posterior import posterior_predictor
from memlab.arena.task import normalised_gap
from memlab.arena.tasks import make_task
from memlab.arena.train import TrainConfig, baselines
from memlab.catalog import EXPERIMENTS
from memlab.runner import Run


def test_the_gap_and_its_standard_error_match_the_bootstrap():
    """The ratio of sums and the delta method's standard error against 4,000 bootstrap resamples of the sequences
    (excess and margin correlated, as a predictor's are: the -g m_i term matters, a third of the error here; a mask
    that scores every other step, as policy-eval's)."""
    rng = np.random.default_rng(0)
    B, L = 400, 16
    margin = rng.gamma(2.0, 0.2, (B, L))
    excess = 0.5 * margin + rng.normal(0, 0.05, (B, L))
    reference = rng.normal(0, 1, (B, L))
    mask = np.tile(np.arange(L) % 2 == 0, (B, 1))
    gap, se = gap_and_standard_error(reference + excess, reference, reference + margin, mask)
    e, m = (np.where(mask, x, 0).sum(1) for x in (excess, margin))
    assert gap == pytest.approx(float(normalised_gap(reference + excess, reference, reference + margin, mask)))
    draws = rng.integers(0, B, (4000, B))
    boot = e[draws].sum(1) / m[draws].sum(1)
    assert se == pytest.approx(boot.std(), rel=0.1)
    assert np.std(e, ddof=1) * np.sqrt(B) / m.sum() > 1.3 * boot.std()  # without the -g m_i term: far off


def test_the_note_says_which_side_of_the_bound_the_closest_layer_is():
    bound = PredictorScore(gap=-0.12, gap_se=0.003, loss=0.02, reference_loss=0.07, trivial_loss=0.47)
    above = bound_note("policy-eval", bound, "gru", -0.08)
    assert "gap of -0.12 ± 0.003" in above and "the closest layer, gru, stays 0.04 above it" in above
    below = bound_note("policy-eval", bound, "gru", -0.15)
    assert "gru, is 0.03 below it: the predictor's approximations cost at least about that much" in below


def test_a_leaderboard_with_policy_eval_scores_the_bound_on_the_layers_batch(tmp_path):
    """The bound's cell draws the layers' held-out batch (the same memory margin as the layer's cell)
    and scores the posterior predictor on it as a layer is scored; the table and the summary carry it."""
    cfg = LeaderboardConfig(tasks=("policy-eval",), layers=("gru",), width=8, seeds=2, test_batch=16,
                            train=TrainConfig(steps=10, batch=8, length=16, eval_every=10), posterior_particles=64)
    run = Run(tmp_path, cfg, "tiny", 0, progress=False)
    board = leaderboard.run_leaderboard(cfg, run)
    bound = board.bounds["policy-eval"]
    margin = board.stats["policy-eval"]["gru"].margin  # the layer's cell's L_trivial - L_ref
    assert bound.trivial_loss - bound.reference_loss == pytest.approx(margin, rel=1e-5)
    task = make_task("policy-eval")
    test = task.sample(run.key_for("test", "policy-eval"), 16, 16)
    base = baselines(task, test)
    outputs = posterior_predictor(task, test, run.key_for("posterior-predictor", "policy-eval"), 64)
    assert bound.gap == pytest.approx(float(normalised_gap(task.loss(outputs, test), base.reference, base.trivial,
                                                           test.mask)), rel=1e-5)
    assert bound.gap < 0 and 0 < bound.gap_se < 0.5  # beats the TD fixed point, as it does at the paper's sizes
    with open(run.out_dir / "leaderboard.csv", newline="") as f:
        table = {row["layer"]: row for row in csv.DictReader(f)}
    assert float(table["gru"]["gap above the bound"]) == pytest.approx(board.stats["policy-eval"]["gru"].gap
                                                                      - bound.gap)
    assert float(table["posterior-predictor (bound; se over the batch)"]["se"]) == pytest.approx(bound.gap_se)
    assert "On policy-eval the posterior predictor" in (run.out_dir / "summary.md").read_text()


def test_a_leaderboard_without_a_bound_has_no_bound_column(tmp_path):
    cfg = LeaderboardConfig(tasks=("lgssm",), layers=("gru",), width=8, seeds=2, test_batch=16,
                            train=TrainConfig(steps=10, batch=8, length=16, eval_every=10), posterior_particles=64)
    run = Run(tmp_path, cfg, "tiny", 0, progress=False)
    assert list(leaderboard.sweep_cells(cfg, run)) == ["lgssm.gru"]  # no policy-eval: the particles are ignored
    leaderboard.run_leaderboard(cfg, run)
    header = (run.out_dir / "leaderboard.csv").read_text().splitlines()[0]
    assert "bound" not in header and "posterior" not in (run.out_dir / "summary.md").read_text()


def test_the_paper_profiles_with_policy_eval_score_the_bound_and_quick_does_not():
    profiles = EXPERIMENTS["arena.leaderboard"].profiles
    assert profiles["paper-core-families"].posterior_particles == 4096
    assert profiles["quick"].posterior_particles == 0
    for wrong in (-1, 1, 2.5):
        with pytest.raises(ValueError, match="posterior_particles must be 0 .no bound. or an int >= 2"):
            LeaderboardConfig(posterior_particles=wrong).validate()

"""Each experiment's ``analyse`` (pure: cell results in, numbers out) on hand-made cells."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from memlab.files import stored_key
from memlab.pissm.experiments.cells import (
    EstimatorStats,
    OracleScores,
    RuleScores,
    SelectionScores,
    particle_cell,
    stability_cell,
    start_survival_cell,
    train_and_score,
)
from memlab.pissm.experiments.imputation import ImputationConfig, ImputationRow, imputation_score_cell
from memlab.pissm.experiments.imputation import analyse as analyse_imputation
from memlab.pissm.experiments.modes import ModesConfig, modes_evaluate_cell, modes_rules_cell, modes_train_cell
from memlab.pissm.experiments.modes import analyse as analyse_modes
from memlab.pissm.experiments.modes_reading import oracle_reading
from memlab.pissm.experiments.stability_claims import kept_within_bound
from memlab.pissm.experiments.stability_stats import analyse as analyse_stability
from memlab.pissm.experiments.stability_sweep import StabilityConfig
from memlab.pissm.experiments.table1 import Table1Config, ll_ceiling
from memlab.pissm.experiments.table1 import analyse as analyse_table1
from memlab.pissm.experiments.table1_claims import add_claims as claims_table1
from memlab.store import result_types, typed_result

# what a hand-made cell leaves out: a training record's histories, the figure's arrays (neutral values)
_NEUTRAL = {"best_val": np.nan, "best_epoch": 0, "failed": False, "failed_epoch": -1, "train_loss": [], "val_ll": [],
            "recurrent_norm": [], "radius": [], "ll": np.nan, "filtered_mse": np.nan, "predicted_mse": np.nan,
            "model": b"", "sizes": [], "finite": [], "shares": [], "b": 0, "modes": [], "obs_means": [],
            "obs_covs": [], "eigenvalues": [], "pf_obs_means": [], "pf_obs_covs": [], "path": []}


def _typed(cell, numbers: dict):
    """A hand-made result of ``cell`` as a sweep gives it back (``store.typed_result``): the numbers a test sets,
    neutral values for the other fields of the cell's result types."""
    keys = {stored_key(f) for kind in result_types(cell) for f in dataclasses.fields(kind)}
    return typed_result(cell, {k: v for k, v in _NEUTRAL.items() if k in keys and k not in numbers} | numbers)


def _all(cell, results: dict) -> dict:
    return {name: _typed(cell, numbers) for name, numbers in results.items()}


def _cell(ll, mse=0.01, failed=False):
    return _typed(train_and_score, {"ll": ll, "filtered_mse": mse, "predicted_mse": 2 * mse, "failed": failed})


def test_table1_rows_are_means_over_seeds_beside_the_paper():
    cfg = Table1Config(datasets=("pong", "lorenz"), models=("pissm-gru", "lg", "gru"), seeds=2)
    pf = _typed(particle_cell, {"ll": 4.0, "filtered_mse": 0.001, "predicted_mse": 0.002})
    cells = {"pong-pissm-gru-0": _cell(2.0, 0.01), "pong-pissm-gru-1": _cell(3.0, 0.03, failed=True),
             "pong-lg-0": _cell(1.0), "pong-lg-1": _cell(1.0), "pong-pf": pf,
             "pong-gru-0": _cell(1.5, 0.02), "pong-gru-1": _cell(1.5, 0.02),
             "lorenz-pissm-gru-0": _cell(-4.0), "lorenz-pissm-gru-1": _cell(-4.0), "lorenz-lg-0": _cell(-3.0),
             "lorenz-lg-1": _cell(-5.0), "lorenz-gru-0": _cell(-6.0), "lorenz-gru-1": _cell(-6.0)}
    ceilings = {"pong": ll_ceiling(0.05**2 * np.eye(2)), "lorenz": ll_ceiling(0.5 * np.eye(3))}
    stats = analyse_table1(cfg, ceilings, cells)
    table = stats.table
    assert [(r.dataset, r.model) for r in table] == [("pong", "pissm-gru"), ("pong", "lg"), ("pong", "gru"),
                                                           ("pong", "pf"), ("lorenz", "pissm-gru"), ("lorenz", "lg"),
                                                           ("lorenz", "gru")]
    gru = table[0]
    assert gru.ll_mean == 2.5 and gru.ll_std == 0.5 and gru.seeds == 2 and gru.failed == 1
    assert gru.filtered_mse_mean == pytest.approx(0.02)
    assert gru.filtered_mse_db == pytest.approx(10 * np.log10(0.02), rel=1e-5)
    assert gru.paper_ll == 5.401 and gru.paper_mse == 0.061  # Table 1 / Table 8, Pong
    direct = table[2]  # a direct RNN has no filtered estimate: only its one-step prediction is scored
    assert direct.filtered_mse_mean is None and direct.filtered_mse_db is None
    assert direct.predicted_mse == pytest.approx(0.04)
    pf = table[3]
    assert pf.seeds == 1 and pf.paper_ll is None and not hasattr(pf, "train_seconds")  # times are the runner's
    assert table[5].ll_mean == -4.0 and table[5].ll_std == 1.0 and table[5].paper_ll == 5.434
    assert stats.ll == {"pong": {"pissm-gru": 2.5, "lg": 1.0, "gru": 1.5, "pf": 4.0},
                           "lorenz": {"pissm-gru": -4.0, "lg": -4.0, "gru": -6.0}}
    # the per-step ceiling: Pong 0.05 -> -log(2 pi e 0.0025); Lorenz R = 0.5 I in 3-D; sup of the density -1.72
    assert gru.ll_ceiling == pytest.approx(-np.log(2 * np.pi * np.e * 0.0025))
    assert table[5].ll_ceiling == pytest.approx(-1.5 * np.log(np.pi * np.e))
    assert ll_ceiling(0.5 * np.eye(3), average=False) == pytest.approx(-1.717, abs=1e-3)


# the starts of the first three seeds (stability.START_SEEDS), one step size, one direction each
_STARTS = {f"pissm-gru-start-{s}": {"finite": [[1.0]]} for s in range(3)}


def test_stability_success_rate_and_objective_over_the_successful_runs():
    cfg = StabilityConfig(models=("pissm-gru",), iss_eps=(0.1,), clip_norms=(20.0,), seeds=3)
    cells = {"pissm-gru-iss-0.1-0": {"ll": 5.0, "failed": False}, "pissm-gru-iss-0.1-1": {"ll": 7.0, "failed": False},
             "pissm-gru-iss-0.1-2": {"ll": 6.0, "failed": False},
             "pissm-gru-clip-20-0": {"ll": 4.0, "failed": False}, "pissm-gru-clip-20-1": {"ll": np.nan, "failed": True},
             "pissm-gru-clip-20-2": {"ll": np.nan, "failed": False}}  # finite training, NaN test: not a success
    table = analyse_stability(cfg, _all(stability_cell, cells), _all(start_survival_cell, _STARTS)).table
    iss, clip = table
    assert (iss.scheme, iss.value, iss.runs, iss.success) == ("iss", 0.1, 3, 1.0)
    assert iss.objective_mean == 6.0 and iss.objective_std == pytest.approx(np.std([5.0, 7.0, 6.0]))
    assert (iss.paper_objective, iss.paper_std, iss.paper_success) == (5.401, 0.197, 1.0)
    assert clip.success == pytest.approx(1 / 3) and clip.objective_mean == 4.0 and clip.objective_std == 0.0
    assert clip.paper_objective is None and clip.paper_success == 0.0  # Table 6: no run succeeded


def test_stability_with_no_successful_run_reports_nan():
    cfg = StabilityConfig(models=("pissm-gru",), iss_eps=(0.1,), clip_norms=(5.0,), seeds=1)
    cells = {"pissm-gru-iss-0.1-0": {"ll": 1.0, "failed": False}, "pissm-gru-clip-5-0": {"ll": np.nan, "failed": True}}
    clip = analyse_stability(cfg, _all(stability_cell, cells), _all(start_survival_cell, _STARTS)).table[1]
    assert clip.success == 0.0 and np.isnan(clip.objective_mean) and np.isnan(clip.objective_std)


def test_failed_iss_runs_are_counted_by_what_their_projection_saw():
    """A failed ISS run kept ||U||_inf within its bound (ratio <= 1 at every finite step), left it, or was non-finite
    from the first optimiser step on; the claims' explanation holds only when no run left the bound."""
    nan = float("nan")
    cfg = StabilityConfig(models=("pissm-gru-tracking",), iss_eps=(0.1,), clip_norms=(5.0,), seeds=3)
    run = {"ll": nan, "failed": True, "radius": [1.0, 1.0, nan]}
    cells = {"pissm-gru-tracking-iss-0.1-0": {**run, "recurrent_norm": [0.5, 1.0, nan]},  # within, then non-finite
             "pissm-gru-tracking-iss-0.1-1": {**run, "recurrent_norm": [nan, nan, nan]},  # non-finite from step 1
             "pissm-gru-tracking-iss-0.1-2": {**run, "recurrent_norm": [0.5, 1.5, nan]},  # left the bound
             **{f"pissm-gru-tracking-clip-5-{s}": {"ll": 1.0, "failed": False} for s in range(3)}}
    starts = {f"pissm-gru-tracking-start-{s}": {"finite": [[1.0]]} for s in range(3)}
    stats = analyse_stability(cfg, _all(stability_cell, cells), _all(start_survival_cell, starts))
    assert (stats.iss_failures, stats.iss_failures_within_bound, stats.iss_failures_at_first_step) == (3, 1, 1)
    assert kept_within_bound(stats) == ""
    kept = kept_within_bound(dataclasses.replace(stats, iss_failures=2))
    assert kept.startswith("of the failed ISS runs, 1 kept") and "1 had non-finite parameters" in kept
    assert kept_within_bound(dataclasses.replace(stats, iss_failures=1, iss_failures_at_first_step=0)) == \
        "every failed ISS run (1) kept ||U||_inf within its ISS bound to the end"


def test_modes_statistics_come_from_the_evaluation_and_the_training_record():
    evaluation = {"modes_in_use": 4, "persistence": 0.9, "agreement": 0.7, "test_ll": 2.5, "dominant_share": 0.3,
                  "eigenvalue_at_bounces": -0.8, "eigenvalue_elsewhere": 0.99, "reflecting_at_bounces": 0.6,
                  "reflecting_next_to_bounces": 0.7, "reflecting_elsewhere": 0.05, "shares": [0.3, 0.7], "b": 3}
    trained = {"train-reinforce": {"best_val": 2.6, "model": b"..."}, "train-mixture": {"best_val": 2.7}}
    cfg = ModesConfig(oracle_epochs=0)
    evaluations = _all(modes_evaluate_cell, {"reinforce": evaluation, "mixture": {**evaluation, "test_ll": 2.8}})
    stats = analyse_modes(cfg, _all(modes_train_cell, trained), evaluations)
    assert stats.estimators["reinforce"] == EstimatorStats(
        modes_in_use=4, persistence=0.9, agreement=0.7, test_ll=2.5, best_val=2.6, dominant_share=0.3,
        eigenvalue_at_bounces=-0.8, eigenvalue_elsewhere=0.99, reflecting_at_bounces=0.6,
        reflecting_next_to_bounces=0.7, reflecting_elsewhere=0.05)
    mixture = stats.estimators["mixture"]
    assert mixture.test_ll == 2.8 and mixture.best_val == 2.7
    assert stats.oracles == {} and stats.rule is None and stats.free_flight is None
    oracles = {f"oracle-{e}": {"at_hits": hits, "in_flight": 0.95, "test_ll": 2.0, "val_ll": [1.0], "failed": False}
               for e, hits in (("reinforce", 0.6), ("mixture", 0.1))}
    rules = {"rule": {"at_hits": 0.8, "in_flight": 0.99, "test_ll": 3.0, "process_var": 1e-4},
             "free-flight": {"at_hits": 0.0, "in_flight": 1.0, "test_ll": 2.0, "process_var": 1e-3}}
    stats = analyse_modes(ModesConfig(), {**_all(modes_train_cell, trained), **oracles},
                          {**_all(modes_evaluate_cell, {"reinforce": evaluation, "mixture": evaluation}),
                           "rules": _typed(modes_rules_cell, rules)})
    assert stats.oracles == {"reinforce": OracleScores(**oracles["oracle-reinforce"]),
                             "mixture": OracleScores(**oracles["oracle-mixture"])}
    assert stats.rule == RuleScores(**rules["rule"]) and stats.free_flight == RuleScores(**rules["free-flight"])
    assert stats.oracles["reinforce"].selects() and not stats.oracles["mixture"].selects()


def test_imputation_rows_follow_the_config_and_keep_the_figure_paths():
    cfg = ImputationConfig(models=("observation", "pissm-gru"))
    scored = {"score-pissm-gru": {"imputation_mse": 0.01, "filtered_mse": 0.002, "ll": 2.0, "path": [[0.1, 0.2]]},
              "score-observation": {"imputation_mse": 0.02, "filtered_mse": 0.003, "ll": 1.5, "path": [[0.3, 0.4]]}}
    stats = analyse_imputation(cfg, _all(imputation_score_cell, scored))
    assert stats.table == [ImputationRow("observation", 0.02, 0.003, 1.5), ImputationRow("pissm-gru", 0.01, 0.002, 2.0)]
    assert list(stats.paths) == ["observation", "pissm-gru"]
    np.testing.assert_array_equal(stats.paths["observation"], [[0.3, 0.4]])


class _Claims:
    """A stand-in for ``Run`` that keeps the claims an experiment makes."""

    def __init__(self):
        self.claims, self.explained, self.by = {}, {}, {}

    def claim(self, id, claim, paper, ours, holds, *, missing="", explained="", by="paper"):  # noqa: A002
        self.claims[id] = (ours, holds) if not missing else (ours, holds, missing)
        self.explained[id], self.by[id] = explained, by


def test_table1_claims_read_the_paper_gain_and_the_bounded_gain_separately():
    """The paper's model is eq. (7)'s gain with its fitted start (``-tracking``); the start from the first step's
    factor (``[prior-init]``) and the bounded gain (``[bounded]``) are read apart. A 'best of GRU/LSTM' claim the
    rows run do not satisfy is undecided while the other row is missing."""
    ll = {"pong": {"pissm-gru-tracking": -1.5, "pissm-lstm-tracking": -1.6, "pissm-gru-bounded": 2.5,
                   "pissm-lg": 2.42, "lg": 2.4, "gru": 2.45, "lstm": 2.3, "pissm-gru": -7.0}}
    run = _Claims()
    claims_table1(ll, run)
    assert run.claims["pong-pissm-beats-lg"] == ("-1.500 vs 2.400", False)
    assert run.claims["pong-pissm-beats-lg[prior-init]"] == ("-7.000 vs 2.400", False, "pissm-lstm not run")
    assert run.claims["pong-pissm-beats-lg[bounded]"] == ("2.500 vs 2.400", True)  # the LSTM-bounded row did not run
    assert run.claims["pong-pissm-beats-direct-rnn[bounded]"] == ("2.500 vs 2.450", True)
    assert run.claims["pong-learned-gain-beats-exact-gain"][1] is False
    assert run.claims["pong-learned-gain-beats-exact-gain[bounded]"] == ("2.500 vs 2.420", True)
    assert len(run.claims) == 9
    failed = _Claims()  # every run of the paper's gain failed: its claims fail, they do not vanish
    claims_table1({"pong": {**ll["pong"], "pissm-gru-tracking": np.nan, "pissm-lstm-tracking": np.nan}}, failed)
    assert failed.claims["pong-pissm-beats-lg"] == ("no run trained vs 2.400", False)
    assert "pissm.stability" in failed.explained["pong-learned-gain-beats-exact-gain"]  # the experiment that shows why
    assert not run.explained["pong-pissm-beats-lg"]  # a gain that trained and lost is not explained away
    absent = _Claims()  # neither row run: the paper's claims are undecided, the other gain forms' absent
    claims_table1({"pong": {"lg": 2.4, "gru": 2.45, "pissm-lg": 2.42}}, absent)
    assert absent.claims["pong-pissm-beats-lg"][1:] == (False,
                                                        "pissm-gru-tracking not run, pissm-lstm-tracking not run")
    assert not any("[" in id for id in absent.claims)
    only_lstm = _Claims()  # the direct GRU missing, the LSTM run: the comparison reads the LSTM, not NaN
    claims_table1({"navier-stokes": {"pissm-gru-tracking": 3.0, "pissm-lstm-tracking": 2.0, "lstm": 2.5}}, only_lstm)
    assert only_lstm.claims["navier-stokes-pissm-beats-direct-rnn"] == ("3.000 vs 2.500", True)


def test_table1_one_mode_ablation_is_memlabs_claim_and_reads_both_one_mode_rows():
    level = _Claims()
    claims_table1({"pong": {"pissm-lg-one-mode": 2.30, "lg-one-mode": 2.33, "pissm-lg": 2.47, "lg": 2.79}}, level)
    assert level.claims["pong-one-mode-pissm-lg-level-with-lg"] == ("2.300 vs 2.330", True)
    assert level.by["pong-one-mode-pissm-lg-level-with-lg"] == "memlab"
    apart = _Claims()
    claims_table1({"pong": {"pissm-lg-one-mode": 2.20, "lg-one-mode": 2.33}}, apart)
    assert apart.claims["pong-one-mode-pissm-lg-level-with-lg"] == ("2.200 vs 2.330", False)
    one_row = _Claims()  # without both rows there is nothing to compare
    claims_table1({"pong": {"pissm-lg-one-mode": 2.20, "lg": 2.33}}, one_row)
    assert "pong-one-mode-pissm-lg-level-with-lg" not in one_row.claims


def test_stability_start_survival_is_read_per_model_over_starts_and_directions():
    cfg = StabilityConfig(models=("pissm-gru-tracking", "pissm-gru-bounded"), iss_eps=(0.1,), clip_norms=(20.0,),
                          seeds=2)
    cells = {f"{m}-{k}-{s}": {"ll": 1.0, "failed": False} for m in cfg.models for k in ("iss-0.1", "clip-20")
             for s in range(2)}
    starts = {"pissm-gru-tracking-start-0": {"finite": [[1.0, 1.0], [0.5, 0.0]]},
              "pissm-gru-tracking-start-1": {"finite": [[1.0, 0.9], [0.25, 1.0]]},
              "pissm-gru-bounded-start-0": {"finite": [[1.0, 1.0], [1.0, 1.0]]},
              "pissm-gru-bounded-start-1": {"finite": [[1.0, 1.0], [1.0, 1.0]]}}
    survival = analyse_stability(cfg, _all(stability_cell, cells), _all(start_survival_cell, starts)).start_survival
    assert survival["pissm-gru-tracking"] == [(1.0, 0.9, 1.0), (0.375, 0.0, 1.0)]
    assert survival["pissm-gru-bounded"] == [(1.0, 1.0, 1.0), (1.0, 1.0, 1.0)]


def test_modes_reading_says_whether_the_full_model_learned_reflections():
    """With a selecting oracle, the summary says the full model learned reflecting modes only if its sampled A_z
    reflects at >= 50 % of the hits (counting the step after) and <= 10 % of the other steps."""
    oracle = SelectionScores(at_hits=0.71, in_flight=0.98, test_ll=6.0)
    rule = SelectionScores(at_hits=0.76, in_flight=0.99, test_ll=5.8)
    learned = EstimatorStats(modes_in_use=4, persistence=0.9, agreement=0.5, test_ll=5.0, dominant_share=0.3,
                             eigenvalue_at_bounces=-0.2, eigenvalue_elsewhere=0.9, reflecting_at_bounces=0.32,
                             reflecting_next_to_bounces=0.61, reflecting_elsewhere=0.04, best_val=5.0)
    assert "learns reflecting modes too" in oracle_reading("mixture", oracle, rule, learned)
    for changed in ({"reflecting_next_to_bounces": 0.4}, {"reflecting_elsewhere": 0.2}):
        reading = oracle_reading("mixture", oracle, rule, dataclasses.replace(learned, **changed))
        assert "lies in learning the modes' dynamics" in reading and "learns reflecting modes" not in reading
    stuck = oracle_reading("reinforce", SelectionScores(at_hits=0.0, in_flight=1.0, test_ll=4.4), rule, learned)
    assert "does not find the reflections" in stuck


def test_stability_rows_say_when_failing_runs_went_non_finite_and_how_far_they_got():
    from memlab.pissm.experiments.stability_rows import nonfinite_step, stability_row

    good = _typed(stability_cell, {"ll": 2.0, "failed": False, "best_val": 2.1, "recurrent_norm": [0.5, 0.6, 0.7]})
    late = _typed(stability_cell, {"ll": np.nan, "failed": True, "best_val": 1.0,
                                   "recurrent_norm": [0.5, 0.6, np.nan, np.nan]})
    early = _typed(stability_cell, {"ll": np.nan, "failed": True, "best_val": -np.inf,
                                    "recurrent_norm": [0.5, np.nan]})
    assert (nonfinite_step(good), nonfinite_step(late), nonfinite_step(early)) == (None, 3, 2)
    # failed on a validation value with finite parameters: the NaN padding of the epochs never run is not a step
    padded = _typed(stability_cell, {"failed": True, "failed_epoch": 0, "train_loss": [1.0, np.nan],
                                     "recurrent_norm": [0.5, 0.6, np.nan, np.nan]})
    assert nonfinite_step(padded) is None
    row = stability_row("pissm-gru", "iss", 0.1, [good, late, early])
    assert (row.success, row.nonfinite_step_min, row.nonfinite_step_max) == (1 / 3, 2.0, 3.0)
    assert row.best_val_mean == pytest.approx(1.55)  # the finite best values, the -inf of a run that never scored out

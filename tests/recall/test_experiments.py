"""The recall experiments are registered and run end to end (tiny profile), resumably."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
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
    summary = (tmp_path / name / "summary.md").read_text()
    assert "## Choices the paper leaves open, and where memlab departs from its text" in summary
    if name != "recall.context-limit":  # the curve experiments: band, verdict per curve, mean ± s.e.
        assert "## Achievable band" in summary and (tmp_path / name / "band.csv").exists()
        assert "Below the tag-only risk (recalls content): " in summary
        results = json.loads((tmp_path / name / "results.json").read_text())
        assert any(c["id"].startswith("recalls[") for c in results["claims"])
    if name == "recall.rate":  # tiny: 2 epochs, n in (4, 8) (one step per epoch), and a budget of 4 steps
        steps = {(r["n"], r["step_budget"]): r["adam_steps"] for r in results["results"]["records"]}
        assert steps == {(4, None): 2, (8, None): 2, (4, 4): 4, (8, 4): 4}


# ---------------------------------------------------------------- configs and the pure analyses


def test_every_profile_validates_and_bad_configs_are_rejected():
    from memlab.recall.experiments.compare import CompareConfig
    from memlab.recall.experiments.context import ContextLimitConfig
    from memlab.recall.experiments.rate import RateConfig
    from memlab.recall.experiments.sweep import SweepConfig

    for name in ISSUE_EXPERIMENTS:
        for config in EXPERIMENTS[name].profiles.values():
            config.validate()
    bad = [
        (RateConfig(alphas=(1.0, 0.75)), "strictly increasing"), (RateConfig(alphas=(0.0, 1.0)), "alphas"),
        (RateConfig(sample_sizes=(8,)), "two sizes"), (RateConfig(sample_sizes=(8, 4)), "sample_sizes"),
        (RateConfig(students=("lstm",)), "unknown student"), (RateConfig(num_val=0), "num_val"),
        (RateConfig(context_lengths=(100, 200)), "one T"),
        (SweepConfig(alphas=(1.0,)), "two or more alphas"),
        (CompareConfig(students=("mamba-1",)), "'attention'"), (CompareConfig(alphas=(0.5, 1.0)), "one alpha"),
        (ContextLimitConfig(student="attention"), "unknown student"),
        (ContextLimitConfig(eval_lengths=(10, 100)), "three context lengths"),
        (ContextLimitConfig(eval_lengths=(100, 10, 1000)), "eval_lengths"),
        (ContextLimitConfig(num_mc=1), "num_mc"), (ContextLimitConfig(num_pairs=1), "num_pairs"),
        (ContextLimitConfig(alpha=-1.0), "alpha"),
        (RateConfig(target="quadratic"), "unknown target"), (RateConfig(step_budget=100), "multiple of epochs"),
        (RateConfig(step_budget=0), "steps"), (RateConfig(band_draws=0), "band_draws"),
    ]
    for config, match in bad:
        with pytest.raises(ValueError, match=match):
            config.validate()


def test_curve_cells_share_the_data_streams_and_travel():
    import cloudpickle

    from memlab.keys import key_for
    from memlab.recall.experiments.cells import curve_cells
    from memlab.recall.experiments.compare import CompareConfig

    cfg = CompareConfig(context_lengths=(16,), sample_sizes=(4, 8), num_val=4, epochs=1)
    cells = curve_cells(cfg, lambda *names: key_for(0, *names))
    assert list(cells) == ["mamba-1_alpha=1_T=16_n=4", "mamba-1_alpha=1_T=16_n=8",
                           "attention_alpha=1_T=16_n=4", "attention_alpha=1_T=16_n=8"]
    a, b, c = (cells[name].args for name in list(cells)[:3])
    same = lambda x, y: bool(np.all(np.asarray(jax.random.key_data(x)) == np.asarray(jax.random.key_data(y))))  # noqa: E731
    assert same(a[-3], b[-3]) and same(a[-2], b[-2])  # one validation set and one training pool for every n
    assert not same(a[-1], b[-1]) and same(a[-1], c[-1])  # init per n, shared by the students
    assert a[6] == 8  # the pool holds the largest n: one compiled train serves every cell
    cloudpickle.loads(cloudpickle.dumps(cells["mamba-1_alpha=1_T=16_n=4"]))


def test_step_budget_and_well_posed_profiles():
    """The equal-step and well-posed profiles change only what they say they change; a budget adds one curve per
    student whose cells share the data streams of the default ones and train on TrainConfig(steps=budget)."""
    from memlab.keys import key_for
    from memlab.recall.experiments.cells import curve_cells
    from memlab.recall.train import TrainConfig

    rate = EXPERIMENTS["recall.rate"].profiles
    assert dataclasses.replace(rate["paper-equal-steps"], step_budget=None) == dataclasses.replace(
        rate["paper"], students=("mamba-1",))
    assert rate["paper-equal-steps"].labels() == ["mamba-1", "mamba-1/steps=120"]
    compare = EXPERIMENTS["recall.attention-vs-s6"].profiles
    well_posed = compare["paper-well-posed"]
    assert (well_posed.target, well_posed.students, well_posed.sample_sizes[-1], well_posed.num_seeds) == (
        "linear", ("mamba-1", "attention"), 1024, 3)
    assert compare["quick-well-posed"].sample_sizes[-1] == 1024
    cells = curve_cells(rate["tiny"], lambda *names: key_for(0, *names))
    assert len(cells) == 2 * 2 * 2 and "mamba-1_alpha=1_T=16_n=8_steps=4" in cells
    default, budget = cells["mamba-1_alpha=1_T=16_n=8"].args, cells["mamba-1_alpha=1_T=16_n=8_steps=4"].args
    assert default[3] == TrainConfig(epochs=2) and budget[3] == TrainConfig(epochs=2, steps=4)
    assert default[:3] == budget[:3] and default[4:7] == budget[4:7]  # same task, n, student, sizes
    same = lambda x, y: bool(np.all(np.asarray(jax.random.key_data(x)) == np.asarray(jax.random.key_data(y))))  # noqa: E731
    assert all(same(a, b) for a, b in zip(default[-3:], budget[-3:]))  # same validation set, pools, init
    tiny_compare = curve_cells(compare["tiny"], lambda *names: key_for(0, *names))
    assert all(c.args[0].target == "linear" for c in tiny_compare.values())


def test_report_lines_give_mean_and_standard_error_and_the_first_n_below_tag_only(training_record):
    from memlab.recall.band import AchievableBand
    from memlab.recall.experiments.cells import CurveConfig
    from memlab.recall.experiments.report import band_rows, budget_line, tag_only_lines
    from memlab.recall.metrics import learning_curves, tag_only_comparison

    rs = [training_record("mamba-1", 1.0, 100, n, m, stderr=e, val_tag_only=0.3, budget=b)  # the budget curve never
          for b in (None, 120) for n, m, e in ((4, 0.5, 0.01), (16, 0.35 if b else 0.25, 0.01))]  # beats 0.3
    comparisons = tag_only_comparison(rs)
    keys = list(comparisons)
    lines = tag_only_lines(comparisons, keys, lambda k: k[0]).splitlines()
    assert lines[0] == ("- mamba-1: n = 4: 0.5 ± 0.01 / 0.3 = 1.667; n = 16: 0.25 ± 0.01 / 0.3 = 0.833 — below the "
                        "tag-only risk (by > 2 s.e.) from n = 16")
    assert lines[1].endswith("never below the tag-only risk")
    line = budget_line(CurveConfig(step_budget=120), learning_curves(rs), keys, lambda k: k[0])
    C = [learning_curves(rs)[k].fit.C for k in keys]
    assert line.endswith(f"mamba-1: {C[0]:.2f} → {C[1]:.2f}.\n\n") and budget_line(CurveConfig(), {}, keys, str) == ""
    band = {(1.0, 100): AchievableBand(tag_only=0.31, context=0.28, context_stderr=0.003, measure=0.17,
                                       measure_stderr=0.002, floor=0.077)}
    assert band_rows(band, rs) == [[1.0, 100, "0.31", "0.3", "0.28 ± 0.003", "0.17 ± 0.002", "0.077"]]


def test_rate_analysis(training_record):
    from memlab.recall.experiments.rate import RateConfig, analyse

    cfg = RateConfig(context_lengths=(100,), sample_sizes=(4, 16, 64))
    mse = {0.75: [0.8, 0.6, 0.62], 1.0: [0.5, 0.55, 0.4]}  # 0.6 -> 0.62 is +3.3 %; 0.5 -> 0.55 is +10 %
    cells = {f"{a}-{n}": training_record("mamba-1", a, 100, n, m, mean=2.0 if a == 0.75 else 0.9)
             for a in (0.75, 1.0) for n, m in zip((4, 16, 64), mse[a])}
    stats = analyse(cfg, cells)
    assert stats.keys == [("mamba-1", 0.75, 100), ("mamba-1", 1.0, 100)]
    assert stats.monotone == [True, False]
    np.testing.assert_array_equal(stats.smoother["mamba-1"].raw, [True, True, True])
    np.testing.assert_array_equal(stats.smoother["mamba-1"].relative,
                                  [0.5 / 0.9 < 0.4, 0.55 / 0.9 < 0.3, 0.4 / 0.9 < 0.31])
    assert stats.curves[("mamba-1", 0.75, 100)].fit.C > 0
    assert stats.tag_only[("mamba-1", 1.0, 100)].first_n == 64  # 0.4 < the tag-only risk 0.5
    assert stats.tag_only[("mamba-1", 0.75, 100)].first_n is None


def test_rate_analysis_with_two_students_keeps_their_curves_apart(training_record):
    from memlab.recall.experiments.rate import RateConfig, analyse

    cfg = RateConfig(context_lengths=(100,), sample_sizes=(4, 16), students=("mamba-1", "mamba-1-residual"))
    cells = {f"{s}-{a}-{n}": training_record(s, a, 100, n, m * (1 if s == "mamba-1" else 2) * (1 if a == 1.0 else 1.5))
             for s in cfg.students for a in cfg.alphas for n, m in zip((4, 16), (0.6, 0.4))}
    stats = analyse(cfg, cells)
    assert stats.keys == [(s, a, 100) for s in cfg.students for a in (0.75, 1.0)]
    assert stats.curves[("mamba-1-residual", 0.75, 100)].mse.tolist() == pytest.approx([1.8, 1.2])
    assert set(stats.smoother) == set(cfg.students) and all(b.raw.all() for b in stats.smoother.values())


def test_sweep_analysis(training_record):
    from memlab.recall.experiments.sweep import SweepConfig, analyse

    cfg = SweepConfig(alphas=(0.5, 2.0), context_lengths=(25, 50), sample_sizes=(4, 16, 64))
    n = np.array([4, 16, 64])
    C = {(0.5, 25): 2.0, (0.5, 50): 2.3, (2.0, 25): 0.5, (2.0, 50): 0.52}
    A = {0.5: 1.0, 2.0: -0.7}  # log risk A - C (log n)^(alpha/(alpha+1)), eq. (1)
    risk = {(a, T): np.exp(A[a] - C[a, T] * np.log(n) ** (a / (a + 1))) for a, T in C}
    cells = {f"{a}-{T}-{k}": training_record("mamba-2", a, T, int(k), float(m)) for a in (0.5, 2.0) for T in (25, 50)
             for k, m in zip(n, risk[a, T])}
    stats = analyse(cfg, cells)
    np.testing.assert_allclose(stats.C, [[2.0, 2.3], [0.5, 0.52]])
    np.testing.assert_allclose(stats.spread, [0.3, 0.02], atol=1e-9)
    np.testing.assert_allclose(stats.allowed, [0.215, 0.051])  # max(10 % of mean |C|, 0.05)
    assert stats.monotone == [True] * 4
    # log risk at T = 25, n = 4: alpha = 2: -0.7 - 0.5 (log 4)^(2/3) = -1.32 < alpha = 0.5: 1 - 2 (log 4)^(1/3) = -1.23;
    # at n = 16 and 64, and everywhere at T = 50 (C = 2.3 for alpha = 0.5), the smoother alpha has the higher risk
    np.testing.assert_array_equal(stats.ordered, [[True, False, False], [False, False, False]])


def test_compare_analysis(training_record):
    from memlab.recall.experiments.compare import CompareConfig, analyse

    cfg = CompareConfig(context_lengths=(100,), sample_sizes=(4, 16, 64))
    mse = {"mamba-1": [0.6, 0.5, 0.45], "attention": [0.6, 0.45, 0.3]}
    cells = {f"{s}-{n}": training_record(s, 1.0, 100, n, m, tag_only=0.4)
             for s in mse for n, m in zip((4, 16, 64), mse[s])}
    stats = analyse(cfg, cells)
    assert stats.learns == [False, True]  # mamba-1 ends above the tag-only risk 0.4
    assert stats.ratio == pytest.approx(1.5)


def test_context_limit_analysis(training_record):
    from types import SimpleNamespace

    from memlab.recall.experiments.context import ContextLimitConfig, Coupling, FiniteContext, StepBounds, analyse

    cfg = ContextLimitConfig(eval_lengths=(10, 100, 1000), num_pairs=2)
    cells = {"T=10": FiniteContext(mean=[1.0, 2.0], stderr=[0.1, 0.1]),
             "T=100": FiniteContext(mean=[1.04, 2.5], stderr=[0.01, 0.1]),
             "T=1000": FiniteContext(mean=[1.02, 2.0], stderr=[0.01, 0.1]),
             "coupling": Coupling(distance=(0.5 * 0.9 ** np.arange(1, 101)).tolist()),
             "per-step-bound": StepBounds(r=[0.99, 0.995])}
    pairs = SimpleNamespace(y_clean=np.array([1.0, 2.1]), query=np.array([[1.0], [-1.0]]))
    stats = analyse(cfg, training_record("mamba-2", 1.0, 5000, 64, 0.3), cells, pairs)
    np.testing.assert_allclose(stats.dev, [[0.02, 0.0], [0.02, 0.5], [0.0, 0.0]], atol=1e-12)
    # at T = 100: pair 0 deviates 0.02 <= 2 sqrt(0.01² + 0.01²) = 0.028; pair 1 deviates 0.5 > 2 sqrt(2) 0.1
    np.testing.assert_array_equal(stats.converged, [True, False])
    assert stats.r_eff == pytest.approx(0.9) and stats.bounds == [0.99, 0.995]
    np.testing.assert_array_equal(stats.query_tag, [1.0, -1.0])


def test_rate_results_keep_one_fit_per_student_and_alpha(tmp_path):
    """With two students, results.json has a fit for each (student, alpha), none replacing another."""
    from memlab.runner import run_experiment

    exp = EXPERIMENTS["recall.rate"]
    cfg = dataclasses.replace(exp.profiles["tiny"], students=("mamba-1", "mamba-1-residual"))
    exp = dataclasses.replace(exp, profiles={**exp.profiles, "tiny": cfg})
    out = run_experiment(exp, "tiny", out_dir=tmp_path / "o", progress=False)
    fits = json.loads((out / "results.json").read_text())["results"]["fits"]
    assert set(fits) == {f"{label} alpha={a:g}" for label in cfg.labels() for a in cfg.alphas}
    assert len(fits) == len(cfg.labels()) * len(cfg.alphas) == 8  # two students, two schedules, two alphas

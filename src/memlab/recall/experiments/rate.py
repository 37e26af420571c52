"""``recall.rate`` -- App. A.2, Fig. 1: best validation MSE of the one-block S6 student(s) vs n for alpha in
{0.75, 1}, the rate fit of eq. (1) (``rate.fit_rate``) per curve, and whether the student ever beats the tag-only
predictor on its validation set (recalls content). Profiles ``paper-equal-steps`` / ``quick-equal-steps`` fit each
curve also on an equal budget of 120 Adam steps at every n, beside A.1's schedule (how much of C is step count).

The grid and its cells are ``cells.py``, its tables and figure panel ``report.py`` (shared with
``recall.sweep`` and ``recall.attention-vs-s6``).
Besides the paper's numbers, the tables carry the exact risks of the mean and the tag-only predictors.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from memlab import plots
from memlab.compile_cache import LEVEL_ONLY
from memlab.files import summary_text
from memlab.recall.experiments.cells import CurveConfig, CurveStats, bands, curve_cells, schedule
from memlab.recall.experiments.report import beats_tag_only, curve_color, n_ticks, plot_curves, recall_claims, report
from memlab.recall.metrics import is_monotone, learning_curves, tag_only_comparison
from memlab.recall.runs import STUDENTS, TrainingRecord
from memlab.runner import Experiment, Run

PAPER_C = {0.75: 1.81, 1.0: 1.28}  # App. A.2, Fig. 1 (T = 5000, one-block student)

SUMMARY = summary_text(__package__, "rate")


@dataclasses.dataclass(frozen=True)
class RateConfig(CurveConfig):
    """One T; one curve per (student, alpha) (defaults: the paper's sizes, its one-block student)."""

    def validate(self) -> None:
        super().validate()
        if len(self.context_lengths) != 1:
            raise ValueError(f"recall.rate draws one T; got context_lengths {self.context_lengths!r}")


@dataclasses.dataclass(frozen=True)
class SmootherBelow:
    """Where the smoothest alpha's curve of one student lies below its roughest, per n (k,) bool: ``raw`` by MSE,
    ``relative`` by MSE / the risk of the mean predictor (which removes the target scale)."""

    raw: np.ndarray
    relative: np.ndarray


@dataclasses.dataclass(frozen=True)
class RateStats(CurveStats):
    """The rate analysis: ``CurveStats`` (records, curves, tag_only) and

    keys: the curves in figure order, (curve label, alpha, T) for every label, then every alpha.
    monotone: (len(keys),) bool, whether each curve decreases in n (``metrics.is_monotone``: at most +5 % a step).
    smoother: curve label -> ``SmootherBelow`` (smoothest vs roughest alpha); empty with one alpha.
    """

    keys: list[tuple[str, float, int]]
    monotone: list[bool]
    smoother: dict[str, SmootherBelow]


def run_rate(cfg: RateConfig, run: Run) -> dict:
    """Sweep the grid -> curves and their fits -> rate.png, claims, risk.csv, fits.csv, summary.md."""
    cells = run.sweep(curve_cells(cfg, run.key_for), "train students")
    stats = analyse(cfg, cells)
    _figures(cfg, stats, run)
    _claims(stats, run)
    run.write_summary(_summary(cfg, stats, run))
    return _results(stats)


def analyse(cfg: RateConfig, cells: dict[str, TrainingRecord]) -> RateStats:
    """Cell records -> one learning curve per (student, alpha), the monotonicity rule and the tag-only comparison
    per curve and, per student with two or more alphas, where the smoothest curve lies below the roughest (raw and
    relative to the mean predictor)."""
    records = list(cells.values())
    curves = learning_curves(records)
    keys = [(label, float(a), cfg.context_lengths[0]) for label in cfg.labels() for a in cfg.alphas]
    smoother = {}
    if len(cfg.alphas) >= 2:
        for label in cfg.labels():
            rough, smooth = (curves[(label, float(a), cfg.context_lengths[0])] for a in (cfg.alphas[0], cfg.alphas[-1]))
            smoother[label] = SmootherBelow(smooth.mse < rough.mse,  # alphas ascend (validate)
                                            smooth.mse / smooth.baseline_mean < rough.mse / rough.baseline_mean)
    return RateStats(records, curves, tag_only_comparison(records), keys,
                     [is_monotone(curves[k].mse) for k in keys], smoother)


def _results(stats: RateStats) -> dict:
    """results.json's "results": the cell records and the eq. (1) fit per curve, keyed '<student> alpha=<a>' (keyed
    by alpha alone, a second student's fits replaced the first's)."""
    return {"records": stats.records,
            "fits": {f"{k[0]} alpha={k[1]:g}": stats.curves[k].fit._asdict() for k in stats.keys}}


def _figures(cfg: RateConfig, stats: RateStats, run: Run) -> None:
    curves, keys = stats.curves, stats.keys
    fig, axes = plots.figure(1, 2, width=9.0, height=4.4)
    handles = plot_curves(axes[0], curves, keys, lambda k, c: f"{_name(k, keys)} (C = {c.fit.C:.2f})", bands(cfg),
                          paper_c=PAPER_C, paired=stats.tag_only)
    axes[0].set_title(f"T = {keys[0][2]}: best validation MSE", fontsize=9)
    for k in keys:
        c, color = curves[k], curve_color(k, keys)
        budget = "/steps=" in k[0]  # as in plot_curves: open squares
        axes[1].plot(c.n, c.mse / c.baseline_mean, "s-" if budget else "o-", mfc="none" if budget else color,
                     color=color)
        axes[1].axhline(c.baseline_tag_only / c.baseline_mean, color=color, ls=":", lw=0.8)
    axes[1].set(xscale="log", yscale="log", xlabel="training examples n", ylabel="MSE / risk of the mean predictor",
                title="relative to the target scale (dotted: tag-only risk)")
    axes[1].title.set_fontsize(9)
    n_ticks(axes[1], curves[keys[0]].n)
    # one legend for both panels, below them: the curves are the same, and inside a panel it covered data
    fig.legend(handles=handles.curves + handles.styles, loc="outside lower center", ncols=3, fontsize=7)
    fig.suptitle("Fig. 1 (paper, App. A.2): risk vs n; paper C ≈ "
                 + ", ".join(f"{c} (α = {a:g})" for a, c in PAPER_C.items()), fontsize=10)
    run.save_figure(fig, "rate.png")


def _name(key: tuple, keys: list[tuple]) -> str:
    """'α = 0.75', or 'mamba-1, α = 0.75' when the run has several students."""
    alpha = f"α = {key[1]:g}"
    return alpha if len({k[0] for k in keys}) == 1 else f"{key[0]}, {alpha}"


def _tag(key: tuple, several: bool) -> str:
    """Claim id suffix: 'alpha=0.75', or 'student=mamba-1,alpha=0.75' when the run has several curves per alpha."""
    return f"student={key[0]},alpha={key[1]:g}" if several else f"alpha={key[1]:g}"


def _claims(stats: RateStats, run: Run) -> None:
    curves, keys = stats.curves, stats.keys
    several = len({k[0] for k in keys}) > 1
    for k, monotone in zip(keys, stats.monotone):
        c, tag = curves[k], _tag(k, several)
        rises = [f"{a:.3g} → {b:.3g} at n = {m:g} → {n:g}" for a, b, m, n in zip(c.mse, c.mse[1:], c.n, c.n[1:])
                 if b > a]
        slack = (f"; holds only through the rule's 5% slack, which stands for the seed-to-seed spread of the best "
                 f"validation MSE: it rises {', '.join(rises)}") if monotone and rises else ""
        run.claim(f"risk-decreases[{tag}]", f"validation MSE decreases monotonically in n ({_name(k, keys)}); "
                  "rule: each step in n raises it by at most 5% (the seed spread)", "App. A.2, Fig. 1",
                  " → ".join(f"{m:.3g}" for m in c.mse) + slack, monotone)
        paper = f"C ≈ {PAPER_C[k[1]]}" if k[1] in PAPER_C else "C > 0"
        run.claim(f"rate-fit[{tag}]", f"log L(n) = A − C (log n)^(α/(α+1)) with C > 0 ({_name(k, keys)}); rule: "
                  "fitted C > 0", f"App. A.2 ({paper})", f"C = {c.fit.C:.2f}, R² = {c.fit.r_squared:.2f}", c.fit.C > 0)
    recall_claims(run, stats.tag_only, keys, lambda k: _tag(k, several), lambda k: _name(k, keys))
    for kind, order in stats.smoother.items():
        rough, smooth = (f"{a:g}" for a in (keys[0][1], keys[-1][1]))
        below, relative = order.raw, order.relative
        suffix = f"[{kind}]" if several else ""
        run.claim(f"smoother-is-easier{suffix}", f"the α = {smooth} curve lies below α = {rough} at every n; rule: "
                  "raw MSE lower at every n", "App. A.2, Fig. 1", f"lower at {int(below.sum())}/{len(below)} n",
                  bool(below.all()))
        run.claim(f"smoother-is-easier-relative{suffix}", "same, after dividing each curve by its mean-predictor risk "
                  "(removes the target scale); rule: relative MSE lower at every n", "App. A.2 (our normalisation)",
                  f"lower at {int(relative.sum())}/{len(relative)} n", bool(relative.all()))


def _summary(cfg: RateConfig, stats: RateStats, run: Run) -> str:
    keys = stats.keys
    return SUMMARY.format(num_val=cfg.num_val, T=cfg.context_lengths[0], schedule=schedule(cfg),
                          num_seeds=cfg.num_seeds, target=cfg.target,
                          students="; ".join(f"`{s}` = {STUDENTS[s]}" for s in cfg.students),
                          verdict="; ".join(f"{_name(k, keys)}: {beats_tag_only(stats.tag_only[k])}" for k in keys),
                          report=report(cfg, stats, keys, lambda k: PAPER_C.get(k[1], "—"),
                                        lambda k: _name(k, keys), run))


EXPERIMENTS = [
    Experiment(
        "recall.rate", "App. A.2, Fig. 1", "mamba-measure-valued-recall",
        "validation MSE of the one-block S6 student vs n for α ∈ {0.75, 1}, rate fit of eq. (1)",
        # quick (budget: make reproduce in 10 min on 2 cores): T = 100 (was 200) and 64 validation examples (was
        # 300): no claim reads T, and the validation set is shared by every n and (same Gaussian coefficients) by
        # both alphas, so the claims' comparisons are paired; 64 = the pool size: one compiled sampler serves both.
        # The n grid, both alphas and the 30 epochs stay: every claim reads every n, and the small-n runs are still
        # improving at epoch 30.
        {"quick": RateConfig(context_lengths=(100,), num_val=64),
         # paper: the paper's student and memlab's former residual one, 3 seeds per cell (the paper ran one) so
         # that every point has a standard error
         "paper": RateConfig(students=("mamba-1", "mamba-1-residual"), num_seeds=3),
         # paper-equal-steps: the paper's student on A.1's schedule and, beside it, on an equal budget of 120 Adam
         # steps at every n (n = 64's count under A.1's 30 epochs: its run is unchanged), 3 seeds
         "paper-equal-steps": RateConfig(num_seeds=3, step_budget=120),
         # paper-core: the paper's (literal) student alone, 2 alphas x 5 n x 3 seeds: the paper
         # profile's mamba-1 cells (same names, keys and arguments), which settle the rate claims
         "paper-core": RateConfig(num_seeds=3),
         # quick-equal-steps: the quick sizes with the same budget and two seeds, so that the recalls[...] rule
         # (2 s.e.) has a standard error
         "quick-equal-steps": RateConfig(context_lengths=(100,), num_val=64, step_budget=120, num_seeds=2),
         # tiny: two seeds (the s.e. path) and a budget of 4 steps in 2 rounds (the step-budget path)
         "tiny": RateConfig(context_lengths=(16,), sample_sizes=(4, 8), num_val=16, epochs=2, num_seeds=2,
                            step_budget=4, band_draws=2000)},
        run_rate, quick_flags=LEVEL_ONLY),
]

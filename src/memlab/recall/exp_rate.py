"""``recall.rate`` -- App. A.2, Fig. 1: best validation MSE of the one-block S6 student vs n for alpha in
{0.75, 1}, and the rate fit of eq. (1) (``rate.fit_rate``) per curve.

The grid, its cells and its tables are ``curves.py`` (shared with ``recall.sweep`` and ``recall.attention-vs-s6``).
Besides the paper's numbers, the tables carry the exact risks of the mean and the tag-only predictors.
"""

from __future__ import annotations

import dataclasses

from memlab import plots
from memlab.recall.curves import (
    CHOICES,
    FIT_FORMAT,
    FIT_HEADER,
    RISK_HEADER,
    CurveConfig,
    curve_cells,
    fit_rows,
    n_ticks,
    plot_curves,
    risk_rows,
)
from memlab.recall.metrics import is_monotone, learning_curves
from memlab.recall.runs import STUDENTS
from memlab.runner import Experiment, Run

PAPER_C = {0.75: 1.81, 1.0: 1.28}  # App. A.2, Fig. 1 (T = 5000, one-block student)

SUMMARY = """# recall.rate — Fig. 1

Best validation MSE ({num_val} held-out examples) of the {student} student vs the number of training contexts n, \
T = {T}, {epochs} epochs, {num_seeds} seed(s) per cell.

![rate](rate.png)

{fit_table}
Paper (App. A.2): C ≈ 1.81 (α = 0.75) and 1.28 (α = 1.0); the α = 1.0 curve lies below α = 0.75 at every n. \
Claims and their rules are in results.json.

{choices}"""


@dataclasses.dataclass(frozen=True)
class RateConfig(CurveConfig):
    """One student and one T; the alphas are the curves of Fig. 1 (defaults: the paper's sizes)."""

    def validate(self) -> None:
        super().validate()
        if len(self.students) != 1 or len(self.context_lengths) != 1:
            raise ValueError(f"recall.rate draws one student at one T; got students {self.students!r}, "
                             f"context_lengths {self.context_lengths!r}")


def run_rate(cfg: RateConfig, run: Run) -> dict:
    """Sweep the grid -> curves and their fits -> rate.png, claims, risk.csv, fits.csv, summary.md."""
    cells = run.sweep(curve_cells(cfg, run.key_for), "train students")
    stats = _analyse(cfg, cells)
    _figures(cfg, stats, run)
    _claims(stats, run)
    run.write_summary(_summary(cfg, stats, run))
    return {"records": stats["records"], "fits": {f"{k[1]:g}": stats["curves"][k].fit._asdict() for k in stats["keys"]}}


def _analyse(cfg: RateConfig, cells: dict) -> dict:
    """Cell records -> one learning curve per alpha (ascending), the monotonicity rule per curve and, with two or
    more alphas, where the smoothest curve lies below the roughest (raw and relative to the mean predictor)."""
    records = list(cells.values())
    curves = learning_curves(records)
    keys = [(cfg.students[0], float(a), cfg.context_lengths[0]) for a in cfg.alphas]
    stats = {"records": records, "curves": curves, "keys": keys,
             "monotone": [is_monotone(curves[k].mse) for k in keys]}
    if len(keys) >= 2:
        rough, smooth = curves[keys[0]], curves[keys[-1]]  # alphas ascend (validate)
        stats["below"] = smooth.mse < rough.mse
        stats["below_relative"] = smooth.mse / smooth.baseline_mean < rough.mse / rough.baseline_mean
    return stats


def _figures(cfg: RateConfig, stats: dict, run: Run) -> None:
    curves, keys = stats["curves"], stats["keys"]
    fig, axes = plots.figure(1, 2, width=9.0, height=3.6)
    plot_curves(axes[0], curves, keys, lambda k, c: f"α = {k[1]:g} (C = {c.fit.C:.2f})")
    axes[0].set_title(f"{keys[0][0]}, T = {keys[0][2]}: solid measured, dashed fit of eq. (1),\ndotted tag-only risk",
                      fontsize=8)
    for i, k in enumerate(keys):
        c = curves[k]
        axes[1].plot(c.n, c.mse / c.baseline_mean, "o-", color=f"C{i}", label=f"α = {k[1]:g}")
        axes[1].axhline(c.baseline_tag_only / c.baseline_mean, color=f"C{i}", ls=":", lw=0.8)
    axes[1].set(xscale="log", yscale="log", xlabel="training examples n", ylabel="MSE / risk of the mean predictor",
                title="relative to the target scale")
    n_ticks(axes[1], curves[keys[0]].n)
    for ax in axes:
        ax.legend()
    run.save_figure(fig, "rate.png")


def _claims(stats: dict, run: Run) -> None:
    curves, keys = stats["curves"], stats["keys"]
    for k, monotone in zip(keys, stats["monotone"]):
        c, alpha = curves[k], f"{k[1]:g}"
        run.claim(f"risk-decreases[alpha={alpha}]", f"validation MSE decreases monotonically in n (α = {alpha}); "
                  "rule: each step in n raises it by at most 5%", "App. A.2, Fig. 1",
                  " → ".join(f"{m:.3g}" for m in c.mse), monotone)
        paper = f"C ≈ {PAPER_C[k[1]]}" if k[1] in PAPER_C else "C > 0"
        run.claim(f"rate-fit[alpha={alpha}]", f"log L(n) = A − C (log n)^(α/(α+1)) with C > 0 (α = {alpha}); rule: "
                  "fitted C > 0", f"App. A.2 ({paper})", f"C = {c.fit.C:.2f}, R² = {c.fit.r_squared:.2f}", c.fit.C > 0)
    if "below" in stats:
        rough, smooth = f"{keys[0][1]:g}", f"{keys[-1][1]:g}"
        below, relative = stats["below"], stats["below_relative"]
        run.claim("smoother-is-easier", f"the α = {smooth} curve lies below α = {rough} at every n; rule: raw MSE "
                  "lower at every n", "App. A.2, Fig. 1", f"lower at {int(below.sum())}/{len(below)} n",
                  bool(below.all()))
        run.claim("smoother-is-easier-relative", "same, after dividing each curve by its mean-predictor risk (removes "
                  "the target scale); rule: relative MSE lower at every n", "App. A.2 (our normalisation)",
                  f"lower at {int(relative.sum())}/{len(relative)} n", bool(relative.all()))


def _summary(cfg: RateConfig, stats: dict, run: Run) -> str:
    run.save_csv("risk.csv", RISK_HEADER, risk_rows(stats["records"]))
    rows = fit_rows(stats["curves"], stats["keys"], lambda k: PAPER_C.get(k[1], "—"))
    return SUMMARY.format(num_val=cfg.num_val, student=STUDENTS[cfg.students[0]], T=cfg.context_lengths[0],
                          epochs=cfg.epochs, num_seeds=cfg.num_seeds, choices=CHOICES,
                          fit_table=run.save_table("fits.csv", FIT_HEADER, rows, FIT_FORMAT))


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
         "paper": RateConfig(),
         "tiny": RateConfig(context_lengths=(16,), sample_sizes=(4, 8), num_val=16, epochs=2)},
        run_rate),
]

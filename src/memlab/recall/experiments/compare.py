"""``recall.attention-vs-s6`` -- section 7: the S6 student beside the softmax-attention comparator of Kawata & Suzuki
(2026), trained on the same data (same validation set, training pools and per-n keys) over the same n grid.
Profiles ``paper-well-posed`` / ``quick-well-posed`` run both on the well-posed linear target (``task.py``) with n up
to 1024, to see whether and from which n each beats the tag-only risk when recall is worth something.

The grid and its cells are ``cells.py``, its tables and figure panel ``report.py`` (shared with
``recall.rate`` and ``recall.sweep``).
"""

from __future__ import annotations

import dataclasses

from memlab import plots
from memlab.compile_cache import LEVEL_ONLY
from memlab.files import summary_text
from memlab.recall.experiments.cells import CurveConfig, CurveStats, bands, curve_cells, schedule
from memlab.recall.experiments.report import beats_tag_only, plot_curves, recall_claims, report
from memlab.recall.metrics import learning_curves, tag_only_comparison
from memlab.recall.runs import TrainingRecord
from memlab.runner import Experiment, Run

SUMMARY = summary_text(__package__, "compare")


@dataclasses.dataclass(frozen=True)
class CompareConfig(CurveConfig):
    """Students side by side at one alpha and one T (defaults: Fig. 1's sizes at alpha = 1)."""

    alphas: tuple[float, ...] = (1.0,)
    students: tuple[str, ...] = ("mamba-1", "attention")

    def validate(self) -> None:
        super().validate()
        if len(self.alphas) != 1 or len(self.context_lengths) != 1 or "attention" not in self.students \
                or not any(s.startswith("mamba") for s in self.students):
            raise ValueError(f"recall.attention-vs-s6 compares an S6 student with 'attention' at one alpha and one T; "
                             f"got students {self.students!r}, alphas {self.alphas!r}, "
                             f"context_lengths {self.context_lengths!r}")


@dataclasses.dataclass(frozen=True)
class CompareStats(CurveStats):
    """The comparison: ``CurveStats`` (records, curves, tag_only) and

    keys: one curve per student label, (curve label, alpha, T), in the config's order.
    learns: (len(keys),) bool, fitted C > 0 and the MSE at the largest n below the tag-only risk.
    ratio: MSE of the first S6 student / MSE of attention, at the largest n.
    """

    keys: list[tuple[str, float, int]]
    learns: list[bool]
    ratio: float


def run_compare(cfg: CompareConfig, run: Run) -> dict:
    """Sweep the grid -> one curve per student -> attention_vs_s6.png, claims, risk.csv, fits.csv, summary.md."""
    cells = run.sweep(curve_cells(cfg, run.key_for), "train students")
    stats = analyse(cfg, cells)
    _figures(cfg, stats, run)
    _claims(stats, run)
    run.write_summary(_summary(cfg, stats, run))
    return _results(stats)


def analyse(cfg: CompareConfig, cells: dict[str, TrainingRecord]) -> CompareStats:
    """Cell records -> one curve per student; whether each learns (C > 0 and the MSE at the largest n below the
    tag-only risk); the MSE ratio of the first S6 student to attention at the largest n."""
    records = list(cells.values())
    curves = learning_curves(records)
    keys = [(label, float(cfg.alphas[0]), cfg.context_lengths[0]) for label in cfg.labels()]
    mamba = next(k for k in keys if k[0].startswith("mamba"))
    attention = curves[("attention", *keys[0][1:])]
    return CompareStats(records, curves, tag_only_comparison(records), keys,
                        [bool(curves[k].fit.C > 0 and curves[k].mse[-1] < curves[k].baseline_tag_only) for k in keys],
                        float(curves[mamba].mse[-1] / attention.mse[-1]))


def _results(stats: CompareStats) -> dict:
    """results.json's "results": the cell records (the curves' statistics are in the claims and tables)."""
    return {"records": stats.records}


def _figures(cfg: CompareConfig, stats: CompareStats, run: Run) -> None:
    curves, keys = stats.curves, stats.keys
    fig, ax = plots.figure(1, 1, width=7.0, height=3.6)
    handles = plot_curves(ax, curves, keys, lambda k, c: f"{k[0]} (C = {c.fit.C:.2f})", bands(cfg))
    ax.set_title(f"§7 (paper: S6 reaches attention's rate; no numbers given)\nα = {keys[0][1]:g}, T = {keys[0][2]}, "
                 f"target {cfg.target}: same data, same training", fontsize=9)
    plots.legend_outside(ax, handles=handles.curves + handles.styles, fontsize=7)
    run.save_figure(fig, "attention_vs_s6.png")


def _claims(stats: CompareStats, run: Run) -> None:
    for k, learns in zip(stats.keys, stats.learns):
        c = stats.curves[k]
        run.claim(f"learns[{k[0]}]", f"{k[0]} learns at the rate of eq. (1); rule: fitted C > 0 and the MSE at the "
                  "largest n is below the tag-only risk (it recalls content)", "Thm. 6.1 / Kawata & Suzuki",
                  f"C = {c.fit.C:.2f}; MSE(n={int(c.n[-1])}) = {c.mse[-1]:.3g} vs tag-only {c.baseline_tag_only:.3g}",
                  learns)
    recall_claims(run, stats.tag_only, stats.keys, lambda k: k[0], lambda k: k[0])
    run.claim("s6-matches-attention", "the S6 student reaches the attention comparator's risk (§7: the same "
              "statistical rate without attention); rule: MSE ratio S6/attention at the largest n ≤ 1.25",
              "§7", f"ratio {stats.ratio:.2f}", stats.ratio <= 1.25)


def _summary(cfg: CompareConfig, stats: CompareStats, run: Run) -> str:
    keys = stats.keys
    return SUMMARY.format(alpha=cfg.alphas[0], T=cfg.context_lengths[0], target=cfg.target,
                          n_max=max(cfg.sample_sizes), schedule=schedule(cfg), num_seeds=cfg.num_seeds,
                          verdict="; ".join(f"{k[0]}: {beats_tag_only(stats.tag_only[k])}" for k in keys),
                          report=report(cfg, stats, keys, lambda k: "—", lambda k: k[0], run))


EXPERIMENTS = [
    Experiment(
        "recall.attention-vs-s6", "§7 vs Kawata & Suzuki", "mamba-measure-valued-recall",
        "the one-block S6 student beside a softmax-attention student on the same data and n grid",
        # quick: T = 100 (was 200), 64 validation examples (was 300), n in (4, 16, 64) (was 4..64 in doublings):
        # the claims read the fitted C (three points fit it) and the MSE at the largest n; both students stay.
        {"quick": CompareConfig(context_lengths=(100,), sample_sizes=(4, 16, 64), num_val=64),
         # paper: the paper's S6 student, memlab's former residual one and attention, 3 seeds per cell (a standard
         # error at every point)
         "paper": CompareConfig(students=("mamba-1", "mamba-1-residual", "attention"), num_seeds=3),
         # well-posed: the linear target of task.py (oracle risk sigma^2), the paper's S6 student beside attention,
         # n extended to 1024 (a control run with A.1's target recalled only at n ~ 1024); the pool holds
         # max(n) examples per seed and n = 1024 trains 64 steps per epoch (16x n = 64's)
         "paper-well-posed": CompareConfig(target="linear", sample_sizes=(4, 16, 64, 256, 1024), num_seeds=3),
         "quick-well-posed": CompareConfig(target="linear", context_lengths=(100,), sample_sizes=(4, 16, 64, 256, 1024),
                                           num_val=64, num_seeds=2),
         # tiny: the well-posed target (rate and sweep's tiny profiles run A.1's)
         "tiny": CompareConfig(target="linear", context_lengths=(16,), sample_sizes=(4, 8), num_val=16, epochs=2,
                               band_draws=2000)},
        run_compare, quick_flags=LEVEL_ONLY),
]

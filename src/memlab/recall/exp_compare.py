"""``recall.attention-vs-s6`` -- section 7: the S6 student beside the softmax-attention comparator of Kawata & Suzuki
(2026), trained on the same data (same validation set, training pools and per-n keys) over the same n grid.

The grid, its cells and its tables are ``curves.py`` (shared with ``recall.rate`` and ``recall.sweep``).
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
    plot_curves,
    risk_rows,
    tag_only_lines,
)
from memlab.recall.metrics import learning_curves, tag_only_comparison
from memlab.runner import Experiment, Run

SUMMARY = """# recall.attention-vs-s6

The S6 student(s) and the softmax-attention comparator (Kawata & Suzuki) trained on the same data (α = {alpha:g}, \
T = {T}, {epochs} epochs, {num_seeds} seed(s)).

![comparison](attention_vs_s6.png)

{fit_table}
Does each student recall? MSE / tag-only risk on the same validation set (a student not below it has learnt the \
tag, not the content):

{recall_lines}

The paper gives no numbers for this comparison; it claims (§7) that Mamba attains the rate that Kawata & Suzuki prove \
for attention.

{choices}"""


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


def run_compare(cfg: CompareConfig, run: Run) -> dict:
    """Sweep the grid -> one curve per student -> attention_vs_s6.png, claims, risk.csv, fits.csv, summary.md."""
    cells = run.sweep(curve_cells(cfg, run.key_for), "train students")
    stats = _analyse(cfg, cells)
    _figures(cfg, stats, run)
    _claims(stats, run)
    run.write_summary(_summary(cfg, stats, run))
    return {"records": stats["records"]}


def _analyse(cfg: CompareConfig, cells: dict) -> dict:
    """Cell records -> one curve per student; whether each learns (C > 0 and the MSE at the largest n below the
    tag-only risk); the MSE ratio of the first S6 student to attention at the largest n."""
    records = list(cells.values())
    curves = learning_curves(records)
    keys = [(kind, float(cfg.alphas[0]), cfg.context_lengths[0]) for kind in cfg.students]
    mamba = next(k for k in keys if k[0].startswith("mamba"))
    attention = curves[("attention", *keys[0][1:])]
    return {"records": records, "curves": curves, "keys": keys,
            "learns": [bool(curves[k].fit.C > 0 and curves[k].mse[-1] < curves[k].baseline_tag_only) for k in keys],
            "ratio": float(curves[mamba].mse[-1] / attention.mse[-1])}


def _figures(cfg: CompareConfig, stats: dict, run: Run) -> None:
    curves, keys = stats["curves"], stats["keys"]
    fig, ax = plots.figure(1, 1, width=5.0, height=3.6)
    plot_curves(ax, curves, keys, lambda k, c: f"{k[0]} (C = {c.fit.C:.2f})", baselines=False)
    ax.axhline(curves[keys[0]].baseline_tag_only, color="0.4", ls=":", lw=0.8, label="tag-only risk")
    ax.set_title(f"α = {keys[0][1]:g}, T = {keys[0][2]}: same data, same training")
    ax.legend()
    run.save_figure(fig, "attention_vs_s6.png")


def _claims(stats: dict, run: Run) -> None:
    for k, learns in zip(stats["keys"], stats["learns"]):
        c = stats["curves"][k]
        run.claim(f"learns[{k[0]}]", f"{k[0]} learns at the rate of eq. (1); rule: fitted C > 0 and the MSE at the "
                  "largest n is below the tag-only risk (it recalls content)", "Thm. 6.1 / Kawata & Suzuki",
                  f"C = {c.fit.C:.2f}; MSE(n={int(c.n[-1])}) = {c.mse[-1]:.3g} vs tag-only {c.baseline_tag_only:.3g}",
                  learns)
    run.claim("s6-matches-attention", "the S6 student reaches the attention comparator's risk (§7: the same "
              "statistical rate without attention); rule: MSE ratio S6/attention at the largest n ≤ 1.25",
              "§7", f"ratio {stats['ratio']:.2f}", stats["ratio"] <= 1.25)


def _summary(cfg: CompareConfig, stats: dict, run: Run) -> str:
    run.save_csv("risk.csv", RISK_HEADER, risk_rows(stats["records"]))
    rows = fit_rows(stats["curves"], stats["keys"], lambda k: "—")
    return SUMMARY.format(alpha=cfg.alphas[0], T=cfg.context_lengths[0], epochs=cfg.epochs, num_seeds=cfg.num_seeds,
                          recall_lines=tag_only_lines(tag_only_comparison(stats["records"]), stats["keys"],
                                                      lambda k: k[0]),
                          choices=CHOICES, fit_table=run.save_table("fits.csv", FIT_HEADER, rows, FIT_FORMAT))


EXPERIMENTS = [
    Experiment(
        "recall.attention-vs-s6", "§7 vs Kawata & Suzuki", "mamba-measure-valued-recall",
        "the one-block S6 student beside a softmax-attention student on the same data and n grid",
        # quick: T = 100 (was 200), 64 validation examples (was 300), n in (4, 16, 64) (was 4..64 in doublings):
        # the claims read the fitted C (three points fit it) and the MSE at the largest n; both students stay.
        {"quick": CompareConfig(context_lengths=(100,), sample_sizes=(4, 16, 64), num_val=64),
         # paper: the paper's S6 student, memlab's former residual one and attention, 3 seeds per cell (issue 14)
         "paper": CompareConfig(students=("mamba-1", "mamba-1-residual", "attention"), num_seeds=3),
         "tiny": CompareConfig(context_lengths=(16,), sample_sizes=(4, 8), num_val=16, epochs=2)},
        run_compare),
]

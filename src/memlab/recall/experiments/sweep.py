"""``recall.sweep`` -- App. A.4, Figs. 2-4: the two-layer S6 student over alpha x T x n (60 runs at the paper's
sizes), the rate constant C of eq. (1) fitted per (alpha, T): risk falls with n, is ordered by alpha, and C
decreases with alpha and is stable across T.

The grid and its cells are ``cells.py``, its tables and figure panel ``report.py`` (shared with
``recall.rate`` and ``recall.attention-vs-s6``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from memlab import plots
from memlab.compile_cache import LEVEL_ONLY
from memlab.files import summary_text
from memlab.recall.experiments.cells import CurveConfig, CurveStats, bands, curve_cells, schedule
from memlab.recall.experiments.report import beats_tag_only, plot_curves, recall_claims, report
from memlab.recall.metrics import is_monotone, learning_curves, tag_only_comparison
from memlab.recall.runs import STUDENTS, TrainingRecord
from memlab.runner import Experiment, Run

PAPER_SWEEP_C = {0.5: "3.3-3.4", 0.75: "2.1-2.2", 1.0: "1.1-1.2", 2.0: "0.4-0.6"}  # App. A.4

SUMMARY = summary_text(__package__, "sweep")


@dataclasses.dataclass(frozen=True)
class SweepConfig(CurveConfig):
    """One student over alphas x Ts x ns (defaults: the paper's sizes, App. A.4)."""

    alphas: tuple[float, ...] = (0.5, 0.75, 1.0, 2.0)
    context_lengths: tuple[int, ...] = (500, 1000, 2000)
    students: tuple[str, ...] = ("mamba-2",)
    num_val: int = 500
    epochs: int = 120

    def validate(self) -> None:
        super().validate()
        if len(self.students) != 1 or len(self.alphas) < 2:
            raise ValueError(f"recall.sweep compares two or more alphas of one student; got students "
                             f"{self.students!r}, alphas {self.alphas!r}")


@dataclasses.dataclass(frozen=True)
class SweepStats(CurveStats):
    """The sweep analysis: ``CurveStats`` (records, curves, tag_only) and, for the student on A.1's schedule,

    C: (alphas, Ts), the fitted rate constant of eq. (1) per (alpha, T).
    monotone: (Ts * alphas,) bool, T-major: whether each curve decreases in n (at most +5 % a step).
    ordered: (Ts, ns) bool, whether the MSE strictly falls with alpha at that (T, n).
    spread: (alphas,), max - min of C over T.
    allowed: (alphas,), the spread allowed: max(10 % of the mean |C| over T, 0.05).
    """

    C: np.ndarray
    monotone: list[bool]
    ordered: np.ndarray
    spread: np.ndarray
    allowed: np.ndarray


def run_sweep(cfg: SweepConfig, run: Run) -> dict:
    """Sweep the grid -> curves, C per (alpha, T) -> sweep.png, claims, risk.csv, fits.csv, summary.md."""
    cells = run.sweep(curve_cells(cfg, run.key_for), "train students")
    stats = analyse(cfg, cells)
    _figures(cfg, stats, run)
    _claims(cfg, stats, run)
    run.write_summary(_summary(cfg, stats, run))
    return _results(cfg, stats)


def analyse(cfg: SweepConfig, cells: dict[str, TrainingRecord]) -> SweepStats:
    """Cell records -> curves; which are monotone in n; at how many (T, n) the risk strictly falls with alpha;
    C (alphas, Ts); and the spread of C over T against its allowance max(10 % of mean |C|, 0.05) per alpha."""
    records = list(cells.values())
    curves = learning_curves(records)
    kind, alphas, Ts = cfg.students[0], [float(a) for a in cfg.alphas], list(cfg.context_lengths)
    mse = np.array([[curves[(kind, a, T)].mse for a in alphas] for T in Ts])  # (Ts, alphas, ns)
    C = np.array([[curves[(kind, a, T)].fit.C for T in Ts] for a in alphas])  # (alphas, Ts)
    return SweepStats(records, curves, tag_only_comparison(records), C,
                      monotone=[is_monotone(curves[(kind, a, T)].mse) for T in Ts for a in alphas],  # A.1's schedule
                      ordered=np.all(np.diff(mse, axis=1) < 0, axis=1),
                      spread=C.max(1) - C.min(1),
                      allowed=np.maximum(0.10 * np.abs(C).mean(1), 0.05))  # a floor: a spread of C ≈ 0 is noise


def _results(cfg: SweepConfig, stats: SweepStats) -> dict:
    """results.json's "results": the cell records and C by alpha, then T."""
    return {"records": stats.records, "C": {f"alpha={a:g}": dict(zip(map(str, cfg.context_lengths), C.tolist()))
                                            for a, C in zip(cfg.alphas, stats.C)}}


def _figures(cfg: SweepConfig, stats: SweepStats, run: Run) -> None:
    Ts = cfg.context_lengths
    fig, axes = plots.figure(1, len(Ts), width=3.8 * len(Ts), height=3.4, squeeze=False, sharey=True)
    for j, T in enumerate(Ts):
        keys = [(label, float(a), T) for label in cfg.labels() for a in cfg.alphas]
        plot_curves(axes[0, j], stats.curves, keys, lambda k, c: f"{_name(k, cfg)}, C = {c.fit.C:.2f}", bands(cfg))
        axes[0, j].set_title(f"T = {T}")
        axes[0, j].legend()
    fig.suptitle(f"{cfg.students[0]}: risk vs n per (α, T); dashed: OLS fit of eq. (1); dotted: tag-only risk; "
                 "dash-dot: context predictor", fontsize=10)
    run.save_figure(fig, "sweep.png")


def _name(key: tuple, cfg: SweepConfig) -> str:
    """'α = 0.5', or 'mamba-2/steps=120, α = 0.5' when the run has a step budget."""
    return f"α = {key[1]:g}" if cfg.step_budget is None else f"{key[0]}, α = {key[1]:g}"


def _keys(cfg: SweepConfig) -> list[tuple]:
    return [(label, float(a), T) for label in cfg.labels() for T in cfg.context_lengths for a in cfg.alphas]


def _claims(cfg: SweepConfig, stats: SweepStats, run: Run) -> None:
    monotone, C, Ts = stats.monotone, stats.C, cfg.context_lengths
    recall_claims(run, stats.tag_only, _keys(cfg), lambda k: f"{k[0]},alpha={k[1]:g},T={k[2]}",
                  lambda k: f"{_name(k, cfg)}, T = {k[2]}")
    run.claim("risk-decreases", "every (α, T) curve decreases in n; rule: each step raises MSE by at most 5%",
              "App. A.4", f"{sum(monotone)}/{len(monotone)} curves", all(monotone))
    run.claim("alpha-orders-curves", f"at fixed n the MSE is monotone in α ({' > '.join(f'{a:g}' for a in cfg.alphas)} "
              "in risk); rule: strictly decreasing in α at every (T, n)", "App. A.4",
              f"ordered at {int(stats.ordered.sum())}/{stats.ordered.size} (T, n)", bool(stats.ordered.all()))
    run.claim("C-decreases-with-alpha", "the fitted C decreases with α; rule: at every T, C strictly decreasing in α",
              "App. A.4 (C ≈ 3.3, 2.1, 1.1, 0.5)",
              "; ".join(f"T={T}: " + ", ".join(f"{c:.2f}" for c in C[:, j]) for j, T in enumerate(Ts)),
              bool(np.all(np.diff(C, axis=0) < 0)))
    if len(Ts) > 1:
        run.claim("stable-across-T", "the fitted C is stable across T; rule: max − min of C over T ≤ max(10% of its "
                  "mean |C|, 0.05) for every α", "App. A.4 (\"within a few percent\")",
                  ", ".join(f"α={a:g}: spread {d:.2f} (allowed {t:.2f})"
                            for a, d, t in zip(cfg.alphas, stats.spread, stats.allowed)),
                  bool(np.all(stats.spread <= stats.allowed)))


def _summary(cfg: SweepConfig, stats: SweepStats, run: Run) -> str:
    keys, name = _keys(cfg), lambda k: f"{_name(k, cfg)}, T = {k[2]}"
    return SUMMARY.format(student=STUDENTS[cfg.students[0]], alphas=[float(a) for a in cfg.alphas],
                          Ts=list(cfg.context_lengths), ns=list(cfg.sample_sizes), schedule=schedule(cfg),
                          num_val=cfg.num_val, num_seeds=cfg.num_seeds, target=cfg.target,
                          verdict="; ".join(f"{name(k)}: {beats_tag_only(stats.tag_only[k])}" for k in keys),
                          report=report(cfg, stats, keys, lambda k: PAPER_SWEEP_C.get(k[1], "—"), name,
                                        run))


EXPERIMENTS = [
    Experiment(
        "recall.sweep", "App. A.4, Figs. 2-4", "mamba-measure-valued-recall",
        "two-layer S6 student: α × T × n sweep (60 runs), C per (α, T)",
        # quick: T in (25, 50) (was (50, 100); stable-across-T needs two T a factor 2 apart, as the paper's grid) and
        # 64 validation examples (was 200; shared by every n, and 64 = the pool size: one compiled sampler);
        # both alphas and all three n stay (every claim reads them), as do the 30 epochs (small n still improving).
        {"quick": SweepConfig(alphas=(0.5, 2.0), context_lengths=(25, 50), sample_sizes=(4, 16, 64), num_val=64,
                              epochs=30),
         "paper": SweepConfig(),
         "tiny": SweepConfig(alphas=(0.5, 2.0), context_lengths=(16,), sample_sizes=(4, 8), num_val=16, epochs=2,
                             band_draws=2000)},
        run_sweep, quick_flags=LEVEL_ONLY),
]

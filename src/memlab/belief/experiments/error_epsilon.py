"""``belief.error-vs-epsilon`` (Fig. 1): the decoding error p_1000, eq. (19), of the LOF and five ALFs against 1/eps
on the HMM of eq. (47) (the choices both error experiments share: ``error.py``)."""

from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np

from memlab import plots
from memlab.belief.alf import delta_is_valid
from memlab.belief.examples import SWAP
from memlab.belief.experiments.error import PAPER, ExampleConfig, ExampleRuns, FilterErrors, example_p_curves
from memlab.belief.metrics import trend
from memlab.belief.theory import xi
from memlab.checks import check_int, check_real
from memlab.files import summary_text
from memlab.runner import Experiment
from memlab.store import cell


def _emission_matrix(e: float) -> np.ndarray:
    return np.array([[e, 1 - e], [1 - e, e]])


@dataclasses.dataclass(frozen=True)
class ErrorVsEpsilonConfig(ExampleConfig):
    inv_eps_min: float = 30.0
    inv_eps_max: float = 250.0
    num_eps: int = 23

    def validate(self):
        super().validate()
        check_real("inv_eps_min", self.inv_eps_min, 1.0, open_low=True)
        if not self.inv_eps_min < self.inv_eps_max:
            raise ValueError(f"need inv_eps_min < inv_eps_max, got {self.inv_eps_min}, {self.inv_eps_max}")
        check_int("num_eps", self.num_eps, low=2)


EPSILON_SUMMARY = summary_text(__package__, "error_epsilon")


@cell("belief.p-final", result=FilterErrors)
def _p_final_cell(runs: ExampleRuns, eps: float, key) -> FilterErrors:
    """p_K (eq. (19), K = runs.num_steps) of the LOF and every ALF at one eps, from runs.num_runs trajectories."""
    names, p = example_p_curves(runs, eps, key)
    return FilterErrors(names=names, p=p[-1])


def _inv_eps_grid(cfg: ErrorVsEpsilonConfig) -> np.ndarray:
    return np.linspace(cfg.inv_eps_min, cfg.inv_eps_max, cfg.num_eps)  # 23 values in [30, 250] (section 6.1)


def run_error_vs_epsilon(cfg: ErrorVsEpsilonConfig, run) -> dict:
    """Sweep 1/eps -> p_1000 per filter -> p_final.csv, figure, claims, summary."""
    inv_eps = _inv_eps_grid(cfg)
    runs = ExampleRuns.of(cfg)
    cells = run.sweep({f"inv_eps={ie:.3f}": partial(_p_final_cell, runs, 1.0 / ie, run.key_for("trajectories", i))
                       for i, ie in enumerate(inv_eps)}, f"p_{cfg.num_steps} vs 1/eps")
    stats = analyse_epsilon(cfg, list(cells.values()))
    p, se, names = stats.p, stats.stderr, stats.filters
    run.save_csv("p_final.csv", ["inv_eps", "eps", "filter", "p", "stderr"],
                 [(ie, 1 / ie, n, p[i, f], se[i, f]) for i, ie in enumerate(inv_eps) for f, n in enumerate(names)])
    _figure_epsilon(cfg, stats, run)
    _claims_epsilon(cfg, stats, run)
    run.write_summary(_summary_epsilon(cfg, stats, run))
    return {"inv_eps": stats.inv_eps, "filters": stats.filters, "p": stats.p, "stderr": stats.stderr, "xi": stats.xi}


@dataclasses.dataclass(frozen=True)
class EpsilonStats:
    """Fig. 1's numbers on E = ``cfg.num_eps`` values of 1/eps and F filters (the LOF, then ``cfg.schedules``).

    **Fields:**
    - ``inv_eps``: (E,) the 1/eps grid, increasing.
    - ``filters``: list of the F filter names.
    - ``p``: (E, F) the decoding error p_K at K = ``cfg.num_steps`` (eq. 19).
    - ``stderr``: (E, F) its binomial standard error over ``cfg.num_runs`` runs.
    - ``trend``: list of F (slope, t): the least-squares slope of p_K on 1/eps and its t-statistic.
    - ``column``: dict, schedule -> its column in ``p``.
    - ``log_wins``: float, the fraction of the grid where delta = 0.7/log(1/eps) has a lower p_K than delta =
      sqrt(eps); None unless both schedules ran.
    - ``xi``: float, xi of the HMM of eq. (47) (eq. 144-145; the bound of eq. (34) on lambda).
    """

    inv_eps: np.ndarray
    filters: list[str]
    p: np.ndarray
    stderr: np.ndarray
    trend: list[tuple[float, float]]
    column: dict[str, int]
    log_wins: float | None
    xi: float


def analyse_epsilon(cfg: ErrorVsEpsilonConfig, cells: list[FilterErrors]) -> EpsilonStats:
    """Cells (one per 1/eps, in grid order) -> p (E, F), binomial stderr, trend per filter, xi of eq. (47)."""
    inv_eps = _inv_eps_grid(cfg)
    names = cells[0].names
    p = np.array([c.p for c in cells])  # (num_eps, F)
    column = {s: f for f, s in enumerate(cfg.schedules, start=1)}
    log_wins = float(np.mean(p[:, column["log"]] < p[:, column["sqrt"]])) if {"log", "sqrt"} <= set(column) else None
    return EpsilonStats(inv_eps=inv_eps, filters=names, p=p, stderr=np.sqrt(p * (1 - p) / cfg.num_runs),
                           trend=[trend(inv_eps, p[:, f]) for f in range(len(names))], column=column,
                           log_wins=log_wins, xi=xi(SWAP, _emission_matrix(cfg.emission)))


def _figure_epsilon(cfg: ErrorVsEpsilonConfig, stats: EpsilonStats, run) -> None:
    inv_eps, p, se, names = stats.inv_eps, stats.p, stats.stderr, stats.filters
    fig, ax = plots.figure(width=7.0, height=3.6)
    ax.errorbar(inv_eps, p[:, 0], yerr=se[:, 0], color="k", marker="o", label="LOF (Bayes-optimal)")
    for f, s in enumerate(cfg.schedules, start=1):
        ax.errorbar(inv_eps, p[:, f], yerr=se[:, f], marker=".", ls="-" if delta_is_valid(s) else "--", label=names[f])
    ax.set(xlabel="1/ε", ylabel=f"$p_{{{cfg.num_steps}}}$", yscale="log",
           title=f"Long-run error vs 1/ε ({cfg.num_runs} runs per point)")
    fig.legend(loc="outside right upper", fontsize=7)
    run.save_figure(fig, "error_vs_epsilon.png")


def _claims_epsilon(cfg: ErrorVsEpsilonConfig, stats: EpsilonStats, run) -> None:
    p, names, column, K = stats.p, stats.filters, stats.column, cfg.num_steps
    for s in ("sqrt", "log"):
        if s in column:
            f = column[s]
            (slope, t), a, b = stats.trend[f], p[0, f], p[-1, f]
            run.claim(f"valid-delta-vanishes[{s}]", f"p_{K} decreases as 1/ε grows for {names[f]}", "Fig. 1",
                      f"{a:.4f} → {b:.4f} (slope {slope:.2e}, t = {t:.1f})", bool(t < -3 and b < 0.5 * a))
    if stats.log_wins is not None:
        run.claim("log-beats-sqrt", "δ = 0.7/log(1/ε) gives lower p than δ = √ε", "Fig. 1 (§6.1)",
                  f"lower at {stats.log_wins:.0%} of the 1/ε grid", stats.log_wins >= 0.8)
    for s in ("eps2", "zero", "one"):
        if s in column:
            a, b = p[0, column[s]], p[-1, column[s]]
            run.claim(f"invalid-delta-persists[{s}]", f"p_{K} does not vanish for {names[column[s]]}", "Fig. 1",
                      f"{a:.4f} → {b:.4f}", bool(b >= 0.5 * a))
    run.claim("lambda-below-xi", "λ = 0.7 satisfies λ < ξ (eq. 34), ξ ≈ 0.7206 (eq. 150)", "App. D.2",
              f"ξ = {stats.xi:.4f}", bool(cfg.lam < stats.xi))


def _summary_epsilon(cfg: ErrorVsEpsilonConfig, stats: EpsilonStats, run) -> str:
    inv_eps, p = stats.inv_eps, stats.p
    shown = [0, len(p) // 2, len(p) - 1]
    header = ["filter", *(f"p at 1/ε = {inv_eps[i]:g}" for i in shown), "slope per unit 1/ε"]
    rows = [[n, *p[shown, f], stats.trend[f][0]] for f, n in enumerate(stats.filters)]
    table = run.save_table("p_final_table.csv", header, rows, {**{h: ".4f" for h in header}, header[-1]: "+.2e"})
    return EPSILON_SUMMARY.format(**dataclasses.asdict(cfg), emission_c=1 - cfg.emission, xi=stats.xi,
                                  table=table)


EXPERIMENTS = [
    Experiment(
        "belief.error-vs-epsilon", "Fig. 1", PAPER, "ALF (5 δ schedules) and LOF: p_1000 vs 1/ε on the HMM of eq. (47)",
        {"paper": ErrorVsEpsilonConfig(),
         "quick": ErrorVsEpsilonConfig(num_eps=12, num_runs=4000),
         "tiny": ErrorVsEpsilonConfig(num_eps=3, num_runs=200, num_steps=50)},
        run_error_vs_epsilon),
]

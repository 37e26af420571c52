"""``belief.error-vs-time`` (Fig. 7): the decoding error p_k, eq. (19), of the LOF and five ALFs against k at
eps = 0.005 on the HMM of eq. (47) (the choices both error experiments share: ``error.py``)."""

from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np

from memlab import plots
from memlab.belief.alf import delta_is_valid
from memlab.belief.experiments.error import PAPER, ExampleConfig, ExampleRuns, FilterErrors, example_p_curves
from memlab.checks import check_real
from memlab.files import summary_text
from memlab.runner import Experiment
from memlab.store import cell


@dataclasses.dataclass(frozen=True)
class ErrorVsTimeConfig(ExampleConfig):
    eps: float = 0.005

    def validate(self):
        super().validate()
        check_real("eps", self.eps, 0.0, 1.0, open_low=True, open_high=True)


TIME_SUMMARY = summary_text(__package__, "error_time")


@cell("belief.p-curves", result=FilterErrors)
def _p_curves_cell(runs: ExampleRuns, eps: float, key) -> FilterErrors:
    """p_k, k = 1..K (eq. (19)), of the LOF and every ALF at ``eps``: ``p`` (K, F)."""
    names, p = example_p_curves(runs, eps, key)
    return FilterErrors(names=names, p=p)


def run_error_vs_time(cfg: ErrorVsTimeConfig, run) -> dict:
    """One cell of error curves -> p_k.csv, figure, claims, summary."""
    cells = run.sweep({"curves": partial(_p_curves_cell, ExampleRuns.of(cfg), cfg.eps, run.key_for("trajectories"))},
                      f"p_k, k = 1..{cfg.num_steps}")
    stats = analyse_time(cfg, cells["curves"])
    run.save_csv("p_k.csv", ["k"] + stats.filters, [(k, *row) for k, row in zip(stats.k, stats.p)])
    _figure_time(cfg, stats, run)
    _claims_time(cfg, stats, run)
    run.write_summary(_summary_time(cfg, stats, run))
    return {"k": stats.k, "filters": stats.filters, "p": stats.p}


@dataclasses.dataclass(frozen=True)
class Flatness:
    """Whether one filter's p_k has stopped moving: the means of p_k over the last two windows of ``tail`` steps.

    **Fields:** ``earlier`` (float, the window before the last), ``later`` (float, the last window), ``flat``
    (bool: they differ by at most 4 binomial standard errors + 0.002).
    """

    earlier: float
    later: float
    flat: bool


@dataclasses.dataclass(frozen=True)
class TimeStats:
    """Fig. 7's numbers on K = ``cfg.num_steps`` steps and F filters (the LOF, then ``cfg.schedules``).

    **Fields:**
    - ``k``: (K,) the steps 1..K.
    - ``filters``: list of the F filter names.
    - ``p``: (K, F) the decoding error p_k (eq. 19).
    - ``tail``: int, the window length (steps) of the flatness test.
    - ``flatness``: list of F :class:`Flatness`.
    - ``start``: (n,) p_1 of the n informative filters (all but delta = 0), in column order.
    - ``valid``: list of the columns of the LOF and the valid schedules (sqrt, log) that ran.
    """

    k: np.ndarray
    filters: list[str]
    p: np.ndarray
    tail: int
    flatness: list[Flatness]
    start: np.ndarray
    valid: list[int]


def analyse_time(cfg: ErrorVsTimeConfig, cell: FilterErrors) -> TimeStats:
    """The error curves -> p_1 of the informative filters (delta > 0) and, per filter, whether p_k is flat
    (:class:`Flatness`)."""
    names, p = cell.names, np.array(cell.p)  # (K, F)
    kinds = ["lof", *cfg.schedules]
    tail = max(cfg.num_steps // 10, 10)
    flatness = []
    for f in range(len(names)):
        a, b = p[-2 * tail:-tail, f].mean(), p[-tail:, f].mean()
        se = np.sqrt(max(b * (1 - b), 1e-4) / (cfg.num_runs * tail) * 4)
        flatness.append(Flatness(float(a), float(b), bool(abs(a - b) <= 4 * se + 0.002)))
    return TimeStats(k=np.arange(1, cfg.num_steps + 1), filters=names, p=p, tail=tail, flatness=flatness,
                        start=p[0, [f for f, s in enumerate(kinds) if s != "zero"]],
                        valid=[f for f, s in enumerate(kinds) if s in ("lof", "sqrt", "log")])


def _figure_time(cfg: ErrorVsTimeConfig, stats: TimeStats, run) -> None:
    k, p, names = stats.k, stats.p, stats.filters
    fig, ax = plots.figure(width=7.0, height=3.6)
    ax.plot(k, p[:, 0], color="k", label="LOF (Bayes-optimal)")
    for f, s in enumerate(cfg.schedules, start=1):
        ax.plot(k, p[:, f], ls="-" if delta_is_valid(s) else "--", lw=1.0, label=names[f])
    ax.set(xlabel="k", ylabel="$p_k$", ylim=(0, 0.55), title=f"Per-step error, ε = {cfg.eps} ({cfg.num_runs} runs)")
    fig.legend(loc="outside right upper", fontsize=7)
    run.save_figure(fig, "error_vs_time.png")


def _claims_time(cfg: ErrorVsTimeConfig, stats: TimeStats, run) -> None:
    p1, start, valid, flatness = 1 - cfg.emission, stats.start, stats.valid, stats.flatness
    se1 = np.sqrt(p1 * (1 - p1) / cfg.num_runs)
    run.claim("start-near-0.1", f"p_1 ≈ {p1:.2g} for LOF and every ALF with δ > 0 (decision on y_1 alone)",
              "App. E.1", f"p_1 ∈ [{start.min():.4f}, {start.max():.4f}]",
              bool(np.all(np.abs(start - p1) <= 4 * se1)))
    run.claim("stable-by-1000", f"p_k has stabilised by k = {cfg.num_steps} for LOF and valid δ", "App. E.1",
              "; ".join(f"{stats.filters[f]}: {flatness[f].earlier:.4f}/{flatness[f].later:.4f}" for f in valid),
              all(flatness[f].flat for f in valid))


def _summary_time(cfg: ErrorVsTimeConfig, stats: TimeStats, run) -> str:
    p = stats.p
    shown = sorted({k for k in (1, 10, 100, cfg.num_steps) if k <= cfg.num_steps})
    header = ["filter", *(f"p_{k}" for k in shown), f"flat over the last {2 * stats.tail} steps"]
    rows = [[n, *p[[k - 1 for k in shown], f], ("no", "yes")[fl.flat]]
            for f, (n, fl) in enumerate(zip(stats.filters, stats.flatness))]
    table = run.save_table("p_k_table.csv", header, rows, ".4f")
    return TIME_SUMMARY.format(**dataclasses.asdict(cfg), emission_c=1 - cfg.emission, forget=1 / cfg.eps ** 2,
                               table=table)


EXPERIMENTS = [
    Experiment(
        "belief.error-vs-time", "Fig. 7", PAPER, "p_k vs k at ε = 0.005 for LOF and the five ALFs",
        {"paper": ErrorVsTimeConfig(), "quick": ErrorVsTimeConfig(num_runs=5000),
         "tiny": ErrorVsTimeConfig(num_runs=200, num_steps=50)},
        run_error_vs_time),
]

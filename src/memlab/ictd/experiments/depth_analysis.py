"""The analysis of ``ictd.depth-convergence``: ``analyse`` -> :class:`DepthStats` from the cells' typed results
(``depth.Theorem2Numbers`` per context length, ``depth.Crosscheck``, ``TaskMargins``): the medians over the covered
tasks, the log-log slopes in n, the Lemma 5 fraction and the eq. (70) excess."""

from __future__ import annotations

import dataclasses

import numpy as np

from memlab.ictd import depth
from memlab.ictd.depth import Crosscheck, Theorem2Numbers
from memlab.ictd.experiments.depth_cells import DepthConfig

__all__ = ["DepthStats", "Margins", "analyse", "covered_quantile"]


@dataclasses.dataclass(frozen=True)
class Margins:
    """The population margin C of eq. (28) over the tasks: min and median."""

    min: float
    median: float


@dataclasses.dataclass(frozen=True)
class DepthStats:
    """The analysis of ``ictd.depth-convergence``; K context lengths, N tasks, L layers. Medians are over the tasks
    covered at each n.

    context_lengths (K,); num_tasks N; margin: ``Margins``; margin_per_task, err0 (N,): C and ||v_0 - v_pi||_inf;
    m_of (N,): each task's number of states; floor_median, T2_median, M_dev_median (K,) and their log-log slopes
    in n (floor_slope, T2_slope, M_dev_slope); frac_lemma5 (K,): fraction with rho_hat <= 1 - C; rate_median (K,);
    rate_minus_bound_max (K,): max of rate - (1 - C); rate_nan: unfitted rates of covered tasks; bound70_max_excess
    (K,): max eq. (70) excess on the Lemma 5 event (-inf if empty); floor_bound_ratio_median (K,): median T2 / C /
    floor; tail_gap: max over n of |median error at L / median floor - 1|; dropped, draws_max: n -> uncovered tasks
    and the most contexts drawn; crosscheck: ``depth.Crosscheck``; per_n: n -> ``depth.Theorem2Numbers`` (arrays);
    bound_curve (N, L+1): (1 - C)^L ||v_0 - v_pi||.
    """

    context_lengths: np.ndarray
    num_tasks: int
    margin: Margins
    margin_per_task: np.ndarray
    err0: np.ndarray
    m_of: np.ndarray
    floor_median: np.ndarray
    floor_slope: float
    T2_median: np.ndarray
    T2_slope: float
    M_dev_median: np.ndarray
    M_dev_slope: float
    frac_lemma5: np.ndarray
    rate_median: np.ndarray
    rate_minus_bound_max: np.ndarray
    rate_nan: int
    bound70_max_excess: np.ndarray
    floor_bound_ratio_median: np.ndarray
    tail_gap: float
    dropped: dict[int, int]
    draws_max: dict[int, int]
    crosscheck: Crosscheck
    per_n: dict[int, Theorem2Numbers]
    bound_curve: np.ndarray


def covered_quantile(per_n: dict, field: str, p: float = 0.5) -> np.ndarray:
    """The p-quantile over the covered tasks of the per-task ``field`` of ``Theorem2Numbers`` at every n: (K,)."""
    return np.array([np.quantile(getattr(c, field)[c.covered], p) for c in per_n.values()])


def analyse(cfg: DepthConfig, cells: dict) -> DepthStats:
    """Cells -> per-n medians over the covered tasks, slopes, the Lemma 5 fraction, the eq. (70) excess."""
    ns = np.array(cfg.context_lengths)
    margin, err0 = np.asarray(cells["tasks"].margin), np.asarray(cells["tasks"].err0)
    per_n = {int(n): cells[f"n={n}"].as_arrays() for n in ns}
    cs = per_n.values()
    floor, T2, M_dev = (covered_quantile(per_n, field) for field in ("floor", "T2", "M_dev"))
    layers = np.arange(cfg.num_layers + 1)
    return DepthStats(
        context_lengths=ns, num_tasks=len(margin), margin=Margins(margin.min(), np.median(margin)),
        margin_per_task=margin, err0=err0, m_of=np.repeat(cfg.state_counts, cfg.tasks_per_m),
        floor_median=floor, floor_slope=depth.loglog_slope(ns, floor),
        T2_median=T2, T2_slope=depth.loglog_slope(ns, T2),
        M_dev_median=M_dev, M_dev_slope=depth.loglog_slope(ns, M_dev),
        frac_lemma5=np.array([c.rho_bounded[c.covered].mean() for c in cs]),
        rate_median=covered_quantile(per_n, "rate"),
        rate_minus_bound_max=np.array([np.nanmax(c.rate[c.covered] - (1 - margin[c.covered])) for c in cs]),
        rate_nan=sum(int(np.isnan(c.rate[c.covered]).sum()) for c in cs),
        bound70_max_excess=np.array([np.max(c.bound70_excess[c.covered & c.rho_bounded], initial=-np.inf)
                                     for c in cs]),
        floor_bound_ratio_median=np.array([np.median(c.T2[c.covered] / margin[c.covered] / c.floor[c.covered])
                                           for c in cs]),
        tail_gap=np.max(np.abs(np.array([c.err_q[1, -1] for c in cs]) / floor - 1.0)),
        dropped={n: int((~c.covered).sum()) for n, c in per_n.items()},
        draws_max={n: int(c.draws.max()) for n, c in per_n.items()},
        crosscheck=cells["crosscheck"], per_n=per_n,
        bound_curve=(1.0 - margin)[:, None] ** layers * err0[:, None],  # (1 - C)^L ||v_0 - v_pi||, v_0 = 0
    )

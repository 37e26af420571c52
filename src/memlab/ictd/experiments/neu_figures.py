"""The analysis of ``ictd.neu`` (Theorem 3) and its figures and tables, pure functions of it: ``NEUStats`` (of the
cells' ``neu.EstimatorStatistics``), J(theta*) against depth and context length, the comparison points of
Theta^Looped, the slow-discount run, the Markdown tables of summary.md and the rows of neu.csv. Kept apart from
``neu.py`` for length (the experiment module stays under 300 lines); ``neu.py`` imports this module, never the other
way round."""

from __future__ import annotations

import dataclasses

import numpy as np
from matplotlib.ticker import MaxNLocator

from memlab import plots
from memlab.files import markdown_table
from memlab.ictd.neu import POINT_LABELS, STAT_FIELDS, EstimatorStatistics

__all__ = ["CSV_HEADER", "NEUStats", "SlowRun", "csv_rows", "depth_table", "fmt", "plot_context",
           "plot_depth", "plot_slow", "point_table"]

CSV_HEADER = ["family", "gamma", "point", "n", "L", "num_samples", *STAT_FIELDS, "J_plain", "noise_floor_plain",
              "tower_vs_plain_max_z", "variance_ratio"]


@dataclasses.dataclass(frozen=True)
class SlowRun:
    """The slow-discount run of theta*: the depth of the peak of J and J there, J and its noise floor at the last
    depth, ratio = peak J / max(last J, last floor), and the tasks' min margin."""

    peak_L: int
    peak_J: float
    last_J: float
    last_floor: float
    ratio: float
    margin_min: float


@dataclasses.dataclass(frozen=True)
class NEUStats:
    """The analysis of ``ictd.neu``; L depths, K context lengths, at depth L unless said.

    depths (L,) = 1..L; contexts (K,); gamma; theta_star n -> ``neu.EstimatorStatistics`` (arrays) of theta*; points
    name -> ``neu.EstimatorStatistics`` at the largest n (``POINT_LABELS`` order, theta* first); slow_cell / slow:
    the slow-discount ``neu.EstimatorStatistics`` and its ``SlowRun`` (None when switched off); margin_min: over
    every cell but the slow run's; margin_median: median of the theta* cells' medians; peak_l: index of the peak of
    J(theta*) over depth at the largest n, depth_ratio: J there / J at L; min_non_td, argmin_non_td: the smallest J
    of ``neu.NON_TD_POINTS`` and its point; z_threshold: the Bonferroni bound of |z| (1 % family-wise);
    tower_vs_plain_max_z: max |z| over the theta* cells; variance_ratio_at_L_max n -> plain / tower variance;
    figures: the PNG files written.
    """

    depths: np.ndarray
    contexts: list[int]
    gamma: float
    theta_star: dict[int, EstimatorStatistics]
    points: dict[str, EstimatorStatistics]
    slow_cell: EstimatorStatistics | None
    slow: SlowRun | None
    margin_min: float
    margin_median: float
    peak_l: int
    depth_ratio: float
    min_non_td: float
    argmin_non_td: str
    z_threshold: float
    tower_vs_plain_max_z: float
    variance_ratio_at_L_max: dict[int, float]
    figures: list[str]


def fmt(v) -> str:
    """A J-like number for a table: 2 significant digits in e-notation below 1e-3, 4 digits otherwise."""
    if abs(v) < 1e-3:
        return f"{v:.2e}"
    return f"{v:.4g}" if abs(v) >= 100 else f"{v:.4f}"


def csv_rows(families: list[tuple[str, float, list[tuple[str, int, EstimatorStatistics]]]]) -> list[list]:
    """Rows of CSV_HEADER, one per (family, point, n, depth): families are (tag, gamma, [(point, n, cell), ...])."""
    return [[tag, gamma, p, n, depth, c.num_samples, *(getattr(c.tower, f)[i] for f in STAT_FIELDS), c.plain.J[i],
             c.plain.noise_floor[i], c.tower_vs_plain_max_z[i], c.variance_ratio[i]]
            for tag, gamma, cells in families for p, n, c in cells for i, depth in enumerate(c.depths)]


def depth_table(main: dict[int, EstimatorStatistics], L: int) -> str:
    """Markdown: per context length n, J(theta*) (noise floor) at a few depths, E||X||_1, margin, variance ratio."""
    shown = sorted({1, 2, 4, L // 2, L} & set(range(1, L + 1)))
    return markdown_table(
        ["n", *(f"L = {l}" for l in shown), f"E‖X‖₁ at L = {L}", "min margin", "var plain/tower"],
        [(n, *(f"{fmt(t.J[l - 1])} ({fmt(t.noise_floor[l - 1])})" for l in shown), fmt(t.abs_mean[L - 1]),
          f"{c.margin_min:.3f}", f"×{c.variance_ratio[-1]:.1f}") for n, c in main.items() for t in [c.tower]])


def point_table(points: dict[str, EstimatorStatistics]) -> str:
    """Markdown: J ± se, noise floor, split-half, E||X||_1 and the sample count of every point at the last depth."""
    return markdown_table(["point", "J", "noise floor", "split-half", "E‖X‖₁", "samples"],
                          [(POINT_LABELS[p], f"{fmt(t.J[-1])} ± {fmt(t.J_se[-1])}", fmt(t.noise_floor[-1]),
                            fmt(t.J_split[-1]), fmt(t.abs_mean[-1]), c.num_samples)
                           for p, c in points.items() for t in [c.tower]])


def _log_yerr(J, se):
    """±1 se error bars for a log axis: the lower bar is clipped at 90% of J (it would reach 0 or below)."""
    return np.stack([np.minimum(se, 0.9 * J), se])


def plot_depth(s: NEUStats, gamma: float):
    """Left: J(theta*) vs depth per context length n; right: every point at the largest n vs depth, theta* first."""
    fig, (ax1, ax2) = plots.figure(1, 2, width=9.5, height=3.8)
    depths, contexts = s.depths, list(s.theta_star)
    colors = plots.plt.cm.viridis(np.linspace(0.0, 0.85, len(contexts)))
    for color, (n, c) in zip(colors, s.theta_star.items()):
        c = c.tower
        ax1.errorbar(depths, c.J, yerr=_log_yerr(c.J, c.J_se), color=color, marker="o", ms=3, capsize=2,
                     label=f"n = {n}")
        ax1.plot(depths, c.noise_floor, color=color, ls=":", lw=1.0)
    ax1.plot([], [], color="gray", ls=":", lw=1.0, label="noise floor (same colour)")
    ax1.set(xlabel="depth L", ylabel=r"$J_{L,n}(\theta^*)$", yscale="log",
            title=f"θ*, γ = {gamma}: J vs depth, per context length n")
    ax1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    star = s.points["theta-star"].tower
    ax2.fill_between(depths, 1e-12, star.noise_floor, color="gray", alpha=0.25, label="θ* noise floor")
    for p, cell in s.points.items():
        c, is_star = cell.tower, p == "theta-star"
        ax2.errorbar(depths, c.J, yerr=_log_yerr(c.J, c.J_se), marker="o" if is_star else ".", ms=3, capsize=2,
                     lw=2.0 if is_star else 1.0, color="k" if is_star else None, label=POINT_LABELS[p])
    lo = max(0.05 * min(float(np.min(star.noise_floor)), float(np.min(star.J))), 1e-12)
    ax2.set(xlabel="depth L", ylabel=rf"$J_{{L,{contexts[-1]}}}(\theta)$", yscale="log", ylim=(lo, None),
            title=rf"points $\theta$ of $\Theta^{{\rm Looped}}$ at n = {contexts[-1]}")
    fig.legend(*ax2.get_legend_handles_labels(), loc="outside right upper", fontsize=7)
    return fig


def plot_context(main: dict[int, EstimatorStatistics], L: int, gamma: float):
    """J(theta*) vs context length n at a few depths, with E||X_L||_1 and the sqrt(log n / n) shape of eq. (33)."""
    fig, ax = plots.figure(width=6.5, height=3.8)
    contexts = list(main)
    ns = np.array(contexts, float)
    shown = sorted({1, 2, max(1, L // 2), L})
    colors = plots.plt.cm.plasma(np.linspace(0.0, 0.8, len(shown)))
    for color, l in zip(colors, shown):
        J, se, floor = (np.array([getattr(c.tower, f)[l - 1] for c in main.values()])
                        for f in ("J", "J_se", "noise_floor"))
        ax.errorbar(ns, J, yerr=_log_yerr(J, se), color=color, marker="o", ms=3, capsize=2, label=f"J, L = {l}")
        ax.plot(ns, floor, color=color, ls=":", lw=1.0)
    upper = np.array([c.tower.abs_mean[-1] for c in main.values()])
    ax.plot(ns, upper, color="k", ls="--", marker="s", ms=3, label=f"E‖X‖₁ at L = {L} (>= J)")
    ref = np.sqrt(np.log(ns) / ns)
    ax.plot(ns, ref * upper[0] / ref[0], color="gray", ls="-.", lw=1.0, label="∝ sqrt(log n / n) (eq. 33)")
    ax.plot([], [], color="gray", ls=":", lw=1.0, label="noise floor (same colour)")
    ax.set(xscale="log", yscale="log", xlabel="context length n", ylabel=r"$J_{L,n}(\theta^*)$",
           title=f"θ*, γ = {gamma}: J vs context length, per depth L")
    ax.set_xticks(ns, [str(n) for n in contexts])
    ax.minorticks_off()
    fig.legend(loc="outside right upper", fontsize=7)
    return fig


def plot_slow(cell: EstimatorStatistics, gamma: float, n: int):
    """The slow-discount run: J(theta*), its noise floor and E||X||_1 vs depth, with the L gamma^L shape."""
    fig, ax = plots.figure(width=6.5, height=3.6)
    depths, c = cell.depths, cell.tower
    ax.errorbar(depths, c.J, yerr=_log_yerr(c.J, c.J_se), color="k", marker="o", ms=3, capsize=2, label="J(θ*)")
    ax.plot(depths, c.noise_floor, color="k", ls=":", lw=1.0, label="noise floor")
    ax.plot(depths, c.abs_mean, color="C0", ls="--", lw=1.0, label="E‖X‖₁ (>= J)")
    shape = depths * gamma ** depths
    peak = int(np.argmax(c.J))
    ax.plot(depths, shape * c.J[peak] / shape[peak], color="gray", ls="-.", lw=1.0, label="∝ L γ^L")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="depth L", ylabel=rf"$J_{{L,{n}}}(\theta^*)$", yscale="log",
           title=f"slow discount γ = {gamma}, n = {n}")
    ax.legend(fontsize=7)
    return fig

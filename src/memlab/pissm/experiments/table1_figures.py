"""``pissm.table1``'s figure: Table 1 as bars. A pure function of the rows; the experiment saves the file."""

from __future__ import annotations

import numpy as np

from memlab import plots
from memlab.pissm.experiments.table1_rows import Table1Row

__all__ = ["plot_log_likelihoods"]


def plot_log_likelihoods(table: list[Table1Row]):
    """Table 1 as bars: per data set, each row's mean test log-likelihood per step (error bar: std over seeds);
    pi-SSM red, the particle filter grey, the rest blue; the paper's number as a black diamond. A row far below the
    others (a failed gain) is cut at the panel's edge with its value written on it; a row with no finite value says
    why in words. Returns the figure."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    datasets = list(dict.fromkeys(r.dataset for r in table))
    fig, axes = plots.figure(1, max(len(datasets), 1), width=4.6 * max(len(datasets), 1), height=3.6, squeeze=False)
    for ax, data_name in zip(axes[0], datasets):
        rows = [r for r in table if r.dataset == data_name]
        means = np.array([r.ll_mean for r in rows])
        finite = means[np.isfinite(means)]
        # the axis spans the rows that are not far below the best (the paper's values included), so one diverged
        # row (Lorenz at -80) does not squash the rest
        paper = np.array([np.nan if r.paper_ll is None else r.paper_ll for r in rows])
        shown = np.concatenate([finite, paper[np.isfinite(paper)]])
        top = shown.max() if shown.size else 1.0
        near = shown[shown >= top - 3 * max(np.median(np.abs(shown - np.median(shown))), 0.5)] if shown.size else shown
        left = min(near.min() if near.size else 0.0, 0.0)
        left -= 0.08 * (top - left + 1e-9)
        colors = ["C3" if r.model.startswith("pissm") else "C7" if r.model == "pf" else "C0" for r in rows]
        ax.barh(range(len(rows)), np.where(np.isfinite(means), np.maximum(means, left), 0.0),
                xerr=[r.ll_std if np.isfinite(r.ll_mean) and r.ll_mean >= left else 0.0 for r in rows], color=colors)
        for i, r in enumerate(rows):
            if not np.isfinite(r.ll_mean):
                ax.text(0.0, i, " no run trained" if r.failed else " no finite score", va="center", fontsize=7)
            elif r.ll_mean < left:
                ax.text(max(0.0, left), i, f" ← {r.ll_mean:.1f} (bar cut)", va="center", ha="left", fontsize=7)
        ax.plot(paper, range(len(rows)), "kD", ms=4, label="paper")
        ax.axvline(rows[0].ll_ceiling, color="k", ls="--", lw=0.8)  # no predictor scores above it
        ax.set_xlim(left, max(rows[0].ll_ceiling, top) + 0.05 * (top - left + 1e-9))
        ax.set_yticks(range(len(rows)), [r.model for r in rows])
        ax.invert_yaxis()
        ax.set_title(f"Table 1, {data_name}: test log q(y_t | y_1:t-1) per step", fontsize=9)
    handles = [Patch(color="C3", label="pi-SSM"), Patch(color="C0", label="baselines"),
               Patch(color="C7", label="particle filter"), Line2D([], [], color="k", marker="D", ls="", ms=4,
                                                                 label="paper (Table 1)"),
               Line2D([], [], color="k", ls="--", lw=0.8, label="ceiling (noise log-density)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=7)
    return fig

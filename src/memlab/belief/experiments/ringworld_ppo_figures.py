"""The figures of ``belief.ringworld-returns`` (Fig. 3) and ``belief.deep-alf-inits`` (Figs. 9, 10): episodic return
against update, the mean over seeds with every seed as a thin line, beside the last updates. Seeds, not a ± std band:
where one seed ends far from the others (Deep ALF's at paper-core), a band would paint over every curve between."""

from __future__ import annotations

import numpy as np

from memlab import plots
from memlab.belief.experiments.ringworld_ppo_stats import ReturnsStats
from memlab.belief.runs import LABELS


def _plot(ax, cfg, analysis: ReturnsStats, memories, tail=False):
    for m in memories:
        R = analysis.curves[m]
        updates = np.arange(1, R.shape[1] + 1)
        if tail:
            updates, R = updates[-cfg.tail:], R[:, -cfg.tail:]
        (line,) = ax.plot(updates, R.mean(axis=0), lw=1.2, label=LABELS[m])
        ax.plot(updates, R.T, color=line.get_color(), lw=0.5, alpha=0.35)
    if not tail:  # the zoomed panel shows the curves only
        ax.axhline(analysis.ceiling, color="k", ls="--", lw=0.8, label="fully informed optimum")
        ax.axhline(analysis.qmdp, color="0.4", ls=":", lw=1.0, label="QMDP on the exact belief")
    ax.set(xlabel="update", ylabel="episodic return")


def save_figure(cfg, analysis: ReturnsStats, run, memories, filename, title):
    fig, axes = plots.figure(1, 2, width=11.5, height=3.6)
    _plot(axes[0], cfg, analysis, memories)
    axes[0].set_title(f"(a) {title}", fontsize=9)
    _plot(axes[1], cfg, analysis, memories, tail=True)
    axes[1].set_title(f"(b) last {min(cfg.tail, analysis.curves[memories[0]].shape[1])} updates", fontsize=9)
    # beside the panels: inside (a) it covered the curves of the first updates
    handles = [*axes[0].get_legend_handles_labels()[0], plots.key("one seed (thin lines; bold: mean)", lw=0.5)]
    plots.legend_outside(axes[1], handles=handles, fontsize=7)
    run.save_figure(fig, filename)

"""The figures of ``belief.ringworld-returns`` (Fig. 3) and ``belief.deep-alf-inits`` (Figs. 9, 10): episodic return
against update, mean ± std over seeds, beside the last updates."""

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
        mean, std = R.mean(axis=0), R.std(axis=0)
        (line,) = ax.plot(updates, mean, lw=1.2, label=LABELS[m])
        ax.fill_between(updates, mean - std, mean + std, color=line.get_color(), alpha=0.2, lw=0)
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
    handles = [*axes[0].get_legend_handles_labels()[0], plots.key("± 1 std over seeds (shaded)", lw=6, alpha=0.2)]
    plots.legend_outside(axes[1], handles=handles, fontsize=7)
    run.save_figure(fig, filename)

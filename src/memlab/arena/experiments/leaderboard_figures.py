"""``arena.leaderboard``'s figures: the heat map of gaps and the budget curves."""

from __future__ import annotations

import matplotlib.colors
import numpy as np

from memlab import plots
from memlab.arena.experiments.leaderboard_analysis import POSTERIOR, Leaderboard
from memlab.runner import Run

FLOOR = 1e-4  # the smallest gap the figures resolve (paper-scale gaps reach 4e-4 on hmm-mess3)


def draw(cfg, board: Leaderboard, exact: list[str], run: Run) -> None:
    """gaps.png, the tasks x layers heat map of ``cfg`` (a ``LeaderboardConfig``), and budget.png, each layer's mean
    held-out gap against training steps per task; with one layer, each seed's beside the mean (a mean over seeds of
    which some recall and some do not is no seed's curve)."""
    # log scales: the layers that learn the task sit between 0.005 and 0.05, where a linear scale shows one colour
    gaps = np.array([[board.stats[t][m].gap for m in cfg.layers] for t in cfg.tasks])
    fig, ax = plots.figure(width=max(4.5, 1.6 + 0.9 * len(cfg.layers)), height=1.4 + 0.6 * len(cfg.tasks))
    norm = matplotlib.colors.LogNorm(vmin=FLOOR, vmax=1.0)
    image = ax.imshow(np.clip(gaps, FLOOR, 1.0), cmap="viridis_r", norm=norm, aspect="auto")
    for (i, j), g in np.ndenumerate(gaps):
        ax.text(j, i, f"{g:.2g}", ha="center", va="center", color="white" if g > 0.1 else "black", fontsize=8)
    ax.set_xticks(range(len(cfg.layers)), cfg.layers, rotation=30, ha="right")
    ax.set_yticks(range(len(cfg.tasks)), [t + ("" if t in exact else " (≈)") for t in cfg.tasks])
    ax.grid(False)
    ax.set_title("normalised gap to each task's reference\n(0 = the reference, 1 = no memory; log colours)\n"
                 "≈: an approximate reference; a gap below 0 beats it", fontsize=9)
    fig.colorbar(image, ax=ax)
    run.save_figure(fig, "gaps.png")

    one = len(cfg.layers) == 1
    fig, axes = plots.figure(1, len(cfg.tasks), width=3.2 * len(cfg.tasks) + 1.6, height=3.2, squeeze=False)
    for ax, t in zip(axes[0], cfg.tasks, strict=True):
        for m in cfg.layers:
            ax.plot(board.steps, board.stats[t][m].budget, marker="o", ms=3, label=m + (" (mean)" if one else ""))
            for k, seed in enumerate(board.stats[t][m].seed_budgets if one else ()):
                ax.plot(board.steps, seed, lw=0.9, alpha=0.6, ls=":", label=f"seed {k}")
        ax.set(title=t, xlabel="training steps")
        ax.set_yscale("symlog", linthresh=FLOOR)  # log above FLOOR, linear through 0 (a gap may dip below it)
        ax.axhline(0.0, color="black", lw=0.8)
        if t in board.bounds:
            ax.axhline(board.bounds[t].gap, color="black", ls="--", lw=0.8, label=POSTERIOR + " (bound)")
    axes[0][0].set_ylabel("held-out gap (symlog)")
    labelled = {label: h for ax in axes[0] for h, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    axes[0][-1].legend(labelled.values(), labelled.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    run.save_figure(fig, "budget.png")

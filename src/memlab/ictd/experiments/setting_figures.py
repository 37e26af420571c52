"""The figures ``ictd.pretrain`` and ``ictd.mask-relaxation`` both draw from trained settings
(:class:`~.setting.Setting`), one plotting function per figure kind: the learned blocks (Fig. 3(a) / 6(e,f)), the
emergence trajectories (Fig. 5 / 6(a,b)) and emergence against d_t (Fig. 3(b) / 6(c,d)); pure functions of the
numbers, returning the figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from memlab import plots
from memlab.ictd.experiments.diagnostics import binned_by_dt, trailing_mean, truncated_mean_sem
from memlab.ictd.experiments.setting import View

__all__ = ["checkpoint_title", "plot_blocks", "plot_emergence_vs_dt", "plot_trajectories"]


def checkpoint_title(rule: str, steps: np.ndarray, scores: np.ndarray) -> str:
    """Panel title of one checkpoint row: the rule, the steps per seed, the seed-mean score, the stand-in note."""
    stand_in = int(np.sum(scores == 0))
    note = f"\nscore 0 at every step for {stand_in}/{scores.size} seeds: their end of training is shown"
    note = note if stand_in else ""
    return f"{rule}\nsteps {steps.tolist()}, seed-mean score {scores.mean():.2f}{note}"


def _block_labels(d: int) -> list[str]:
    return [f"$x_{{{i + 1}}}$" for i in range(d)] + ["$r$", r"$\gamma v'$", "$v$"]


def plot_blocks(rows: list[tuple[str, np.ndarray, np.ndarray]]):
    """Fig. 3(a) / 6(e,f): one row per checkpoint (title, V (S, D, D), A (S, D, D)); seed means, each matrix divided by
    its max |entry|, colormap over [-1, 1], entries printed."""
    fig = plt.figure(layout="constrained", figsize=(8.4, 3.9 * len(rows)))
    for (title, V, A), sub in zip(rows, np.atleast_1d(fig.subfigures(len(rows), 1))):
        sub.suptitle(title, fontsize=9)
        axes = sub.subplots(1, 2)
        for M, name, ax in ((V, "V_0", axes[0]), (A, "A_0", axes[1])):
            mean = np.mean(M, 0)
            scale = np.max(np.abs(mean))
            shown = mean / scale if scale > 0 else mean
            image = ax.imshow(shown, cmap="RdBu_r", vmin=-1, vmax=1)
            labels = _block_labels(M.shape[-1] - 3)
            ax.set_xticks(range(len(labels)), labels)
            ax.set_yticks(range(len(labels)), labels)
            ax.grid(False)
            for (i, j), x in np.ndenumerate(shown):
                if x != 0:
                    ax.text(j, i, f"{x:.2f}", ha="center", va="center", fontsize=6,
                            color="w" if abs(x) > 0.6 else "k")
            ax.set_title(f"${name}$ / max|entry|  (max|entry| = {scale:.3g})", fontsize=8)
        sub.colorbar(image, ax=axes.tolist(), shrink=0.8)
    return fig


def plot_trajectories(grid: list[list[View]], window: int):
    """Fig. 5 / 6(a,b): trailing average (``window``) per seed, mean +- s.e.m. over seeds. ``grid`` rows: score forms
    (paper, mirrored), columns: settings (masks); one panel of V_em and A_em per view, each seed truncated at its best
    step as App. F.3 does, and below each column one panel of d_t, which the score form does not change (every seed
    to the end of training). A grey step line gives the share of seeds still in the mean; where fewer than half of
    them are left, the curve is pale: a mean of the few seeds that trained longest is not comparable with the steps
    before (the paper run's Fig. 5 jumped there). One legend below the panels."""
    R, C = len(grid), len(grid[0])
    fig, axes = plots.figure(R + 1, C, width=max(5.2 * C, 8.0), height=2.4 * (R + 1) + 0.6, squeeze=False,
                             sharex="col")
    seeds = grid[0][0].stop.size
    for c in range(C):
        for r in range(R):
            view, ax = grid[r][c], axes[r, c]
            for data, color in ((view.V_em, "tab:blue"), (view.A_em, "tab:orange")):
                mean, sem, count = truncated_mean_sem(trailing_mean(data, window), view.stop)
                steps, enough = np.arange(mean.size), 2 * count >= seeds
                pale = ~enough | np.append(~enough[1:], False)  # from the last step with enough seeds: no gap
                ax.plot(np.where(enough, steps, np.nan), mean, color=color, lw=1.2)
                ax.fill_between(steps, mean - sem, mean + sem, where=enough, color=color, alpha=0.25, lw=0)
                ax.plot(np.where(pale, steps, np.nan), mean, color=color, lw=0.8, alpha=0.45)
            if count.min() < seeds:
                ax.plot(steps, count / seeds, color="0.5", lw=0.8, drawstyle="steps-post")
            truncated = np.sum(view.stop < view.V_em.shape[1] - 1)
            ax.set(ylim=(-0.03, 1.03), ylabel="score",
                   title=f"{view.title}\n({truncated}/{seeds} seeds truncated at their best step)")
        view, ax = grid[0][c], axes[R, c]
        every_step = np.full(view.stop.size, view.d_t.shape[1] - 1)
        mean, sem, _ = truncated_mean_sem(trailing_mean(view.d_t, window), every_step)
        steps = np.arange(mean.size)
        ax.plot(steps, mean, color="tab:green", lw=1.2)
        ax.fill_between(steps, mean - sem, mean + sem, color="tab:green", alpha=0.25, lw=0)
        ax.axhline(1 / view.n, color="0.4", ls=":", lw=1)
        ax.set(xlabel="training step", ylabel="$d_t$",
               title=f"{view.title.split(':')[0]}: $d_t$, every seed to the end")
    handles = [plots.key("$V_{em}$ (band ± s.e.m.)", color="tab:blue"),
               plots.key("$A_{em}$", color="tab:orange"),
               plots.key(f"pale: fewer than half of the {seeds} seeds left", lw=0.8, alpha=0.45),
               plots.key("share of seeds in the mean (the others stopped at their best step)", lw=0.8, color="0.5"),
               plots.key("$d_t$", color="tab:green"),
               plots.key(f"uniform attention 1/n = {1 / grid[0][0].n:.2g}", ls=":", lw=1, color="0.4")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=7)
    return fig


def plot_emergence_vs_dt(grid: list[list[View]], num_bins: int):
    """Fig. 3(b) / 6(c,d): V_em and A_em against d_t in ``num_bins`` equal-width bins (pooled mean, per-seed IQR)."""
    R, C = len(grid), len(grid[0])
    fig, axes = plots.figure(R, C, width=5.2 * C, height=3.4 * R, squeeze=False)
    for r, views in enumerate(grid):
        for c, view in enumerate(views):
            ax = axes[r, c]
            for name, score, color in (("V", view.V_em, "tab:blue"), ("A", view.A_em, "tab:orange")):
                b = binned_by_dt(view.d_t, score, num_bins)
                ax.plot(b.centers, b.mean, "o-", ms=3, color=color, label=f"${name}_{{em}}$ (mean)")
                ax.fill_between(b.centers, b.q25, b.q75, color=color, alpha=0.25, lw=0,
                                label="25–75 % of the per-seed bin means" if name == "V" else None)
            ax.axvline(1 / view.n, color="0.4", ls=":", lw=1, label="uniform attention 1/n")
            ax.set(xlabel="kernel diagonal mean $d_t$ (eq. 34)", ylabel="score", ylim=(-0.03, 1.03),
                   title=view.title)
            ax.legend(loc="best", fontsize=7)
    return fig

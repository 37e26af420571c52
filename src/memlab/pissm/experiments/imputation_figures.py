"""``pissm.imputation``'s figure: the imputed paths. A pure function of the numbers; the experiment saves the file."""

from __future__ import annotations

import numpy as np

from memlab import plots
from memlab.pissm.data import Split

__all__ = ["plot_imputation"]


def plot_imputation(test: Split, mask, b: int, paths: dict[str, np.ndarray]):
    """One panel per model of ``paths`` (model -> (T, 2) sample-mean filtered position along test sequence ``b``):
    the true path, the kept observations (``mask``), and the estimate, circled at the removed steps. Every panel
    spans the same box: the true path, the observations and the estimates, but no more than half the true path's
    extent beyond it on each side, so that one estimate that runs away does not shrink the others; a panel whose
    estimate leaves that box says how many of its points are outside. Returns the figure."""
    y, x, m = np.asarray(test.y[b]), np.asarray(test.x[b]), np.asarray(mask[b])
    truth = x[:, [0, 2]]
    estimates = np.concatenate([est for est in paths.values()]) if paths else truth
    shown = np.concatenate([truth, y[m], estimates])
    shown = shown[np.isfinite(shown).all(-1)]
    t_lo, t_hi = truth.min(0), truth.max(0)
    reach = 0.5 * np.maximum(t_hi - t_lo, 0.1)
    lo = np.maximum(shown.min(0), t_lo - reach)
    hi = np.minimum(shown.max(0), t_hi + reach)
    pad = 0.05 * (hi - lo)
    lo, hi = lo - pad, hi + pad
    # square panels: narrower than tall, else constrained layout pushes the titles out of the figure
    fig, axes = plots.figure(1, len(paths), width=3.2 * len(paths), height=3.8, squeeze=False)
    for ax, (name, est) in zip(axes[0], paths.items()):
        ax.plot(truth[:, 0], truth[:, 1], "k-", lw=0.8, alpha=0.6, label="true path")
        ax.plot(y[m, 0], y[m, 1], "k.", ms=4, label="kept observations")
        ax.plot(est[:, 0], est[:, 1], "C3-", lw=0.8, label="estimate (sample mean)")
        ax.plot(est[~m, 0], est[~m, 1], "C3o", ms=3, mfc="none", label="imputed (removed steps)")
        outside = int(np.sum(~(np.all((est >= lo) & (est <= hi), -1))))
        if outside:
            ax.text(0.02, 0.02, f"{outside}/{len(est)} estimates outside the view", transform=ax.transAxes,
                    fontsize=7, color="C3")
        ax.set(title=name, xlim=(lo[0], hi[0]), ylim=(lo[1], hi[1]), aspect="equal")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncols=4, fontsize=7)
    fig.suptitle(f"App. H.1 (paper: imputation, shown as animations)\n{np.mean(~m):.0%} of this test sequence's "
                 "observations removed", fontsize=9)
    return fig

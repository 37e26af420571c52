"""``pissm.pong-modes``' figure: Fig. 9 (modes, eigenvalues, predictive ellipses). A pure function of an evaluation
cell; the experiment saves the file."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Ellipse

from memlab import plots
from memlab.pissm.data import Split
from memlab.pissm.experiments.cells import ModesEvaluation
from memlab.pissm.pong_modes import true_eigenvalues
from memlab.pissm.runs import NUM_MODES

__all__ = ["plot_modes"]

SNAPSHOTS = (15, 35, 55, 75)  # Fig. 9's predictive ellipses, at these steps


def _ellipse(ax, mean, cov, **kw):
    values, vectors = np.linalg.eigh(np.asarray(cov))
    angle = np.degrees(np.arctan2(vectors[1, -1], vectors[0, -1]))
    w, h = 2 * 2 * np.sqrt(np.maximum(values[::-1], 0))  # 2-sigma
    ax.add_patch(Ellipse(np.asarray(mean), w, h, angle=angle, fill=False, **kw))


def plot_modes(split: Split, evaluation: ModesEvaluation, estimator: str):
    """Fig. 9 for the test sequence ``b`` of one estimator's evaluation cell (``modes.modes_evaluate_cell``): the
    true and the sampled modes, the two smallest eigenvalues of the sampled A_z against the truth, and the
    predictive ellipses at ``SNAPSHOTS`` beside the particle filter's. Returns the figure."""
    fig = plots.plt.figure(figsize=(12, 7.5), layout="constrained")
    grid = fig.add_gridspec(3, 4)
    b = evaluation.b
    y, x, T = np.asarray(split.y[b]), np.asarray(split.x[b]), split.y.shape[1]
    modes, true_modes = np.asarray(evaluation.modes), np.asarray(split.z[b])
    box = (-0.05, 1.05)  # the unit box with a margin: markers on a wall are not cut in half
    ax = fig.add_subplot(grid[0, 0])
    ax.scatter(x[:, 0], x[:, 2], c=true_modes, cmap="tab10", vmin=0, vmax=9, s=12)
    ax.set(title="true path, true mode\n(velocity quadrant)", xlim=box, ylim=box, aspect="equal")
    ax = fig.add_subplot(grid[0, 1])
    ax.scatter(y[:, 0], y[:, 1], c=modes % 20, cmap="tab20", vmin=0, vmax=19, s=12)
    ax.plot(x[:, 0], x[:, 2], "k-", lw=0.5, alpha=0.5)
    ax.set(title="observations coloured by\nthe sampled mode z_t", xlim=(-0.1, 1.1), ylim=(-0.1, 1.1), aspect="equal")
    # the modes against time, the paper's second row: persistence is one colour per interval between bounces
    ax = fig.add_subplot(grid[0, 2:])
    ax.scatter(np.arange(T), np.ones(T), c=true_modes, cmap="tab10", vmin=0, vmax=9, s=28, marker="s")
    ax.scatter(np.arange(T), np.zeros(T), c=modes % 20, cmap="tab20", vmin=0, vmax=19, s=28, marker="s")
    for t in np.flatnonzero(np.asarray(split.events[b]).any(-1)):
        ax.axvline(t, color="k", lw=0.5, alpha=0.3)
    in_use = evaluation.modes_in_use
    ax.set(yticks=[0, 1], yticklabels=["sampled z_t", "true mode"], ylim=(-0.6, 1.6), xlim=(-1, T),
           xlabel="t (grey: true bounces)",
           title="modes along the sequence" + (f"\n{in_use} of {NUM_MODES['pong']} modes in use on the test split "
                                               "(paper: 4 dominant)" if in_use is not None else ""))
    ax.grid(False)
    ax = fig.add_subplot(grid[1, :])
    bounces = np.flatnonzero(np.asarray(split.events[b]).any(-1))
    eig = np.asarray(evaluation.eigenvalues)
    truth = true_eigenvalues(np.asarray(split.events[b]))
    for i, style in enumerate(("C0", "C1")):
        ax.plot(eig[:, i], style, marker=".", lw=1, label=f"learned: eigenvalue {i + 1} of A_z_t (real part)")
        ax.plot(truth[:, i], style, ls=":", lw=1.5, label=f"true: eigenvalue {i + 1}")
    for t in bounces:
        ax.axvline(t, color="k", lw=0.5, alpha=0.3)
    ax.set(xlabel="t (grey: true bounces)", ylabel="eigenvalue",
           title="two smallest eigenvalues of the sampled step map A_z_t; dotted: the true step's (paper: they track "
                 "the truth)")
    ax.set_ylim(-1.75, 1.2)  # room below the true -1 for the legend: it hid the last bounces
    ax.legend(ncol=4, fontsize=7, loc="lower center")
    for j, t in enumerate(sorted({min(t, T - 1) for t in SNAPSHOTS})):  # a short test sequence: its last step once
        ax = fig.add_subplot(grid[2, j])
        ax.plot(x[max(t - 10, 0): t + 1, 0], x[max(t - 10, 0): t + 1, 2], "k-", lw=0.8, alpha=0.5)
        ax.plot(x[t, 0], x[t, 2], "k*", ms=8, label="true position")
        ax.plot(y[t, 0], y[t, 1], "kx", label="observation")
        _ellipse(ax, evaluation.obs_means[t], evaluation.obs_covs[t], color="C3",
                 label="pi-SSM q(y_t | y_1:t-1)")
        _ellipse(ax, evaluation.pf_obs_means[t], evaluation.pf_obs_covs[t], color="C2", ls="--",
                 label="particle filter (true dynamics)")
        ax.set(title=f"t = {t}", xlim=(-0.1, 1.1), ylim=(-0.1, 1.1), aspect="equal")  # ellipses at a wall
        if j == 0:
            ax.legend(fontsize=6, loc="lower left")
    fig.suptitle(f"Fig. 9 (paper, App. H.1; Fig. 4 in the main text), estimator {estimator}")
    return fig

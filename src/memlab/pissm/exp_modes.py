"""``pissm.pong-modes``: Fig. 4 / Fig. 9 and App. H.1's mode analysis on Pong.

A pi-SSM-GRU is trained on Pong; on the test split we report App. H.1's two properties of the sampled modes
z_t ~ q(z_t | x_{t-1}): uniqueness (how many of the K = 18 modes are still sampled: ``modes_in_use``, share
>= 1 %) and persistence (inside each interval between two bounces, the share of steps with the interval's most
frequent mode), plus the best one-to-one agreement with the true velocity-quadrant modes (``pong_modes``). The
figure shows one test trajectory with the inferred modes coloured, the predictive distributions
q(y_t | y_{1:t-1}) at t = 15, 35, 55, 75 (pi-SSM and the true-dynamics particle filter), and the two smallest
eigenvalues (by real part) of A_{z_t} along the trajectory against the true linear part of each step.

Oracle (``oracle_epochs`` > 0, ``pong_modes.oracle_selection``): the true step maps given, does eq. (9) learn to
select them? It separates two failures: learning the modes' dynamics, and learning to select them.

Two sweeps: training (the model, whose bytes the cell returns, and the oracle), then one evaluation cell that
rebuilds the model and computes the statistics and the figure's arrays.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax.numpy as jnp
import numpy as np
from matplotlib.patches import Ellipse

from memlab import plots
from memlab.checks import check_choice, check_int
from memlab.pissm import metrics
from memlab.pissm.data import Dataset
from memlab.pissm.data.pong import NOISE_STD
from memlab.pissm.pong_modes import (
    mode_statistics,
    most_bounces,
    oracle_selection,
    smallest_eigenvalues,
    true_eigenvalues,
)
from memlab.pissm.reference import pong_particle_filter
from memlab.pissm.runs import (
    LAYOUTS,
    NUM_MODES,
    fit,
    full_mask,
    load_dataset,
    model_bytes,
    model_from_bytes,
    predict_jit,
)
from memlab.pissm.train import TrainConfig
from memlab.runner import Experiment, Run

SNAPSHOTS = (15, 35, 55, 75)
SUMMARY = """# pissm.pong-modes — Fig. 4 / Fig. 9, App. H.1

{model} trained on Pong ({layout} layout, {epochs} epochs; best validation log-likelihood {best_val:.3f} per step, \
test {test_ll:.3f}). Modes sampled on the test split:

{table}
Persistence counts, per interval of constant true mode, the share of steps carrying the interval's most frequent \
sampled mode (1 = one mode per interval). Our Pong is our own generator (unit box, noise 0.05); the true modes are \
velocity quadrants, which change exactly at bounces. A single dominant mode scores high persistence trivially; the \
agreement (chance ~0.25-0.3) and the eigenvalues at wall hits say whether the modes are the bounce dynamics.

{oracle}![Fig. 9](fig9_pong_modes.png)
"""
ORACLE = """Oracle ({oracle_epochs} epochs): with A_z, b_z, C fixed to the true step maps (free flight and one \
reflection per wall, exact Kalman update), the trained q(z | x) samples the right reflection at {at_hits:.1%} of the \
wall hits and free flight at {in_flight:.1%} of the other steps (test log-likelihood {test_ll:.3f}). {reading}

"""
READINGS = {
    "learnable": "So selection is learnable here; a failure of the full model lies in learning the modes' dynamics.",
    "free-flight": "So the estimator of eq. (9) does not find the reflections even when they are given: it settled "
                   "on free flight everywhere (a reflection sampled in mid-flight costs tens of nats), and a mode "
                   "that is never sampled gets no gradient.",
    "none": "q(z | x) has not learned a selection in this budget.",
}
QUANTITIES = (  # (statistic, quantity, paper)
    ("modes_in_use", "modes in use (share >= 1 %, K = 18)", "4 dominant"),
    ("persistence", "persistence inside bounce intervals", "consistent colours"),
    ("dominant_share", "share of the most used mode", "—"),
    ("agreement", "best one-to-one agreement with the true quadrant mode", "—"),
    ("eigenvalue_at_bounces", "smallest eigenvalue of the sampled A_z at wall hits (truth -1)", "tracks the truth"),
    ("eigenvalue_elsewhere", "... at the other steps (truth 1)", "tracks the truth"),
)
STATISTICS = ("modes_in_use", "persistence", "agreement", "test_ll", "best_val", "dominant_share",
              "eigenvalue_at_bounces", "eigenvalue_elsewhere")


@dataclasses.dataclass(frozen=True)
class ModesConfig:
    seed: int = 0
    layout: str = "quick"  # runs.LAYOUTS: tiny, quick, paper
    model: str = "pissm-gru"
    epochs: int = 10
    batch_size: int = 32
    particles: int = 2000
    oracle_epochs: int = 10  # 0: no oracle run (module doc)

    def validate(self):
        check_choice("layout", self.layout, LAYOUTS)
        check_choice("model", self.model, ("pissm-gru", "pissm-lstm", "pissm-lg"))
        for name in ("epochs", "batch_size", "particles"):
            check_int(name, getattr(self, name))
        check_int("oracle_epochs", self.oracle_epochs, low=0)


def run_pong_modes(cfg: ModesConfig, run: Run) -> dict:
    """Pong (driver) -> training sweep (model, oracle) -> evaluation sweep -> statistics, Fig. 9, claims."""
    data = load_dataset("pong", LAYOUTS[cfg.layout]["pong"], key=run.key_for("data", "pong"))
    trained = run.sweep(_train_cells(cfg, data, run), "pissm.pong-modes training")
    evaluation = run.sweep({"evaluate": partial(evaluate_cell, cfg, data, trained["train"]["model"],
                                                run.key_for("evaluate"), run.key_for("particle-filter"))},
                           "pissm.pong-modes evaluation")["evaluate"]
    stats = _analyse(trained, evaluation)
    run.save_csv("mode_shares.csv", ["mode", "share"], list(enumerate(evaluation["shares"])))
    _figures(data.test, evaluation, run)
    _claims(cfg, stats, run)
    _summary(cfg, stats, run)
    return stats


def _train_cells(cfg: ModesConfig, data: Dataset, run: Run) -> dict:
    cells = {"train": partial(train_cell, cfg, data, run.key_for("train"))}
    if cfg.oracle_epochs:
        cells["oracle"] = partial(oracle_selection, data, cfg.oracle_epochs, cfg.batch_size,
                                  run.key_for("oracle"))
    return cells


def train_cell(cfg: ModesConfig, data: Dataset, key) -> dict:
    """One cell: train ``cfg.model`` on Pong; its training record and the model as bytes."""
    model, record = fit(cfg.model, "pong", data, TrainConfig(epochs=cfg.epochs, batch_size=cfg.batch_size), key)
    return {**record, "model": model_bytes(model)}


def evaluate_cell(cfg: ModesConfig, data: Dataset, blob: bytes, key, pf_key) -> dict:
    """One cell: one sampled path per test sequence of the trained model -> ``mode_statistics`` and the test
    log-likelihood; for the test sequence with the most bounces (``b``) the arrays of Fig. 9: the sampled modes,
    the predictive moments, the eigenvalues of the sampled A_z and the particle filter's predictive moments."""
    model = model_from_bytes(blob, cfg.model, "pong", data)
    test = data.test
    preds = predict_jit(model, test.y, full_mask(test), key, 1)
    A, modes = np.asarray(model.A), np.asarray(preds.modes[0])
    b = most_bounces(test)
    pf = pong_particle_filter(pf_key, test.y[b], None, NOISE_STD, cfg.particles)
    return {**mode_statistics(A, modes, test),
            "test_ll": float(jnp.mean(metrics.predictive_log_likelihood(preds.log_likelihoods, full_mask(test)))),
            "b": b, "modes": modes[b], "obs_means": preds.obs_means[0, b], "obs_covs": preds.obs_covs[0, b],
            "eigenvalues": smallest_eigenvalues(A[modes[b]]).real, "pf_obs_means": pf.obs_means,
            "pf_obs_covs": pf.obs_covs}


def _analyse(trained: dict[str, dict], evaluation: dict) -> dict:
    """The statistics of the evaluation cell, the best validation log-likelihood of training, the oracle's scores."""
    stats = {name: trained["train"]["best_val"] if name == "best_val" else evaluation[name] for name in STATISTICS}
    if "oracle" in trained:
        stats["oracle"] = trained["oracle"]
    return stats


def _ellipse(ax, mean, cov, **kw):
    values, vectors = np.linalg.eigh(np.asarray(cov))
    angle = np.degrees(np.arctan2(vectors[1, -1], vectors[0, -1]))
    w, h = 2 * 2 * np.sqrt(np.maximum(values[::-1], 0))  # 2-sigma
    ax.add_patch(Ellipse(np.asarray(mean), w, h, angle=angle, fill=False, **kw))


def _figures(split, evaluation: dict, run: Run) -> None:
    """Fig. 9 for the test sequence ``b`` of the evaluation cell."""
    fig = plots.plt.figure(figsize=(12, 7.5), layout="constrained")
    grid = fig.add_gridspec(3, 4)
    b = evaluation["b"]
    y, x, T = np.asarray(split.y[b]), np.asarray(split.x[b]), split.y.shape[1]
    modes = np.asarray(evaluation["modes"])
    ax = fig.add_subplot(grid[0, :2])
    ax.scatter(x[:, 0], x[:, 2], c=np.asarray(split.z[b]), cmap="tab10", vmin=0, vmax=9, s=12)
    ax.set(title="true trajectory, true mode (velocity quadrant)", xlim=(0, 1), ylim=(0, 1), aspect="equal")
    ax = fig.add_subplot(grid[0, 2:])
    ax.scatter(y[:, 0], y[:, 1], c=modes % 20, cmap="tab20", vmin=0, vmax=19, s=12)
    ax.plot(x[:, 0], x[:, 2], "k-", lw=0.5, alpha=0.5)
    ax.set(title="observations coloured by the sampled mode z_t", xlim=(-0.1, 1.1), ylim=(-0.1, 1.1), aspect="equal")
    ax = fig.add_subplot(grid[1, :])
    bounces = np.flatnonzero(np.asarray(split.events[b]).any(-1))
    eig = np.asarray(evaluation["eigenvalues"])
    truth = true_eigenvalues(np.asarray(split.events[b]))
    for i, style in enumerate(("C0", "C1")):
        ax.plot(eig[:, i], style, marker=".", lw=1, label=f"learned: eigenvalue {i + 1} of A_z_t (real part)")
        ax.plot(truth[:, i], style, ls=":", lw=1.5, label=f"true: eigenvalue {i + 1}")
    for t in bounces:
        ax.axvline(t, color="k", lw=0.5, alpha=0.3)
    ax.set(xlabel="t (grey: true bounces)", ylabel="eigenvalue", title="two smallest eigenvalues of the step map")
    ax.legend(ncol=2, fontsize=7)
    for j, t in enumerate(SNAPSHOTS):
        t = min(t, T - 1)
        ax = fig.add_subplot(grid[2, j])
        ax.plot(x[max(t - 10, 0): t + 1, 0], x[max(t - 10, 0): t + 1, 2], "k-", lw=0.8, alpha=0.5)
        ax.plot(x[t, 0], x[t, 2], "k*", ms=8, label="true position")
        ax.plot(y[t, 0], y[t, 1], "kx", label="observation")
        _ellipse(ax, evaluation["obs_means"][t], evaluation["obs_covs"][t], color="C3",
                 label="pi-SSM q(y_t | y_1:t-1)")
        _ellipse(ax, evaluation["pf_obs_means"][t], evaluation["pf_obs_covs"][t], color="C2", ls="--",
                 label="particle filter (true dynamics)")
        ax.set(title=f"t = {t}", xlim=(-0.05, 1.05), ylim=(-0.05, 1.05), aspect="equal")
        if j == 0:
            ax.legend(fontsize=6, loc="lower left")
    run.save_figure(fig, "fig9_pong_modes.png")


def _claims(cfg: ModesConfig, stats: dict, run: Run) -> None:
    run.claim("modes-pruned", f"of K = {NUM_MODES['pong']} modes only a few stay in use (App. H.1: four dominant "
              "modes in Pong)",
              "4", str(stats["modes_in_use"]), bool(stats["modes_in_use"] <= 6))
    run.claim("modes-persist", "inside each interval between bounces the same mode is sampled (persistence)",
              "consistent colours per interval (Fig. 9)", f"{stats['persistence']:.2f}",
              bool(stats["persistence"] >= 0.9))
    run.claim("modes-flip-at-bounces", "at the steps with a wall hit the sampled A_z has an eigenvalue near -1 "
              "(mean smallest real part over those steps; elsewhere near 1)", "eigenvalues track the truth (Fig. 9)",
              f"{stats['eigenvalue_at_bounces']:.2f} at bounces, {stats['eigenvalue_elsewhere']:.2f} elsewhere",
              bool(stats["eigenvalue_at_bounces"] < 0))
    if "oracle" in stats:
        oracle = stats["oracle"]
        run.claim("oracle-selects-reflections", "with the true step maps given, eq. (9) teaches q(z | x) to sample "
                  "the reflection at wall hits", "implied by Fig. 9 (modes switch at bounces)",
                  f"{oracle['at_hits']:.2f} of hits ({oracle['in_flight']:.2f} of free-flight steps right)",
                  bool(oracle["at_hits"] >= 0.5))


def _oracle_reading(oracle: dict) -> str:
    """Which of READINGS the oracle's scores support."""
    if oracle["at_hits"] >= 0.5:
        return READINGS["learnable"]
    return READINGS["free-flight"] if oracle["in_flight"] >= 0.9 else READINGS["none"]


def _summary(cfg: ModesConfig, stats: dict, run: Run) -> None:
    rows = [[quantity, paper, stats[name]] for name, quantity, paper in QUANTITIES]
    table = run.save_table("modes.csv", ["quantity", "paper", "ours"], rows, {"ours": ".3f"})
    oracle = ""
    if "oracle" in stats:
        o = stats["oracle"]
        oracle = ORACLE.format(oracle_epochs=cfg.oracle_epochs, at_hits=o["at_hits"], in_flight=o["in_flight"],
                               test_ll=o["test_ll"], reading=_oracle_reading(o))
    run.write_summary(SUMMARY.format(model=cfg.model, layout=cfg.layout, epochs=cfg.epochs, best_val=stats["best_val"],
                                     test_ll=stats["test_ll"], table=table, oracle=oracle))


EXPERIMENTS = [Experiment(
    name="pissm.pong-modes",
    paper_ref="Fig. 4, Fig. 9, App. H.1",
    paper="pi-ssm-hybrid-state-space",
    description="pi-SSM on Pong: inferred modes along a trajectory, predictive ellipses at t = 15, 35, 55, 75 beside "
                "a particle filter, eigenvalues of A_z against the true step maps, mode pruning and persistence, "
                "and an oracle (true step maps given) that tests whether eq. (9) learns to select the modes",
    profiles={
        "tiny": ModesConfig(layout="tiny", epochs=1, particles=200, oracle_epochs=1),
        # quick: 10 epochs at batch 16 on the quick layout (250 sequences; was 12 epochs at batch 32 on 500: the
        # same number of optimiser steps per epoch, half the cost), the settings of the other pissm quick profiles.
        "quick": ModesConfig(epochs=10, batch_size=16),
        "paper": ModesConfig(layout="paper", epochs=60, oracle_epochs=20),
    },
    run=run_pong_modes,
)]

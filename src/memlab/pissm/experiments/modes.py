"""``pissm.pong-modes``: Fig. 4 / Fig. 9 and App. H.1's mode analysis on Pong.

A pi-SSM-GRU is trained on Pong by each estimator of ``estimators`` (``runs.ESTIMATORS``: eq. (9) REINFORCE with
z_t drawn from q(z_t | x_{t-1}), and the exact mixture objective with z_t drawn from eq. (6)); on the test split we
report for each App. H.1's two properties of the sampled modes
z_t ~ q(z_t | x_{t-1}): uniqueness (how many of the K = 18 modes are still sampled: ``modes_in_use``, share
>= 1 %) and persistence (inside each interval between two bounces, the share of steps with the interval's most
frequent mode), plus the best one-to-one agreement with the true velocity-quadrant modes (``pong_modes``). The
figure shows one test trajectory with the inferred modes coloured, the predictive distributions
q(y_t | y_{1:t-1}) at t = 15, 35, 55, 75 (pi-SSM and the true-dynamics particle filter), and the two smallest
eigenvalues (by real part) of A_{z_t} along the trajectory against the true linear part of each step.

Oracle (``oracle_epochs`` > 0, ``pong_modes.oracle_selection``): the true step maps given, does each estimator learn
to select them? It separates two failures: learning the modes' dynamics, and learning to select them. Beside it,
the same maps with a hand-coded switching rule and with free flight everywhere, untrained, scored on the same
objective (``pong_modes.rule_scores``): where the rule beats what an estimator learned, the objective prefers
switching and the estimator did not find it.

Two sweeps: training (a model per estimator, whose bytes the cell returns, and an oracle per estimator), then an
evaluation cell per estimator that rebuilds the model and computes the statistics and the figure's arrays, and
one cell for the hand-coded rules.

Choices the paper leaves open (stated in summary.md): our own Pong generator (unit box, speeds 0.03-0.07 per
step; noise 0.05, or 0.01 with ``dataset="pong-0.01"``), the estimators' settings of ``runs``/``train`` (warm-up 5
epochs with theta's optimiser idle, decay 0.5 every 10 epochs, modes started distinct), App. F.1's AR(1) input
noise at ``input_noise`` observation-noise widths, K = 18, the bounded gain (``model``) unless ``model`` is
``pissm-gru`` with the paper's.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax.numpy as jnp
import numpy as np

from memlab.checks import check_choice, check_choices, check_int, check_real
from memlab.files import summary_text
from memlab.pissm import metrics
from memlab.pissm.data import Dataset
from memlab.pissm.experiments.cells import (
    STATISTICS,
    EstimatorStats,
    ModesEvaluation,
    ModesRules,
    OracleScores,
    RuleScores,
    SelectionScores,
    TrainedModel,
    UntrainedModel,
    fit_as_bytes,
)
from memlab.pissm.experiments.modes_figures import plot_modes
from memlab.pissm.experiments.modes_reading import oracle_reading
from memlab.pissm.experiments.report import CHOICES
from memlab.pissm.pong_modes import (
    mode_statistics,
    most_bounces,
    oracle_selection,
    rule_scores,
    smallest_eigenvalues,
)
from memlab.pissm.reference import pong_particle_filter
from memlab.pissm.runs import (
    ESTIMATORS,
    LAYOUTS,
    NUM_MODES,
    PONG_NOISE,
    full_mask,
    load_dataset,
    model_from_bytes,
    predict_jit,
)
from memlab.pissm.train import TrainConfig
from memlab.runner import Experiment, Run
from memlab.store import cell

SUMMARY = summary_text(__package__, "modes")
QUANTITIES = (  # (statistic, quantity, paper)
    ("modes_in_use", "modes in use (share >= 1 %, K = 18)", "4 dominant"),
    ("persistence", "persistence inside bounce intervals", "consistent colours"),
    ("dominant_share", "share of the most used mode", "—"),
    ("agreement", "best one-to-one agreement with the true quadrant mode", "—"),
    ("eigenvalue_at_bounces", "smallest eigenvalue of the sampled A_z at wall hits (truth -1)", "tracks the truth"),
    ("eigenvalue_elsewhere", "... at the other steps (truth 1)", "tracks the truth"),
    ("reflecting_at_bounces", "share of wall hits whose sampled A_z reflects (an eigenvalue < 0; truth 1)", "—"),
    ("reflecting_next_to_bounces", "... at the hit or the step after it", "—"),
    ("reflecting_elsewhere", "share of the other steps whose sampled A_z reflects (truth 0)", "—"),
    ("test_ll", "test log-likelihood per step", "—"),
    ("best_val", "best validation log-likelihood per step", "—"),
)
PONG_DATASETS = tuple(PONG_NOISE)


@dataclasses.dataclass(frozen=True)
class ModesConfig:
    seed: int = 0
    layout: str = "quick"  # runs.LAYOUTS: tiny, quick, paper
    dataset: str = "pong"  # or "pong-0.01"
    model: str = "pissm-gru-bounded"
    estimators: tuple[str, ...] = ("reinforce", "mixture")  # runs.ESTIMATORS
    epochs: int = 10
    batch_size: int = 32
    particles: int = 2000
    oracle_epochs: int = 10  # 0: no oracle runs (module doc)
    input_noise: float = 0.5  # App. F.1's AR(1) input noise, in observation-noise standard deviations

    def validate(self):
        check_choice("layout", self.layout, LAYOUTS)
        check_choice("dataset", self.dataset, PONG_DATASETS)
        check_choice("model", self.model, ("pissm-gru", "pissm-lstm", "pissm-gru-bounded", "pissm-lstm-bounded",
                                           "pissm-lg"))
        check_choices("estimators", self.estimators, ESTIMATORS)
        for name in ("epochs", "batch_size", "particles"):
            check_int(name, getattr(self, name))
        check_int("oracle_epochs", self.oracle_epochs, low=0)
        check_real("input_noise", self.input_noise, 0)


@cell("pissm.modes-train", result=(TrainedModel, UntrainedModel))
def modes_train_cell(model: str, dataset: str, data: Dataset, estimator: str, train: TrainConfig,
                     input_noise: float, key) -> TrainedModel | UntrainedModel:
    """One cell: train ``model`` on the Pong data set ``dataset`` by ``estimator`` (every estimator from the same
    key: the same initial model); its training record and the model as bytes."""
    return fit_as_bytes(model, dataset, data, train, key, estimator=estimator, input_noise=input_noise)


@cell("pissm.modes-rules", result=ModesRules)
def modes_rules_cell(data: Dataset, key) -> ModesRules:
    """One cell: the hand-coded switching rule and free flight everywhere on the true step maps (``rule_scores``)."""
    return ModesRules(rule=RuleScores(**rule_scores(data, key)),
                      free_flight=RuleScores(**rule_scores(data, key, free_flight_only=True)))


@cell("pissm.modes-evaluate", result=ModesEvaluation)
def modes_evaluate_cell(model_name: str, dataset: str, data: Dataset, estimator: str, blob: bytes, particles: int,
                        key, pf_key) -> ModesEvaluation:
    """One cell: one sampled path per test sequence of the model trained by ``estimator`` -> ``mode_statistics``
    and the test log-likelihood; for the test sequence with the most bounces (``b``) the arrays of Fig. 9: the
    sampled modes, the predictive moments, the eigenvalues of the sampled A_z and the particle filter's predictive
    moments (``particles`` particles)."""
    model = model_from_bytes(blob, model_name, dataset, data, estimator)
    test = data.test
    preds = predict_jit(model, test.y, full_mask(test), key, 1)
    A, modes = np.asarray(model.A), np.asarray(preds.modes[0])
    b = most_bounces(test)
    pf = pong_particle_filter(pf_key, test.y[b], None, PONG_NOISE[dataset], particles)
    return ModesEvaluation(
        **mode_statistics(A, modes, test),
        test_ll=float(jnp.mean(metrics.predictive_log_likelihood(preds.log_likelihoods, full_mask(test)))),
        b=b, modes=modes[b], obs_means=preds.obs_means[0, b], obs_covs=preds.obs_covs[0, b],
        eigenvalues=smallest_eigenvalues(A[modes[b]]).real, pf_obs_means=pf.obs_means, pf_obs_covs=pf.obs_covs)


def run_pong_modes(cfg: ModesConfig, run: Run) -> dict:
    """Pong (driver) -> training sweep (a model and an oracle per estimator) -> evaluation sweep (a cell per
    estimator, one for the hand-coded rules) -> statistics, Fig. 9 per estimator, claims."""
    data = load_dataset(cfg.dataset, LAYOUTS[cfg.layout][cfg.dataset], key=run.key_for("data", "pong"))
    trained = run.sweep(_train_cells(cfg, data, run), "pissm.pong-modes training")
    evaluation = run.sweep(_evaluation_cells(cfg, data, trained, run), "pissm.pong-modes evaluation")
    stats = analyse(cfg, trained, evaluation)
    run.save_csv("mode_shares.csv", ["estimator", "mode", "share"],
                 [[e, k, share] for e in cfg.estimators for k, share in enumerate(evaluation[e].shares)])
    figures = {e: f"fig9_pong_modes_{e}.png" for e in cfg.estimators}
    for e, name in figures.items():
        run.save_figure(plot_modes(data.test, evaluation[e], e), name)
    _claims(cfg, stats, run)
    _summary(cfg, stats, figures, run)
    return _results(stats)


def _train_cells(cfg: ModesConfig, data: Dataset, run: Run) -> dict:
    train = TrainConfig(epochs=cfg.epochs, batch_size=cfg.batch_size)
    cells = {f"train-{e}": partial(modes_train_cell, cfg.model, cfg.dataset, data, e, train, cfg.input_noise,
                                   run.key_for("train")) for e in cfg.estimators}
    if cfg.oracle_epochs:
        cells |= {f"oracle-{e}": partial(oracle_selection, data, cfg.oracle_epochs, cfg.batch_size,
                                         run.key_for("oracle"), e) for e in cfg.estimators}
    return cells


def _evaluation_cells(cfg: ModesConfig, data: Dataset, trained: dict, run: Run) -> dict:
    cells = {e: partial(modes_evaluate_cell, cfg.model, cfg.dataset, data, e, trained[f"train-{e}"].model,
                        cfg.particles, run.key_for("evaluate"), run.key_for("particle-filter"))
             for e in cfg.estimators}
    if cfg.oracle_epochs:
        cells["rules"] = partial(modes_rules_cell, data, run.key_for("rules"))
    return cells


@dataclasses.dataclass(frozen=True)
class ModesStats:
    """The mode analysis: ``estimators``, estimator -> ``EstimatorStats``; with oracle runs, ``oracles``, estimator ->
    ``OracleScores``, and the hand-coded switching rule (``rule``) and free flight everywhere (``free_flight``);
    without, ``oracles`` is empty and the rules None."""

    estimators: dict[str, EstimatorStats]
    oracles: dict[str, OracleScores]
    rule: RuleScores | None
    free_flight: RuleScores | None


def analyse(cfg: ModesConfig, trained: dict, evaluation: dict) -> ModesStats:
    """Per estimator: the statistics of its evaluation cell and the best validation log-likelihood of its training;
    the oracles' and the hand-coded rules' scores."""
    estimators = {e: EstimatorStats(**{name: getattr(evaluation[e], name) for name in STATISTICS},
                                    best_val=trained[f"train-{e}"].best_val) for e in cfg.estimators}
    if not cfg.oracle_epochs:
        return ModesStats(estimators, {}, None, None)
    rules = evaluation["rules"]
    return ModesStats(estimators, {e: OracleScores(**trained[f"oracle-{e}"]) for e in cfg.estimators},
                      rules.rule, rules.free_flight)


def _results(stats: ModesStats) -> dict:
    """results.json's "results": per estimator its statistics; with oracle runs, "oracle" and "rules"."""
    if stats.rule is None:
        return dict(stats.estimators)
    rules = {"rule": stats.rule, "free-flight": stats.free_flight}
    return {**stats.estimators, "oracle": stats.oracles, "rules": rules}


def _claims(cfg: ModesConfig, stats: ModesStats, run: Run) -> None:
    for e in cfg.estimators:
        st = stats.estimators[e]
        run.claim(f"modes-pruned[{e}]", f"of K = {NUM_MODES['pong']} modes only a few stay in use (App. H.1: four "
                  f"dominant modes in Pong); estimator {e}; rule: at most 6 modes with share >= 1 %",
                  "4", str(st.modes_in_use), bool(st.modes_in_use <= 6))
        run.claim(f"modes-persist[{e}]", f"inside each interval between bounces the same mode is sampled "
                  f"(persistence); estimator {e}; rule: persistence >= 0.9",
                  "consistent colours per interval (Fig. 9)", f"{st.persistence:.2f}", bool(st.persistence >= 0.9))
        run.claim(f"modes-flip-at-bounces[{e}]", "at the steps with a wall hit the sampled A_z has an eigenvalue "
                  f"near -1 (mean smallest real part over those steps; elsewhere near 1); estimator {e}; rule: "
                  "the mean at wall hits < 0", "eigenvalues track the truth (Fig. 9)",
                  f"{st.eigenvalue_at_bounces:.2f} at bounces, {st.eigenvalue_elsewhere:.2f} elsewhere "
                  f"(reflects at {st.reflecting_at_bounces:.0%} of hits, {st.reflecting_elsewhere:.0%} elsewhere)",
                  bool(st.eigenvalue_at_bounces < 0))
        if e in stats.oracles:
            oracle = stats.oracles[e]
            run.claim(f"oracle-selects-reflections[{e}]", "with the true step maps given, the estimator teaches "
                      f"q(z | x) to sample the reflection at wall hits ({e}); rule: right at >= 50 % of the hits "
                      "and >= 90 % of the free-flight steps", "implied by Fig. 9 (modes switch at bounces)",
                      f"{oracle.at_hits:.2f} of hits ({oracle.in_flight:.2f} of free-flight steps right)",
                      oracle.selects())


def _summary(cfg: ModesConfig, stats: ModesStats, figures: dict[str, str], run: Run) -> None:
    rows = [[quantity, paper, *(getattr(stats.estimators[e], name) for e in cfg.estimators)]
            for name, quantity, paper in QUANTITIES]
    table = run.save_table("modes.csv", ["quantity", "paper", *cfg.estimators], rows,
                           {e: ".3f" for e in cfg.estimators})
    oracle_table, reading = "", "(no oracle runs in this profile)"
    if stats.rule is not None:
        rows = [["hand-coded switching rule (untrained)", *_selection_row(stats.rule)],
                ["free flight everywhere (untrained)", *_selection_row(stats.free_flight)],
                *([f"q(z | x) trained by `{e}`", *_selection_row(stats.oracles[e])] for e in cfg.estimators)]
        oracle_table = run.save_table("oracle.csv", ["mode selection", "at hits", "in flight", "test ll"], rows,
                                      ".3f")
        reading = " ".join(oracle_reading(e, stats.oracles[e], stats.rule, stats.estimators[e])
                           for e in cfg.estimators)
    run.write_summary(SUMMARY.format(
        model=cfg.model, dataset=cfg.dataset, noise=PONG_NOISE[cfg.dataset], layout=cfg.layout, epochs=cfg.epochs,
        input_noise=cfg.input_noise, estimators=", ".join(f"`{e}`" for e in cfg.estimators), table=table,
        oracle_epochs=cfg.oracle_epochs, oracle_table=oracle_table, reading=reading,
        figures="\n".join(f"![Fig. 9, {e}]({f})\n" for e, f in figures.items()), choices=CHOICES))


def _selection_row(scores: SelectionScores) -> list[float]:
    return [scores.at_hits, scores.in_flight, scores.test_ll]


EXPERIMENTS = [Experiment(
    name="pissm.pong-modes",
    paper_ref="Fig. 4, Fig. 9, App. H.1",
    paper="pi-ssm-hybrid-state-space",
    description="pi-SSM on Pong trained by eq. (9) and by the exact mixture objective: inferred modes along a "
                "trajectory, predictive ellipses at t = 15, 35, 55, 75 beside a particle filter, eigenvalues of A_z "
                "against the true step maps, mode pruning and persistence, and the true step maps with a learned, "
                "a hand-coded and no switching rule",
    profiles={
        # tiny: the mixture estimator only (the other pissm tiny profiles train by REINFORCE), to keep make test short
        "tiny": ModesConfig(layout="tiny", estimators=("mixture",), epochs=1, particles=200, oracle_epochs=1),
        # quick: 10 epochs at batch 16 on the quick layout (250 sequences), the settings of the other pissm quick
        # profiles, the paper's estimator (eq. (9) REINFORCE) only: none of the claims is decidable at this size
        # (the paper profiles decide them), and the mixture's cells were close to half of the quick run
        "quick": ModesConfig(epochs=10, batch_size=16, estimators=("reinforce",)),
        # paper: the paper's data size (4000 training sequences), 60 epochs, both estimators and their oracles;
        # paper-0.01: the same at observation noise 0.01, where a bounce shows in one observation
        "paper": ModesConfig(layout="paper", epochs=60, oracle_epochs=20),
        "paper-0.01": ModesConfig(layout="paper", dataset="pong-0.01", epochs=60, oracle_epochs=20),
    },
    run=run_pong_modes,
)]

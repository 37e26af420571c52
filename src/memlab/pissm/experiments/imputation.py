"""``pissm.imputation``: App. H.1's imputation task. Models filter Pong test sequences from which half of the
observations were removed at random (``metrics.imputation_mask``; the first step is kept); at a removed step
every model predicts through the gap with its own dynamics (eq. 208-209 for pi-SSM) and its estimate there is
scored against the true position. Also reported: the predictive log-likelihood of the observations that remain
and the filtered MSE at the observed steps.

App. H.1 does not say whether the models were trained with gaps. Every model here is trained on sequences
with ``train_missing`` of the observations removed (default: the test fraction), so that a direct RNN, which
has no dynamics to predict through a gap with, has learned what a missing-step flag means; ``train_missing=0``
trains on complete sequences as Table 1 does.

Two sweeps: one training cell per model (it returns the model as bytes), then one scoring cell per model (it
rebuilds the model, scores the test split and filters the figure's sequence).
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
from memlab.pissm.experiments.cells import TrainedModel, UntrainedModel, fields_of, fit_as_bytes, score_test_split
from memlab.pissm.experiments.imputation_figures import plot_imputation
from memlab.pissm.experiments.report import CHOICES
from memlab.pissm.runs import (
    LAYOUTS,
    MODELS,
    MaskedScores,
    default_stability,
    load_dataset,
    model_from_bytes,
    predict_jit,
)
from memlab.pissm.train import TrainConfig
from memlab.runner import Experiment, Run
from memlab.store import cell

SUMMARY = summary_text(__package__, "imputation")
TRAINED_WITH_GAPS = ("sequences with {percent:.0f} % of the observations removed (App. H.1 does not say; a direct "
                     "RNN must learn what the missing-step flag means)")
TRAINED_COMPLETE = "complete sequences"
SHOWN = ("pissm-gru-bounded", "lg", "gru", "observation")  # the figure's panels (those of the config)


@dataclasses.dataclass(frozen=True)
class ImputationConfig:
    seed: int = 0
    layout: str = "quick"  # runs.LAYOUTS: tiny, quick, paper
    models: tuple[str, ...] = ("pissm-gru-bounded", "pissm-lg", "lg", "gru", "observation")
    fraction: float = 0.5
    train_missing: float = 0.5  # fraction removed from the training / validation sequences (0: complete)
    epochs: int = 10
    batch_size: int = 32
    num_samples: int = 8
    input_noise: float = 0.5  # App. F.1's AR(1) input noise, in observation-noise standard deviations

    def validate(self):
        check_real("input_noise", self.input_noise, 0)
        check_choice("layout", self.layout, LAYOUTS)
        check_choices("models", self.models, MODELS)
        check_real("fraction", self.fraction, 0, 1, open_low=True, open_high=True)
        check_real("train_missing", self.train_missing, 0, 1, open_high=True)
        for name in ("epochs", "batch_size", "num_samples"):
            check_int(name, getattr(self, name))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImputationScores(MaskedScores):
    """``pissm.imputation-score``: the ``runs.MaskedScores`` of the masked test split and path (T, 2), the
    sample-mean filtered position along the figure's test sequence (an array; lists from a stored record)."""

    path: np.ndarray


@cell("pissm.imputation-train", result=(TrainedModel, UntrainedModel))
def imputation_train_cell(name: str, data: Dataset, train: TrainConfig, train_missing: float, input_noise: float,
                          key) -> TrainedModel | UntrainedModel:
    """One cell: train ``name`` on sequences with a fraction ``train_missing`` removed; its record and the model as
    bytes."""
    return fit_as_bytes(name, "pong", data, train, key, missing=train_missing, input_noise=input_noise)


@cell("pissm.imputation-score", result=ImputationScores)
def imputation_score_cell(name: str, data: Dataset, blob: bytes, mask, num_samples: int, key, b: int,
                          figure_key) -> ImputationScores:
    """One cell: the mean scores of the trained ``name`` on the masked test split (``runs.evaluate``), and its
    sample-mean filtered position (T, 2) along test sequence ``b`` (the figure's)."""
    model, test = model_from_bytes(blob, name, "pong", data), data.test
    scores = score_test_split(model, data, key, num_samples, mask)
    y_in = jnp.where(mask[b:b + 1, :, None], test.y[b:b + 1], jnp.nan)
    p = predict_jit(model, y_in, mask[b:b + 1], figure_key, num_samples)
    return ImputationScores(**fields_of(scores), path=jnp.mean(p.filtered_obs[:, 0], axis=0))


def run_imputation(cfg: ImputationConfig, run: Run) -> dict:
    """Pong and the test mask (driver) -> training sweep -> scoring sweep -> table, figure, claim."""
    data = load_dataset("pong", LAYOUTS[cfg.layout]["pong"], key=run.key_for("data", "pong"))
    mask = metrics.imputation_mask(run.key_for("test-mask"), *data.test.y.shape[:2], cfg.fraction)
    def train(name: str) -> TrainConfig:
        return TrainConfig(epochs=cfg.epochs, batch_size=cfg.batch_size, stability=default_stability(name))

    trained = run.sweep({f"train-{name}": partial(imputation_train_cell, name, data, train(name), cfg.train_missing,
                                                  cfg.input_noise, run.key_for("train"))
                         for name in cfg.models}, "pissm.imputation training")
    b = _figure_sequence(data.test)
    scored = run.sweep({f"score-{name}": partial(imputation_score_cell, name, data,
                                                 trained[f"train-{name}"].model, mask, cfg.num_samples,
                                                 run.key_for("evaluate"), b, run.key_for("figure"))
                        for name in cfg.models}, "pissm.imputation scoring")
    stats = analyse(cfg, scored)
    shown = {name: stats.paths[name] for name in SHOWN if name in stats.paths}
    run.save_figure(plot_imputation(data.test, mask, b, shown), "imputation.png")
    _claims(stats, run)
    _summary(cfg, stats, run)
    return {"table": stats.table}


def _figure_sequence(test) -> int:
    """The test path that covers most of the box."""
    positions = np.asarray(test.x)[:, :, [0, 2]]
    return int(np.argmax(np.prod(np.ptp(positions, axis=1), axis=-1)))


@dataclasses.dataclass(frozen=True)
class ImputationRow:
    """One model's scores on the masked test split (results.json: an entry of ``table``; imputation.csv: a row):
    ``imputation_mse`` at the removed steps, ``observed_filtered_mse`` at the kept ones (against the true position),
    ``ll_observed``, the predictive log-likelihood per kept observation."""

    model: str
    imputation_mse: float
    observed_filtered_mse: float
    ll_observed: float


HEADER = [f.name for f in dataclasses.fields(ImputationRow)]


@dataclasses.dataclass(frozen=True)
class ImputationStats:
    """The imputation analysis: ``table``, an ``ImputationRow`` per model of the config, in order; ``paths``, model ->
    (T, 2) sample-mean filtered position along the figure's test sequence."""

    table: list[ImputationRow]
    paths: dict[str, np.ndarray]


def analyse(cfg: ImputationConfig, scored: dict[str, ImputationScores]) -> ImputationStats:
    """Scoring cells ('score-<model>', ``imputation_score_cell``) -> a row and a figure path per model."""
    scores = {name: scored[f"score-{name}"] for name in cfg.models}
    return ImputationStats([ImputationRow(name, s.imputation_mse, s.filtered_mse, s.ll) for name, s in scores.items()],
                           {name: np.asarray(s.path) for name, s in scores.items()})


def _claims(stats: ImputationStats, run: Run) -> None:
    mse = {row.model: row.imputation_mse for row in stats.table}
    if "pissm-gru-bounded" in mse and "observation" in mse:
        ours, carry = mse["pissm-gru-bounded"], mse["observation"]
        run.claim("pissm-imputes-through-gaps", "pi-SSM's predictions through the gaps beat carrying the last "
                  "observation forward", "qualitative (App. H.1, animations)", f"MSE {ours:.4f} vs {carry:.4f}",
                  bool(ours < carry))


def _summary(cfg: ImputationConfig, stats: ImputationStats, run: Run) -> None:
    rows = [[getattr(row, c) for c in HEADER] for row in stats.table]
    table = run.save_table("imputation.csv", HEADER, rows,
                           {"imputation_mse": ".5f", "observed_filtered_mse": ".5f", "ll_observed": ".3f"})
    trained_on = TRAINED_WITH_GAPS.format(percent=100 * cfg.train_missing) if cfg.train_missing else TRAINED_COMPLETE
    run.write_summary(SUMMARY.format(**dataclasses.asdict(cfg), percent_removed=100 * cfg.fraction,
                                     trained_on=trained_on, table=table, choices=CHOICES))


EXPERIMENTS = [Experiment(
    name="pissm.imputation",
    paper_ref="App. H.1 (imputation)",
    paper="pi-ssm-hybrid-state-space",
    description="50 % of Pong's observations removed: imputed trajectories and MSE at the removed steps",
    profiles={
        "tiny": ImputationConfig(layout="tiny", models=("pissm-gru-bounded", "observation"), epochs=1, num_samples=2),
        # quick: only the two models the claim reads (was also pissm-lg, lg, gru: three trainings that bought no
        # claim; the paper profile keeps them), 10 epochs at batch 16 on the quick layout (250 sequences; was at
        # batch 32 on 500), the settings of the other pissm quick profiles.
        "quick": ImputationConfig(models=("pissm-gru-bounded", "observation"), batch_size=16),
        "paper": ImputationConfig(layout="paper", epochs=60),
    },
    run=run_imputation,
)]

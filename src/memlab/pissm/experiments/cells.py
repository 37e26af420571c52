"""The pi-SSM cells that read no experiment's config, the two steps every training cell shares (``fit_as_bytes``,
``score_test_split``), and the typed records an analysis reads ``pissm.pong-modes``' cell results into
(``EstimatorStats``, ``SelectionScores`` and its two kinds).

Table 1's cells train a model by name and score its test split (``train_and_score``; ``stability_cell`` scores only
a run that did not fail), or run the true-dynamics particle filter (``particle_cell``). ``pissm.pong-modes`` and
``pissm.imputation`` train in one sweep, returning the model as bytes, and rebuild it in a second sweep to score it;
their cells take the experiment's config, so they live beside it (``modes.py``, ``imputation.py``): this module
imports no experiment.

A cell's store name (``@cell``), version and its arguments' values in order are its digest (``store.describe``):
changing these orphans the stored cells (paper-results/cells; tests/test_store_committed.py says so), moving a cell
function or renaming a parameter, an argument's class or its fields does not.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from memlab.pissm.data import Dataset
from memlab.pissm.runs import (
    FitRecord,
    MaskedScores,
    MeanScores,
    NotTrained,
    evaluate,
    fit,
    full_mask,
    initial_model,
    mean_scores,
    model_bytes,
    particle_scores,
)
from memlab.pissm.sensitivity import gain_step_survival
from memlab.pissm.train import TrainConfig
from memlab.store import cell

__all__ = ["STATISTICS", "EstimatorStats", "ModesEvaluation", "ModesRules", "OracleScores", "RuleScores",
           "SelectionScores", "StabilityRun", "StartSurvival", "TrainedModel", "TrainedRun", "UntrainedModel",
           "UntrainedRun", "fields_of", "fit_as_bytes", "particle_cell", "score_test_split", "stability_cell",
           "start_survival_cell", "train_and_score"]


def fields_of(result) -> dict:
    """A result's fields by name, in order (not recursing into fields that are dataclasses themselves)."""
    return {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}


# A cell's result is the record of ``runs.fit`` (a ``FitRecord``, or ``NotTrained`` for a model without trained
# parameters) followed by what the cell adds: dataclass fields are collected base by base from the last base to the
# first, so ``class TrainedRun(MeanScores, FitRecord)`` stores the record's keys, then the scores', as before.


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainedModel(FitRecord):
    """A training cell's result when a later cell rebuilds the model (``runs.model_from_bytes``): the ``FitRecord``
    and model, the trained model's leaves as bytes (``runs.model_bytes``)."""

    model: bytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class UntrainedModel(NotTrained):
    """``TrainedModel`` of a model ``fit`` does not train: the ``NotTrained`` record and the model's bytes."""

    model: bytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainedRun(MeanScores, FitRecord):
    """``pissm.table1-run`` of a model that trains: its ``FitRecord``, then its test split's ``MeanScores``."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class UntrainedRun(MeanScores, NotTrained):
    """``pissm.table1-run`` of a model without trained parameters: ``NotTrained``, then the ``MeanScores``."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StabilityRun(FitRecord):
    """``pissm.stability-run``: the ``FitRecord`` and ll, the test log-likelihood per step (NaN if training failed)."""

    ll: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class StartSurvival:
    """``pissm.start-survival``: per step size in sizes, finite (the share of random directions after whose step the
    filter stays finite) and ll (the test log-likelihood there), lists over the step sizes and directions
    (``sensitivity.gain_step_survival``)."""

    sizes: list[float]
    finite: list
    ll: list


def fit_as_bytes(*args, **kwargs) -> TrainedModel | UntrainedModel:
    """``runs.fit(*args, **kwargs)``'s training record with the trained model as bytes (``model``): what a training
    cell returns when a later cell rebuilds the model (``runs.model_from_bytes``)."""
    model, record = fit(*args, **kwargs)
    kind = TrainedModel if isinstance(record, FitRecord) else UntrainedModel
    return kind(**fields_of(record), model=model_bytes(model))


def score_test_split(model, data: Dataset, key, num_samples: int, mask=None) -> MeanScores | MaskedScores:
    """The means over the test split's sequences of ``runs.evaluate``'s metrics (``mask``: the observed steps)."""
    return mean_scores(evaluate(model, data, data.test, key, num_samples, mask))


@cell("pissm.table1-run", result=(TrainedRun, UntrainedRun))
def train_and_score(model_name: str, data_name: str, data: Dataset, train_cfg: TrainConfig, key, eval_key,
                    estimator: str, input_noise: float, num_samples: int) -> TrainedRun | UntrainedRun:
    """One cell: train ``model_name`` on ``data`` from ``key``, score the test split with ``eval_key``."""
    model, record = fit(model_name, data_name, data, train_cfg, key, estimator=estimator, input_noise=input_noise)
    kind = TrainedRun if isinstance(record, FitRecord) else UntrainedRun
    return kind(**fields_of(record), **fields_of(score_test_split(model, data, eval_key, num_samples)))


@cell("pissm.particle-filter", result=MeanScores)
def particle_cell(data_name: str, data: Dataset, key, particles: int) -> MeanScores:
    """One cell: the true-dynamics particle filter's scores on the test split."""
    return mean_scores(particle_scores(data_name, data, key, particles))


@cell("pissm.stability-run", result=StabilityRun)
def stability_cell(model: str, data: Dataset, train_cfg: TrainConfig, key, eval_key, input_noise: float,
                   num_samples: int) -> StabilityRun:
    """One cell: train ``model`` on Pong; score the test split if it succeeded (``ll`` NaN otherwise)."""
    trained, record = fit(model, "pong", data, train_cfg, key, input_noise=input_noise)
    if not isinstance(record, FitRecord):
        raise ValueError(f"a stability run trains its model; {model} has nothing to train")
    ll = np.nan
    if not record.failed:
        ll = score_test_split(trained, data, eval_key, num_samples).ll
    return StabilityRun(**fields_of(record), ll=ll)


@cell("pissm.start-survival", result=StartSurvival)
def start_survival_cell(model: str, data: Dataset, iss_eps: float, key, eval_key, sizes: tuple[float, ...],
                        directions: int) -> StartSurvival:
    """One cell: the start that ``stability_cell(model, data, <ISS at iss_eps>, key, ...)`` trains from, filtering
    the test split after random steps of its gain's parameters (``sensitivity.gain_step_survival``)."""
    start = initial_model(model, "pong", data, TrainConfig(stability="iss", iss_eps=iss_eps), key)
    survival = gain_step_survival(start, data.test.y, full_mask(data.test), eval_key, sizes, directions)
    return StartSurvival(sizes=list(sizes), finite=survival.finite.tolist(), ll=survival.log_likelihood.tolist())


@dataclasses.dataclass(frozen=True)
class SelectionScores:
    """A mode selection on the true step maps (``pong_modes.oracle_model``), on the test split: ``at_hits``, the
    share of wall hits whose sampled mode is that wall's reflection; ``in_flight``, the share of the other steps with
    free flight; ``test_ll``, the log-likelihood per step."""

    at_hits: float
    in_flight: float
    test_ll: float

    def selects(self) -> bool:
        """A selection that switches: right at >= 50 % of the wall hits and >= 90 % of the free-flight steps."""
        return bool(self.at_hits >= 0.5 and self.in_flight >= 0.9)


@dataclasses.dataclass(frozen=True)
class OracleScores(SelectionScores):
    """q(z | x) trained by an estimator (``pong_modes.oracle_selection``): also ``val_ll`` per epoch, ``failed``."""

    val_ll: list[float]
    failed: bool


@dataclasses.dataclass(frozen=True)
class RuleScores(SelectionScores):
    """An untrained rule (``pong_modes.rule_scores``): also ``process_var``, the Q = q I it chose on validation."""

    process_var: float


@dataclasses.dataclass(frozen=True)
class EstimatorStats:
    """App. H.1's statistics of the model trained by one estimator (results.json: ``results[<estimator>]``): those of
    ``pong_modes.mode_statistics`` but ``shares`` (one sampled path per test sequence), ``test_ll`` (per step, on the
    test split) and ``best_val`` (the training's best validation log-likelihood per step)."""

    modes_in_use: int
    persistence: float
    agreement: float
    test_ll: float
    dominant_share: float
    eigenvalue_at_bounces: float
    eigenvalue_elsewhere: float
    reflecting_at_bounces: float
    reflecting_next_to_bounces: float
    reflecting_elsewhere: float
    best_val: float

    def learns_reflections(self) -> bool:
        """The sampled A_z reflects at >= 50 % of the wall hits (at the hit or the step after) and at <= 10 % of the
        other steps."""
        return bool(self.reflecting_next_to_bounces >= 0.5 and self.reflecting_elsewhere <= 0.1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModesRules:
    """``pissm.modes-rules``: the hand-coded switching rule (rule) and free flight everywhere (free_flight, stored as
    "free-flight"), each ``pong_modes.rule_scores`` on the true step maps."""

    rule: RuleScores
    free_flight: RuleScores = dataclasses.field(metadata={"stored_as": "free-flight"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModesEvaluation:
    """``pissm.modes-evaluate``, the model trained by one estimator with one sampled path per test sequence: the
    numbers of ``pong_modes.mode_statistics`` (modes_in_use ... reflecting_next_to_bounces, shares (K,)), test_ll per
    step; and for the test sequence b with the most bounces the arrays of Fig. 9: the sampled modes (T,), the
    predictive obs_means (T, 2) and obs_covs (T, 2, 2), the two smallest eigenvalues (T, 2) of the sampled A_z, and
    the particle filter's pf_obs_means, pf_obs_covs. Arrays, or lists as a stored record gives them back."""

    modes_in_use: int
    persistence: float
    agreement: float
    dominant_share: float
    eigenvalue_at_bounces: float
    eigenvalue_elsewhere: float
    reflecting_at_bounces: float
    reflecting_elsewhere: float
    reflecting_next_to_bounces: float
    shares: list[float]
    test_ll: float
    b: int
    modes: np.ndarray
    obs_means: np.ndarray
    obs_covs: np.ndarray
    eigenvalues: np.ndarray
    pf_obs_means: np.ndarray
    pf_obs_covs: np.ndarray


# the statistics modes.modes_evaluate_cell computes
STATISTICS = tuple(f.name for f in dataclasses.fields(EstimatorStats) if f.name != "best_val")

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

__all__ = ["STATISTICS", "EstimatorStats", "OracleScores", "RuleScores", "SelectionScores", "fit_as_bytes",
           "particle_cell", "score_test_split", "stability_cell", "start_survival_cell", "train_and_score"]


def fit_as_bytes(*args, **kwargs) -> dict:
    """``runs.fit(*args, **kwargs)``'s training record with the trained model as bytes (``model``): what a training
    cell returns when a later cell rebuilds the model (``runs.model_from_bytes``)."""
    model, record = fit(*args, **kwargs)
    return {**record, "model": model_bytes(model)}


def score_test_split(model, data: Dataset, key, num_samples: int, mask=None) -> dict[str, float]:
    """The means over the test split's sequences of ``runs.evaluate``'s metrics (``mask``: the observed steps)."""
    return mean_scores(evaluate(model, data, data.test, key, num_samples, mask))


@cell("pissm.table1-run")
def train_and_score(model_name: str, data_name: str, data: Dataset, train_cfg: TrainConfig, key, eval_key,
                    estimator: str, input_noise: float, num_samples: int) -> dict:
    """One cell: train ``model_name`` on ``data`` from ``key``, score the test split with ``eval_key``."""
    model, record = fit(model_name, data_name, data, train_cfg, key, estimator=estimator, input_noise=input_noise)
    return {**record, **score_test_split(model, data, eval_key, num_samples)}


@cell("pissm.particle-filter")
def particle_cell(data_name: str, data: Dataset, key, particles: int) -> dict:
    """One cell: the true-dynamics particle filter's scores on the test split."""
    return mean_scores(particle_scores(data_name, data, key, particles))


@cell("pissm.stability-run")
def stability_cell(model: str, data: Dataset, train_cfg: TrainConfig, key, eval_key, input_noise: float,
                   num_samples: int) -> dict:
    """One cell: train ``model`` on Pong; score the test split if it succeeded (``ll`` NaN otherwise)."""
    trained, record = fit(model, "pong", data, train_cfg, key, input_noise=input_noise)
    ll = np.nan
    if not record["failed"]:
        ll = score_test_split(trained, data, eval_key, num_samples)["ll"]
    return {**record, "ll": ll}


@cell("pissm.start-survival")
def start_survival_cell(model: str, data: Dataset, iss_eps: float, key, eval_key, sizes: tuple[float, ...],
                        directions: int) -> dict:
    """One cell: the start that ``stability_cell(model, data, <ISS at iss_eps>, key, ...)`` trains from, filtering
    the test split after random steps of its gain's parameters (``sensitivity.gain_step_survival``)."""
    start = initial_model(model, "pong", data, TrainConfig(stability="iss", iss_eps=iss_eps), key)
    survival = gain_step_survival(start, data.test.y, full_mask(data.test), eval_key, sizes, directions)
    return {"sizes": list(sizes), "finite": survival.finite.tolist(), "ll": survival.log_likelihood.tolist()}


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


# the statistics modes.modes_evaluate_cell computes
STATISTICS = tuple(f.name for f in dataclasses.fields(EstimatorStats) if f.name != "best_val")

"""Table 6 of the paper beside our typed row (``StabilityRow``), the function that computes one from a row's cells,
and where a failed run's parameters stopped being finite."""

from __future__ import annotations

import dataclasses

import numpy as np

from memlab.pissm.experiments.cells import StabilityRun
from memlab.pissm.experiments.report import paper_row
from memlab.pissm.runs import FitRecord

__all__ = ["PAPER_TABLE6", "STABILITY_COLUMNS", "STABILITY_FORMATS", "StabilityRow", "nonfinite_step",
           "stability_row"]

# Table 6, Pong column: objective (mean, std) and success rate per (model, scheme, value).
PAPER_TABLE6 = {
    ("pissm-gru", "iss", 0.1): (5.401, 0.197, 1.0), ("pissm-gru", "iss", 0.15): (5.231, 0.228, 1.0),
    ("pissm-gru", "iss", 0.2): (5.084, 0.281, 1.0), ("pissm-gru", "iss", 0.25): (4.888, 0.324, 1.0),
    ("pissm-lstm", "iss", 0.1): (5.475, 0.217, 1.0), ("pissm-lstm", "iss", 0.15): (5.281, 0.174, 1.0),
    ("pissm-lstm", "iss", 0.2): (5.172, 0.202, 1.0), ("pissm-lstm", "iss", 0.25): (4.911, 0.215, 1.0),
    ("pissm-gru", "clip", 5): (5.166, 0.446, 1.0), ("pissm-gru", "clip", 10): (5.249, 1.12, 0.6),
    ("pissm-gru", "clip", 15): (5.281, 2.541, 0.3), ("pissm-gru", "clip", 20): (None, None, 0.0),
    ("pissm-lstm", "clip", 10): (5.251, 1.31, 0.45), ("pissm-lstm", "clip", 20): (None, None, 0.0),
}


@dataclasses.dataclass(frozen=True)
class StabilityRow:
    """One line of Table 6 (results.json: an entry of ``table``; stability.csv: a row).

    model, scheme, value: the model, "iss" (ISS buffer eps = value) or "clip" (gradient-norm threshold = value).
    runs: seeds; success: the share of them that trained (finite, not diverged, a finite test score).
    objective_mean, objective_std: test log-likelihood per step over the successful runs; NaN if none.
    nonfinite_step_min, nonfinite_step_max: over the runs that failed with a non-finite value, the first optimiser
    step (1-based, counted over epochs) after which the parameters were not finite; NaN if no run did.
    best_val_mean: the best validation log-likelihood per step a run reached (before it stopped, if it failed), mean
    over the runs that reached a finite one; NaN if none did.
    paper_objective, paper_std, paper_success: Table 6's Pong column; None where the paper has no number.
    """

    model: str
    scheme: str
    value: float
    runs: int
    success: float
    objective_mean: float
    objective_std: float
    nonfinite_step_min: float
    nonfinite_step_max: float
    best_val_mean: float
    paper_objective: float | None
    paper_std: float | None
    paper_success: float | None


STABILITY_COLUMNS = [f.name for f in dataclasses.fields(StabilityRow)]
STABILITY_FORMATS = {"value": "g", "success": ".0%", "objective_mean": ".3f", "objective_std": ".3f",
                     "nonfinite_step_min": ".0f", "nonfinite_step_max": ".0f", "best_val_mean": ".3f",
                     "paper_success": ".0%"}


def stability_row(model: str, scheme: str, value: float, cells: list[StabilityRun]) -> StabilityRow:
    """The row of one (model, scheme, value) from its cells (one per seed, ``cells.stability_cell``): the success
    rate and the objective over the successful runs, beside Table 6."""
    lls = [c.ll for c in cells if not c.failed and np.isfinite(c.ll)]
    steps = [step for c in cells if c.failed and (step := nonfinite_step(c)) is not None]
    best = [c.best_val for c in cells if np.isfinite(c.best_val)]
    paper = PAPER_TABLE6.get((paper_row(model), scheme, value), (None, None, None))
    return StabilityRow(model, scheme, value, len(cells), len(lls) / len(cells),
                        float(np.mean(lls)) if lls else np.nan, float(np.std(lls)) if lls else np.nan,
                        float(min(steps)) if steps else np.nan, float(max(steps)) if steps else np.nan,
                        float(np.mean(best)) if best else np.nan, *paper)


def nonfinite_step(record: FitRecord) -> int | None:
    """The first optimiser step (1-based) after which a training record's parameters were not finite (its
    ||U||_inf, recorded after every step, is NaN from there), or None if they stayed finite. Only the steps that ran
    count: training stops after its first non-finite epoch and pads the later epochs' histories with NaN."""
    norms = np.asarray(record.recurrent_norm, float)
    epochs, failed = len(record.train_loss), record.failed_epoch
    if epochs and failed is not None and failed >= 0:
        norms = norms[:(failed + 1) * (norms.size // epochs)]
    bad = np.flatnonzero(~np.isfinite(norms))
    return int(bad[0]) + 1 if bad.size else None

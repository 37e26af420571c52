"""Table 1 / Table 8 of the paper beside our typed row (``Table1Row``) and the function that computes one from a
row's cells."""

from __future__ import annotations

import dataclasses

import numpy as np

from memlab.pissm import metrics
from memlab.pissm.experiments.cells import TrainedRun, UntrainedRun
from memlab.pissm.experiments.report import paper_row
from memlab.pissm.runs import MeanScores

__all__ = ["DIRECT", "TABLE1_COLUMNS", "TABLE1_FORMATS", "Table1Row", "table1_row"]

# Table 1 (log-likelihood) and Table 8 (MSE; NCLT in dB from Table 7) of the paper, for the rows we run, per column
# (Pong, Lorenz, Navier-Stokes, NCLT); both our Pong noises sit beside the paper's one Pong column.
PAPER_LL = {
    "observation": (4.112, 4.374, 3.591, -30.87), "lstm": (4.580, 5.182, 4.571, -27.91),
    "gru": (4.611, 5.215, 4.558, -27.94), "lg": (4.993, 5.434, 4.711, -24.42),
    "pissm-lg": (5.385, 5.691, 5.044, -23.51), "pissm-gru": (5.401, 5.856, 5.097, -23.18),
    "pissm-lstm": (5.475, 5.844, 5.137, -23.25),
}
PAPER_MSE = {
    "observation": (None, None, None, 25.47), "lstm": (0.097, 0.090, 0.360, 22.83),
    "gru": (0.095, 0.091, 0.356, 22.57), "lg": (0.083, 0.076, 0.260, 20.45), "pissm-lg": (None,) * 4,
    "pissm-gru": (0.061, 0.056, 0.208, 19.50), "pissm-lstm": (0.058, 0.057, 0.205, 19.64),
}
PAPER_COLUMN = {"pong": 0, "pong-0.01": 0, "lorenz": 1, "navier-stokes": 2, "nclt": 3}
DIRECT = ("gru", "lstm")  # predict y_t from y_{1:t-1} only: no filtered estimate


@dataclasses.dataclass(frozen=True)
class Table1Row:
    """One line of Table 1 / Table 8 (results.json: an entry of ``table``; table1.csv: a row, with its time).

    dataset, model: the data set and the model (``runs.MODELS``, or ``pf`` for the particle filter).
    seeds: the cells averaged (one for ``pf``).
    ll_mean, ll_std: mean and std over seeds of the test log-likelihood per step; ll_ceiling: the data set's
    ``table1.ll_ceiling``.
    filtered_mse_mean, filtered_mse_std: the filtered position's MSE over seeds; filtered_mse_db: 10 log10 of the
    mean (Table 7's unit, NCLT); all three None for the direct RNNs (``DIRECT``), which have no filtered estimate.
    predicted_mse: the one-step prediction's MSE, mean over seeds.
    failed: how many seeds' training failed.
    paper_ll, paper_mse: Table 1 / Table 8 (NCLT: Table 7, dB); None where the paper has no number.
    """

    dataset: str
    model: str
    seeds: int
    ll_mean: float
    ll_std: float
    ll_ceiling: float
    filtered_mse_mean: float | None
    filtered_mse_std: float | None
    filtered_mse_db: float | None
    predicted_mse: float
    failed: int
    paper_ll: float | None
    paper_mse: float | None


TABLE1_COLUMNS = tuple(f.name for f in dataclasses.fields(Table1Row))
TABLE1_FORMATS = {"ll_mean": ".3f", "ll_std": ".3f", "ll_ceiling": ".2f", "filtered_mse_mean": ".2e",
                  "filtered_mse_std": ".2e", "filtered_mse_db": ".2f", "predicted_mse": ".2e", "cell_seconds": ".0f"}


def table1_row(data_name: str, model_name: str, ceiling: float, cells: list[TrainedRun | UntrainedRun | MeanScores]
               ) -> Table1Row:
    """The row of ``model_name`` on ``data_name`` from its cells (one per seed; ``cells.train_and_score`` or
    ``cells.particle_cell``): our mean (std) over seeds beside the paper's number."""
    d = PAPER_COLUMN[data_name]
    column = {"ll": np.asarray([c.ll for c in cells], float),
              "filtered_mse": np.asarray([c.filtered_mse for c in cells], float),
              "predicted_mse": np.asarray([c.predicted_mse for c in cells], float)}
    failed = sum(bool(getattr(c, "failed", False)) for c in cells)  # the particle filter's MeanScores: no training
    filtered = None if model_name in DIRECT else column["filtered_mse"]
    return Table1Row(
        dataset=data_name, model=model_name, seeds=len(cells), ll_mean=float(column["ll"].mean()),
        ll_std=float(column["ll"].std()), ll_ceiling=ceiling,
        filtered_mse_mean=None if filtered is None else float(filtered.mean()),
        filtered_mse_std=None if filtered is None else float(filtered.std()),
        filtered_mse_db=None if filtered is None else float(metrics.to_db(filtered.mean())),
        predicted_mse=float(column["predicted_mse"].mean()), failed=failed,
        paper_ll=PAPER_LL.get(paper_row(model_name), (None,) * 4)[d],
        paper_mse=PAPER_MSE.get(paper_row(model_name), (None,) * 4)[d])

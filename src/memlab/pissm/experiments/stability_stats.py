"""``pissm.stability``'s analysis: Table 6's rows from the training cells, the failed ISS runs that kept their RNN
within the bound, and how the starts survive random steps."""

from __future__ import annotations

import dataclasses

import numpy as np

from memlab.pissm.experiments.cells import StabilityRun, StartSurvival
from memlab.pissm.experiments.stability_rows import StabilityRow, stability_row
from memlab.pissm.experiments.stability_sweep import (
    MODELS,
    START_SEEDS,
    StabilityConfig,
    cell_name,
    schemes,
    start_name,
    step_sizes,
)


@dataclasses.dataclass(frozen=True)
class StabilityStats:
    """The stability analysis (results.json's ``results``): ``table``, one ``stability_rows.StabilityRow`` per (model,
    scheme, value), models of the config in order, each with its ISS buffers, then its clipping thresholds."""

    table: list[StabilityRow]
    iss_failures: int = 0  # ISS runs (of the paper's models) that failed
    iss_failures_within_bound: int = 0  # of those, the runs whose ||U||_inf stayed within the ISS bound to the end
    # and the runs whose parameters were non-finite from the first optimiser step on (no finite ||U|| to bound)
    iss_failures_at_first_step: int = 0
    step_sizes: tuple[float, ...] = ()
    # per model, per step size: the fraction of test sequences whose filter stays finite after a random step of that
    # size in the gain's parameters, over the starts and directions (median, min, max; survival_cells)
    start_survival: dict[str, list[tuple[float, float, float]]] = dataclasses.field(default_factory=dict)


def _within_bound(record: StabilityRun) -> bool:
    """Whether ||U||_inf / radius stayed at most 1 (float32 round-off aside) at every step before training stopped:
    the ISS projection did its work, so what diverged was not the RNN."""
    ratio = np.asarray(record.recurrent_norm, float) / np.asarray(record.radius, float)
    ratio = ratio[np.isfinite(ratio)]
    return bool(ratio.size and ratio.max() <= 1.0 + 1e-5)


def _never_finite(record: StabilityRun) -> bool:
    """Whether no step of the run left a finite ||U||_inf: non-finite from the first optimiser step on."""
    return not np.any(np.isfinite(np.asarray(record.recurrent_norm, float)))


def analyse(cfg: StabilityConfig, cells: dict[str, StabilityRun], starts: dict[str, StartSurvival]) -> StabilityStats:
    """Cells -> per (model, scheme, value) the success rate over seeds and the objective's mean and std over the
    successful runs, beside Table 6; how many failed ISS runs kept their RNN within the ISS bound; and how the starts
    survive random steps (``survival_cells``)."""
    table = [stability_row(model, scheme, value, [cells[cell_name(model, scheme, value, s)] for s in range(cfg.seeds)])
             for model in cfg.models for scheme, value in schemes(cfg)]
    failed = [cells[cell_name(m, "iss", e, s)] for m in cfg.models if m in MODELS for e in cfg.iss_eps
              for s in range(cfg.seeds) if cells[cell_name(m, "iss", e, s)].failed]
    survival = {}
    for model in cfg.models:
        finite = np.concatenate([np.asarray(starts[start_name(model, s)].finite, float)
                                 for s in range(min(cfg.seeds, START_SEEDS))], axis=1)  # (sizes, starts x directions)
        survival[model] = [(float(np.median(f)), float(f.min()), float(f.max())) for f in finite]
    return StabilityStats(table, iss_failures=len(failed),
                          iss_failures_within_bound=sum(_within_bound(c) for c in failed),
                          iss_failures_at_first_step=sum(_never_finite(c) for c in failed),
                          step_sizes=step_sizes(cfg), start_survival=survival)

"""``pissm.stability``'s claims: Table 6's, read on the paper's models of the config."""

from __future__ import annotations

import numpy as np

from memlab.pissm.experiments.report import paper_row
from memlab.pissm.experiments.stability_rows import PAPER_TABLE6
from memlab.pissm.experiments.stability_stats import StabilityStats
from memlab.pissm.experiments.stability_sweep import MODELS, StabilityConfig
from memlab.runner import Run


def _paper_eps_order(model: str, low: float, high: float) -> str:
    """Table 6's objectives of ``model``'s paper row at the ISS buffers ``low`` and ``high``
    (``stability_rows.PAPER_TABLE6``)."""
    objective = {eps: PAPER_TABLE6[(paper_row(model), "iss", eps)][0] for eps in (low, high)}
    return f"{objective[low]:.3f} (eps {low:g}) > {objective[high]:.3f} (eps {high:g})"


def add_claims(cfg: StabilityConfig, stats: StabilityStats, run: Run) -> None:
    """Table 6's claims, read on the paper's models (``MODELS``) of the config; an ablation-only config has none."""
    by = {(r.model, r.scheme, r.value): r for r in stats.table}
    models = [m for m in cfg.models if m in MODELS]
    if not models:
        return
    iss_success = [by[(m, "iss", e)].success for m in models for e in cfg.iss_eps]
    kept = kept_within_bound(stats)
    why = (f"{kept} (Fig. 8): what diverged is eq. (7)'s gain in the filter, which ISS does not bound (profile "
           f"paper-ablation changes the gain alone){_survival_words(cfg, stats, models)}") if kept else ""
    run.claim("iss-always-succeeds", "every ISS-projected run trains without NaN or divergence", "100% (Table 6)",
              f"{100 * min(iss_success):.0f}% (worst setting)", bool(min(iss_success) == 1.0), explained=why)
    largest = max(cfg.clip_norms)
    gc_large = [by[(m, "clip", largest)].success for m in models]
    run.claim("gc-fails-at-large-delta", f"gradient clipping at delta = {largest:g} fails in some runs",
              "0% success at delta = 20 (Table 6)", f"{100 * max(gc_large):.0f}% success",
              bool(max(gc_large) < 1.0))
    for m in models if len(set(cfg.iss_eps)) > 1 else ():  # a comparison of buffers needs two of them
        lo = by[(m, "iss", min(cfg.iss_eps))].objective_mean
        hi = by[(m, "iss", max(cfg.iss_eps))].objective_mean
        run.claim(f"{m}-smaller-eps-better", f"{m}: a smaller ISS buffer gives a higher objective",
                  f"{_paper_eps_order(m, min(cfg.iss_eps), max(cfg.iss_eps))} (Table 6)",
                  f"{_objective(lo)} vs {_objective(hi)}",
                  bool(np.isfinite(lo) and np.isfinite(hi) and lo > hi),
                  explained=why if not (np.isfinite(lo) and np.isfinite(hi)) else "")


def kept_within_bound(stats: StabilityStats) -> str:
    """That the ISS projection did its work in every failed ISS run ("" if it did not, or no run failed): each kept
    ||U||_inf within its bound to the end, or had non-finite parameters from the first optimiser step on (no finite
    U for the projection to bound)."""
    first = stats.iss_failures_at_first_step
    if not stats.iss_failures or stats.iss_failures_within_bound + first != stats.iss_failures:
        return ""
    if not first:
        return f"every failed ISS run ({stats.iss_failures}) kept ||U||_inf within its ISS bound to the end"
    return (f"of the failed ISS runs, {stats.iss_failures_within_bound} kept ||U||_inf within its ISS bound to the end "
            f"and {first} had non-finite parameters from the first optimiser step on")


def _survival_words(cfg: StabilityConfig, stats: StabilityStats, models: list[str]) -> str:
    """How much of the test split the paper's models' starts keep finite after one random step of Adam's size (the
    learning rate): the measurement behind a failure at the first optimiser steps (start_survival.png)."""
    at = stats.step_sizes.index(cfg.learning_rate)
    kept = ", ".join(f"{m} {100 * stats.start_survival[m][at][0]:.0f} %" for m in models)
    return (f"; a random step of Adam's size ({cfg.learning_rate:g}) in the gain's parameters leaves finite a median "
            f"of {kept} of the test filters from the start these runs train from (start_survival.png)")


def _objective(value: float) -> str:
    """An objective for the reader: NaN means that no run of the setting trained, and says so."""
    return f"{value:.3f}" if np.isfinite(value) else "no run trained"

"""``pissm.stability``: Table 2 / Table 6 and Fig. 8: the ISS projection (Theorem 2, buffer eps) against gradient
clipping (GC, global-norm threshold delta) as the way to keep pi-SSM's gain RNN trainable.

Each (cell type, scheme, value, seed) is one cell of one sweep: a training run on Pong at the paper's learning
rate 0.011. Objective = test predictive log-likelihood per step of the successful runs (mean ± std); success = the
run stayed finite and did not diverge (``train.py``: last validation log-likelihood not more than 1 nat per step
below the first epoch's). Fig. 8 plots, for one seed, the training loss and the ratio ||U||_inf / (l1 radius at
which the ISS gain reaches 1) after every optimiser step.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np

from memlab.checks import check_choice, check_choices, check_int, check_real
from memlab.files import markdown_table, summary_text
from memlab.pissm.data import Dataset
from memlab.pissm.experiments.cells import stability_cell, start_survival_cell
from memlab.pissm.experiments.report import (
    CHOICES,
    PAPER_TABLE6,
    STABILITY_COLUMNS,
    STABILITY_FORMATS,
    StabilityRow,
    blank,
    paper_row,
    plot_stability,
    plot_start_survival,
    stability_row,
)
from memlab.pissm.runs import LAYOUTS, PISSM_GAINS, TRACKING_INIT, load_dataset
from memlab.pissm.train import TrainConfig
from memlab.runner import Experiment, Run

SUMMARY = summary_text(__package__, "stability")
# the paper's models (gain of eq. (7), readout fitted to the exact gain: the untrained filter tracks); the claims
# read these
MODELS = ("pissm-gru-tracking", "pissm-lstm-tracking")
GATED = tuple(m for m, (gain, _) in PISSM_GAINS.items() if gain != "exact")  # any gated gain (the ablation)
GAIN_WORDS = {"paper": "eq. (7) as printed (absolute units, raw [Σ, r] inputs, unbounded)",
              "paper-normalised": "eq. (7) with its [Σ, r] inputs normalised to ||u||_inf < 1 (Assumption 4), L_t in "
                                  "absolute units, unbounded",
              "unbounded": "scale-free inputs, L = G^{-T} Ltilde around the exact gain, unbounded",
              "bounded": "scale-free inputs, around the exact gain, bounded (memlab's)"}
START_WORDS = {True: "readout fitted to the exact gain before training",
               False: "readout from the first step's factor (untrained filter loses track)"}  # eq. (7)'s two starts


def _model_words(model: str) -> str:
    """How a model's gain is built: its form, and for eq. (7)'s gain its start (``runs.TRACKING_INIT``)."""
    form = PISSM_GAINS[model][1]
    return GAIN_WORDS[form] + (f", {START_WORDS[model in TRACKING_INIT]}" if form.startswith("paper") else "")


def _paper_eps_order(model: str, low: float, high: float) -> str:
    """Table 6's objectives of ``model``'s paper row at the ISS buffers ``low`` and ``high`` (report.PAPER_TABLE6)."""
    objective = {eps: PAPER_TABLE6[(paper_row(model), "iss", eps)][0] for eps in (low, high)}
    return f"{objective[low]:.3f} (eps {low:g}) > {objective[high]:.3f} (eps {high:g})"


@dataclasses.dataclass(frozen=True)
class StabilityConfig:
    seed: int = 0
    layout: str = "quick"  # runs.LAYOUTS: tiny, quick, paper
    models: tuple[str, ...] = MODELS
    iss_eps: tuple[float, ...] = (0.1, 0.15, 0.2, 0.25)
    clip_norms: tuple[float, ...] = (5.0, 10.0, 15.0, 20.0)
    seeds: int = 5
    epochs: int = 10
    batch_size: int = 32
    num_samples: int = 4
    input_noise: float = 0.5  # App. F.1's AR(1) input noise, in observation-noise standard deviations
    learning_rate: float = 0.011  # App. F.1; the paper-lr profile tries a smaller one

    def validate(self):
        check_real("input_noise", self.input_noise, 0)
        check_real("learning_rate", self.learning_rate, 0, open_low=True)
        check_choice("layout", self.layout, LAYOUTS)
        check_choices("models", self.models, GATED)
        for eps in self.iss_eps:
            check_real("iss_eps", eps, 0, 1, open_low=True, open_high=True)
        for delta in self.clip_norms:
            check_real("clip_norms", delta, 0, open_low=True)
        for name in ("seeds", "epochs", "batch_size", "num_samples"):
            check_int(name, getattr(self, name))


def run_stability(cfg: StabilityConfig, run: Run) -> dict:
    """Pong (driver) -> one sweep of (model, scheme, value, seed) training cells -> table, Fig. 8, claims."""
    data = load_dataset("pong", LAYOUTS[cfg.layout]["pong"], key=run.key_for("data", "pong"))
    cells = run.sweep(sweep_cells(cfg, data, run), "pissm.stability")
    starts = run.sweep(survival_cells(cfg, data, run), "pissm.stability start")
    stats = analyse(cfg, cells, starts)
    _figures(cfg, cells, stats, run)
    _claims(cfg, stats, run)
    _summary(cfg, stats, run)
    return stats


def _schemes(cfg: StabilityConfig) -> list[tuple[str, float]]:
    return [("iss", e) for e in cfg.iss_eps] + [("clip", d) for d in cfg.clip_norms]


def _name(model: str, scheme: str, value: float, s: int) -> str:
    return f"{model}-{scheme}-{value:g}-{s}"


def sweep_cells(cfg: StabilityConfig, data: Dataset, run: Run) -> dict:
    """Seed s trains from the key stream ("train", s) and scores with ("evaluate", s), whatever the scheme. A cell's
    arguments are what its result depends on (not the whole config), so profiles share their common cells."""
    return {_name(model, scheme, value, s): partial(stability_cell, model, data, _train_config(cfg, scheme, value),
                                                    run.key_for("train", s), run.key_for("evaluate", s),
                                                    cfg.input_noise, cfg.num_samples)
            for model in cfg.models for scheme, value in _schemes(cfg) for s in range(cfg.seeds)}


# the sizes of the random steps a start is tested against (sensitivity.py): Adam's first steps move every parameter by
# about the learning rate (the profiles' 0.011 and 1e-3 are added); 0 is the start itself
STEP_SIZES = (0.0, 1e-5, 1e-4, 1e-3, 1e-2)
STEP_DIRECTIONS = 4
START_SEEDS = 3  # the first seeds' starts of each model (a start costs a model fit and one filter pass per step)


def _step_sizes(cfg: StabilityConfig) -> tuple[float, ...]:
    return tuple(sorted(set(STEP_SIZES) | {cfg.learning_rate}))


def survival_cells(cfg: StabilityConfig, data: Dataset, run: Run) -> dict:
    """The ISS runs' starts (smallest buffer) of the first ``START_SEEDS`` seeds of each model, stepped at random
    (``start_survival_cell``): the same keys as their training cells, so each is the start that cell trains from."""
    return {_start_name(model, s): partial(start_survival_cell, model, data, min(cfg.iss_eps), run.key_for("train", s),
                                           run.key_for("start", s), _step_sizes(cfg), STEP_DIRECTIONS)
            for model in cfg.models for s in range(min(cfg.seeds, START_SEEDS))}


def _start_name(model: str, s: int) -> str:
    return f"{model}-start-{s}"


def _train_config(cfg: StabilityConfig, scheme: str, value: float) -> TrainConfig:
    """ISS buffer / clipping threshold ``value`` (the other scheme's field at its default)."""
    return TrainConfig(epochs=cfg.epochs, batch_size=cfg.batch_size, stability=scheme, learning_rate=cfg.learning_rate,
                       iss_eps=value if scheme == "iss" else 0.1, clip_norm=value if scheme == "clip" else 10.0)


@dataclasses.dataclass(frozen=True)
class StabilityStats:
    """The stability analysis (results.json's ``results``): ``table``, one ``report.StabilityRow`` per (model,
    scheme, value), models of the config in order, each with its ISS buffers, then its clipping thresholds."""

    table: list[StabilityRow]
    iss_failures: int = 0  # ISS runs (of the paper's models) that failed
    iss_failures_within_bound: int = 0  # of those, the runs whose ||U||_inf stayed within the ISS bound to the end
    step_sizes: tuple[float, ...] = ()
    # per model, per step size: the fraction of test sequences whose filter stays finite after a random step of that
    # size in the gain's parameters, over the starts and directions (median, min, max; survival_cells)
    start_survival: dict[str, list[tuple[float, float, float]]] = dataclasses.field(default_factory=dict)


def _within_bound(record: dict) -> bool:
    """Whether ||U||_inf / radius stayed at most 1 (float32 round-off aside) at every step before training stopped:
    the ISS projection did its work, so what diverged was not the RNN."""
    ratio = np.asarray(record["recurrent_norm"], float) / np.asarray(record["radius"], float)
    ratio = ratio[np.isfinite(ratio)]
    return bool(ratio.size and ratio.max() <= 1.0 + 1e-5)


def analyse(cfg: StabilityConfig, cells: dict[str, dict], starts: dict[str, dict]) -> StabilityStats:
    """Cells -> per (model, scheme, value) the success rate over seeds and the objective's mean and std over the
    successful runs, beside Table 6; how many failed ISS runs kept their RNN within the ISS bound; and how the starts
    survive random steps (``survival_cells``)."""
    table = [stability_row(model, scheme, value, [cells[_name(model, scheme, value, s)] for s in range(cfg.seeds)])
             for model in cfg.models for scheme, value in _schemes(cfg)]
    failed = [cells[_name(m, "iss", e, s)] for m in cfg.models if m in MODELS for e in cfg.iss_eps
              for s in range(cfg.seeds) if cells[_name(m, "iss", e, s)]["failed"]]
    survival = {}
    for model in cfg.models:
        finite = np.concatenate([np.asarray(starts[_start_name(model, s)]["finite"], float)
                                 for s in range(min(cfg.seeds, START_SEEDS))], axis=1)  # (sizes, starts x directions)
        survival[model] = [(float(np.median(f)), float(f.min()), float(f.max())) for f in finite]
    return StabilityStats(table, len(failed), sum(_within_bound(c) for c in failed), _step_sizes(cfg), survival)


def _figures(cfg: StabilityConfig, cells: dict[str, dict], stats: StabilityStats, run: Run) -> None:
    """Fig. 8: loss and ||U||_inf / radius per optimiser step, smallest eps (a seed that trained, if one did) vs
    largest delta (a seed that failed, if one did); and the starts' survival of random steps."""
    run.save_figure(plot_start_survival(stats.step_sizes, stats.start_survival, cfg.learning_rate),
                    "start_survival.png")
    model = cfg.models[0]
    picks = [("ISS eps", "iss", min(cfg.iss_eps), False), ("GC delta", "clip", max(cfg.clip_norms), True)]

    def seed(scheme, value, failed):  # the paper's figure contrasts a run that trains with one that fails
        runs = [cells[_name(model, scheme, value, s)] for s in range(cfg.seeds)]
        return next((r for r in runs if r["failed"] == failed), runs[0])

    panels = [(label, value, seed(scheme, value, failed)) for label, scheme, value, failed in picks]
    run.save_figure(plot_stability(model, panels), "fig8_stability.png")


def _claims(cfg: StabilityConfig, stats: StabilityStats, run: Run) -> None:
    """Table 6's claims, read on the paper's models (``MODELS``) of the config; an ablation-only config has none."""
    by = {(r.model, r.scheme, r.value): r for r in stats.table}
    models = [m for m in cfg.models if m in MODELS]
    if not models:
        return
    iss_success = [by[(m, "iss", e)].success for m in models for e in cfg.iss_eps]
    within = stats.iss_failures and stats.iss_failures_within_bound == stats.iss_failures
    why = (f"every failed ISS run ({stats.iss_failures}) kept ||U||_inf within its ISS bound to the end (Fig. 8): "
           "what diverged is eq. (7)'s gain in the filter, which ISS does not bound (profile paper-ablation changes "
           f"the gain alone){_survival_words(cfg, stats, models)}") if within else ""
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


def _summary(cfg: StabilityConfig, stats: StabilityStats, run: Run) -> None:
    rows = [[blank(getattr(row, c)) for c in STABILITY_COLUMNS] for row in stats.table]
    run.save_csv("stability.csv", STABILITY_COLUMNS, rows)  # exact values, NaN where no run trained
    mean, std = STABILITY_COLUMNS.index("objective_mean"), STABILITY_COLUMNS.index("objective_std")
    shown = [[*row[:mean], *((row[mean], row[std]) if np.isfinite(row[mean]) else ("no run trained", "—")),
              *row[std + 1:]] for row in rows]
    table = markdown_table(STABILITY_COLUMNS, shown, STABILITY_FORMATS)
    run.write_summary(SUMMARY.format(**dataclasses.asdict(cfg), table=table, choices=CHOICES,
                                     gains=_gain_forms(cfg, stats), survival=_survival_table(stats),
                                     starts=min(cfg.seeds, START_SEEDS), directions=STEP_DIRECTIONS))


def _survival_table(stats: StabilityStats) -> str:
    """The starts' survival (``StabilityStats.start_survival``) as a table: a row per model, a column per step size."""
    header = ["model"] + ["start" if size == 0 else f"step {size:g}" for size in stats.step_sizes]
    rows = [[f"`{m}`"] + [f"{100 * med:.0f} % ({100 * lo:.0f}–{100 * hi:.0f})" for med, lo, hi in rows]
            for m, rows in stats.start_survival.items()]
    return markdown_table(header, rows)


def _gain_forms(cfg: StabilityConfig, stats: StabilityStats) -> str:
    """The gain form of each model of the config and its success over every setting: with the ablation
    (``pissm-gru-unbounded``) beside the paper's and the bounded gain, which ingredient keeps training alive."""
    lines = []
    for m in cfg.models:
        counts = []
        for scheme, words in (("iss", "with ISS"), ("clip", "with GC")):
            rows = [r for r in stats.table if r.model == m and r.scheme == scheme]
            if rows:
                ok = round(sum(r.success * r.runs for r in rows))
                counts.append(f"{ok} of {sum(r.runs for r in rows)} runs succeed {words}")
        lines.append(f"- `{m}`: {_model_words(m)}: {', '.join(counts)}")
    return "\n".join(lines)


EXPERIMENTS = [Experiment(
    name="pissm.stability",
    paper_ref="Tables 2 and 6, Fig. 8",
    paper="pi-ssm-hybrid-state-space",
    description="ISS projection (eps) vs gradient clipping (delta) for pi-SSM-GRU/LSTM on Pong: objective, success "
                "rate, and ||U||_inf against the l1 radius over training",
    profiles={
        "tiny": StabilityConfig(layout="tiny", models=("pissm-gru-tracking",), iss_eps=(0.1,), clip_norms=(20.0,),
                                seeds=1,
                                epochs=1, num_samples=1),
        # quick: no clip 5 (no claim reads it: the claims read every ISS eps and the largest delta), 10 epochs
        # at batch 16 on the quick layout (250 sequences; was 6 epochs at batch 32 on 500), 8 test samples (was 4):
        # the settings of the other pissm quick profiles, so ISS eps = 0.1 shares their compiled programs.
        "quick": StabilityConfig(models=("pissm-gru-tracking",), iss_eps=(0.1, 0.25), clip_norms=(20.0,), seeds=2,
                                 epochs=10, batch_size=16, num_samples=8),
        "paper": StabilityConfig(layout="paper", seeds=10, epochs=60),
        # paper-prior-init: the paper profile with eq. (7)'s readout from the first step's factor, the untrained
        # filter already lost (the first paper run, kept as the ablation it became)
        "paper-prior-init": StabilityConfig(layout="paper", models=("pissm-gru", "pissm-lstm"), seeds=10, epochs=60),
        # paper-lr: paper-core's settings at Adam 1e-3 instead of App. F.1's 0.011, for eq. (7)'s gain from either
        # initialisation (at quick size the first-step-factor start trains at 1e-3 and fails at 0.011; the fitted
        # start diverges within its first steps at every rate down to 1e-5)
        "paper-lr": StabilityConfig(layout="paper", models=("pissm-gru", "pissm-gru-tracking"), iss_eps=(0.1, 0.25),
                                    clip_norms=(5.0, 20.0), seeds=5, epochs=60, learning_rate=1e-3),
        # paper-core: the paper profile for pi-SSM-GRU, the smallest and largest ISS buffer and clipping
        # threshold, 5 of its 10 seeds (20 cells; same cell names, keys and arguments as the paper profile's)
        "paper-core": StabilityConfig(layout="paper", models=("pissm-gru-tracking",), iss_eps=(0.1, 0.25),
                                      clip_norms=(5.0, 20.0), seeds=5, epochs=60),
        # paper-normalised: paper-core with eq. (7)'s inputs normalised (Theorem 2's Assumption 4, "enforced via input
        # normalization", App. C.7), the readout fitted to the exact gain as in paper-core: is the failure of
        # paper-core's runs due to the unnormalised inputs, which the paper's theorem assumes away?
        "paper-normalised": StabilityConfig(layout="paper", models=("pissm-gru-normalised",), iss_eps=(0.1, 0.25),
                                            clip_norms=(5.0, 20.0), seeds=5, epochs=60),
        # paper-ablation: quick-ablation's question at the paper's sizes: eq. (7)'s gain from either
        # initialisation, the bounded gain's inputs and units without its bound, and the bounded gain, with ISS 0.1
        # and GC 20, 5 seeds (the paper profile's cell names and keys)
        "paper-ablation": StabilityConfig(layout="paper", models=("pissm-gru", "pissm-gru-tracking",
                                                                  "pissm-gru-unbounded", "pissm-gru-bounded"),
                                          iss_eps=(0.1,), clip_norms=(20.0,), seeds=5, epochs=60),
        # quick-ablation: which ingredient of the bounded gain keeps training alive: eq. (7)'s gain, the
        # bounded gain's inputs and units without the bound, and the bounded gain; ISS 0.1 and GC 20, quick sizes,
        # 5 seeds (30 cells)
        "quick-ablation": StabilityConfig(models=("pissm-gru", "pissm-gru-tracking", "pissm-gru-unbounded",
                                                  "pissm-gru-bounded"),
                                          iss_eps=(0.1,), clip_norms=(20.0,), seeds=5, epochs=10, batch_size=16,
                                          num_samples=8),
    },
    run=run_stability,
    # paper-scale cells, one core each: two cells at a time on two cores do more work than one cell split over
    # both
    pool_profiles=("paper", "paper-prior-init", "paper-core", "paper-ablation", "paper-lr", "paper-normalised"),
)]

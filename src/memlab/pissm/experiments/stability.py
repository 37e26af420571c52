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

from memlab import plots
from memlab.checks import check_choice, check_choices, check_int, check_real
from memlab.files import markdown_table
from memlab.pissm.data import Dataset
from memlab.pissm.runs import CHOICES, LAYOUTS, PISSM_GAINS, evaluate, fit, load_dataset, mean_scores
from memlab.pissm.train import TrainConfig
from memlab.runner import Experiment, Run
from memlab.store import cell

# Table 6, Pong column: objective (mean, std) and success rate per (model, scheme, value).
PAPER_PONG = {
    ("pissm-gru", "iss", 0.1): (5.401, 0.197, 1.0), ("pissm-gru", "iss", 0.15): (5.231, 0.228, 1.0),
    ("pissm-gru", "iss", 0.2): (5.084, 0.281, 1.0), ("pissm-gru", "iss", 0.25): (4.888, 0.324, 1.0),
    ("pissm-lstm", "iss", 0.1): (5.475, 0.217, 1.0), ("pissm-lstm", "iss", 0.15): (5.281, 0.174, 1.0),
    ("pissm-lstm", "iss", 0.2): (5.172, 0.202, 1.0), ("pissm-lstm", "iss", 0.25): (4.911, 0.215, 1.0),
    ("pissm-gru", "clip", 5): (5.166, 0.446, 1.0), ("pissm-gru", "clip", 10): (5.249, 1.12, 0.6),
    ("pissm-gru", "clip", 15): (5.281, 2.541, 0.3), ("pissm-gru", "clip", 20): (None, None, 0.0),
    ("pissm-lstm", "clip", 10): (5.251, 1.31, 0.45), ("pissm-lstm", "clip", 20): (None, None, 0.0),
}


SUMMARY = """# pissm.stability — Tables 2 and 6, Fig. 8

Pong ({layout} layout), {seeds} seeds per setting, {epochs} epochs, Adam at 0.011. Objective: test predictive \
log-likelihood per step over the successful runs (mean and std; NaN where no run succeeded); success: finite and \
not diverged (last validation log-likelihood at most 1 nat per step below the first epoch's). `paper_*`: Table 6's \
Pong column (empty where the paper has no number).

{table}
The ISS buffer acts on the U_r (GRU) or U_c (LSTM) condition; the LSTM forget-gate condition has its own buffer \
1e-3 (App. E.2), see `memlab.layers.gated_rnn`. The gain is eq. (7)'s as printed (`gain_form="paper"`: L_t read \
from the RNN fed [Σ_{{t|t-1}}, r_t], unbounded; its readout starts at the first step's Kalman factor), so the filter \
can diverge as the paper's can: that is what this comparison is about. memlab's bounded gain \
(`pissm-gru-bounded`) removes that route by construction. Every run trains with App. F.1's AR(1) input noise at \
{input_noise} × the observation noise; the estimator is eq. (9) with z_t drawn from q(z_t | x_{{t-1}}).

Gain forms in this run (the ablation, profile `quick-ablation`, changes one thing at a time: eq. (7)'s gain, \
the same inputs and units as the bounded gain without its bound, the bounded gain):

{gains}

![Fig. 8](fig8_stability.png)

## Choices the paper leaves open, and departures from its text

{choices}"""
HEADER = ["model", "scheme", "value", "runs", "success", "objective_mean", "objective_std", "paper_objective",
          "paper_std", "paper_success"]
FORMATS = {"value": "g", "success": ".0%", "objective_mean": ".3f", "objective_std": ".3f", "paper_success": ".0%"}
MODELS = ("pissm-gru", "pissm-lstm")  # the paper's models (gain of eq. (7)); the claims read these
GATED = tuple(m for m, (gain, _) in PISSM_GAINS.items() if gain != "exact")  # any gated gain (the ablation)
GAIN_WORDS = {"paper": "eq. (7) as printed (absolute units, raw [Σ, r] inputs, unbounded)",
              "unbounded": "scale-free inputs, L = G^{-T} Ltilde around the exact gain, unbounded",
              "bounded": "scale-free inputs, around the exact gain, bounded (memlab's)"}
FAILED = {True: " (failed)", False: ""}  # Fig. 8's panel titles


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

    def validate(self):
        check_real("input_noise", self.input_noise, 0)
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
    stats = analyse(cfg, cells)
    _figures(cfg, cells, run)
    _claims(cfg, stats, run)
    _summary(cfg, stats, run)
    return {"table": stats["table"]}


def _schemes(cfg: StabilityConfig) -> list[tuple[str, float]]:
    return [("iss", e) for e in cfg.iss_eps] + [("clip", d) for d in cfg.clip_norms]


def _name(model: str, scheme: str, value: float, s: int) -> str:
    return f"{model}-{scheme}-{value:g}-{s}"


def sweep_cells(cfg: StabilityConfig, data: Dataset, run: Run) -> dict:
    """Seed s trains from the key stream ("train", s) and scores with ("evaluate", s), whatever the scheme. A cell's
    arguments are what its result depends on (not the whole config), so profiles share their common cells."""
    return {_name(model, scheme, value, s): partial(train_cell, model, data, _train_config(cfg, scheme, value),
                                                    run.key_for("train", s), run.key_for("evaluate", s),
                                                    cfg.input_noise, cfg.num_samples)
            for model in cfg.models for scheme, value in _schemes(cfg) for s in range(cfg.seeds)}


def _train_config(cfg: StabilityConfig, scheme: str, value: float) -> TrainConfig:
    """ISS buffer / clipping threshold ``value`` (the other scheme's field at its default)."""
    return TrainConfig(epochs=cfg.epochs, batch_size=cfg.batch_size, stability=scheme,
                       iss_eps=value if scheme == "iss" else 0.1, clip_norm=value if scheme == "clip" else 10.0)


@cell("pissm.stability-run")
def train_cell(model: str, data: Dataset, train_cfg: TrainConfig, key, eval_key, input_noise: float,
               num_samples: int) -> dict:
    """One cell: train ``model`` on Pong; score the test split if it succeeded (``ll`` NaN otherwise)."""
    trained, record = fit(model, "pong", data, train_cfg, key, input_noise=input_noise)
    ll = np.nan
    if not record["failed"]:
        ll = mean_scores(evaluate(trained, data, data.test, eval_key, num_samples))["ll"]
    return {**record, "ll": ll}


def analyse(cfg: StabilityConfig, cells: dict[str, dict]) -> dict:
    """Cells -> {"table": one row per (model, scheme, value) (HEADER), "rows": the same as lists}: the success
    rate over seeds and the objective's mean and std over the successful runs, beside Table 6."""
    rows = []
    for model in cfg.models:
        for scheme, value in _schemes(cfg):
            runs = [cells[_name(model, scheme, value, s)] for s in range(cfg.seeds)]
            lls = [r["ll"] for r in runs if not r["failed"] and np.isfinite(r["ll"])]
            paper = PAPER_PONG.get((model, scheme, value), (None, None, None))
            rows.append([model, scheme, value, len(runs), len(lls) / len(runs),
                         float(np.mean(lls)) if lls else np.nan, float(np.std(lls)) if lls else np.nan, *paper])
    return {"table": [dict(zip(HEADER, r)) for r in rows], "rows": rows}


def _figures(cfg: StabilityConfig, cells: dict[str, dict], run: Run) -> None:
    """Fig. 8: loss and ||U||_inf / radius per optimiser step, smallest eps vs largest delta, seed 0."""
    model = cfg.models[0]
    picks = [("iss", min(cfg.iss_eps), "ISS eps"), ("clip", max(cfg.clip_norms), "GC delta")]
    fig, axes = plots.figure(1, 2, width=9, height=3.2)
    for ax, (scheme, value, label) in zip(axes, picks):
        cell = cells[_name(model, scheme, value, 0)]
        ratio = np.asarray(cell["recurrent_norm"], float) / np.asarray(cell["radius"], float)
        steps = np.arange(1, ratio.size + 1)
        epochs = np.arange(1, len(cell["train_loss"]) + 1) * ratio.size / max(len(cell["train_loss"]), 1)
        ax.plot(epochs, cell["train_loss"], "C0o-", label="training loss (epoch mean)")
        ax.set_xlabel("optimiser step")
        ax.set_ylabel("loss = -log q per step", color="C0")
        twin = ax.twinx()
        twin.plot(steps, ratio, "C3", lw=1, label="||U||_inf / radius")
        twin.axhline(1.0, color="k", ls=":", lw=1)
        twin.set_ylabel("||U||_inf / l1 radius", color="C3")
        ax.set_title(f"{model}, {label} = {value:g}{FAILED[cell['failed']]}")
        if cell.get("failed_epoch", -1) >= 0:  # training stopped there: say so where the loss curve ends
            ax.text(0.02, 0.86, f"stopped after epoch {cell['failed_epoch'] + 1}: a non-finite value",
                    transform=ax.transAxes, va="top", fontsize=7)
    run.save_figure(fig, "fig8_stability.png")


def _claims(cfg: StabilityConfig, stats: dict, run: Run) -> None:
    """Table 6's claims, read on the paper's models (``MODELS``) of the config; an ablation-only config has none."""
    by = {(r["model"], r["scheme"], r["value"]): r for r in stats["table"]}
    models = [m for m in cfg.models if m in MODELS]
    if not models:
        return
    iss_success = [by[(m, "iss", e)]["success"] for m in models for e in cfg.iss_eps]
    run.claim("iss-always-succeeds", "every ISS-projected run trains without NaN or divergence", "100% (Table 6)",
              f"{100 * min(iss_success):.0f}% (worst setting)", bool(min(iss_success) == 1.0))
    largest = max(cfg.clip_norms)
    gc_large = [by[(m, "clip", largest)]["success"] for m in models]
    run.claim("gc-fails-at-large-delta", f"gradient clipping at delta = {largest:g} fails in some runs",
              "0% success at delta = 20 (Table 6)", f"{100 * max(gc_large):.0f}% success",
              bool(max(gc_large) < 1.0))
    for m in models:
        lo = by[(m, "iss", min(cfg.iss_eps))]["objective_mean"]
        hi = by[(m, "iss", max(cfg.iss_eps))]["objective_mean"]
        run.claim(f"{m}-smaller-eps-better", f"{m}: a smaller ISS buffer gives a higher objective",
                  "5.40 (eps 0.1) > 4.89 (eps 0.25) for GRU", f"{_objective(lo)} vs {_objective(hi)}",
                  bool(np.isfinite(lo) and np.isfinite(hi) and lo > hi))


def _objective(value: float) -> str:
    """An objective for the reader: NaN means that no run of the setting trained, and says so."""
    return f"{value:.3f}" if np.isfinite(value) else "no run trained"


def _summary(cfg: StabilityConfig, stats: dict, run: Run) -> None:
    rows = [["" if v is None else v for v in row] for row in stats["rows"]]
    run.save_csv("stability.csv", HEADER, rows)  # exact values, NaN where no run trained
    mean, std = HEADER.index("objective_mean"), HEADER.index("objective_std")
    shown = [[*row[:mean], *((row[mean], row[std]) if np.isfinite(row[mean]) else ("no run trained", "—")),
              *row[std + 1:]] for row in rows]
    table = markdown_table(HEADER, shown, FORMATS)
    run.write_summary(SUMMARY.format(**dataclasses.asdict(cfg), table=table, choices=CHOICES,
                                     gains=_gain_forms(cfg, stats)))


def _gain_forms(cfg: StabilityConfig, stats: dict) -> str:
    """The gain form of each model of the config and its success over every setting: with the ablation
    (``pissm-gru-unbounded``) beside the paper's and the bounded gain, which ingredient keeps training alive."""
    lines = []
    for m in cfg.models:
        counts = []
        for scheme, words in (("iss", "with ISS"), ("clip", "with GC")):
            rows = [r for r in stats["table"] if r["model"] == m and r["scheme"] == scheme]
            if rows:
                ok = round(sum(r["success"] * r["runs"] for r in rows))
                counts.append(f"{ok} of {sum(r['runs'] for r in rows)} runs succeed {words}")
        lines.append(f"- `{m}`: {GAIN_WORDS[PISSM_GAINS[m][1]]}: {', '.join(counts)}")
    return "\n".join(lines)


EXPERIMENTS = [Experiment(
    name="pissm.stability",
    paper_ref="Tables 2 and 6, Fig. 8",
    paper="pi-ssm-hybrid-state-space",
    description="ISS projection (eps) vs gradient clipping (delta) for pi-SSM-GRU/LSTM on Pong: objective, success "
                "rate, and ||U||_inf against the l1 radius over training",
    profiles={
        "tiny": StabilityConfig(layout="tiny", models=("pissm-gru",), iss_eps=(0.1,), clip_norms=(20.0,), seeds=1,
                                epochs=1, num_samples=1),
        # quick: no clip 5 (no claim reads it: the claims read every ISS eps and the largest delta), 10 epochs
        # at batch 16 on the quick layout (250 sequences; was 6 epochs at batch 32 on 500), 8 test samples (was 4):
        # the settings of the other pissm quick profiles, so ISS eps = 0.1 shares their compiled programs.
        "quick": StabilityConfig(models=("pissm-gru",), iss_eps=(0.1, 0.25), clip_norms=(20.0,), seeds=2,
                                 epochs=10, batch_size=16, num_samples=8),
        "paper": StabilityConfig(layout="paper", seeds=10, epochs=60),
        # paper-core (issue 29): the paper profile for pi-SSM-GRU, the smallest and largest ISS buffer and clipping
        # threshold, 5 of its 10 seeds (20 cells; same cell names, keys and arguments as the paper profile's)
        "paper-core": StabilityConfig(layout="paper", models=("pissm-gru",), iss_eps=(0.1, 0.25),
                                      clip_norms=(5.0, 20.0), seeds=5, epochs=60),
        # paper-ablation: quick-ablation's question at the paper's sizes (issue 29): at paper-core, eq. (7)'s gain
        # fails in every run, with ISS as with GC; the bounded gain's inputs and units without its bound, and the
        # bounded gain, with ISS 0.1 and GC 20, 5 seeds (the paper profile's cell names and keys)
        "paper-ablation": StabilityConfig(layout="paper", models=("pissm-gru-unbounded", "pissm-gru-bounded"),
                                          iss_eps=(0.1,), clip_norms=(20.0,), seeds=5, epochs=60),
        # quick-ablation: which ingredient of the bounded gain keeps training alive (issue 14): eq. (7)'s gain, the
        # bounded gain's inputs and units without the bound, and the bounded gain; ISS 0.1 and GC 20, quick sizes,
        # 5 seeds (30 cells, ~40 s each on one core)
        "quick-ablation": StabilityConfig(models=("pissm-gru", "pissm-gru-unbounded", "pissm-gru-bounded"),
                                          iss_eps=(0.1,), clip_norms=(20.0,), seeds=5, epochs=10, batch_size=16,
                                          num_samples=8),
    },
    run=run_stability,
    # paper-scale cells, one core each: two at a time on 2 cores do 1.3x the work of one (steady state, issue 29)
    pool_profiles=("paper", "paper-core", "paper-ablation"),
)]

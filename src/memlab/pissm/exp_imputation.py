"""``pissm.imputation``: App. H.1's imputation task. Models filter Pong test sequences from which half of the
observations were removed at random (``metrics.imputation_mask``; the first step is kept); at a removed step
every model predicts through the gap with its own dynamics (eq. 208-209 for pi-SSM) and its estimate there is
scored against the true position. Also reported: the predictive log-likelihood of the observations that remain
and the filtered MSE at the observed steps.

App. H.1 does not say whether the models were trained with gaps. Every model here is trained on sequences
with ``train_missing`` of the observations removed (default: the test fraction), so that a direct RNN, which
has no dynamics to predict through a gap with, has learned what a missing-step flag means; ``train_missing=0``
trains on complete sequences as Table 1 does.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from memlab import plots
from memlab.pissm import metrics
from memlab.pissm.runs import (
    LAYOUTS,
    MODELS,
    default_stability,
    evaluate,
    load_dataset,
    mean_scores,
    predict_jit,
    trained_model,
)
from memlab.pissm.train import TrainConfig
from memlab.runner import Experiment, Run


@dataclasses.dataclass(frozen=True)
class ImputationConfig:
    seed: int = 0
    layout: str = "quick"  # runs.LAYOUTS: tiny, quick, paper
    models: tuple[str, ...] = ("pissm-gru", "pissm-lg", "lg", "gru", "observation")
    fraction: float = 0.5
    train_missing: float = 0.5  # fraction removed from the training / validation sequences (0: complete)
    epochs: int = 10
    batch_size: int = 32
    num_samples: int = 8

    def validate(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        for m in self.models:
            if m not in MODELS:
                raise ValueError(f"unknown model {m!r}; known: {', '.join(MODELS)}")
        if not 0 < self.fraction < 1:
            raise ValueError(f"fraction must lie in (0, 1), got {self.fraction!r}")
        if not 0 <= self.train_missing < 1:
            raise ValueError(f"train_missing must lie in [0, 1), got {self.train_missing!r}")
        if min(self.epochs, self.batch_size, self.num_samples) < 1:
            raise ValueError("epochs, batch_size and num_samples must be >= 1")


def run(cfg: ImputationConfig, run: Run) -> dict:
    layout = LAYOUTS[cfg.layout]["pong"]
    data = load_dataset("pong", layout, seed=cfg.seed)
    test = data.test
    mask = metrics.imputation_mask(jax.random.key(cfg.seed + 7), *test.y.shape[:2], cfg.fraction)
    scores, models = {}, {}
    with run.progress(len(cfg.models), "pissm.imputation") as advance:
        for name in cfg.models:
            train_cfg = TrainConfig(epochs=cfg.epochs, batch_size=cfg.batch_size, stability=default_stability(name))
            models[name], _ = trained_model(run, f"train-{name}", name, "pong", data, train_cfg, cfg.seed,
                                            missing=cfg.train_missing)
            scores[name] = run.cell(f"score-{name}", lambda name=name: mean_scores(
                evaluate(models[name], data, test, jax.random.key(cfg.seed), cfg.num_samples, mask)))
            advance()
    header = ["model", "imputation_mse", "observed_filtered_mse", "ll_observed"]
    rows = [[n, s["imputation_mse"], s["filtered_mse"], s["ll"]] for n, s in scores.items()]
    run.save_csv("imputation.csv", header, rows)
    _figure(cfg, models, test, mask, run)
    if "pissm-gru" in scores and "observation" in scores:
        ours, carry = scores["pissm-gru"]["imputation_mse"], scores["observation"]["imputation_mse"]
        run.claim("pissm-imputes-through-gaps", "pi-SSM's predictions through the gaps beat carrying the last "
                  "observation forward", "qualitative (App. H.1, animations)", f"MSE {ours:.4f} vs {carry:.4f}",
                  bool(ours < carry))
    _summary(cfg, rows, run)
    return {"table": [dict(zip(header, r)) for r in rows]}


def _figure(cfg, models, test, mask, run: Run):
    positions = np.asarray(test.x)[:, :, [0, 2]]
    b = int(np.argmax(np.prod(np.ptp(positions, axis=1), axis=-1)))  # the test path that covers most of the box
    y, x, m = np.asarray(test.y[b]), np.asarray(test.x[b]), np.asarray(mask[b])
    shown = [n for n in ("pissm-gru", "lg", "gru", "observation") if n in models]
    # square panels: narrower than tall, else constrained layout pushes the titles out of the figure
    fig, axes = plots.figure(1, len(shown), width=3.2 * len(shown), height=3.8, squeeze=False)
    for ax, name in zip(axes[0], shown):
        y_in = jnp.where(mask[b:b + 1, :, None], test.y[b:b + 1], jnp.nan)
        p = predict_jit(models[name], y_in, mask[b:b + 1], jax.random.key(0), cfg.num_samples)
        est = np.asarray(jnp.mean(p.filtered_obs[:, 0], axis=0))
        ax.plot(x[:, 0], x[:, 2], "k-", lw=0.8, alpha=0.6, label="true path")
        ax.plot(y[m, 0], y[m, 1], "k.", ms=4, label="kept observations")
        ax.plot(est[:, 0], est[:, 1], "C3-", lw=0.8)
        ax.plot(est[~m, 0], est[~m, 1], "C3o", ms=3, mfc="none", label="imputed (removed steps)")
        ax.set(title=name, xlim=(-0.05, 1.05), ylim=(-0.05, 1.05), aspect="equal")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize=7)
    run.save_figure(fig, "imputation.png")


def _summary(cfg, rows, run: Run):
    trained_on = (f"sequences with {100 * cfg.train_missing:.0f} % of the observations removed (App. H.1 does not "
                  "say; a direct RNN must learn what the missing-step flag means)" if cfg.train_missing
                  else "complete sequences")
    lines = ["# pissm.imputation — App. H.1", "",
             f"Pong ({cfg.layout} layout), {100 * cfg.fraction:.0f} % of each test sequence's observations removed "
             f"at random (first step kept), models trained {cfg.epochs} epochs on {trained_on}, "
             f"{cfg.num_samples} sampled paths. MSE against the true position; the observation noise variance is "
             "0.0025. The paper shows imputation only qualitatively (animations), so there is no number to compare.",
             "", "| model | imputation MSE (removed steps) | filtered MSE (kept steps) | log-likelihood (kept) |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {r[0]} | {r[1]:.5f} | {r[2]:.5f} | {r[3]:.3f} |" for r in rows]
    lines += ["", "`observation` carries the last kept observation forward (a random walk cannot do better). A direct "
              "RNN (`gru`, `lstm`) has no update with y_t: its estimate at a kept step is the prediction from "
              "y_{1:t-1}, hence its larger filtered MSE.", "",
              "![imputation](imputation.png)"]
    run.write_summary("\n".join(lines))


EXPERIMENT = Experiment(
    name="pissm.imputation",
    paper_ref="App. H.1 (imputation)",
    paper="pi-ssm-hybrid-state-space",
    description="50 % of Pong's observations removed: imputed trajectories and MSE at the removed steps",
    profiles={
        "tiny": ImputationConfig(layout="tiny", models=("pissm-gru", "observation"), epochs=1, num_samples=2),
        "quick": ImputationConfig(),
        "paper": ImputationConfig(layout="paper", epochs=60),
    },
    run=run,
)

"""``pissm.stability``'s config and its two sweeps: a training cell per (model, scheme, value, seed) and a
start-survival cell per (model, seed), with the names the analysis reads them by."""

from __future__ import annotations

import dataclasses
from functools import partial

from memlab.checks import check_choice, check_choices, check_int, check_real
from memlab.pissm.data import Dataset
from memlab.pissm.experiments.cells import stability_cell, start_survival_cell
from memlab.pissm.runs import LAYOUTS, PISSM_GAINS
from memlab.pissm.train import TrainConfig
from memlab.runner import Run

# the paper's models (gain of eq. (7), readout fitted to the exact gain: the untrained filter tracks); the claims
# read these
MODELS = ("pissm-gru-tracking", "pissm-lstm-tracking")
GATED = tuple(m for m, (gain, _) in PISSM_GAINS.items() if gain != "exact")  # any gated gain (the ablation)


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


def schemes(cfg: StabilityConfig) -> list[tuple[str, float]]:
    return [("iss", e) for e in cfg.iss_eps] + [("clip", d) for d in cfg.clip_norms]


def cell_name(model: str, scheme: str, value: float, s: int) -> str:
    return f"{model}-{scheme}-{value:g}-{s}"


def sweep_cells(cfg: StabilityConfig, data: Dataset, run: Run) -> dict:
    """Seed s trains from the key stream ("train", s) and scores with ("evaluate", s), whatever the scheme. A cell's
    arguments are what its result depends on (not the whole config), so profiles share their common cells."""
    return {cell_name(model, scheme, value, s): partial(stability_cell, model, data, _train_config(cfg, scheme, value),
                                                    run.key_for("train", s), run.key_for("evaluate", s),
                                                    cfg.input_noise, cfg.num_samples)
            for model in cfg.models for scheme, value in schemes(cfg) for s in range(cfg.seeds)}


# the sizes of the random steps a start is tested against (sensitivity.py): Adam's first steps move every parameter by
# about the learning rate (the profiles' 0.011 and 1e-3 are added); 0 is the start itself
STEP_SIZES = (0.0, 1e-5, 1e-4, 1e-3, 1e-2)
STEP_DIRECTIONS = 4
START_SEEDS = 3  # the first seeds' starts of each model (a start costs a model fit and one filter pass per step)


def step_sizes(cfg: StabilityConfig) -> tuple[float, ...]:
    return tuple(sorted(set(STEP_SIZES) | {cfg.learning_rate}))


def survival_cells(cfg: StabilityConfig, data: Dataset, run: Run) -> dict:
    """The ISS runs' starts (smallest buffer) of the first ``START_SEEDS`` seeds of each model, stepped at random
    (``start_survival_cell``): the same keys as their training cells, so each is the start that cell trains from."""
    return {start_name(model, s): partial(start_survival_cell, model, data, min(cfg.iss_eps), run.key_for("train", s),
                                           run.key_for("start", s), step_sizes(cfg), STEP_DIRECTIONS)
            for model in cfg.models for s in range(min(cfg.seeds, START_SEEDS))}


def start_name(model: str, s: int) -> str:
    return f"{model}-start-{s}"


def _train_config(cfg: StabilityConfig, scheme: str, value: float) -> TrainConfig:
    """ISS buffer / clipping threshold ``value`` (the other scheme's field at its default)."""
    return TrainConfig(epochs=cfg.epochs, batch_size=cfg.batch_size, stability=scheme, learning_rate=cfg.learning_rate,
                       iss_eps=value if scheme == "iss" else 0.1, clip_norm=value if scheme == "clip" else 10.0)

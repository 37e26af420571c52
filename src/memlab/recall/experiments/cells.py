"""Risk-vs-n grids, the cells ``recall.rate``, ``recall.sweep`` and ``recall.attention-vs-s6`` share: the grid's
config, its sweep cells, the typed result their analyses extend (``CurveStats``), the achievable band of each task.

Every (schedule, student, alpha, T, n) is one cell (``runs.curve_cell``) with three named key streams:
``"validation"`` (one validation set per task, shared by every n, student and schedule), ``"training-pool"`` (nested
training sets per seed) and ``("init", n)`` (initialisation and shuffling at size n). A curve is named by
``metrics.curve_label`` (the student, with ``/steps=B`` on a step budget); the rate of eq. (1) is fitted per curve by
``metrics.learning_curves``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial

from jax import Array

from memlab.checks import check_choice, check_choices, check_increasing_ints, check_int, check_real
from memlab.recall.band import AchievableBand, achievable_band
from memlab.recall.metrics import LearningCurve, TagOnlyComparison, curve_label
from memlab.recall.runs import STUDENTS, TrainingRecord, curve_cell
from memlab.recall.task import TARGETS, RecallTask
from memlab.recall.train import TrainConfig

__all__ = ["CurveConfig", "CurveStats", "bands", "curve_cells", "schedule"]


@dataclasses.dataclass(frozen=True)
class CurveConfig:
    """A grid students x alphas x context lengths T x sample sizes n (defaults: App. A.2, Fig. 1)."""

    seed: int = 0
    alphas: tuple[float, ...] = (0.75, 1.0)
    context_lengths: tuple[int, ...] = (5000,)
    sample_sizes: tuple[int, ...] = (4, 8, 16, 32, 64)
    students: tuple[str, ...] = ("mamba-1",)
    num_val: int = 2000
    epochs: int = 30
    num_seeds: int = 1  # independent training sets and initialisations per cell (the paper: one)
    target: str = "a1"  # "a1": App. A.1's target; "linear": the well-posed variant (task.py)
    step_budget: int | None = None  # if set, every curve also runs with this many Adam steps at every n
    band_draws: int = 20_000  # float64 draws to fit, and as many to score, each predictor of the band

    def validate(self) -> None:
        check_int("seed", self.seed, low=0)
        for i, alpha in enumerate(self.alphas):
            check_real(f"alphas[{i}]", alpha, 0.0, open_low=True)
        if not self.alphas or any(b <= a for a, b in zip(self.alphas, self.alphas[1:])):
            raise ValueError(f"alphas must be a non-empty, strictly increasing sequence, got {self.alphas!r}")
        check_increasing_ints("context_lengths", self.context_lengths)
        if len(check_increasing_ints("sample_sizes", self.sample_sizes)) < 2:
            raise ValueError(f"sample_sizes needs at least two sizes to fit a rate, got {self.sample_sizes!r}")
        check_choices("students", self.students, STUDENTS)
        check_choice("target", self.target, TARGETS)
        for name in ("num_val", "epochs", "num_seeds", "band_draws"):
            check_int(name, getattr(self, name))
        self.train_configs()  # a step budget must split into the epochs' rounds

    def train_configs(self) -> dict[int | None, TrainConfig]:
        """The training schedules by step budget: None (A.1's epochs) and, if set, ``step_budget``."""
        budgets = [None] if self.step_budget is None else [None, self.step_budget]
        return {b: TrainConfig(epochs=self.epochs, steps=b) for b in budgets}

    def labels(self) -> list[str]:
        """The curves of every (alpha, T): each student, then each student on the step budget."""
        return [curve_label(kind, b) for b in self.train_configs() for kind in self.students]

    def task(self, alpha: float, T: int) -> RecallTask:
        return RecallTask(alpha=float(alpha), context_length=int(T), target=self.target)


@dataclasses.dataclass(frozen=True)
class CurveStats:
    """What every risk-vs-n analysis returns (the typed results of ``rate``, ``sweep`` and ``compare`` extend it);
    a curve's key is (``metrics.curve_label``, alpha, T).

    records: the cell records (``runs.curve_cell``), in sweep order.
    curves: key -> ``LearningCurve``: sizes n (k,), best validation MSE (k,) (mean over seeds), its eq. (1) fit and
        the exact mean and tag-only risks.
    tag_only: key -> ``TagOnlyComparison``: the MSE against the tag-only risk of the same validation set per n (k,)
        and the first n where it is below by more than 2 s.e. (None: never).
    """

    records: list[TrainingRecord]
    curves: dict[tuple[str, float, int], LearningCurve]
    tag_only: dict[tuple[str, float, int], TagOnlyComparison]


def curve_cells(cfg: CurveConfig, key_for: Callable[..., Array]) -> dict[str, partial]:
    """The sweep cells of the grid, in (schedule, student, alpha, T, n) loop order; ``key_for(*names)`` gives the
    named key streams (``run.key_for``). A budget's cells share the data and keys of the default ones."""
    val_key, pool_key = key_for("validation"), key_for("training-pool")
    return {f"{kind}_alpha={alpha:g}_T={T}_n={n}" + ("" if b is None else f"_steps={b}"): partial(
                curve_cell, cfg.task(alpha, T), int(n), kind, train, cfg.num_val, cfg.num_seeds,
                max(cfg.sample_sizes), val_key, pool_key, key_for("init", n))
            for b, train in cfg.train_configs().items() for kind in cfg.students for alpha in cfg.alphas
            for T in cfg.context_lengths for n in cfg.sample_sizes}


def schedule(cfg: CurveConfig) -> str:
    """The training schedule(s) in words, for a summary's first line."""
    epochs = f"{cfg.epochs} epochs (Adam steps grow with n)"
    return epochs if cfg.step_budget is None else (f"{epochs} and, as curves `…/steps={cfg.step_budget}`, an equal "
                                                   f"budget of {cfg.step_budget} Adam steps at every n")


def bands(cfg: CurveConfig) -> dict[tuple[float, int], AchievableBand]:
    """The achievable band (``band.achievable_band``) of every (alpha, T) of the grid."""
    return {(float(a), int(T)): achievable_band(cfg.task(a, T), cfg.band_draws, cfg.band_draws)
            for a in cfg.alphas for T in cfg.context_lengths}

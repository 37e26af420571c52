"""Risk-vs-n grids, shared by ``recall.rate``, ``recall.sweep`` and ``recall.attention-vs-s6``: the grid's config,
its sweep cells, its tables and its figure panel.

Every (student, alpha, T, n) is one cell (``runs.curve_cell``) with three named key streams: ``"validation"``
(one validation set per task, shared by every n and student), ``"training-pool"`` (nested training sets per
seed) and ``("init", n)`` (initialisation and shuffling at size n). The rate of eq. (1) is fitted per curve by
``metrics.learning_curves``. Every table carries the two exact reference risks of ``task.baseline_mse``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import numpy as np
from jax import Array
from matplotlib import ticker

from memlab.checks import check_choices, check_increasing_ints, check_int, check_real
from memlab.recall.metrics import LearningCurve, TagOnlyComparison
from memlab.recall.runs import STUDENTS, curve_cell
from memlab.recall.task import RecallTask, scale_floor_mse
from memlab.recall.train import TrainConfig

__all__ = ["CHOICES", "FIT_FORMAT", "FIT_HEADER", "RISK_HEADER", "CurveConfig", "curve_cells", "fit_rows", "n_ticks",
           "plot_curves", "risk_rows", "tag_only_lines"]

CHOICES = """## Choices the paper leaves open

- **Targets are not functions of the recalled measure.** A.1 renormalises the clamped density, which discards the \
scale of Z; Y = v_1 Σ λ_j Z_j² depends on that scale. So no learner reaches σ² = 1e-4: the dotted lines are the \
exact risk of the best predictor that uses the query tag only (E[Y | q] = v_1 E[S]); a student below it has recalled \
content. The `scale floor` column bounds every predictor that knows the recalled measure exactly from below \
(`task.scale_floor_mse`: the measure fixes only the direction of Z, and |Z|² ~ χ²₁₅ is independent of it): \
between it and the tag-only risk lies all that recall can gain. Comparing α's by raw MSE also compares target \
scales (Var Y shrinks as α grows), so `relative_to_mean` in risk.csv divides by the mean predictor's risk.
- **Grid and degenerate densities.** The 32-point grid is `linspace(0, 1, 32)`; the basis is exactly 0 at x = 0 \
and x = 1 (a rounded sin(πj) ≈ 1e-16 there would turn some all-negative densities into a point mass at x = 1). \
Where the clamped density vanishes on the whole grid the mass function is uniform (what \
clamp-with-epsilon-then-renormalise gives); `task.degenerate_fraction` measures how often: about 15 % of draws at \
α = 0.75, 27 % at α = 1 and 47 % at α = 2.
- **Student.** Token u = (one-hot marker m_in/m_ctx/m_out, tag, content), the query inserted before and after the \
context (§4.1). Φ's are one-hidden-layer ReLU MLPs of width 32; each S6 block is the Mamba mixer (in-projection ×2, \
causal depthwise conv of width 4, SiLU, Δ of rank ⌈16/16⌉ = 1, S4D-real A = −exp(A_log), ZOH discretisation of §4.2, \
SiLU gate, out-projection), composed as written (`mamba-1`, `mamba-2`: Φ → S6 → Φ, no residual, no norm). The \
students `mamba-1-residual` / `mamba-2-residual` put each mixer inside the public Mamba code's pre-norm residual \
wrapper x + Mamba(RMSNorm(x)) instead (memlab's default before issue 14). The readout is the head MLP at the last \
token.
- **Training.** Adam 2e-3 × 0.95 per epoch (staircase), batch min(16, n), global-norm clipping 1.0; the validation \
set is drawn once per (α, T) with its own key and shared by every n and student; the training sets are nested (the \
run at n uses the first n examples of one pool per seed).
"""

RISK_HEADER = ["student", "alpha", "T", "n", "mse", "mse_stderr", "best_epoch", "relative_to_mean", "baseline_mean",
               "baseline_tag_only", "val_tag_only"]
FIT_HEADER = ["student", "α", "T", "MSE at each n", "fitted C (ours)", "C (paper)", "R²", "tag-only risk",
              "scale floor"]
FIT_FORMAT = {"α": "g", "fitted C (ours)": ".2f", "R²": ".2f", "tag-only risk": ".3g", "scale floor": ".3g"}


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
        for name in ("num_val", "epochs", "num_seeds"):
            check_int(name, getattr(self, name))


def curve_cells(cfg: CurveConfig, key_for: Callable[..., Array]) -> dict[str, partial]:
    """The sweep cells of the grid, in (student, alpha, T, n) loop order; ``key_for(*names)`` gives the named
    key streams (``run.key_for``)."""
    train_config = TrainConfig(epochs=cfg.epochs)
    val_key, pool_key = key_for("validation"), key_for("training-pool")
    return {f"{kind}_alpha={alpha:g}_T={T}_n={n}": partial(
                curve_cell, RecallTask(alpha=float(alpha), context_length=int(T)), int(n), kind, train_config,
                cfg.num_val, cfg.num_seeds, max(cfg.sample_sizes), val_key, pool_key, key_for("init", n))
            for kind in cfg.students for alpha in cfg.alphas for T in cfg.context_lengths for n in cfg.sample_sizes}


def risk_rows(records: Sequence[Mapping]) -> list[list]:
    """Rows of risk.csv (``RISK_HEADER``), one per cell record."""
    return [[r["student"], r["alpha"], r["T"], r["n"], r["mse"], r["mse_stderr"], int(np.mean(r["best_epoch"])),
             r["mse"] / r["baseline_mean"], r["baseline_mean"], r["baseline_tag_only"], r["val_baseline_tag_only"]]
            for r in records]


def tag_only_lines(comparisons: Mapping[tuple, TagOnlyComparison], keys: Sequence[tuple],
                   name: Callable[[tuple], str]) -> str:
    """Markdown bullets, one per curve ``name(key)``: MSE / tag-only risk on the same validation set at every n and
    whether (from which n) the student beats it (``metrics.tag_only_comparison``)."""
    return "\n".join(
        f"- {name(k)}: " + ", ".join(f"n = {int(n)}: {r:.3f}" for n, r in zip(c.n, c.ratio))
        + (f" — below the tag-only risk from n = {c.first_n}" if c.first_n else " — never below the tag-only risk")
        for k, c in ((k, comparisons[k]) for k in keys))


def fit_rows(curves: Mapping[tuple, LearningCurve], keys: Sequence[tuple], paper_c: Callable[[tuple], str]) -> list:
    """Rows of the fit table (``FIT_HEADER``) for the curves ``keys``; ``paper_c(key)`` is the paper's C."""
    floors = {a: scale_floor_mse(RecallTask(alpha=a)) for a in {k[1] for k in keys}}
    return [[k[0], k[1], k[2], ", ".join(f"{m:.3g}" for m in curves[k].mse), curves[k].fit.C, paper_c(k),
             curves[k].fit.r_squared, curves[k].baseline_tag_only, floors[k[1]]] for k in keys]


def plot_curves(ax, curves: Mapping[tuple, LearningCurve], keys: Sequence[tuple], label: Callable,
                baselines: bool = True) -> None:
    """Measured risk (solid), the eq. (1) fit (dashed) and, if ``baselines``, the tag-only risk (dotted) per curve;
    ``label(key, curve)`` names each curve."""
    for i, key in enumerate(keys):
        c, color = curves[key], f"C{i}"
        ax.plot(c.n, c.mse, "o-", color=color, label=label(key, c))
        grid = np.geomspace(c.n.min(), c.n.max(), 50)
        ax.plot(grid, c.fit.predict(grid, key[1]), "--", color=color, lw=1.0)
        if baselines:
            ax.axhline(c.baseline_tag_only, color=color, ls=":", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="training examples n", ylabel="best validation MSE")
    n_ticks(ax, curves[keys[0]].n)


def n_ticks(ax, n) -> None:
    """Label the x axis at the sample sizes only (no minor log ticks)."""
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xticks(n, [f"{int(v)}" for v in n])

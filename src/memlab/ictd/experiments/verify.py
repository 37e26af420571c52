"""``ictd.verify`` -- Fig. 7 (App. F.6): Theorem 1 and Lemma 1 in float64, four kernels.

The L-layer theta* transformer (eq. 15) in the dual-head form (eq. 14-18) and the single-head + TSM form (eq. 21-23)
against the reference weighted softmax TD (eq. 11-12) on the same prompts, for the kernels softmax, relu, elu1, rbf
(``verify.py``). Choices the paper leaves open: the prompts (per trial a Boyan chain of Algorithm 2 with
``num_states`` states and an on-policy trajectory of n transitions, features scaled by ``feature_scale`` = 1/sqrt(d)
so ||x||^2 ~ 1/3; the unscaled Alg. 2 features run as a robustness check), the same prompts for every kernel, and
a relative discrepancy |v - y| / max(1, |y|) beside the absolute one (the unnormalised kernels make values grow).
One cell per kernel.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from memlab import plots
from memlab.checks import check_choices, check_gamma, check_int, check_real
from memlab.files import summary_text
from memlab.ictd.softmax_td import KERNELS
from memlab.ictd.verify import log_discrepancy, trial_prompts, verify_trials
from memlab.runner import Experiment, Run
from memlab.store import cell

PAPER = "softmax-transformers-in-context-td"
TOL = 1e-10  # Theorem 1 (relative) and Lemma 1 tolerance of the claims
KIND_COLORS = {"softmax": "C0", "relu": "C1", "elu1": "C2", "rbf": "C3"}
TRIAL_FIELDS = ("abs_tsm", "abs_dual", "rel_tsm", "rel_dual", "lemma1", "lemma1_rel")
TABLE_HEADER = ["kernel", "max E_l, TSM", "max E_l, dual", "median E_L", "max relative discrepancy (both forms)",
                "max abs y_l", "Lemma 1 max abs Z difference", "Lemma 1 max relative Z difference",
                "unscaled features: max relative", "unscaled: max abs y_l"]
TABLE_FORMAT = {"max E_l, TSM": ".1f", "max E_l, dual": ".1f", "median E_L": ".1f", "max abs y_l": ".2g",
                "max relative discrepancy (both forms)": ".1e", "Lemma 1 max abs Z difference": ".1e",
                "Lemma 1 max relative Z difference": ".1e", "unscaled features: max relative": ".1e",
                "unscaled: max abs y_l": ".1e"}
PANELS = [("abs_tsm", r"$E_l = \log_{10}|v_l(S_n) - y_l|$", "(a) single-head + TSM (eq. 21–23) vs reference"),
          ("abs_dual", r"$E_l = \log_{10}|v_l(S_n) - y_l|$", "(b) dual-head (eq. 14–18) vs reference"),
          ("rel_tsm", r"$\log_{10}\,|v_l(S_n) - y_l| / \max(1, |y_l|)$", "(c) relative, single-head + TSM"),
          ("lemma1_rel", r"$\log_{10}\,\max|Z_l^{dual} - Z_l^{TSM}| / \max(1, \max|Z_l|)$",
           "(d) Lemma 1 over the whole $Z_l$, relative")]

SUMMARY = summary_text(__package__, "verify")


@dataclasses.dataclass(frozen=True)
class VerifyConfig:
    """App. F.6: d = 8, n = 20, L = 10, gamma = 0.9, alpha_l = 1, 50 trials, float64; prompts from Boyan chains."""

    seed: int = 0
    d: int = 8
    n: int = 20
    num_layers: int = 10
    gamma: float = 0.9
    alpha: float = 1.0
    num_trials: int = 50
    num_states: int = 10  # Boyan chain size (Algorithm 2); the paper does not say how its prompts are drawn
    feature_scale: float = 8 ** -0.5  # prompt features x(S_j) * scale
    kinds: tuple[str, ...] = ("softmax", "relu", "elu1", "rbf")

    def validate(self):
        for name, least in (("d", 1), ("n", 1), ("num_layers", 1), ("num_trials", 1), ("num_states", 2)):
            check_int(name, getattr(self, name), least)
        check_gamma(self.gamma)
        check_real("alpha", self.alpha, 0.0, open_low=True)
        check_real("feature_scale", self.feature_scale, 0.0, open_low=True)
        check_choices("kinds", self.kinds, KERNELS)


class Trials(NamedTuple):
    """What every kernel's cell computes on: ``num_trials`` prompts of n transitions of a ``num_states`` Boyan chain
    (d features, scaled by ``feature_scale``), ``num_layers`` layers at step size alpha and discount gamma."""

    d: int
    n: int
    num_layers: int
    gamma: float
    alpha: float
    num_trials: int
    num_states: int
    feature_scale: float

    @classmethod
    def of(cls, cfg: VerifyConfig) -> Trials:
        return cls(cfg.d, cfg.n, cfg.num_layers, cfg.gamma, cfg.alpha, cfg.num_trials, cfg.num_states,
                   cfg.feature_scale)


@dataclasses.dataclass(frozen=True, kw_only=True)
class KernelTrials:
    """One kernel's cell (``verify_cell``), per trial and layer (T, L+1) unless noted (arrays; lists as a stored
    record gives them back): abs_tsm, abs_dual |v_l(S_n) - y_l| of the single-head + TSM and the dual-head form;
    rel_tsm, rel_dual the same / max(1, |y_l|); row_tsm max over the columns j of |Z_l[d+2, j] - y_l(S_j)| (eq. 37);
    lemma1, lemma1_rel max |Z_dual - Z_tsm| absolute and / max(1, max |Z|); y_max (T,) max |y_l|; unscaled_rel,
    unscaled_y_max (T,) the same with the unscaled Alg. 2 features. Fields in the stored order (``verify_trials``'
    keys, sorted)."""

    abs_dual: np.ndarray
    abs_tsm: np.ndarray
    lemma1: np.ndarray
    lemma1_rel: np.ndarray
    rel_dual: np.ndarray
    rel_tsm: np.ndarray
    row_tsm: np.ndarray
    unscaled_rel: np.ndarray
    unscaled_y_max: np.ndarray
    y_max: np.ndarray


@cell("ictd.verify", result=KernelTrials)
def verify_cell(trials: Trials, kind: str, key) -> KernelTrials:
    """Every trial of one kernel (float64 when the sweep enables it): discrepancies per trial and layer."""
    X, R = trial_prompts(jax.random.split(key, trials.num_trials), trials.num_states, trials.d, trials.gamma,
                         trials.n)
    out = verify_trials(X, R, trials.gamma, trials.num_layers, kind, trials.alpha, trials.feature_scale)
    if out["abs_tsm"].dtype != jnp.float64:
        raise RuntimeError(f"ictd.verify needs float64, got {out['abs_tsm'].dtype}")
    return KernelTrials(**{k: np.asarray(v) for k, v in out.items()})


@dataclasses.dataclass(frozen=True)
class KernelStats:
    """One kernel's maxima over trials (the claims and per_kernel.csv): max_E_tsm, max_E_dual the largest E_l =
    log10 |v_l - y_l| of each form; median_E_L the median over trials of E_L (TSM form, last layer); max_rel the
    largest relative discrepancy of both forms; max_row_abs of row_tsm; max_abs_y the largest |y_l|; lemma1_max_abs,
    lemma1_max_rel the largest Lemma 1 differences; unscaled_max_rel, unscaled_max_abs_y with the unscaled features."""

    max_E_tsm: float
    max_E_dual: float
    median_E_L: float
    max_rel: float
    max_row_abs: float
    max_abs_y: float
    lemma1_max_abs: float
    lemma1_max_rel: float
    unscaled_max_rel: float
    unscaled_max_abs_y: float


@dataclasses.dataclass(frozen=True)
class VerifyStats:
    """The analysis of ``ictd.verify``: kinds (the kernels, config order); per_kernel kind -> ``KernelStats``;
    trials kind -> ``KernelTrials``."""

    kinds: list[str]
    per_kernel: dict[str, KernelStats]
    trials: dict[str, KernelTrials]


def run_verify(cfg: VerifyConfig, run: Run) -> dict:
    """Sweep -> numbers -> files: one float64 cell per kernel on the same trial prompts."""
    cells = {f"kernel={kind}": partial(verify_cell, Trials.of(cfg), kind, run.key_for("prompts")) for kind in cfg.kinds}
    with jax.enable_x64(True):
        cells = run.sweep(cells, "Theorem 1 / Lemma 1 per kernel (float64)")
    stats = analyse(cfg, cells)
    _figures(cfg, stats, run)
    _claims(cfg, stats, run)
    _summary(cfg, stats, run)
    return _results(stats)


def _results(stats: VerifyStats) -> dict:
    """results.json's "results": the kernels and their maxima (the trial arrays are in discrepancy.csv)."""
    return {"kinds": stats.kinds, "per_kernel": stats.per_kernel}


def analyse(cfg: VerifyConfig, cells: dict) -> VerifyStats:
    """Cells -> per-kernel trial arrays (T, L+1) and the per-kernel maxima of the claims and the table."""
    fields = [f.name for f in dataclasses.fields(KernelTrials)]
    trials = {kind: KernelTrials(**{f: np.asarray(getattr(cells[f"kernel={kind}"], f), np.float64) for f in fields})
              for kind in cfg.kinds}
    return VerifyStats(list(cfg.kinds), {kind: _kernel_stats(r) for kind, r in trials.items()}, trials)


def _kernel_stats(r: KernelTrials) -> KernelStats:
    E_tsm, E_dual = log_discrepancy(r.abs_tsm), log_discrepancy(r.abs_dual)
    return KernelStats(
        max_E_tsm=E_tsm.max(), max_E_dual=E_dual.max(), median_E_L=np.median(E_tsm[:, -1]),
        max_rel=max(r.rel_tsm.max(), r.rel_dual.max()), max_row_abs=r.row_tsm.max(), max_abs_y=r.y_max.max(),
        lemma1_max_abs=r.lemma1.max(), lemma1_max_rel=r.lemma1_rel.max(), unscaled_max_rel=r.unscaled_rel.max(),
        unscaled_max_abs_y=r.unscaled_y_max.max())


def _figures(cfg: VerifyConfig, stats: VerifyStats, run: Run) -> None:
    layers = np.arange(cfg.num_layers + 1)
    fig, axes = plots.figure(2, 2, width=9.0, height=6.4, sharex=True)
    for ax, (field, ylabel, title) in zip(axes.flat, PANELS):
        for kind, r in stats.trials.items():
            E = log_discrepancy(getattr(r, field))
            c = KIND_COLORS.get(kind)
            # quartile bands (min-max bands of the kernels overlapped into one blur) and the worst trial dashed
            ax.plot(layers, np.median(E, axis=0), marker="o", ms=3, color=c, label=kind)
            ax.fill_between(layers, *np.percentile(E, [25, 75], axis=0), color=c, alpha=0.2, lw=0)
            ax.plot(layers, E.max(axis=0), color=c, ls="--", lw=0.8)
        if field in ("rel_tsm", "lemma1_rel"):  # the claims' rules are relative
            tol = ax.axhline(np.log10(TOL), color="k", ls=":", lw=1, label="claim tolerance 1e-10 (relative)")
            ax.legend(handles=[tol], fontsize=7, loc="upper right")
        ax.set(ylabel=ylabel, title=title, ylim=(-18, -8))
    for ax in axes[1]:
        ax.set_xlabel("layer l")
    axes[0, 0].legend(ncol=2, fontsize=7, loc="upper left")
    fig.suptitle(f"Fig. 7: Theorem 1 / Lemma 1 in float64 (d={cfg.d}, n={cfg.n}, γ={cfg.gamma}, {cfg.num_trials} "
                 "trials; median, quartile band, worst trial dashed; zeros floored at 1e-17)", fontsize=9)
    run.save_figure(fig, "verify.png")


def _claims(cfg: VerifyConfig, stats: VerifyStats, run: Run) -> None:
    for kind, s in stats.per_kernel.items():
        worst = max(s.max_rel, s.unscaled_max_rel)
        run.claim(f"theorem-1[{kind}]",
                  f"v_l(S_n) of both transformer forms equals weighted softmax TD y_l at every layer l <= "
                  f"{cfg.num_layers} and trial: rule max |v - y| / max(1, |y|) <= 1e-10 (scaled and unscaled features)",
                  "Theorem 1, Fig. 7 (E_l at numerical precision across depth)",
                  f"max relative {worst:.1e}; max E_l = {max(s.max_E_tsm, s.max_E_dual):.1f}", bool(worst <= TOL))
    per_kernel = stats.per_kernel.values()
    lemma_rel = max(s.lemma1_max_rel for s in per_kernel)
    run.claim("lemma-1", "dual-head (18) and single-head + TSM (23) give the same Z_l at every layer: rule "
              "max over kernels, trials, layers, entries of |Z_dual - Z_tsm| / max(1, max |Z|) <= 1e-10",
              "Lemma 1", f"max relative {lemma_rel:.1e}, max absolute "
              f"{max(s.lemma1_max_abs for s in per_kernel):.1e}", bool(lemma_rel <= TOL))


def _summary(cfg: VerifyConfig, stats: VerifyStats, run: Run) -> None:
    layers = range(cfg.num_layers + 1)
    run.save_csv("discrepancy.csv", ["kernel", "trial", "layer", "abs_tsm", "abs_dual", "rel_tsm", "rel_dual",
                                     "lemma1_max_abs_Z", "lemma1_max_rel_Z"],
                 [(kind, t, k, *(getattr(r, f)[t, k] for f in TRIAL_FIELDS))
                  for kind, r in stats.trials.items() for t in range(cfg.num_trials) for k in layers])
    rows = [(kind, s.max_E_tsm, s.max_E_dual, s.median_E_L, s.max_rel, s.max_abs_y, s.lemma1_max_abs, s.lemma1_max_rel,
             s.unscaled_max_rel, s.unscaled_max_abs_y) for kind, s in stats.per_kernel.items()]
    table = run.save_table("per_kernel.csv", TABLE_HEADER, rows, TABLE_FORMAT)
    max_row_abs = max(s.max_row_abs for s in stats.per_kernel.values())
    run.write_summary(SUMMARY.format(cfg=cfg, table=table, max_row_abs=max_row_abs))


EXPERIMENTS = [
    Experiment(
        "ictd.verify", "Fig. 7, App. F.6, Theorem 1, Lemma 1", PAPER,
        "theta* transformer (dual-head and single-head + TSM) vs weighted softmax TD, 4 kernels, float64",
        {"paper": VerifyConfig(), "quick": VerifyConfig(),
         "tiny": VerifyConfig(d=4, n=8, num_layers=4, num_trials=4, num_states=5, feature_scale=0.5)},
        run_verify),
]

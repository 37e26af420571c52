"""What ``recall.rate``, ``recall.sweep`` and ``recall.attention-vs-s6`` report about a risk-vs-n grid
(:mod:`.cells`): its tables, its summary sections (fit table, tag-only comparison, achievable band, choices), the
claim that a student recalls, and its figure panel. Pure functions of the numbers; the experiments write the files."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
from matplotlib import ticker

from memlab import plots
from memlab.files import summary_text
from memlab.recall.band import AchievableBand
from memlab.recall.experiments.cells import CurveConfig, CurveStats, bands
from memlab.recall.metrics import LearningCurve, TagOnlyComparison, curve_label
from memlab.recall.rate import rate_axis
from memlab.recall.runs import TrainingRecord

__all__ = ["BAND", "BAND_HEADER", "CHOICES", "FIT_FORMAT", "FIT_HEADER", "RISK_HEADER", "CurveHandles", "band_rows",
           "beats_tag_only", "budget_line", "curve_color", "fit_rows", "n_ticks", "plot_curves", "recall_claims",
           "report", "risk_rows", "tag_only_lines"]

CHOICES = summary_text(__package__, "report_choices")

BAND = summary_text(__package__, "report_band")

RISK_HEADER = ["curve", "student", "alpha", "T", "n", "mse", "mse_stderr", "best_epoch", "adam_steps",
               "relative_to_mean", "baseline_mean", "baseline_tag_only", "val_tag_only"]
FIT_HEADER = ["curve", "α", "T", "MSE ± s.e. at each n", "fitted C (ours)", "C (paper)", "R²", "below tag-only"]
FIT_FORMAT = {"α": "g", "fitted C (ours)": ".2f", "R²": ".2f"}
BAND_HEADER = ["α", "T", "tag-only", "tag-only (validation set)", "context (T)", "measure (T = ∞)", "floor"]


def risk_rows(records: Sequence[TrainingRecord]) -> list[list]:
    """Rows of risk.csv (``RISK_HEADER``), one per cell record."""
    return [[curve_label(r.student, r.step_budget), r.student, r.alpha, r.T, r.n, r.mse, r.mse_stderr,
             int(np.mean(r.best_epoch)), "" if r.adam_steps is None else r.adam_steps, r.mse / r.baseline_mean,
             r.baseline_mean, r.baseline_tag_only, r.val_baseline_tag_only] for r in records]


def _pm(mean: float, stderr: float) -> str:
    """'0.312 ± 0.004', or '0.312' when the standard error is nan (one seed)."""
    return f"{mean:.3g}" if np.isnan(stderr) else f"{mean:.3g} ± {stderr:.2g}"


def beats_tag_only(c: TagOnlyComparison) -> str:
    """'from n = 64' or 'never' (``metrics.tag_only_comparison``'s rule)."""
    return f"from n = {c.first_n}" if c.first_n else "never"


def tag_only_lines(comparisons: Mapping[tuple, TagOnlyComparison], keys: Sequence[tuple],
                   name: Callable[[tuple], str]) -> str:
    """Markdown bullets, one per curve ``name(key)``: MSE (mean ± s.e. over seeds) / tag-only risk on the same
    validation set at every n, and whether (from which n) the student beats it (``metrics.tag_only_comparison``)."""
    return "\n".join(
        f"- {name(k)}: " + "; ".join(f"n = {int(n)}: {_pm(m, e)} / {t:.3g} = {r:.3f}"
                                   for n, m, e, t, r in zip(c.n, c.mse, c.stderr, c.tag_only, c.ratio))
        + (f" — below the tag-only risk (by > 2 s.e.) from n = {c.first_n}" if c.first_n
           else " — never below the tag-only risk")
        for k, c in ((k, comparisons[k]) for k in keys))


def fit_rows(curves: Mapping[tuple, LearningCurve], comparisons: Mapping[tuple, TagOnlyComparison],
             keys: Sequence[tuple], paper_c: Callable[[tuple], str]) -> list:
    """Rows of the fit table (``FIT_HEADER``) for the curves ``keys``; ``paper_c(key)`` is the paper's C."""
    return [[k[0], k[1], k[2], ", ".join(_pm(m, e) for m, e in zip(comparisons[k].mse, comparisons[k].stderr)),
             curves[k].fit.C, paper_c(k), curves[k].fit.r_squared, beats_tag_only(comparisons[k])] for k in keys]


def band_rows(band: Mapping[tuple, AchievableBand], records: Sequence[TrainingRecord]) -> list:
    """Rows of band.csv (``BAND_HEADER``), one per (alpha, T); the validation-set tag-only risk from the records."""
    on_val = {(float(r.alpha), int(r.T)): r.val_baseline_tag_only for r in records}
    return [[a, T, f"{b.tag_only:.4g}", f"{on_val[a, T]:.4g}", _pm(b.context, b.context_stderr),
             _pm(b.measure, b.measure_stderr), f"{b.floor:.4g}"] for (a, T), b in band.items()]


def budget_line(cfg: CurveConfig, curves: Mapping[tuple, LearningCurve], keys: Sequence[tuple],
                name: Callable[[tuple], str]) -> str:
    """'Fitted C on A.1's schedule → on the step budget: ...' (a paragraph), or '' without a budget."""
    if cfg.step_budget is None:
        return ""
    pairs = [(k, (curve_label(k[0], cfg.step_budget), *k[1:])) for k in keys if "/steps=" not in k[0]]
    return (f"Fitted C on A.1's schedule → on the equal budget of {cfg.step_budget} Adam steps at every n (how much of "
            "C is step count): " + "; ".join(f"{name(k)}: {curves[k].fit.C:.2f} → {curves[b].fit.C:.2f}"
                                           for k, b in pairs if b in curves) + ".\n\n")


def report(cfg: CurveConfig, stats: CurveStats, keys: Sequence[tuple], paper_c: Callable[[tuple], str],
           name: Callable[[tuple], str], run) -> str:
    """risk.csv, fits.csv, band.csv and the summary's shared Markdown: the fit table, whether each curve beats the
    tag-only risk and from which n, the achievable band, the choices."""
    curves, comparisons = stats.curves, stats.tag_only
    run.save_csv("risk.csv", RISK_HEADER, risk_rows(stats.records))
    fits = run.save_table("fits.csv", FIT_HEADER, fit_rows(curves, comparisons, keys, paper_c), FIT_FORMAT)
    band = run.save_table("band.csv", BAND_HEADER, band_rows(bands(cfg), stats.records))
    return (f"{fits}\n{budget_line(cfg, curves, keys, name)}Does the student recall? Best validation MSE (mean ± s.e. "
            "over seeds) / the tag-only risk on the same validation set, per n (a student not below it has learnt the "
            f"tag and nothing of the content, whatever its fitted C):\n\n{tag_only_lines(comparisons, keys, name)}\n\n"
            f"{BAND.format(draws=cfg.band_draws, table=band)}\n{CHOICES}")


def recall_claims(run, comparisons: Mapping[tuple, TagOnlyComparison], keys: Sequence[tuple],
                  tag: Callable[[tuple], str], name: Callable[[tuple], str]) -> None:
    """One claim per curve: the student's risk falls below the tag-only risk at some n."""
    for k in keys:
        t = comparisons[k]
        run.claim(f"recalls[{tag(k)}]", f"the student's risk falls below the tag-only risk at some n ({name(k)}): "
                  "it recalls content; rule: mean MSE below the tag-only risk of the same validation set by more "
                  "than 2 s.e. over seeds (any margin with one seed) at some n", "App. A.2 (what a rate in n means)",
                  f"first at n = {t.first_n}" if t.first_n else f"never; lowest MSE / tag-only {t.ratio.min():.3f}",
                  t.first_n is not None)


class CurveHandles(NamedTuple):
    """Legend entries of ``plot_curves``: one per curve (``curves``), one per line style (``styles``, grey)."""

    curves: list
    styles: list


def plot_curves(ax, curves: Mapping[tuple, LearningCurve], keys: Sequence[tuple], label: Callable,
                band: Mapping[tuple, AchievableBand] | None = None,
                paper_c: Mapping[float, float] | None = None,
                paired: Mapping[tuple, TagOnlyComparison] | None = None) -> CurveHandles:
    """Measured risk (solid), the eq. (1) fit (dashed) per curve; ``label(key, curve)`` names each curve. With
    ``band``: per (alpha, T) the tag-only risk (dotted) and the context predictor's (dash-dot), in the colour of its
    first curve (grey when every curve shares one (alpha, T)). With ``paper_c`` (alpha -> the paper's C): per curve
    on A.1's schedule, the paper's rate drawn from our fit's value at the smallest n (thick and pale), so that its
    slope stands beside ours. With ``paired`` (``metrics.tag_only_comparison``): per curve the tag-only risk of its
    own validation sets at every n (x markers), the comparison the recalls[...] claims make. Returns the legend
    entries."""
    handles = []
    for key in keys:
        c, color = curves[key], curve_color(key, keys)
        budget = "/steps=" in key[0]  # open squares, in the colour of the same curve on A.1's schedule
        handles += ax.plot(c.n, c.mse, "s-" if budget else "o-", mfc="none" if budget else color, color=color,
                           label=label(key, c))
        grid = np.geomspace(c.n.min(), c.n.max(), 50)
        ax.plot(grid, c.fit.predict(grid, key[1]), "--", color=color, lw=1.0)
        if paper_c and key[1] in paper_c and not budget:
            start = c.fit.predict(grid[:1], key[1])
            shift = rate_axis(grid, key[1]) - rate_axis(grid[:1], key[1])
            ax.plot(grid, start * np.exp(-paper_c[key[1]] * shift), "-", color=color, lw=4, alpha=0.3)
        if paired and key in paired:
            ax.plot(paired[key].n, paired[key].tag_only, "x", color=color, ms=5)
    styles = [plots.key("fit of eq. (1)", ls="--", lw=1.0)]
    if paper_c and any(k[1] in paper_c for k in keys):
        styles.append(plots.key("paper's C (A.2), from our fit at the smallest n", lw=4, alpha=0.3))
    if paired:
        styles.append(plots.key("tag-only risk of the validation set (the recalls claim's comparison)", ls="",
                                marker="x", ms=5))
    tasks = list(dict.fromkeys(k[1:] for k in keys))
    for alpha, T in tasks if band else ():
        one = len(tasks) == 1
        color = "0.4" if one else curve_color(next(k for k in keys if k[1:] == (alpha, T)), keys)
        ax.axhline(band[alpha, T].tag_only, color=color, ls=":", lw=0.9)
        ax.axhline(band[alpha, T].context, color=color, ls="-.", lw=0.9)
    if band:
        styles += [plots.key("tag-only risk (population)", ls=":", lw=0.9),
                   plots.key("context predictor" + (f" (T = {tasks[0][1]})" if len(tasks) == 1 else ""),
                             ls="-.", lw=0.9)]
    ax.set(xscale="log", yscale="log", xlabel="training examples n", ylabel="best validation MSE")
    n_ticks(ax, curves[keys[0]].n)
    return CurveHandles(handles, styles)


def curve_color(key: tuple, keys: Sequence[tuple]) -> str:
    """'C<i>': i counts the curves on A.1's schedule; a step-budget curve takes the colour of its A.1 twin."""
    plain = [k for k in keys if "/steps=" not in k[0]]
    twin = (key[0].split("/steps=")[0], *key[1:])
    return f"C{plain.index(twin)}" if twin in plain else f"C{len(plain) + keys.index(key)}"


def n_ticks(ax, n) -> None:
    """Label the x axis at the sample sizes only (no minor log ticks)."""
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xticks(n, [f"{int(v)}" for v in n])

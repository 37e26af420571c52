"""``ictd.msve-vs-context`` -- Fig. 1: MSVE of the 15-layer dual-head transformer with theta* vs context length.

The paper's Fig. 1 plots MSVE(t) = sum_s d_pi(s) (TF_theta*(tau_t, s) - v_pi(s))^2 against the context length t,
averaged over 300 random policy-evaluation tasks with standard-error bands, one theta* shared by all tasks. The task
family, sizes, discount, query construction and trajectory start are unstated; ``policy_eval.py`` states what memlab
decides (random tasks with m in 5..10 and d = 10, readings (a)-(c)) and computes TF(tau_t, s) and its references.
Two discounts, each a panel: gamma = 0.9 (the only one the paper states, Table 1) and gamma = 0.5. t is log-spaced
from 1 to t_max. The tasks are drawn in the driver and again in each cell; one sweep cell per (gamma, t) holds all tasks
(``msve_cells``); their analysis is ``msve_analysis``; this module runs the sweep and writes the figure, the claims and
the summary.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np

from memlab import plots
from memlab.files import markdown_table, summary_text
from memlab.ictd.experiments.msve_analysis import MsveStats, TaskNumbers, analyse
from memlab.ictd.experiments.msve_cells import MsveConfig, TaskDraw, msve_cell
from memlab.ictd.policy_eval import METHODS, method_label
from memlab.runner import Experiment, Run

PAPER = "softmax-transformers-in-context-td"
STYLES = {"transformer": dict(color="C0", lw=2.0, marker="o", ms=3),
          "weighted_softmax_td": dict(color="k", ls="none", marker="x", ms=5),
          "depth_limit": dict(color="C1", ls="--"),
          "tabular_td": dict(color="C2", ls=":", lw=2.0)}
MARGIN_HEADER = ["γ", "min", "median", "max", "largest possible (1−γ)/2", "tasks with margin > 0"]
MARGIN_FORMAT = {"γ": "g", "min": ".4f", "median": ".4f", "max": ".4f", "largest possible (1−γ)/2": ".3f",
                 "tasks with margin > 0": ".0%"}
RESULT_KEYS = ("contexts", "gammas", "num_tasks", "mean_msve", "stderr_msve", "depth_floor_msve",
               "max_abs_diff_tf_wstd", "max_rel_diff_tf_wstd", "dtype", "depth_limit_change", "margin", "loglog_slope")

SUMMARY = summary_text(__package__, "msve")
SECTION = summary_text(__package__, "msve_section")


def run_msve_vs_context(cfg: MsveConfig, run: Run) -> dict:
    """Tasks (driver) -> sweep over (gamma, t) -> numbers -> files."""
    draw = TaskDraw.of(cfg, run.key_for("tasks"), run.key_for("trajectories"))  # m states: stream ("tasks", m)
    tasks = draw.tasks()
    layers = (cfg.num_layers, cfg.depth_limit_layers)
    cells = run.sweep({f"gamma={gamma:g},t={t}": partial(msve_cell, draw, g, gamma, t, *layers)
                       for g, gamma in enumerate(cfg.gammas) for t in cfg.contexts()}, "MSVE vs context length")
    stats = analyse(cfg, TaskNumbers.of(tasks), cells)
    _figures(cfg, stats, run)
    _claims(cfg, stats, run)
    _summary(cfg, stats, run)
    return {k: getattr(stats, k) for k in RESULT_KEYS}


def _figures(cfg: MsveConfig, s: MsveStats, run: Run) -> None:
    contexts, G, L = s.contexts, len(cfg.gammas), cfg.num_layers
    fig, axes = plots.figure(1, G, width=4.6 * G, height=4.2, squeeze=False)
    for g, gamma in enumerate(cfg.gammas):
        ax, floor = axes[0, g], s.depth_floor_msve[g]
        for name, style in STYLES.items():
            y, se = s.mean_msve[name][g], s.stderr_msve[name][g]
            ax.plot(contexts, y, label=method_label(name, L), **style)
            if name != "weighted_softmax_td":
                ax.fill_between(contexts, np.maximum(y - se, y * 1e-3), y + se, color=style["color"], alpha=0.2, lw=0)
        if floor > 0.1 * min(s.mean_msve[name][g].min() for name in STYLES):
            ax.axhline(floor, color="0.4", lw=1.0, ls="-.", label=f"depth-{L} floor (t → ∞)")
        else:
            ax.text(0.98, 0.98, f"depth-{L} floor (t → ∞) = {floor:.1g}, below the axis", ha="right",
                    va="top", transform=ax.transAxes, fontsize=7, color="0.4")
        ax.set(xscale="log", yscale="log", xlabel="context length t", ylabel="MSVE",
               title=f"γ = {gamma:g}: {s.num_tasks} tasks, m ∈ {{{min(cfg.m_values)}..{max(cfg.m_values)}}}")
    handles = {label: h for ax in axes[0] for h, label in zip(*ax.get_legend_handles_labels())}
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=3, fontsize=7)
    fig.suptitle("In-context policy evaluation, one θ* for all tasks (mean ± s.e. over tasks)", fontsize=10)
    run.save_figure(fig, "msve_vs_context.png")


def _claims(cfg: MsveConfig, s: MsveStats, run: Run) -> None:
    contexts, N, L = s.contexts, s.num_tasks, cfg.num_layers
    for g, gamma in enumerate(cfg.gammas):
        first, last = s.mean_msve["transformer"][g, 0], s.mean_msve["transformer"][g, -1]
        trend = s.loglog_slope[f"{gamma:g}"]
        run.claim(f"msve-decreases[gamma={gamma:g}]",
                  f"MSVE of TF_θ* decreases with context length (γ = {gamma:g}); rule: mean MSVE at t = {contexts[-1]} "
                  f"< 0.5 × at t = {contexts[0]} and the per-task log-log slope of MSVE vs t has mean < 0 with "
                  f"one-sample t < -3", "Fig. 1",
                  f"{first:.3g} → {last:.3g}; slope {trend.mean:+.3f} ± {s.slope_se[g]:.3f} "
                  f"(t = {trend.t:.1f}, {N} tasks)",
                  bool(last < 0.5 * first and trend.mean < 0 and trend.t < -3))
        const, improved = s.const_msve[g], s.improved[g]
        run.claim(f"one-theta-all-tasks[gamma={gamma:g}]",
                  f"a single θ* serves all {N} tasks (γ = {gamma:g}); rule: mean MSVE at t = {contexts[-1]} ≤ 0.1 × "
                  f"the MSVE of the best context-free constant predictor, and MSVE(t_max) < MSVE(t_min) for ≥ 90% "
                  f"of tasks",
                  "Fig. 1, §1", f"{last:.3g} vs constant predictor {const:.3g}; {improved:.0%} of tasks improved",
                  bool(last <= 0.1 * const and improved >= 0.9))
    tol, dtype = s.tol, s.dtype
    run.claim("transformer-equals-weighted-softmax-td",
              f"TF_θ* (dual head, {L} layers) computes weighted softmax TD with {L} iterations (Theorem 1) at every "
              f"query, task, t and γ; rule: max |TF − WSTD| ≤ {tol:g} × max(1, max |WSTD|) in {dtype}",
              "Thm. 1, Fig. 1",
              f"max |diff| = {s.max_abs_diff_tf_wstd:.2e} (relative {s.max_rel_diff_tf_wstd:.2e}, "
              f"|values| ≤ {s.max_abs_value:.3g})", bool(s.max_rel_diff_tf_wstd <= tol))


def _summary(cfg: MsveConfig, s: MsveStats, run: Run) -> None:
    contexts, msve, L = s.contexts, s.msve, cfg.num_layers
    rows = []  # per (gamma, t, method): all tasks, then each m
    for g, gamma in enumerate(cfg.gammas):
        for j, t in enumerate(contexts):
            for name in METHODS:
                rows.append((gamma, t, name, "all", s.num_tasks, s.mean_msve[name][g, j], s.stderr_msve[name][g, j]))
                rows += [(gamma, t, name, f"m={m}", len(x), x.mean(), x.std(ddof=1) / np.sqrt(len(x)))
                         for m in cfg.m_values for x in [msve[name][g, j, s.m == m]]]
    run.save_csv("msve_vs_context.csv", ["gamma", "t", "method", "tasks", "num_tasks", "mean_msve", "stderr"], rows)
    run.save_csv("tasks.csv", ["task", "m"] + [f"{k}_gamma={g:g}" for k in ("margin", "depth_floor_msve")
                                                for g in cfg.gammas],
                 [(i, int(m), *s.margins[:, i], *s.floors[:, i]) for i, m in enumerate(s.m)])
    margin_rows = [(g, *dataclasses.astuple(s.margin[f"{g:g}"]), (1 - g) / 2, np.mean(s.margins[i] > 0))
                   for i, g in enumerate(cfg.gammas)]
    margin_table = run.save_table("margins.csv", MARGIN_HEADER, margin_rows, MARGIN_FORMAT)
    picks = sorted({0, len(contexts) // 3, 2 * len(contexts) // 3, len(contexts) - 1})
    sections, mean, se = [], s.mean_msve, s.stderr_msve
    for g, gamma in enumerate(cfg.gammas):
        rows = [(method_label(n, L), *(f"{mean[n][g, j]:.3g} ± {se[n][g, j]:.2g}" for j in picks)) for n in METHODS]
        rows.append((f"depth-{L} floor (t → ∞)", *(s.depth_floor_msve[g] for _ in picks)))
        table = run.save_table(f"msve_gamma={gamma:g}.csv", ["method", *(f"t = {contexts[j]}" for j in picks)], rows,
                               ".3g")
        trend = s.loglog_slope[f"{gamma:g}"]
        sections.append(SECTION.format(gamma=gamma, table=table, slope=trend.mean, t_stat=trend.t,
                                       const=s.const_msve[g], improved=s.improved[g], t_first=contexts[0]))
    claims = markdown_table(["id", "ours", "holds"], [(c["id"], c["ours"], c["holds"]) for c in run.claims])
    run.write_summary(SUMMARY.format(
        cfg=cfg, L=L, N=s.num_tasks, m_values=list(cfg.m_values), contexts=list(contexts),
        margin_table=margin_table, abs_diff=s.max_abs_diff_tf_wstd, dtype=s.dtype,
        twice_limit=2 * cfg.depth_limit_layers, limit_change=s.depth_limit_change, limit_t=s.limit_t,
        slow_power=0.9 ** L, fast_power=0.5 ** L, sections="\n".join(sections), claims_table=claims))


EXPERIMENTS = [
    Experiment(
        "ictd.msve-vs-context", "Fig. 1", PAPER,
        "MSVE vs context length of the 15-layer dual-head θ* transformer on random tasks, with weighted softmax TD, "
        "its depth limit and tabular TD",
        {"paper": MsveConfig(),
         # quick: 48 tasks with m in {5, 7, 10} (was 8 per m = 5..10), 6 lengths t <= 300 (was 10): each m and each t
         # compiles once (compiling is most of the run); 6 points still give every task's log-log slope
         "quick": MsveConfig(m_values=(5, 7, 10), tasks_per_m=16, t_max=300, num_contexts=6),
         "tiny": MsveConfig(m_values=(3, 4), tasks_per_m=3, d=4, t_max=20, num_contexts=4, depth_limit_layers=100)},
        run_msve_vs_context),
]

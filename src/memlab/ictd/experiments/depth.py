"""``ictd.depth-convergence`` -- Theorem 2: ||v_L - v_pi||_inf against depth L for several context lengths n.

On random tasks (``random_tasks``: random MDP + policy, features c * orthonormal in R^d; the paper states no tasks or
sizes for Theorem 2) v_L is the operator iteration v_{l+1} = T_hat(v_l) of eq. (24)-(26), the transformer's output at
every visited state by Theorem 1 when the context visits every state (checked against ``transformer.forward`` on one
small case); M_hat, P_hat come from the state counts, eq. (49). Contexts start at S_0 ~ p0 and are conditioned on
visiting every state among S_0..S_{n-1} (section 5) by resampling; a task left uncovered is dropped at that n and
counted. Every term of eq. (29) and Lemmas 4-5 is measured by ``depth.py``. One cell per n (all tasks), one for the
tasks' margins and one for the cross-check (``depth_cells``); their analysis is ``depth_analysis``; this module runs
the sweep and writes the figure, the claims and the summary.
"""

from __future__ import annotations

from functools import partial

import jax
import numpy as np

from memlab import plots
from memlab.files import summary_text
from memlab.ictd.experiments.depth_analysis import DepthStats, analyse, covered_quantile
from memlab.ictd.experiments.depth_cells import DepthConfig, DepthTasks, context_cell, crosscheck_cell, tasks_cell
from memlab.runner import Experiment, Run

PAPER = "softmax-transformers-in-context-td"
TOL = 1e-10  # the operator-form cross-check
RESULT_KEYS = ("context_lengths", "num_tasks", "margin", "floor_median", "floor_slope", "T2_median", "T2_slope",
               "M_dev_median", "M_dev_slope", "frac_lemma5", "rate_median", "rate_minus_bound_max",
               "bound70_max_excess", "floor_bound_ratio_median", "dropped", "crosscheck")
TABLE_HEADER = ["n", "tasks dropped", "max draws", "median floor ‖v_∞ − v_π‖", "median T2", "median ‖M̂ − M_π‖∞",
                "ρ̂ median", "ρ̂ max", "frac ρ̂ ≤ 1 − C", "median fitted rate", "median ‖v_L − v_π‖"]
TABLE_FORMAT = {h: ".4f" for h in TABLE_HEADER} | {"median ‖M̂ − M_π‖∞": ".2e", "frac ρ̂ ≤ 1 − C": ".3f"}

SUMMARY = summary_text(__package__, "depth")


def run_depth(cfg: DepthConfig, run: Run) -> dict:
    """Sweep -> numbers -> files."""
    tasks_key = run.key_for("tasks")  # the tasks with m states: stream ("tasks", m)
    tasks, iteration = DepthTasks.of(cfg), (cfg.num_layers, cfg.max_resamples, max(cfg.context_lengths))
    cells = {"tasks": partial(tasks_cell, tasks, tasks_key),
             "crosscheck": partial(crosscheck_cell, tasks, tasks_key, run.key_for("crosscheck"),
                                   cfg.context_lengths[0], *iteration),
             **{f"n={n}": partial(context_cell, tasks, n, tasks_key, run.key_for("contexts", n), *iteration)
                for n in cfg.context_lengths}}  # context keys: stream ("contexts", n, m)
    with jax.enable_x64(True):
        cells = run.sweep(cells, "Theorem 2: operator iteration per context length")
    stats = analyse(cfg, cells)
    _figures(cfg, stats, run)
    _claims(cfg, stats, run)
    _summary(cfg, stats, run)
    return {k: getattr(stats, k) for k in RESULT_KEYS}


def _figures(cfg: DepthConfig, s: DepthStats, run: Run) -> None:
    ns, per_n, layers = s.context_lengths, s.per_n, np.arange(cfg.num_layers + 1)
    fig, (ax1, ax2, ax3) = plots.figure(1, 3, width=13.5, height=4.0)
    for i, (n, c) in enumerate(per_n.items()):
        ax1.plot(layers, c.err_q[1], color=f"C{i % 10}", label=f"n = {n}")
        ax1.fill_between(layers, c.err_q[0], c.err_q[2], color=f"C{i % 10}", alpha=0.15, lw=0)
    ax1.plot(layers, np.median(s.bound_curve, axis=0), "k--", label="(1−C)^L ||v_0 − v_π|| (median)")
    ax1.plot(layers, np.median(s.err0) * cfg.gamma ** layers, "k:", lw=1, label="γ^L ||v_0 − v_π|| (median)")
    ax1.set(yscale="log", xlabel="depth L", ylabel="||v_L − v_π||∞",
            title="(a) error vs depth (median, IQR over tasks)")
    ax1.legend(fontsize=7, ncol=2)
    floor = s.floor_median
    ax2.plot(ns, floor, "o-", color="C0", label="floor ||v_∞ − v_π||∞ (median)")
    ax2.fill_between(ns, covered_quantile(per_n, "floor", 0.25), covered_quantile(per_n, "floor", 0.75), color="C0",
                     alpha=0.15, lw=0)
    ax2.plot(ns, s.T2_median, "s-", color="C1", label="bias T2 = ||T̂(v_π) − v_π||∞ (median)")
    ax2.plot(ns, s.M_dev_median, "^-", color="C2", label="||M̂ − M_π||∞ (median, Lemma 4)")
    ax2.plot(ns, floor[0] * (ns / ns[0]) ** -0.5, "k--", lw=1, label="slope −1/2 reference")
    ax2.set(xscale="log", yscale="log", xlabel="context length n", ylabel="value",
            title=f"(b) floor vs n (fitted slope {s.floor_slope:.2f})")
    ax2.legend(fontsize=7)
    ax3.plot(ns, [np.median(c.rho_hat[c.covered]) for c in per_n.values()], "o-", color="C0",
             label="ρ̂ = ||I − M̂ + γP̂||∞ (median)")
    ax3.plot(ns, [c.rho_hat[c.covered].max() for c in per_n.values()], "o--", color="C0", lw=1,
             label="ρ̂ (max over tasks)")
    ax3.plot(ns, s.rate_median, "s-", color="C3", label="fitted decay rate (median)")
    ax3.axhline(np.median(1 - s.margin_per_task), color="k", ls="--", lw=1, label="1 − C (median)")
    ax3.axhline(cfg.gamma, color="k", ls=":", lw=1, label="γ")
    ax3.set(xscale="log", xlabel="context length n", ylabel="factor per layer",
            title="(c) contraction factor (eq. 57) and decay rate")
    ax3.legend(fontsize=7)
    run.save_figure(fig, "depth_convergence.png")


def _claims(cfg: DepthConfig, s: DepthStats, run: Run) -> None:
    margin, ns, (lo, hi) = s.margin_per_task, s.context_lengths, cfg.slope_band
    run.claim("assumption-5.1", "the population diagonal margin C = min_s M_pi(s,s) - (1+gamma)/2 (eq. 28) is > 0 "
              "for every task used: rule min C > 0", "Assumption 5.1",
              f"C in [{margin.min():.4f}, {margin.max():.4f}], median {np.median(margin):.4f} "
              f"(at most (1-γ)/2 = {(1 - cfg.gamma) / 2:.3f})", bool(margin.min() > 0))
    gap = s.rate_minus_bound_max
    run.claim("geometric-rate", "||v_L - v_inf|| (the transient part of the error) decays geometrically at a rate "
              "<= 1 - C of the task's own margin: rule fitted rate <= 1 - C for every covered task at every n",
              "Theorem 2, eq. (29) first term",
              f"max over tasks and n of (rate - (1 - C)) = {np.nanmax(gap):+.4f}; median rate "
              f"{np.nanmedian(s.rate_median):.4f} vs median 1 - C = {np.median(1 - margin):.4f}; "
              f"{s.rate_nan} unfitted", bool(np.all(gap <= 1e-9) and s.rate_nan == 0))
    excess = s.bound70_max_excess.max()
    run.claim("bound-70", "on the Lemma 5 event (rho_hat <= 1 - C), ||v_L - v_pi|| <= (1-C)^L ||v_0 - v_pi|| + T2/C "
              "for every L <= L_max, T2 the measured bias of eq. (67): rule max excess <= 1e-12",
              "Theorem 2 proof, eq. (67)-(70)", f"max excess {excess:.2e} (negative: bound holds)",
              bool(excess <= 1e-12))
    floor, slope = s.floor_median, s.floor_slope
    run.claim("floor-slope", f"the floor ||v_inf - v_pi|| (large-L error) decreases with n: rule the median over tasks "
              f"decreases at every step of n and its log-log slope lies in [{lo}, {hi}]",
              "Theorem 2, eq. (29) second term O(sqrt(log(1/δ)/n))",
              f"median floor {floor[0]:.3g} (n={ns[0]}) → {floor[-1]:.3g} (n={ns[-1]}), slope {slope:.3f}",
              bool(np.all(np.diff(floor) < 0) and lo <= slope <= hi))
    frac = s.frac_lemma5
    run.claim("lemma-5", "the empirical operator contracts with factor ||I - M_hat + gamma P_hat||_inf <= 1 - C once n "
              "is large: rule every covered task at the largest n, and the fraction does not fall from the smallest "
              "to the largest n", "Lemma 5, eq. (57)",
              "fraction with ρ̂ ≤ 1 − C: " + ", ".join(f"n={n}: {f:.3f}" for n, f in zip(ns, frac)),
              bool(frac[-1] == 1.0 and frac[-1] >= frac[0]))
    M_dev, M_slope = s.M_dev_median, s.M_dev_slope
    run.claim("lemma-4", f"||M_hat - M_pi||_inf = O(sqrt(log(1/δ)/n)): rule log-log slope of its median in "
              f"[{lo}, {hi}]", "Lemma 4, eq. (45)", f"median {M_dev[0]:.2e} → {M_dev[-1]:.2e}, slope {M_slope:.3f}",
              bool(lo <= M_slope <= hi))
    check = s.crosscheck
    run.claim("operator-form", "the theta* transformer's values equal the operator iteration v_{l+1} = T_hat(v_l) at "
              "every state of a covering context (eq. 24-26) and eq. (49) equals eq. (24): rule max |difference| <= "
              "1e-10", "Theorem 1 + section 5, eq. (24)-(26), (49)",
              f"m = {check.m}, n = {check.n}, L = {cfg.num_layers}: transformer vs operator "
              f"{check.transformer_vs_operator:.1e}, eq. (49) vs (24) {check.eq49_vs_eq24:.1e}",
              bool(max(check.transformer_vs_operator, check.eq49_vs_eq24) <= TOL))


def _summary(cfg: DepthConfig, s: DepthStats, run: Run) -> None:
    per_n, margin, L = s.per_n, s.margin_per_task, cfg.num_layers
    run.save_csv("per_task.csv", ["n", "task", "m", "margin_C", "covered", "draws", "rho_hat", "one_minus_C",
                                  "C_hat", "spectral_radius", "fitted_rate", "floor", "T2", "M_dev"],
                 [(n, i, s.m_of[i], margin[i], bool(c.covered[i]), c.draws[i], c.rho_hat[i], 1 - margin[i], c.C_hat[i],
                   c.spectral_radius[i], c.rate[i], c.floor[i], c.T2[i], c.M_dev[i])
                  for n, c in per_n.items() for i in range(len(margin))])
    run.save_csv("error_vs_depth.csv", ["n", "layer", "err_q25", "err_median", "err_q75", "bound_median"],
                 [(n, k, *c.err_q[:, k], np.median(s.bound_curve[:, k])) for n, c in per_n.items()
                  for k in range(L + 1)])
    rows = [(n, s.dropped[n], s.draws_max[n], s.floor_median[i], s.T2_median[i], s.M_dev_median[i],
             np.median(c.rho_hat[c.covered]), c.rho_hat[c.covered].max(), s.frac_lemma5[i],
             np.nanmedian(c.rate[c.covered]), np.median(c.err_q[1, -1]))
            for i, (n, c) in enumerate(per_n.items())]
    header = [*TABLE_HEADER[:-1], f"median ‖v_{L} − v_π‖"]
    table = run.save_table("per_n.csv", header, rows, TABLE_FORMAT | {header[-1]: ".4f"})
    ratio, frac, floor, ns = s.floor_bound_ratio_median, s.frac_lemma5, s.floor_median, s.context_lengths
    run.write_summary(SUMMARY.format(
        cfg=cfg, L=L, half_L=L // 2, state_counts=list(cfg.state_counts), context_lengths=list(cfg.context_lengths),
        num_tasks=s.num_tasks, dropped=s.dropped, check=s.crosscheck, table=table,
        half_one_plus_gamma=(1 + cfg.gamma) / 2, positive=np.mean(margin > 0), margin_median=np.median(margin),
        max_margin=(1 - cfg.gamma) / 2, rate_median=np.nanmedian(s.rate_median), one_minus_C=np.median(1 - margin),
        spectral_median=np.median(np.concatenate([c.spectral_radius[c.covered] for c in per_n.values()])),
        floor_first=floor[0], floor_last=floor[-1], floor_slope=s.floor_slope, T2_slope=s.T2_slope,
        M_dev_slope=s.M_dev_slope, frac_first=frac[0], frac_last=frac[-1], n_first=ns[0], n_last=ns[-1],
        excess_max=s.bound70_max_excess.max(), ratio_first=ratio[0], ratio_last=ratio[-1], tail_gap=s.tail_gap))


EXPERIMENTS = [
    Experiment(
        "ictd.depth-convergence", "Theorem 2 (eq. 29), Lemmas 4-5", PAPER,
        "||v_L - v_pi|| vs depth L and context length n on random tasks satisfying Assumption 5.1 (float64)",
        {"paper": DepthConfig(),
         # quick: m in {5, 7, 10} x 40 tasks (was 6 sizes x 20): each m compiles once, and compiling dominated the
         # run; same rules
         "quick": DepthConfig(context_lengths=(50, 200, 1000, 4000), state_counts=(5, 7, 10), tasks_per_m=40),
         "tiny": DepthConfig(context_lengths=(30, 120), num_layers=20, state_counts=(5,), tasks_per_m=8, d=5,
                             max_resamples=30)},
        run_depth),
]

"""``ictd.neu`` -- Theorem 3: the NEU objective J_{L,n} of eq. (31) at theta* on the looped space Theta^Looped (32).

Eq. (33) bounds J_{L,n}(theta*), so lim_L limsup_n J = 0: theta* is a global minimiser of NEU in that limit. The
paper states no experiment and no task distribution; memlab decides (also in summary.md): Delta = ``random_tasks``
with c = 3 (Assumption 5.1 holds; the minimum margin is reported); gamma = 0.5 for the main grid, plus a deeper run at
the slow discount gamma = 0.9 (the transient ~ L gamma^L peaks near L ~ 1/(1 - gamma)); the tower estimator of App.
E.4 beside the plain one, with the noise floor of J-hat (``neu.py``); theta* against ``neu.comparison_points`` at the
largest n on the same tasks. Cells: one per (point, n), each holding every depth (one forward pass reads all).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import NamedTuple

import jax
import numpy as np
from scipy.stats import norm

from memlab.checks import check_increasing_ints, check_int, check_real
from memlab.files import summary_text
from memlab.ictd.experiments.neu_figures import (
    CSV_HEADER,
    NEUStats,
    SlowRun,
    csv_rows,
    depth_table,
    fmt,
    plot_context,
    plot_depth,
    plot_slow,
    point_table,
)
from memlab.ictd.neu import (
    POINT_LABELS,
    EstimatorStatistics,
    comparison_points,
    estimator_statistics,
    sample_tasks,
)
from memlab.runner import Experiment, Run
from memlab.store import cell

PAPER = "softmax-transformers-in-context-td"
NON_TD_POINTS = ("mirror", "perturbed", "random", "u-zero", "B-zero")  # points expected to have J bounded away from 0
RESOLUTION = {True: "resolved from 0 (the split-half estimate is above twice the floor): the finite-n terms of (33), "
                    "which vanish only as n grows",
              False: "not resolved from 0 at this sample size"}
FALLS = {True: "does not fall", False: "falls only"}
SLOW_CELL = "theta-star_slow_gamma={0.slow_gamma:g}_n={0.slow_context}"  # the cell name of the slow-discount run

SUMMARY = summary_text(__package__, "neu")
SLOW_SUMMARY = summary_text(__package__, "neu_slow")


@dataclasses.dataclass(frozen=True)
class NEUConfig:
    """Sizes of the NEU experiment (module docstring). Depths l = 1..num_layers come from one pass per sample."""

    seed: int = 0
    m: int = 5  # states per task
    d: int = 5  # feature dimension (D_theta = d^2 + 3 parameters)
    gamma: float = 0.5
    feature_scale: float = 3.0  # c: x(s) = c q_s
    num_actions: int = 2
    num_layers: int = 12  # L_max
    contexts: tuple[int, ...] = (20, 50, 200, 1000)  # n
    num_samples: int = 256  # (task, trajectory) pairs per n at theta*
    num_samples_compare: int = 32  # at the comparison points (their J is far above the noise)
    perturbation: float = 0.1  # eps of the perturbed point
    slow_gamma: float = 0.9  # the deeper run at a slow discount; slow_layers = 0 switches it off
    slow_context: int = 200
    slow_layers: int = 40  # depths 1..12, then every 4th up to slow_layers (``slow_depths``)
    slow_samples: int = 256
    batch_size: int = 4  # samples per vmapped group (memory: L (n+1)^2 floats per sample)

    def validate(self) -> None:
        for name in ("num_actions", "batch_size", "slow_context"):
            check_int(name, getattr(self, name))
        check_int("m", self.m, 2)
        check_int("d", self.d, self.m)  # orthonormal features need d >= m
        check_int("num_layers", self.num_layers, 2)  # a depth trend
        check_int("slow_layers", self.slow_layers, 0)  # 0 = off
        for name in ("num_samples", "num_samples_compare", "slow_samples"):
            check_int(name, getattr(self, name), 4)  # standard errors
        check_real("gamma", self.gamma, 0.0, 1.0, open_high=True)
        check_real("slow_gamma", self.slow_gamma, 0.0, 1.0, open_high=True)
        check_real("feature_scale", self.feature_scale, 0.0, open_low=True)
        check_real("perturbation", self.perturbation, 0.0, open_low=True)
        if len(check_increasing_ints("contexts", self.contexts, low=2)) < 2:
            raise ValueError(f"contexts needs at least 2 context lengths (a trend), got {self.contexts!r}")

    @property
    def slow_depths(self) -> tuple[int, ...]:
        """Depths of the slow-discount run: 1..12, then every 4th, and slow_layers (each costs a backward pass)."""
        L = self.slow_layers
        return tuple(sorted({*range(1, min(L, 12) + 1), *range(12, L + 1, 4), L})) if L > 0 else ()


class TaskShape(NamedTuple):
    """What a NEU cell's tasks are drawn as (``sample_tasks``): m states, d features, scale c, num_actions."""

    m: int
    d: int
    feature_scale: float
    num_actions: int


@cell("ictd.neu", result=EstimatorStatistics)
def neu_cell(u, B, key, gamma: float, n: int, drawn: int, used: int, num_layers: int, tasks: TaskShape,
             batch_size: int, depths=None) -> EstimatorStatistics:
    """``estimator_statistics`` at (u, B) on the first ``used`` of ``drawn`` tasks of shape ``tasks`` from ``key``
    (common numbers)."""
    sampled, keys = sample_tasks(key, drawn, tasks.m, tasks.d, gamma, tasks.feature_scale, tasks.num_actions)
    sampled = jax.tree_util.tree_map(lambda a: a[:used], sampled)
    return estimator_statistics(u, B, sampled, keys[:used], num_layers, n, batch_size, depths)


def run_neu(cfg: NEUConfig, run: Run) -> dict:
    """Sweep over (point, n) -> numbers -> files."""
    points = comparison_points(cfg.d, run.key_for("points"), cfg.perturbation)
    drawn, L, n_max = max(cfg.num_samples, cfg.num_samples_compare), cfg.num_layers, cfg.contexts[-1]
    tasks_key = {n: run.key_for("tasks", n) for n in cfg.contexts}  # the same tasks for every point at n
    shape = dict(tasks=TaskShape(cfg.m, cfg.d, cfg.feature_scale, cfg.num_actions), batch_size=cfg.batch_size)
    cells = {f"theta-star_n={n}": partial(neu_cell, *points["theta-star"], tasks_key[n], cfg.gamma, n, drawn,
                                          cfg.num_samples, L, **shape) for n in cfg.contexts}
    cells |= {f"{p}_n={n_max}": partial(neu_cell, *points[p], tasks_key[n_max], cfg.gamma, n_max, drawn,
                                        cfg.num_samples_compare, L, **shape) for p in POINT_LABELS if p != "theta-star"}
    if cfg.slow_layers > 0:
        cells[SLOW_CELL.format(cfg)] = partial(
            neu_cell, *points["theta-star"], run.key_for("slow-tasks"), cfg.slow_gamma, cfg.slow_context,
            cfg.slow_samples, cfg.slow_samples, cfg.slow_layers, **shape, depths=cfg.slow_depths)
    stats = analyse(cfg, run.sweep(cells, "NEU cells"))
    _figures(cfg, stats, run)
    _claims(cfg, stats, run)
    _summary(cfg, stats, run)
    return _results(stats)


def analyse(cfg: NEUConfig, cells: dict) -> NEUStats:
    """Cells -> J(theta*) by n, the points at the largest n, the slow run, and the numbers behind the claims."""
    L, n_max = cfg.num_layers, cfg.contexts[-1]
    main = {n: cells[f"theta-star_n={n}"].as_arrays() for n in cfg.contexts}
    points = {p: main[n_max] if p == "theta-star" else cells[f"{p}_n={n_max}"].as_arrays()
              for p in POINT_LABELS}  # theta* first
    J_star, J_last = main[n_max].tower.J, {p: c.tower.J[-1] for p, c in points.items()}
    peak = int(np.argmax(J_star))
    slow_cell = cells.get(SLOW_CELL.format(cfg))
    slow_cell = None if slow_cell is None else slow_cell.as_arrays()
    return NEUStats(
        depths=np.arange(1, L + 1), contexts=list(cfg.contexts), gamma=cfg.gamma, theta_star=main, points=points,
        slow_cell=slow_cell, slow=None if slow_cell is None else _slow_run(cfg, slow_cell),
        margin_min=min(c.margin_min for c in [*main.values(), *points.values()]),
        margin_median=float(np.median([c.margin_median for c in main.values()])),
        peak_l=peak, depth_ratio=J_star[peak] / J_star[-1], min_non_td=min(J_last[p] for p in NON_TD_POINTS),
        argmin_non_td=min(NON_TD_POINTS, key=lambda p: J_last[p]),
        z_threshold=float(norm.isf(0.01 / (2 * L * (cfg.d * cfg.d + 3) * len(cfg.contexts)))),  # Bonferroni, 1%
        tower_vs_plain_max_z=max(float(np.max(c.tower_vs_plain_max_z)) for c in main.values()),
        variance_ratio_at_L_max={n: float(c.variance_ratio[-1]) for n, c in main.items()},
        figures=["neu_vs_depth.png", "neu_vs_context.png"] + ["neu_slow_discount.png"] * (cfg.slow_layers > 0))


def _slow_run(cfg: NEUConfig, c: EstimatorStatistics) -> SlowRun:
    J, floor = c.tower.J, c.tower.noise_floor
    peak = int(np.argmax(J))
    last = max(J[-1], floor[-1])  # J-hat at the last depth, or its noise floor if that is larger
    return SlowRun(cfg.slow_depths[peak], J[peak], J[-1], floor[-1], J[peak] / last, c.margin_min)


def _results(s: NEUStats) -> dict:
    """results.json's "results": theta*'s tower statistics per n, every point's at the largest n, the slow run."""
    return {"depths": s.depths, "contexts": s.contexts, "gamma": s.gamma,
            "theta_star": {n: c.tower for n, c in s.theta_star.items()},
            "points_at_n_max": {p: c.tower for p, c in s.points.items()}, "margin_min": s.margin_min,
            "tower_vs_plain_max_z": s.tower_vs_plain_max_z, "variance_ratio_at_L_max": s.variance_ratio_at_L_max,
            "slow": s.slow or {}, "figures": s.figures}


def _figures(cfg: NEUConfig, s: NEUStats, run: Run) -> None:
    run.save_figure(plot_depth(s, cfg.gamma), "neu_vs_depth.png")
    run.save_figure(plot_context(s.theta_star, cfg.num_layers, cfg.gamma), "neu_vs_context.png")
    if s.slow_cell is not None:
        run.save_figure(plot_slow(s.slow_cell, cfg.slow_gamma, cfg.slow_context), "neu_slow_discount.png")


def _claims(cfg: NEUConfig, s: NEUStats, run: Run) -> None:
    L, n_max, peak = cfg.num_layers, cfg.contexts[-1], s.peak_l
    star, J_points = s.theta_star[n_max].tower, {p: c.tower.J[-1] for p, c in s.points.items()}
    run.claim("assumption-5.1-uniform",
              "Assumption 5.1 holds for every sampled task: min over all tasks of min_s M_π(s,s) − (1+γ)/2 > 0",
              "Thm 3 hypothesis, eq. (28)", f"min margin {s.margin_min:.4f} (median per cell "
              f"{s.margin_median:.3f}), γ = {cfg.gamma}, c = {cfg.feature_scale}", bool(s.margin_min > 0))
    run.claim("neu-decreases-with-depth",
              f"J(θ*) at n = {n_max} falls with depth: its value at L = {L} is at least 5x below its peak over L",
              "Thm 3, eq. (33): (1 − C)^L term",
              f"peak {star.J[peak]:.4f} at L = {peak + 1} → {star.J[-1]:.5f} at L = {L} (×{s.depth_ratio:.1f} "
              f"lower; noise floor {star.noise_floor[-1]:.5f})", bool(s.depth_ratio >= 5))
    J_by_n, upper_by_n = ([getattr(c.tower, f)[-1] for c in s.theta_star.values()] for f in ("J", "abs_mean"))
    run.claim("neu-decreases-with-context",
              f"At L = {L}, J(θ*) at n = {n_max} is at least 3x below n = {cfg.contexts[0]}, and the bound E||X_L||_1 "
              f"decreases at every step of the n grid", "Thm 3, eq. (33): sqrt(log n / n) and L(2+γ)^{2L}/n terms",
              "J: " + " → ".join(f"{v:.4f}" for v in J_by_n)
              + "; E||X||_1: " + " → ".join(f"{v:.4f}" for v in upper_by_n),
              bool(star.J[-1] * 3 <= J_by_n[0] and np.all(np.diff(upper_by_n) < 0)))
    run.claim("theta-star-far-below",
              f"J(θ*) at n = {n_max}, L = {L} is at least 10x below J at every non-TD point "
              f"({', '.join(NON_TD_POINTS)})", "Thm 3: θ* is a global minimiser (J >= 0)",
              f"J(θ*) = {J_points['theta-star']:.5f}; smallest other: {s.argmin_non_td} {s.min_non_td:.4f} "
              f"(×{s.min_non_td / J_points['theta-star']:.0f})", bool(10 * J_points["theta-star"] <= s.min_non_td))
    se = {p: c.tower.J_se[-1] for p, c in s.points.items()}
    run.claim("theta-star-smallest",
              f"J(θ*) <= J(p) + 2 (se(θ*) + se(p)) for every compared point p (half-step u*/2 included) "
              f"at n = {n_max}, L = {L}", "Thm 3: θ* is a global minimiser",
              "; ".join(f"{p} {J_points[p]:.4g}" for p in POINT_LABELS),
              bool(all(J_points["theta-star"] <= J_points[p] + 2 * (se["theta-star"] + se[p]) for p in J_points)))
    run.claim("tower-estimator-unbiased",
              f"tower (E over S_(n+1) ~ p(·|S_n)) and plain estimators have the same mean: max |z| over depths, "
              f"parameters and n <= {s.z_threshold:.2f} (Bonferroni, 1% family-wise)", "App. E.4 (tower property)",
              f"max |z| = {s.tower_vs_plain_max_z:.2f}; variance plain/tower at L = {L}: "
              + ", ".join(f"n={n}: ×{v:.1f}" for n, v in s.variance_ratio_at_L_max.items()),
              bool(s.tower_vs_plain_max_z <= s.z_threshold))
    if s.slow is not None:
        slow = s.slow
        run.claim("neu-decreases-with-depth-slow-discount",
                  f"At γ = {cfg.slow_gamma} (n = {cfg.slow_context}) J(θ*) rises first and then falls with depth: its "
                  f"peak is at L > 1 and is at least 3x above max(J, noise floor) at L = {cfg.slow_layers}",
                  "Thm 3, eq. (33): (1 − C)^L with C <= (1 − γ)/2",
                  f"peak {slow.peak_J:.4f} at L = {slow.peak_L} → {slow.last_J:.4f} (floor "
                  f"{slow.last_floor:.4f}) at L = {cfg.slow_layers} (×{slow.ratio:.1f}); min margin "
                  f"{slow.margin_min:.4f}", bool(slow.peak_L > cfg.slow_depths[0] and slow.ratio >= 3))


def _summary(cfg: NEUConfig, s: NEUStats, run: Run) -> None:
    L, n_max, n_min = cfg.num_layers, cfg.contexts[-1], cfg.contexts[0]
    points = [("theta-star", n, c) for n, c in s.theta_star.items()]
    points += [(p, n_max, c) for p, c in list(s.points.items())[1:]]
    slow = [("theta-star", cfg.slow_context, s.slow_cell)] if s.slow_cell is not None else []
    run.save_csv("neu.csv", CSV_HEADER, csv_rows([("main", cfg.gamma, points), ("slow", cfg.slow_gamma, slow)]))
    r = s.slow
    slow_text = "" if r is None else SLOW_SUMMARY.format(
        cfg=cfg, margin_min=r.margin_min, max_margin=(1 - cfg.slow_gamma) / 2, peak_J=fmt(r.peak_J), peak_L=r.peak_L,
        last_J=fmt(r.last_J), last_floor=fmt(r.last_floor), horizon=1 / (1 - cfg.slow_gamma))
    star, small = s.theta_star[n_max].tower, s.theta_star[n_min].tower
    half, mirror = s.points["half-step"].tower.J, s.points["mirror"].tower.J
    run.write_summary(SUMMARY.format(
        cfg=cfg, num_params=cfg.d * cfg.d + 3, depth_table=depth_table(s.theta_star, L),
        point_table=point_table(s.points), n_max=n_max, L=L, margin_min=s.margin_min, peak_L=s.peak_l + 1,
        depth_ratio=s.depth_ratio, J_last=fmt(star.J[-1]), floor_last=fmt(star.noise_floor[-1]),
        split=fmt(star.J_split[-1]), resolution=RESOLUTION[bool(star.J_split[-1] > 2 * star.noise_floor[-1])],
        min_non_td=fmt(s.min_non_td), n_min=n_min, falls=FALLS[bool(small.J[-1] >= small.J[0])],
        J_nmin_1=fmt(small.J[0]), J_nmin_L=fmt(small.J[-1]), half_1=fmt(half[0]), half_L=fmt(half[-1]),
        mirror_L=fmt(mirror[-1]), mirror_1=fmt(mirror[0]), slow_text=slow_text))


EXPERIMENTS = [
    Experiment(
        "ictd.neu", "Thm 3, eq. (31)-(33)", PAPER,
        "NEU J_{L,n} of θ* on the looped space vs depth and context length (tower estimator, noise floor), against "
        "the mirror, perturbed, random, u = 0, B = 0 and half-step points",
        {"paper": NEUConfig(),
         # quick: slow run with 128 samples (was 512; reuses the compiled sampler): floor x2, still < peak / 3
         "quick": NEUConfig(num_layers=8, contexts=(20, 50, 200), num_samples=128, num_samples_compare=32,
                            slow_context=100, slow_layers=30, slow_samples=128),
         # tiny: every cell has the same (N, L, n) as a theta* cell, so the run compiles two sample functions
         "tiny": NEUConfig(m=3, d=3, num_layers=3, contexts=(8, 16), num_samples=8, num_samples_compare=8,
                           slow_context=8, slow_layers=3, slow_samples=8)},
        run_neu),
]

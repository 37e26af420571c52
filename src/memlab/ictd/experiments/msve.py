"""``ictd.msve-vs-context`` -- Fig. 1: MSVE of the 15-layer dual-head transformer with theta* vs context length.

The paper's Fig. 1 plots MSVE(t) = sum_s d_pi(s) (TF_theta*(tau_t, s) - v_pi(s))^2 against the context length t,
averaged over 300 random policy-evaluation tasks with standard-error bands, one theta* shared by all tasks. The task
family, sizes, discount, query construction and trajectory start are unstated; ``policy_eval.py`` states what memlab
decides (random tasks with m in 5..10 and d = 10, readings (a)-(c)) and computes TF(tau_t, s) and its references.
Two discounts, each a panel: gamma = 0.9 (the only one the paper states, Table 1) and gamma = 0.5. t is log-spaced
from 1 to t_max. The tasks are drawn once in the driver; one sweep cell per (gamma, t) holds all tasks.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import numpy as np
from scipy import stats as scipy_stats

from memlab import plots
from memlab.checks import check_int, check_real
from memlab.files import markdown_table, summary_text
from memlab.ictd.policy_eval import METHODS, TaskSet, context_msve, make_task_set, method_label
from memlab.runner import Experiment, Run
from memlab.store import cell

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


@dataclasses.dataclass(frozen=True)
class MsveConfig:
    """Fig. 1 sizes (paper defaults; the paper states only 15 layers and 300 tasks)."""

    seed: int = 0
    m_values: tuple[int, ...] = (5, 6, 7, 8, 9, 10)  # state-space sizes; tasks_per_m tasks each
    tasks_per_m: int = 50
    d: int = 10  # feature dimension, shared by all tasks (one theta*)
    gammas: tuple[float, ...] = (0.9, 0.5)
    feature_scale: float = 3.0  # c in x(s) = c q_s
    num_actions: int = 2
    num_layers: int = 15
    t_max: int = 500
    num_contexts: int = 15  # log-spaced t in [1, t_max] (duplicates after rounding removed)
    depth_limit_layers: int = 500

    def contexts(self) -> tuple[int, ...]:
        return tuple(int(t) for t in np.unique(np.round(np.geomspace(1, self.t_max, self.num_contexts))))

    def validate(self):
        if not self.m_values or any(not isinstance(m, int) or m < 2 for m in self.m_values):
            raise ValueError(f"m_values must be non-empty ints >= 2, got {self.m_values}")
        if len(set(self.m_values)) != len(self.m_values):
            raise ValueError(f"m_values must be distinct, got {self.m_values}")
        check_int("d", self.d, max(self.m_values))  # orthonormal features need d >= every m
        check_int("tasks_per_m", self.tasks_per_m, 2)  # standard errors
        if not self.gammas or any(not 0.0 <= g < 1.0 for g in self.gammas) or len(set(self.gammas)) != len(self.gammas):
            raise ValueError(f"gammas must be distinct values in [0, 1), got {self.gammas}")
        check_real("feature_scale", self.feature_scale, 0.0, open_low=True)
        check_int("num_actions", self.num_actions)
        check_int("num_layers", self.num_layers)
        check_int("t_max", self.t_max, 2)
        if self.num_contexts < 3 or len(self.contexts()) < 3:
            raise ValueError(f"need at least 3 distinct context lengths, got num_contexts = {self.num_contexts}")
        check_int("depth_limit_layers", self.depth_limit_layers, self.num_layers)


def make_tasks(cfg: MsveConfig, tasks_key, trajectories_key) -> TaskSet:
    return make_task_set(tasks_key, trajectories_key, cfg.m_values, cfg.tasks_per_m, cfg.d, cfg.gammas,
                         cfg.feature_scale, cfg.num_actions, cfg.t_max, cfg.num_layers)


@cell("ictd.msve")
def msve_cell(cfg: MsveConfig, tasks: TaskSet, g: int, t: int) -> dict:
    """MSVE of every method for every task at discount cfg.gammas[g] and context length t."""
    return context_msve(tasks, g, cfg.gammas[g], t, cfg.num_layers, cfg.depth_limit_layers)


def run_msve_vs_context(cfg: MsveConfig, run: Run) -> dict:
    """Tasks (driver) -> sweep over (gamma, t) -> numbers -> files."""
    tasks = make_tasks(cfg, run.key_for("tasks"), run.key_for("trajectories"))  # m states: stream ("tasks", m)
    cells = run.sweep({f"gamma={gamma:g},t={t}": partial(msve_cell, cfg, tasks, g, t)
                       for g, gamma in enumerate(cfg.gammas) for t in cfg.contexts()}, "MSVE vs context length")
    stats = analyse(cfg, TaskNumbers.of(tasks), cells)
    _figures(cfg, stats, run)
    _claims(cfg, stats, run)
    _summary(cfg, stats, run)
    return {k: getattr(stats, k) for k in RESULT_KEYS}


@dataclasses.dataclass(frozen=True)
class TaskNumbers:
    """What the analysis needs of the N tasks (G discounts, M padded states) as NumPy arrays: m (N,) states per task;
    v (G, N, M) v_pi; mu (N, M) stationary distribution; margin, floor (G, N) the Assumption 5.1 margin and the
    depth-L floor MSVE; dtype of the features ("float32" / "float64")."""

    m: np.ndarray
    v: np.ndarray
    mu: np.ndarray
    margin: np.ndarray
    floor: np.ndarray
    dtype: str

    @classmethod
    def of(cls, tasks: TaskSet) -> TaskNumbers:
        return cls(tasks.m, np.asarray(tasks.v), np.asarray(tasks.mu), tasks.margin, tasks.floor,
                   str(tasks.features.dtype))


@dataclasses.dataclass(frozen=True)
class MarginRange:
    """The Assumption 5.1 margin (eq. 28) over the tasks at one discount: min, median, max."""

    min: float
    median: float
    max: float


@dataclasses.dataclass(frozen=True)
class SlopeTrend:
    """The per-task least-squares slope of log MSVE on log t: its mean over tasks and the one-sample t-statistic."""

    mean: float
    t: float


@dataclasses.dataclass(frozen=True)
class MsveStats:
    """The analysis of ``ictd.msve-vs-context``; G discounts, T context lengths, N tasks; ``method`` keys are
    ``policy_eval.METHODS``, ``gamma`` keys f"{gamma:g}".

    contexts (T,), gammas (G,), num_tasks N; msve method -> (G, T, N) per task; mean_msve, stderr_msve method ->
    (G, T) mean and standard error over tasks; depth_floor_msve (G,) mean depth-L floor; max_abs_diff_tf_wstd,
    max_rel_diff_tf_wstd: max |TF - WSTD| absolute and / max(1, |WSTD|) over every cell, max_abs_value the largest
    |WSTD|; dtype of the tasks and tol the relative tolerance of the Theorem 1 claim there; depth_limit_change: the
    largest change of the depth limit from L_inf to 2 L_inf iterations, at context limit_t; margin gamma ->
    ``MarginRange``; loglog_slope gamma -> ``SlopeTrend``; slope_se (G,) standard error of the mean slope;
    const_msve (G,) MSVE of the best context-free constant predictor; improved (G,) fraction of tasks with
    MSVE(t_max) < MSVE(t_min); margins, floors (G, N) per task; m (N,) states per task.
    """

    contexts: list[int]
    gammas: list[float]
    num_tasks: int
    msve: dict[str, np.ndarray]
    mean_msve: dict[str, np.ndarray]
    stderr_msve: dict[str, np.ndarray]
    depth_floor_msve: np.ndarray
    max_abs_diff_tf_wstd: float
    max_rel_diff_tf_wstd: float
    max_abs_value: float
    dtype: str
    tol: float
    depth_limit_change: float
    limit_t: int
    margin: dict[str, MarginRange]
    loglog_slope: dict[str, SlopeTrend]
    slope_se: list[float]
    const_msve: list[float]
    improved: list[float]
    margins: np.ndarray
    floors: np.ndarray
    m: np.ndarray


def _slope_t(log_t, log_msve) -> tuple[np.ndarray, float]:
    """Per-task least-squares slope of log MSVE (N, T) on log t (T,), and the one-sample t-statistic of their mean."""
    x = log_t - log_t.mean()
    slopes = (log_msve - log_msve.mean(axis=1, keepdims=True)) @ x / (x @ x)
    return slopes, scipy_stats.ttest_1samp(slopes, 0.0).statistic


def analyse(cfg: MsveConfig, tasks: TaskNumbers, cells: dict) -> MsveStats:
    """Task numbers and cells -> MSVE (G, T, N) per method, means, s.e., slopes, the constant predictor, margins."""
    contexts, gammas, N = cfg.contexts(), cfg.gammas, len(tasks.m)
    grid = [[cells[f"gamma={gamma:g},t={t}"] for t in contexts] for gamma in gammas]
    msve = {name: np.array([[c["msve"][name] for c in row] for row in grid], float) for name in METHODS}
    max_diff, max_value = (np.array([[c[k] for c in row] for row in grid]) for k in ("max_abs_diff", "max_abs_value"))
    limit_change = np.array([[c["depth_limit_change"] for c in row] for row in grid])
    log_t = np.log(np.asarray(contexts, float))
    trend, slope_se, const_msve, improved = {}, [], [], []
    for g, gamma in enumerate(gammas):
        tf = msve["transformer"][g]  # (T, N)
        slopes, t_stat = _slope_t(log_t, np.log(tf.T))
        trend[f"{gamma:g}"] = SlopeTrend(float(slopes.mean()), float(t_stat))
        slope_se.append(slopes.std(ddof=1) / np.sqrt(N))
        v_all, mu = tasks.v[g], tasks.mu
        const = np.sum(mu * v_all) / np.sum(mu)  # the best context-free constant prediction over all tasks
        const_msve.append(np.mean(np.sum(mu * (v_all - const) ** 2, axis=1)))
        improved.append(float(np.mean(tf[-1] < tf[0])))
    margin = tasks.margin
    return MsveStats(
        contexts=list(contexts), gammas=list(gammas), num_tasks=N, msve=msve,
        mean_msve={k: a.mean(axis=2) for k, a in msve.items()},
        stderr_msve={k: a.std(axis=2, ddof=1) / np.sqrt(N) for k, a in msve.items()},
        depth_floor_msve=tasks.floor.mean(axis=1), max_abs_diff_tf_wstd=float(max_diff.max()),
        max_rel_diff_tf_wstd=float((max_diff / np.maximum(1.0, max_value)).max()), max_abs_value=max_value.max(),
        dtype=tasks.dtype, tol=1e-10 if tasks.dtype == "float64" else 1e-5,
        depth_limit_change=float(limit_change.max()), limit_t=contexts[int(np.argmax(limit_change.max(axis=0)))],
        margin={f"{g:g}": MarginRange(float(margin[i].min()), float(np.median(margin[i])), float(margin[i].max()))
                for i, g in enumerate(gammas)},
        loglog_slope=trend, slope_se=slope_se, const_msve=const_msve, improved=improved,
        margins=margin, floors=tasks.floor, m=tasks.m)


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

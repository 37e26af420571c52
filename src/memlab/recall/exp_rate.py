"""Risk-vs-n experiments: ``recall.rate`` (Fig. 1), ``recall.sweep`` (App. A.4, Figs. 2-4) and
``recall.attention-vs-s6`` (the S6 student beside the softmax-attention comparator).

Every (student, alpha, T, n) is one resumable cell (``runs.train_cell``); the rate of eq. (1) is fitted per
curve by ``rate.fit_rate``. Besides the paper's numbers, every table carries the two exact reference risks of
``task.baseline_mse``: the mean predictor and the best predictor that uses only the query tag (no recall).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from matplotlib import ticker

from memlab import plots
from memlab.recall.rate import fit_rate
from memlab.recall.runs import STUDENTS, train_cell, validation_set
from memlab.recall.task import RecallTask
from memlab.recall.train import TrainConfig
from memlab.runner import Experiment, Run

PAPER_C = {0.75: 1.81, 1.0: 1.28}  # App. A.2, Fig. 1 (T = 5000, one-block student)
PAPER_SWEEP_C = {0.5: "3.3-3.4", 0.75: "2.1-2.2", 1.0: "1.1-1.2", 2.0: "0.4-0.6"}  # App. A.4


@dataclasses.dataclass(frozen=True)
class RateConfig:
    seed: int = 0
    alphas: tuple[float, ...] = (0.75, 1.0)
    context_lengths: tuple[int, ...] = (5000,)
    sample_sizes: tuple[int, ...] = (4, 8, 16, 32, 64)
    students: tuple[str, ...] = ("mamba-1",)
    num_val: int = 2000
    epochs: int = 30
    num_seeds: int = 1  # independent training sets and initialisations per cell (the paper: one)


def _grid(cfg: RateConfig, run: Run) -> list[dict]:
    """Train every (student, alpha, T, n) cell; returns their records in loop order."""
    for kind in cfg.students:
        if kind not in STUDENTS:
            raise ValueError(f"unknown student {kind!r}; known: {', '.join(STUDENTS)}")
    train_config = TrainConfig(epochs=cfg.epochs)
    cells = [(kind, alpha, T, n) for kind in cfg.students for alpha in cfg.alphas for T in cfg.context_lengths
             for n in cfg.sample_sizes]
    records, val_sets = [], {}
    with run.progress(len(cells), "train students") as advance:
        for kind, alpha, T, n in cells:
            task = RecallTask(alpha=float(alpha), context_length=int(T))

            def compute(task=task, n=n, kind=kind):
                if task not in val_sets:
                    val_sets[task] = validation_set(task, cfg.num_val, cfg.seed)
                return train_cell(task, int(n), kind, train_config, val_sets[task], cfg.num_seeds, cfg.seed,
                                  capacity=max(cfg.sample_sizes))[0]

            records.append(run.cell(f"{kind}_alpha={alpha:g}_T={T}_n={n}", compute))
            advance()
    run.save_csv("risk.csv", ["student", "alpha", "T", "n", "mse", "mse_stderr", "best_epoch", "relative_to_mean",
                              "baseline_mean", "baseline_tag_only"],
                 [(r["student"], r["alpha"], r["T"], r["n"], r["mse"], r["mse_stderr"], int(np.mean(r["best_epoch"])),
                   r["mse"] / r["baseline_mean"], r["baseline_mean"], r["baseline_tag_only"]) for r in records])
    return records


def _curves(records: list[dict]) -> dict[tuple, dict]:
    """(student, alpha, T) -> {"n": array, "mse": array, "fit": RateFit, "record": first record}."""
    curves: dict[tuple, dict] = {}
    for r in records:
        curves.setdefault((r["student"], r["alpha"], r["T"]), []).append(r)
    out = {}
    for key, rs in curves.items():
        n = np.array([r["n"] for r in rs], float)
        mse = np.array([r["mse"] for r in rs], float)
        out[key] = {"n": n, "mse": mse, "fit": fit_rate(n, mse, key[1]), "record": rs[0]}
    return out


def _monotone(mse: np.ndarray, slack: float = 0.05) -> bool:
    """Non-increasing in n up to ``slack`` (each step may rise by at most 5%)."""
    return bool(np.all(mse[1:] <= (1 + slack) * mse[:-1]))


def _plot_panel(ax, curves: dict, keys: list[tuple], label, baselines: bool = True) -> None:
    for i, key in enumerate(keys):
        c = curves[key]
        color = f"C{i}"
        ax.plot(c["n"], c["mse"], "o-", color=color, label=label(key, c))
        grid = np.geomspace(c["n"].min(), c["n"].max(), 50)
        ax.plot(grid, c["fit"].predict(grid, key[1]), "--", color=color, lw=1.0)
        if baselines:
            ax.axhline(c["record"]["baseline_tag_only"], color=color, ls=":", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="training examples n", ylabel="best validation MSE")
    _n_ticks(ax, curves[keys[0]]["n"])


def _n_ticks(ax, n) -> None:
    """Label the x axis at the sample sizes only (no minor log ticks)."""
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xticks(n, [f"{int(v)}" for v in n])


def _fit_table(curves: dict, keys: list[tuple], paper_c) -> str:
    head = "| student | α | T | MSE at each n | fitted C (ours) | C (paper) | R² | tag-only risk |\n|---|---|---|---|---|---|---|---|\n"
    return head + "".join(
        f"| {k[0]} | {k[1]:g} | {k[2]} | {', '.join(f'{m:.3g}' for m in curves[k]['mse'])} | {curves[k]['fit'].C:.2f} "
        f"| {paper_c(k)} | {curves[k]['fit'].r_squared:.2f} | {curves[k]['record']['baseline_tag_only']:.3g} |\n"
        for k in keys)


_CHOICES = (
    "## Choices the paper leaves open\n\n"
    "- **Targets are not functions of the recalled measure.** A.1 renormalises the clamped density, which "
    "discards the scale of Z; Y = v_1 Σ λ_j Z_j² depends on that scale. So no learner reaches σ² = 1e-4: the "
    "dotted lines are the exact risk of the best predictor that uses the query tag only (E[Y | q] = v_1 E[S]); a "
    "student below it has recalled content. Comparing α's by raw MSE also compares target scales (Var Y shrinks "
    "as α grows), so `relative_to_mean` in risk.csv divides by the mean predictor's risk.\n"
    "- **Grid and degenerate densities.** The 32-point grid is `linspace(0, 1, 32)`; where the clamped density "
    "vanishes on the whole grid (often for α = 2: λ_1 dominates and Z_1 < 0) the mass function is uniform "
    "(what clamp-with-epsilon-then-renormalise gives).\n"
    "- **Student.** Token u = (one-hot marker m_in/m_ctx/m_out, tag, content), the query inserted before and "
    "after the context (§4.1). Φ's are one-hidden-layer ReLU MLPs of width 32; each S6 block is the Mamba mixer "
    "(in-projection ×2, causal depthwise conv of width 4, SiLU, Δ of rank ⌈16/16⌉ = 1, S4D-real A = −exp(A_log), "
    "ZOH discretisation of §4.2, SiLU gate, out-projection) inside the public Mamba code's pre-norm residual "
    "wrapper. The readout is the head MLP at the last token.\n"
    "- **Training.** Adam 2e-3 × 0.95 per epoch (staircase), batch min(16, n), global-norm clipping 1.0; the "
    "validation set is drawn once per (α, T) with its own key and shared by every n and student; the training "
    "sets are nested (the run at n uses the first n examples of one pool per seed).\n"
)


def run_rate(cfg: RateConfig, run: Run) -> dict:
    records = _grid(cfg, run)
    curves = _curves(records)
    kind, T = cfg.students[0], cfg.context_lengths[0]
    keys = [(kind, float(a), T) for a in cfg.alphas]

    fig, axes = plots.figure(1, 2, width=9.0, height=3.6)
    _plot_panel(axes[0], curves, keys, lambda k, c: f"α = {k[1]:g} (C = {c['fit'].C:.2f})")
    axes[0].set_title(f"{kind}, T = {T}: solid measured, dashed fit of eq. (1),\ndotted tag-only risk", fontsize=8)
    for i, k in enumerate(keys):
        c = curves[k]
        axes[1].plot(c["n"], c["mse"] / c["record"]["baseline_mean"], "o-", color=f"C{i}", label=f"α = {k[1]:g}")
        axes[1].axhline(c["record"]["baseline_tag_only"] / c["record"]["baseline_mean"], color=f"C{i}", ls=":", lw=0.8)
    axes[1].set(xscale="log", yscale="log", xlabel="training examples n", ylabel="MSE / risk of the mean predictor",
                title="relative to the target scale")
    _n_ticks(axes[1], curves[keys[0]]["n"])
    for ax in axes:
        ax.legend()
    run.save_figure(fig, "rate.png")

    for k in keys:
        c = curves[k]
        run.claim(f"risk-decreases[alpha={k[1]:g}]",
                  f"validation MSE decreases monotonically in n (α = {k[1]:g}); rule: each step in n raises it by "
                  f"at most 5%", "App. A.2, Fig. 1", " → ".join(f"{m:.3g}" for m in c["mse"]), _monotone(c["mse"]))
        paper = f"C ≈ {PAPER_C[k[1]]}" if k[1] in PAPER_C else "C > 0"
        run.claim(f"rate-fit[alpha={k[1]:g}]",
                  f"log L(n) = A − C (log n)^(α/(α+1)) with C > 0 (α = {k[1]:g}); rule: fitted C > 0",
                  f"App. A.2 ({paper})", f"C = {c['fit'].C:.2f}, R² = {c['fit'].r_squared:.2f}", c["fit"].C > 0)
    if len(keys) >= 2:
        order = sorted(keys, key=lambda k: k[1])
        rough, smooth = curves[order[0]], curves[order[-1]]
        below = smooth["mse"] < rough["mse"]
        run.claim("smoother-is-easier",
                  f"the α = {order[-1][1]:g} curve lies below α = {order[0][1]:g} at every n; rule: raw MSE lower at "
                  f"every n", "App. A.2, Fig. 1", f"lower at {int(below.sum())}/{len(below)} n", bool(below.all()))
        rel_below = smooth["mse"] / smooth["record"]["baseline_mean"] < rough["mse"] / rough["record"]["baseline_mean"]
        run.claim("smoother-is-easier-relative",
                  "same, after dividing each curve by its mean-predictor risk (removes the target scale); rule: "
                  "relative MSE lower at every n", "App. A.2 (our normalisation)",
                  f"lower at {int(rel_below.sum())}/{len(rel_below)} n", bool(rel_below.all()))
    run.write_summary(
        f"# recall.rate — Fig. 1\n\n"
        f"Best validation MSE ({cfg.num_val} held-out examples) of the {STUDENTS[kind]} student vs the number of "
        f"training contexts n, T = {T}, {cfg.epochs} epochs, {cfg.num_seeds} seed(s) per cell.\n\n"
        f"![rate](rate.png)\n\n{_fit_table(curves, keys, lambda k: PAPER_C.get(k[1], '—'))}\n"
        f"Paper (App. A.2): C ≈ 1.81 (α = 0.75) and 1.28 (α = 1.0); the α = 1.0 curve lies below α = 0.75 at every "
        f"n. Claims and their rules are in results.json.\n\n{_CHOICES}")
    return {"records": records, "fits": {f"{k[1]:g}": curves[k]["fit"]._asdict() for k in keys}}


def run_sweep(cfg: RateConfig, run: Run) -> dict:
    records = _grid(cfg, run)
    curves = _curves(records)
    kind = cfg.students[0]
    Ts = list(cfg.context_lengths)
    fig, axes = plots.figure(1, len(Ts), width=3.8 * len(Ts), height=3.4, squeeze=False, sharey=True)
    for j, T in enumerate(Ts):
        keys = [(kind, float(a), T) for a in cfg.alphas]
        _plot_panel(axes[0, j], curves, keys, lambda k, c: f"α = {k[1]:g}, C = {c['fit'].C:.2f}")
        axes[0, j].set_title(f"T = {T}")
        axes[0, j].legend()
    fig.suptitle(f"{kind}: risk vs n per (α, T); dashed: OLS fit of eq. (1); dotted: tag-only risk", fontsize=10)
    run.save_figure(fig, "sweep.png")

    alphas = sorted(float(a) for a in cfg.alphas)
    all_monotone = [(k, _monotone(c["mse"])) for k, c in curves.items()]
    run.claim("risk-decreases", "every (α, T) curve decreases in n; rule: each step raises MSE by at most 5%",
              "App. A.4", f"{sum(m for _, m in all_monotone)}/{len(all_monotone)} curves",
              all(m for _, m in all_monotone))
    ordered = 0
    for T in Ts:
        mse = np.array([curves[(kind, a, T)]["mse"] for a in alphas])  # (alphas, n) ascending alpha
        ordered += int(np.sum(np.all(np.diff(mse, axis=0) < 0, axis=0)))
    total = len(Ts) * len(cfg.sample_sizes)
    run.claim("alpha-orders-curves", f"at fixed n the MSE is monotone in α ({' > '.join(f'{a:g}' for a in alphas)} "
              f"in risk); rule: strictly decreasing in α at every (T, n)", "App. A.4",
              f"ordered at {ordered}/{total} (T, n)", ordered == total)
    C = np.array([[curves[(kind, a, T)]["fit"].C for T in Ts] for a in alphas])  # (alphas, Ts)
    run.claim("C-decreases-with-alpha", "the fitted C decreases with α; rule: at every T, C strictly decreasing in α",
              "App. A.4 (C ≈ 3.3, 2.1, 1.1, 0.5)",
              "; ".join(f"T={T}: " + ", ".join(f"{c:.2f}" for c in C[:, j]) for j, T in enumerate(Ts)),
              bool(np.all(np.diff(C, axis=0) < 0)))
    if len(Ts) > 1:
        spread = C.max(1) - C.min(1)
        allowed = np.maximum(0.10 * np.abs(C).mean(1), 0.05)  # an absolute floor: a relative spread of C ≈ 0 is noise
        run.claim("stable-across-T", "the fitted C is stable across T; rule: max − min of C over T ≤ max(10% of its "
                  "mean |C|, 0.05) for every α", "App. A.4 (\"within a few percent\")",
                  ", ".join(f"α={a:g}: spread {d:.2f} (allowed {t:.2f})" for a, d, t in zip(alphas, spread, allowed)),
                  bool(np.all(spread <= allowed)))
    table_keys = [(kind, a, T) for T in Ts for a in alphas]
    run.write_summary(
        f"# recall.sweep — App. A.4, Figs. 2-4\n\n{STUDENTS[kind]} student, α ∈ {alphas}, T ∈ {Ts}, "
        f"n ∈ {list(cfg.sample_sizes)}, {cfg.epochs} epochs, {cfg.num_val} validation examples, "
        f"{cfg.num_seeds} seed(s) per cell.\n\n![sweep](sweep.png)\n\n"
        f"{_fit_table(curves, table_keys, lambda k: PAPER_SWEEP_C.get(k[1], '—'))}\n{_CHOICES}")
    return {"records": records, "C": {f"alpha={a:g}": dict(zip(map(str, Ts), C[i].tolist())) for i, a in enumerate(alphas)}}


def run_compare(cfg: RateConfig, run: Run) -> dict:
    records = _grid(cfg, run)
    curves = _curves(records)
    alpha, T = float(cfg.alphas[0]), cfg.context_lengths[0]
    keys = [(kind, alpha, T) for kind in cfg.students]
    fig, ax = plots.figure(1, 1, width=5.0, height=3.6)
    _plot_panel(ax, curves, keys, lambda k, c: f"{k[0]} (C = {c['fit'].C:.2f})", baselines=False)
    ax.axhline(curves[keys[0]]["record"]["baseline_tag_only"], color="0.4", ls=":", lw=0.8, label="tag-only risk")
    ax.set_title(f"α = {alpha:g}, T = {T}: same data, same training")
    ax.legend()
    run.save_figure(fig, "attention_vs_s6.png")
    for k in keys:
        c = curves[k]
        run.claim(f"learns[{k[0]}]", f"{k[0]} learns at the rate of eq. (1); rule: fitted C > 0 and the MSE at the "
                  f"largest n is below the tag-only risk (it recalls content)", "Thm. 6.1 / Kawata & Suzuki",
                  f"C = {c['fit'].C:.2f}; MSE(n={int(c['n'][-1])}) = {c['mse'][-1]:.3g} vs tag-only "
                  f"{c['record']['baseline_tag_only']:.3g}",
                  bool(c["fit"].C > 0 and c["mse"][-1] < c["record"]["baseline_tag_only"]))
    mamba = [k for k in keys if k[0].startswith("mamba")]
    if mamba and ("attention", alpha, T) in curves:
        m, a = curves[mamba[0]], curves[("attention", alpha, T)]
        ratio = m["mse"][-1] / a["mse"][-1]
        run.claim("s6-matches-attention", "the S6 student reaches the attention comparator's risk (§7: the same "
                  "statistical rate without attention); rule: MSE ratio S6/attention at the largest n ≤ 1.25",
                  "§7", f"ratio {ratio:.2f}", bool(ratio <= 1.25))
    run.write_summary(
        f"# recall.attention-vs-s6\n\nThe S6 student(s) and the softmax-attention comparator (Kawata & Suzuki) "
        f"trained on the same data (α = {alpha:g}, T = {T}, {cfg.epochs} epochs, {cfg.num_seeds} seed(s)).\n\n"
        f"![comparison](attention_vs_s6.png)\n\n{_fit_table(curves, keys, lambda k: '—')}\n"
        f"The paper gives no numbers for this comparison; it claims (§7) that Mamba attains the rate that Kawata & "
        f"Suzuki prove for attention.\n\n{_CHOICES}")
    return {"records": records}


EXPERIMENTS = [
    Experiment(
        "recall.rate", "App. A.2, Fig. 1", "mamba-measure-valued-recall",
        "validation MSE of the one-block S6 student vs n for α ∈ {0.75, 1}, rate fit of eq. (1)",
        {"quick": RateConfig(context_lengths=(200,), num_val=300),
         "paper": RateConfig(),
         "tiny": RateConfig(context_lengths=(16,), sample_sizes=(4, 8), num_val=16, epochs=2)},
        run_rate),
    Experiment(
        "recall.sweep", "App. A.4, Figs. 2-4", "mamba-measure-valued-recall",
        "two-layer S6 student: α × T × n sweep (60 runs), C per (α, T)",
        {"quick": RateConfig(alphas=(0.5, 2.0), context_lengths=(50, 100), sample_sizes=(4, 16, 64),
                             students=("mamba-2",), num_val=200, epochs=30),
         "paper": RateConfig(alphas=(0.5, 0.75, 1.0, 2.0), context_lengths=(500, 1000, 2000),
                             students=("mamba-2",), num_val=500, epochs=120),
         "tiny": RateConfig(alphas=(0.5, 2.0), context_lengths=(16,), sample_sizes=(4, 8), students=("mamba-2",),
                            num_val=16, epochs=2)},
        run_sweep),
    Experiment(
        "recall.attention-vs-s6", "§7 vs Kawata & Suzuki", "mamba-measure-valued-recall",
        "the one-block S6 student beside a softmax-attention student on the same data and n grid",
        {"quick": RateConfig(alphas=(1.0,), context_lengths=(200,), students=("mamba-1", "attention"), num_val=300),
         "paper": RateConfig(alphas=(1.0,), students=("mamba-1", "attention")),
         "tiny": RateConfig(alphas=(1.0,), context_lengths=(16,), sample_sizes=(4, 8),
                            students=("mamba-1", "attention"), num_val=16, epochs=2)},
        run_compare),
]

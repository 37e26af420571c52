"""What the pi-SSM experiments report: the choices every summary lists (``CHOICES``), the paper's Table 1 / 8 and
Table 6 numbers with the typed row our results sit in beside them (``Table1Row``, ``StabilityRow``) and the function
that computes one from a row's cells, and one plotting function per figure: Table 1's bars, Fig. 8 (stability),
Fig. 9 (modes) and the imputed paths. Pure functions of the numbers; the experiments save the files."""

from __future__ import annotations

import dataclasses

import numpy as np
from matplotlib.patches import Ellipse

from memlab import plots
from memlab.files import summary_text
from memlab.pissm import metrics
from memlab.pissm.data import Split
from memlab.pissm.pong_modes import true_eigenvalues
from memlab.pissm.runs import NUM_MODES

__all__ = ["CHOICES", "DIRECT", "PAPER_TABLE6", "STABILITY_COLUMNS", "STABILITY_FORMATS", "TABLE1_COLUMNS",
           "TABLE1_FORMATS", "StabilityRow", "Table1Row", "blank", "paper_row", "plot_imputation",
           "plot_log_likelihoods", "plot_modes", "plot_stability", "plot_start_survival", "stability_row", "table1_row"]

# The choices every pi-SSM experiment's summary.md lists (the paper leaves them open, or memlab departs from its text).
CHOICES = summary_text(__package__, "report_choices")
SNAPSHOTS = (15, 35, 55, 75)  # Fig. 9's predictive ellipses, at these steps
FAILED = {True: " (failed)", False: ""}  # Fig. 8's panel titles


def paper_row(model: str) -> str:
    """The paper's row of a model name: eq. (7)'s gain is the paper's pi-SSM-GRU / LSTM whichever way its readout
    starts (``runs.TRACKING_INIT``) and whether its inputs are normalised."""
    return model.removesuffix("-tracking").removesuffix("-normalised")


def blank(value):
    """A table entry: None (no paper number) as an empty cell."""
    return "" if value is None else value


# Table 1 (log-likelihood) and Table 8 (MSE; NCLT in dB from Table 7) of the paper, for the rows we run, per column
# (Pong, Lorenz, Navier-Stokes, NCLT); both our Pong noises sit beside the paper's one Pong column.
PAPER_LL = {
    "observation": (4.112, 4.374, 3.591, -30.87), "lstm": (4.580, 5.182, 4.571, -27.91),
    "gru": (4.611, 5.215, 4.558, -27.94), "lg": (4.993, 5.434, 4.711, -24.42),
    "pissm-lg": (5.385, 5.691, 5.044, -23.51), "pissm-gru": (5.401, 5.856, 5.097, -23.18),
    "pissm-lstm": (5.475, 5.844, 5.137, -23.25),
}
PAPER_MSE = {
    "observation": (None, None, None, 25.47), "lstm": (0.097, 0.090, 0.360, 22.83),
    "gru": (0.095, 0.091, 0.356, 22.57), "lg": (0.083, 0.076, 0.260, 20.45), "pissm-lg": (None,) * 4,
    "pissm-gru": (0.061, 0.056, 0.208, 19.50), "pissm-lstm": (0.058, 0.057, 0.205, 19.64),
}
PAPER_COLUMN = {"pong": 0, "pong-0.01": 0, "lorenz": 1, "navier-stokes": 2, "nclt": 3}
DIRECT = ("gru", "lstm")  # predict y_t from y_{1:t-1} only: no filtered estimate


@dataclasses.dataclass(frozen=True)
class Table1Row:
    """One line of Table 1 / Table 8 (results.json: an entry of ``table``; table1.csv: a row, with its time).

    dataset, model: the data set and the model (``runs.MODELS``, or ``pf`` for the particle filter).
    seeds: the cells averaged (one for ``pf``).
    ll_mean, ll_std: mean and std over seeds of the test log-likelihood per step; ll_ceiling: the data set's
    ``table1.ll_ceiling``.
    filtered_mse_mean, filtered_mse_std: the filtered position's MSE over seeds; filtered_mse_db: 10 log10 of the
    mean (Table 7's unit, NCLT); all three None for the direct RNNs (``DIRECT``), which have no filtered estimate.
    predicted_mse: the one-step prediction's MSE, mean over seeds.
    failed: how many seeds' training failed.
    paper_ll, paper_mse: Table 1 / Table 8 (NCLT: Table 7, dB); None where the paper has no number.
    """

    dataset: str
    model: str
    seeds: int
    ll_mean: float
    ll_std: float
    ll_ceiling: float
    filtered_mse_mean: float | None
    filtered_mse_std: float | None
    filtered_mse_db: float | None
    predicted_mse: float
    failed: int
    paper_ll: float | None
    paper_mse: float | None


TABLE1_COLUMNS = tuple(f.name for f in dataclasses.fields(Table1Row))
TABLE1_FORMATS = {"ll_mean": ".3f", "ll_std": ".3f", "ll_ceiling": ".2f", "filtered_mse_mean": ".2e",
                  "filtered_mse_std": ".2e", "filtered_mse_db": ".2f", "predicted_mse": ".2e", "cell_seconds": ".0f"}


def table1_row(data_name: str, model_name: str, ceiling: float, cells: list[dict]) -> Table1Row:
    """The row of ``model_name`` on ``data_name`` from its cells (one per seed; ``cells.train_and_score`` or
    ``cells.particle_cell``): our mean (std) over seeds beside the paper's number."""
    d = PAPER_COLUMN[data_name]
    column = {key: np.asarray([c.get(key, 0.0) for c in cells], float)
              for key in ("ll", "filtered_mse", "predicted_mse")}
    filtered = None if model_name in DIRECT else column["filtered_mse"]
    return Table1Row(
        dataset=data_name, model=model_name, seeds=len(cells), ll_mean=float(column["ll"].mean()),
        ll_std=float(column["ll"].std()), ll_ceiling=ceiling,
        filtered_mse_mean=None if filtered is None else float(filtered.mean()),
        filtered_mse_std=None if filtered is None else float(filtered.std()),
        filtered_mse_db=None if filtered is None else float(metrics.to_db(filtered.mean())),
        predicted_mse=float(column["predicted_mse"].mean()), failed=sum(bool(c.get("failed", False)) for c in cells),
        paper_ll=PAPER_LL.get(paper_row(model_name), (None,) * 4)[d],
        paper_mse=PAPER_MSE.get(paper_row(model_name), (None,) * 4)[d])


# Table 6, Pong column: objective (mean, std) and success rate per (model, scheme, value).
PAPER_TABLE6 = {
    ("pissm-gru", "iss", 0.1): (5.401, 0.197, 1.0), ("pissm-gru", "iss", 0.15): (5.231, 0.228, 1.0),
    ("pissm-gru", "iss", 0.2): (5.084, 0.281, 1.0), ("pissm-gru", "iss", 0.25): (4.888, 0.324, 1.0),
    ("pissm-lstm", "iss", 0.1): (5.475, 0.217, 1.0), ("pissm-lstm", "iss", 0.15): (5.281, 0.174, 1.0),
    ("pissm-lstm", "iss", 0.2): (5.172, 0.202, 1.0), ("pissm-lstm", "iss", 0.25): (4.911, 0.215, 1.0),
    ("pissm-gru", "clip", 5): (5.166, 0.446, 1.0), ("pissm-gru", "clip", 10): (5.249, 1.12, 0.6),
    ("pissm-gru", "clip", 15): (5.281, 2.541, 0.3), ("pissm-gru", "clip", 20): (None, None, 0.0),
    ("pissm-lstm", "clip", 10): (5.251, 1.31, 0.45), ("pissm-lstm", "clip", 20): (None, None, 0.0),
}


@dataclasses.dataclass(frozen=True)
class StabilityRow:
    """One line of Table 6 (results.json: an entry of ``table``; stability.csv: a row).

    model, scheme, value: the model, "iss" (ISS buffer eps = value) or "clip" (gradient-norm threshold = value).
    runs: seeds; success: the share of them that trained (finite, not diverged, a finite test score).
    objective_mean, objective_std: test log-likelihood per step over the successful runs; NaN if none.
    nonfinite_step_min, nonfinite_step_max: over the runs that failed with a non-finite value, the first optimiser
    step (1-based, counted over epochs) after which the parameters were not finite; NaN if no run did.
    best_val_mean: the best validation log-likelihood per step a run reached (before it stopped, if it failed), mean
    over the runs that reached a finite one; NaN if none did.
    paper_objective, paper_std, paper_success: Table 6's Pong column; None where the paper has no number.
    """

    model: str
    scheme: str
    value: float
    runs: int
    success: float
    objective_mean: float
    objective_std: float
    nonfinite_step_min: float
    nonfinite_step_max: float
    best_val_mean: float
    paper_objective: float | None
    paper_std: float | None
    paper_success: float | None


STABILITY_COLUMNS = [f.name for f in dataclasses.fields(StabilityRow)]
STABILITY_FORMATS = {"value": "g", "success": ".0%", "objective_mean": ".3f", "objective_std": ".3f",
                     "nonfinite_step_min": ".0f", "nonfinite_step_max": ".0f", "best_val_mean": ".3f",
                     "paper_success": ".0%"}


def stability_row(model: str, scheme: str, value: float, cells: list[dict]) -> StabilityRow:
    """The row of one (model, scheme, value) from its cells (one per seed, ``cells.stability_cell``): the success
    rate and the objective over the successful runs, beside Table 6."""
    lls = [c["ll"] for c in cells if not c["failed"] and np.isfinite(c["ll"])]
    steps = [step for c in cells if c["failed"] and (step := nonfinite_step(c)) is not None]
    best = [c["best_val"] for c in cells if np.isfinite(c.get("best_val", np.nan))]
    paper = PAPER_TABLE6.get((paper_row(model), scheme, value), (None, None, None))
    return StabilityRow(model, scheme, value, len(cells), len(lls) / len(cells),
                        float(np.mean(lls)) if lls else np.nan, float(np.std(lls)) if lls else np.nan,
                        float(min(steps)) if steps else np.nan, float(max(steps)) if steps else np.nan,
                        float(np.mean(best)) if best else np.nan, *paper)


def nonfinite_step(record: dict) -> int | None:
    """The first optimiser step (1-based) after which a training record's parameters were not finite (its
    ||U||_inf, recorded after every step, is NaN from there), or None if they stayed finite. Only the steps that ran
    count: training stops after its first non-finite epoch and pads the later epochs' histories with NaN."""
    norms = np.asarray(record.get("recurrent_norm", []), float)
    epochs, failed = len(record.get("train_loss", [])), record.get("failed_epoch", -1)
    if epochs and failed is not None and failed >= 0:
        norms = norms[:(failed + 1) * (norms.size // epochs)]
    bad = np.flatnonzero(~np.isfinite(norms))
    return int(bad[0]) + 1 if bad.size else None


def plot_log_likelihoods(table: list[Table1Row]):
    """Table 1 as bars: per data set, each row's mean test log-likelihood per step (error bar: std over seeds);
    pi-SSM red, the particle filter grey, the rest blue; the paper's number as a black diamond. A row far below the
    others (a failed gain) is cut at the panel's edge with its value written on it; a row with no finite value says
    why in words. Returns the figure."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    datasets = list(dict.fromkeys(r.dataset for r in table))
    fig, axes = plots.figure(1, max(len(datasets), 1), width=4.6 * max(len(datasets), 1), height=3.6, squeeze=False)
    for ax, data_name in zip(axes[0], datasets):
        rows = [r for r in table if r.dataset == data_name]
        means = np.array([r.ll_mean for r in rows])
        finite = means[np.isfinite(means)]
        # the axis spans the rows that are not far below the best (the paper's values included), so one diverged
        # row (Lorenz at -80) does not squash the rest
        paper = np.array([np.nan if r.paper_ll is None else r.paper_ll for r in rows])
        shown = np.concatenate([finite, paper[np.isfinite(paper)]])
        top = shown.max() if shown.size else 1.0
        near = shown[shown >= top - 3 * max(np.median(np.abs(shown - np.median(shown))), 0.5)] if shown.size else shown
        left = min(near.min() if near.size else 0.0, 0.0)
        left -= 0.08 * (top - left + 1e-9)
        colors = ["C3" if r.model.startswith("pissm") else "C7" if r.model == "pf" else "C0" for r in rows]
        ax.barh(range(len(rows)), np.where(np.isfinite(means), np.maximum(means, left), 0.0),
                xerr=[r.ll_std if np.isfinite(r.ll_mean) and r.ll_mean >= left else 0.0 for r in rows], color=colors)
        for i, r in enumerate(rows):
            if not np.isfinite(r.ll_mean):
                ax.text(0.0, i, " no run trained" if r.failed else " no finite score", va="center", fontsize=7)
            elif r.ll_mean < left:
                ax.text(max(0.0, left), i, f" ← {r.ll_mean:.1f} (bar cut)", va="center", ha="left", fontsize=7)
        ax.plot(paper, range(len(rows)), "kD", ms=4, label="paper")
        ax.axvline(rows[0].ll_ceiling, color="k", ls="--", lw=0.8)  # no predictor scores above it
        ax.set_xlim(left, max(rows[0].ll_ceiling, top) + 0.05 * (top - left + 1e-9))
        ax.set_yticks(range(len(rows)), [r.model for r in rows])
        ax.invert_yaxis()
        ax.set_title(f"Table 1, {data_name}: test log q(y_t | y_1:t-1) per step", fontsize=9)
    handles = [Patch(color="C3", label="pi-SSM"), Patch(color="C0", label="baselines"),
               Patch(color="C7", label="particle filter"), Line2D([], [], color="k", marker="D", ls="", ms=4,
                                                                 label="paper (Table 1)"),
               Line2D([], [], color="k", ls="--", lw=0.8, label="ceiling (noise log-density)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=7)
    return fig


def plot_stability(model: str, panels: list[tuple[str, float, dict]]):
    """Fig. 8: per panel (label, value, training record of ``runs.fit``), the training loss per epoch and
    ||U||_inf / radius after every optimiser step. Returns the figure."""
    fig, axes = plots.figure(1, len(panels), width=4.5 * len(panels), height=3.2)
    for ax, (label, value, record) in zip(axes, panels):
        ratio = np.asarray(record["recurrent_norm"], float) / np.asarray(record["radius"], float)
        steps = np.arange(1, ratio.size + 1)
        epochs = np.arange(1, len(record["train_loss"]) + 1) * ratio.size / max(len(record["train_loss"]), 1)
        loss = ax.plot(epochs, record["train_loss"], "C0o-", label="training loss (epoch mean, left)")
        ax.set_xlabel("optimiser step")
        ax.set_ylabel("loss = -log q per step", color="C0")
        twin = ax.twinx()
        norm = twin.plot(steps, ratio, "C3", lw=1, label="||U||_inf / l1 radius (right)")
        bound = [twin.axhline(1.0, color="k", ls=":", lw=1, label="ISS bound: ratio 1")]
        twin.set_ylabel("||U||_inf / l1 radius", color="C3")
        handles = loss + norm + bound
        ax.set_title(f"{model}, {label} = {value:g}{FAILED[record['failed']]}")
        if record.get("failed_epoch", -1) >= 0:  # training stopped there: say so where the loss curve ends
            first = nonfinite_step(record)
            where = f"\nparameters non-finite after optimiser step {first}" if first else ""
            ax.text(0.02, 0.86, f"stopped in epoch {record['failed_epoch'] + 1}: a non-finite value{where}",
                    transform=ax.transAxes, va="top", fontsize=7)
            if first is not None and first <= 3:  # nothing to draw: a marker where the ratio was still finite
                twin.plot(steps[:first - 1], ratio[:first - 1], "C3o", ms=4)
                ax.set_xlim(0, max(first + 1, 3))
    fig.suptitle("Fig. 8 (paper: the ISS run trains with ||U|| held below its bound; GC at the largest delta "
                 "lets it grow and fails)", fontsize=9)
    fig.legend(handles, [h.get_label() for h in handles], loc="outside lower center", ncol=3, fontsize=7)
    return fig


def plot_start_survival(sizes, survival: dict[str, list[tuple[float, float, float]]], learning_rate: float):
    """Per model, the fraction of test sequences whose filter stays finite after a random step of each size in its
    gain's parameters (median over starts and directions, the band from the smallest to the largest); the training
    runs' learning rate marked. Returns the figure."""
    fig, ax = plots.figure(1, 1, width=5.5, height=3.4)
    sizes = np.asarray(sizes, float)
    x = np.where(sizes > 0, sizes, sizes[sizes > 0].min() / 10)  # the start itself, one decade left of the smallest
    for i, (model, rows) in enumerate(survival.items()):  # markers shrink so that coinciding curves stay visible
        median, low, high = (np.asarray(v) for v in zip(*rows))
        ax.plot(x, 100 * median, color=f"C{i}", marker="osD^v"[i % 5], ms=max(9 - 2 * i, 3),
                ls=("-", "--", "-.", ":")[i % 4], label=model, lw=1.2)
        ax.fill_between(x, 100 * low, 100 * high, color=f"C{i}", alpha=0.15, lw=0)
    ax.axvline(learning_rate, color="k", ls=":", lw=1, label=f"Adam's learning rate {learning_rate:g}")
    ax.set_xscale("log")
    ticks = [i for i in range(len(sizes)) if not (sizes[i] == learning_rate and np.sum(np.abs(np.log10(
        x / x[i])) < 0.3) > 1)]  # the learning rate's tick only where no other size's sits beside it
    ax.set_xticks(x[ticks], ["start" if sizes[i] == 0 else f"{sizes[i]:g}" for i in ticks], fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel("random step: every gain parameter moved by +- this much")
    ax.set_ylabel("test sequences still finite (%)")
    ax.set_ylim(-3, 103)
    ax.set_title("How far the start can move before the filter diverges", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    return fig


def _ellipse(ax, mean, cov, **kw):
    values, vectors = np.linalg.eigh(np.asarray(cov))
    angle = np.degrees(np.arctan2(vectors[1, -1], vectors[0, -1]))
    w, h = 2 * 2 * np.sqrt(np.maximum(values[::-1], 0))  # 2-sigma
    ax.add_patch(Ellipse(np.asarray(mean), w, h, angle=angle, fill=False, **kw))


def plot_modes(split: Split, evaluation: dict, estimator: str):
    """Fig. 9 for the test sequence ``b`` of one estimator's evaluation cell (``modes.modes_evaluate_cell``): the
    true and the sampled modes, the two smallest eigenvalues of the sampled A_z against the truth, and the
    predictive ellipses at ``SNAPSHOTS`` beside the particle filter's. Returns the figure."""
    fig = plots.plt.figure(figsize=(12, 7.5), layout="constrained")
    grid = fig.add_gridspec(3, 4)
    b = evaluation["b"]
    y, x, T = np.asarray(split.y[b]), np.asarray(split.x[b]), split.y.shape[1]
    modes, true_modes = np.asarray(evaluation["modes"]), np.asarray(split.z[b])
    box = (-0.05, 1.05)  # the unit box with a margin: markers on a wall are not cut in half
    ax = fig.add_subplot(grid[0, 0])
    ax.scatter(x[:, 0], x[:, 2], c=true_modes, cmap="tab10", vmin=0, vmax=9, s=12)
    ax.set(title="true path, true mode\n(velocity quadrant)", xlim=box, ylim=box, aspect="equal")
    ax = fig.add_subplot(grid[0, 1])
    ax.scatter(y[:, 0], y[:, 1], c=modes % 20, cmap="tab20", vmin=0, vmax=19, s=12)
    ax.plot(x[:, 0], x[:, 2], "k-", lw=0.5, alpha=0.5)
    ax.set(title="observations coloured by\nthe sampled mode z_t", xlim=(-0.1, 1.1), ylim=(-0.1, 1.1), aspect="equal")
    # the modes against time, the paper's second row: persistence is one colour per interval between bounces
    ax = fig.add_subplot(grid[0, 2:])
    ax.scatter(np.arange(T), np.ones(T), c=true_modes, cmap="tab10", vmin=0, vmax=9, s=28, marker="s")
    ax.scatter(np.arange(T), np.zeros(T), c=modes % 20, cmap="tab20", vmin=0, vmax=19, s=28, marker="s")
    for t in np.flatnonzero(np.asarray(split.events[b]).any(-1)):
        ax.axvline(t, color="k", lw=0.5, alpha=0.3)
    in_use = evaluation.get("modes_in_use")
    ax.set(yticks=[0, 1], yticklabels=["sampled z_t", "true mode"], ylim=(-0.6, 1.6), xlim=(-1, T),
           xlabel="t (grey: true bounces)",
           title="modes along the sequence" + (f"\n{in_use} of {NUM_MODES['pong']} modes in use on the test split "
                                               "(paper: 4 dominant)" if in_use is not None else ""))
    ax.grid(False)
    ax = fig.add_subplot(grid[1, :])
    bounces = np.flatnonzero(np.asarray(split.events[b]).any(-1))
    eig = np.asarray(evaluation["eigenvalues"])
    truth = true_eigenvalues(np.asarray(split.events[b]))
    for i, style in enumerate(("C0", "C1")):
        ax.plot(eig[:, i], style, marker=".", lw=1, label=f"learned: eigenvalue {i + 1} of A_z_t (real part)")
        ax.plot(truth[:, i], style, ls=":", lw=1.5, label=f"true: eigenvalue {i + 1}")
    for t in bounces:
        ax.axvline(t, color="k", lw=0.5, alpha=0.3)
    ax.set(xlabel="t (grey: true bounces)", ylabel="eigenvalue",
           title="two smallest eigenvalues of the sampled step map A_z_t; dotted: the true step's (paper: they track "
                 "the truth)")
    ax.set_ylim(-1.75, 1.2)  # room below the true -1 for the legend: it hid the last bounces
    ax.legend(ncol=4, fontsize=7, loc="lower center")
    for j, t in enumerate(sorted({min(t, T - 1) for t in SNAPSHOTS})):  # a short test sequence: its last step once
        ax = fig.add_subplot(grid[2, j])
        ax.plot(x[max(t - 10, 0): t + 1, 0], x[max(t - 10, 0): t + 1, 2], "k-", lw=0.8, alpha=0.5)
        ax.plot(x[t, 0], x[t, 2], "k*", ms=8, label="true position")
        ax.plot(y[t, 0], y[t, 1], "kx", label="observation")
        _ellipse(ax, evaluation["obs_means"][t], evaluation["obs_covs"][t], color="C3",
                 label="pi-SSM q(y_t | y_1:t-1)")
        _ellipse(ax, evaluation["pf_obs_means"][t], evaluation["pf_obs_covs"][t], color="C2", ls="--",
                 label="particle filter (true dynamics)")
        ax.set(title=f"t = {t}", xlim=(-0.1, 1.1), ylim=(-0.1, 1.1), aspect="equal")  # ellipses at a wall
        if j == 0:
            ax.legend(fontsize=6, loc="lower left")
    fig.suptitle(f"Fig. 9 (paper, App. H.1; Fig. 4 in the main text), estimator {estimator}")
    return fig


def plot_imputation(test: Split, mask, b: int, paths: dict[str, np.ndarray]):
    """One panel per model of ``paths`` (model -> (T, 2) sample-mean filtered position along test sequence ``b``):
    the true path, the kept observations (``mask``), and the estimate, circled at the removed steps. Every panel
    spans the same box: the true path, the observations and the estimates, but no more than half the true path's
    extent beyond it on each side, so that one estimate that runs away does not shrink the others; a panel whose
    estimate leaves that box says how many of its points are outside. Returns the figure."""
    y, x, m = np.asarray(test.y[b]), np.asarray(test.x[b]), np.asarray(mask[b])
    truth = x[:, [0, 2]]
    estimates = np.concatenate([est for est in paths.values()]) if paths else truth
    shown = np.concatenate([truth, y[m], estimates])
    shown = shown[np.isfinite(shown).all(-1)]
    t_lo, t_hi = truth.min(0), truth.max(0)
    reach = 0.5 * np.maximum(t_hi - t_lo, 0.1)
    lo = np.maximum(shown.min(0), t_lo - reach)
    hi = np.minimum(shown.max(0), t_hi + reach)
    pad = 0.05 * (hi - lo)
    lo, hi = lo - pad, hi + pad
    # square panels: narrower than tall, else constrained layout pushes the titles out of the figure
    fig, axes = plots.figure(1, len(paths), width=3.2 * len(paths), height=3.8, squeeze=False)
    for ax, (name, est) in zip(axes[0], paths.items()):
        ax.plot(truth[:, 0], truth[:, 1], "k-", lw=0.8, alpha=0.6, label="true path")
        ax.plot(y[m, 0], y[m, 1], "k.", ms=4, label="kept observations")
        ax.plot(est[:, 0], est[:, 1], "C3-", lw=0.8, label="estimate (sample mean)")
        ax.plot(est[~m, 0], est[~m, 1], "C3o", ms=3, mfc="none", label="imputed (removed steps)")
        outside = int(np.sum(~(np.all((est >= lo) & (est <= hi), -1))))
        if outside:
            ax.text(0.02, 0.02, f"{outside}/{len(est)} estimates outside the view", transform=ax.transAxes,
                    fontsize=7, color="C3")
        ax.set(title=name, xlim=(lo[0], hi[0]), ylim=(lo[1], hi[1]), aspect="equal")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncols=4, fontsize=7)
    fig.suptitle(f"App. H.1 (paper: imputation, shown as animations)\n{np.mean(~m):.0%} of this test sequence's "
                 "observations removed", fontsize=9)
    return fig

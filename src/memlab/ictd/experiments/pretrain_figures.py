"""Diagnostics and figures of the pretraining experiments (Fig. 3, 5, 6 of the paper; App. F.3-F.5).

Plain NumPy functions of stored traces and parameters (no training here): the sign-agnostic diagonal share of A_feat,
the value row and its sign pattern, trailing means, seed means truncated at a checkpoint, the d_t binning of Fig. 3(b)
and the numbers behind its claims (``emergence_along_dt``), and one plotting function per figure kind, shared by
``ictd.pretrain`` and ``ictd.mask-relaxation`` (``experiments/pretrain.py``, ``experiments/mask.py``).
"""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np

from memlab import plots

# --------------------------------------------------------------------------- diagnostics (numbers behind the figures)


def diagonal_share(A: np.ndarray) -> np.ndarray:
    """A_diag of App. F.4.2 (sign-agnostic): share of the column-normalised |A_feat| on the diagonal.

    A: (..., d+3, d+3) -> (...). Zero columns count as zero (as in eq. (111)); an all-zero A_feat gives 0.
    """
    d = A.shape[-1] - 3
    feat = np.abs(A[..., :d, :d])
    norms = np.linalg.norm(feat, axis=-2, keepdims=True)
    hat = np.divide(feat, norms, out=np.zeros_like(feat, dtype=float), where=norms > 0)
    total = hat.sum(axis=(-2, -1))
    return np.divide(np.trace(hat, axis1=-2, axis2=-1), total, out=np.zeros_like(total), where=total > 0)


def value_row(V: np.ndarray) -> np.ndarray:
    """(p_r, p_gamma v', p_v) = V[d+2, d:d+3] (the paper's (V)_{d+3, d:d+3}); V (..., d+3, d+3) -> (..., 3)."""
    d = V.shape[-1] - 3
    return V[..., d + 2, d : d + 3]


def sign_pattern(row: np.ndarray) -> str:
    """'(+, +, -)' style string of the signs of a (3,) row (0 shows as 0)."""
    return "(" + ", ".join({1.0: "+", -1.0: "−", 0.0: "0"}[float(np.sign(x))] for x in row) + ")"


def majority_pattern(rows: np.ndarray) -> tuple[str, int]:
    """The most common sign pattern of (S, 3) value rows and how many seeds have it."""
    patterns = sorted(sign_pattern(r) for r in rows)
    top = max(patterns, key=patterns.count)
    return top, patterns.count(top)


def trailing_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing average over the last ``window`` steps (fewer at the start) along the last axis."""
    c = np.cumsum(np.asarray(x, float), axis=-1)
    shifted = np.concatenate([np.zeros(c.shape[:-1] + (window,)), c], axis=-1)[..., : c.shape[-1]]  # c[t - window]
    count = np.minimum(np.arange(1, c.shape[-1] + 1), window)
    return (c - shifted) / count


def truncated_mean_sem(x: np.ndarray, stop: np.ndarray):
    """Mean and s.e.m. over seeds of x (S, T) truncated at each seed's ``stop`` (inclusive).

    Returns (mean, sem, count), each (max(stop) + 1,): at step t only seeds with stop >= t count; sem = 0 for one seed.
    """
    T = int(np.max(stop)) + 1
    alive = np.arange(T)[None, :] <= np.asarray(stop)[:, None]  # (S, T)
    vals = np.where(alive, x[:, :T], np.nan)
    count = alive.sum(0)
    mean = np.nanmean(vals, 0)
    sd = np.sqrt(np.nanmean((vals - mean) ** 2, 0) * count / np.maximum(count - 1, 1))
    return mean, np.where(count > 1, sd / np.sqrt(count), 0.0), count


def binned_by_dt(d_t: np.ndarray, scores: dict, num_bins: int) -> dict:
    """Fig. 3(b): equal-width d_t bins over all (S, T) points; per bin the pooled mean of each score and the 25/75 %
    quantiles of the per-seed bin means. Returns edges (B+1,), centers, count (B,), and per score name
    <name>_mean, <name>_q25, <name>_q75 (B,), NaN in empty bins."""
    lo, hi = float(np.min(d_t)), float(np.max(d_t))
    hi = hi if hi > lo else lo + 1e-6
    edges = np.linspace(lo, hi, num_bins + 1)
    idx = np.clip(np.searchsorted(edges, d_t, side="right") - 1, 0, num_bins - 1)  # (S, T), last edge inclusive
    onehot = idx[..., None] == np.arange(num_bins)  # (S, T, B)
    count_seed = onehot.sum(1)  # (S, B)
    out = {"edges": edges, "centers": 0.5 * (edges[1:] + edges[:-1]), "count": count_seed.sum(0)}
    for name, score in scores.items():
        total_seed = np.einsum("st,stb->sb", np.asarray(score, float), onehot)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"{name}_mean"] = total_seed.sum(0) / out["count"]
            per_seed = np.where(count_seed > 0, total_seed / np.maximum(count_seed, 1), np.nan)
        occupied = count_seed.sum(0) > 0
        q = np.full((2, num_bins), np.nan)
        q[:, occupied] = np.nanpercentile(per_seed[:, occupied], [25, 75], axis=0)
        out[f"{name}_q25"], out[f"{name}_q75"] = q
    return out


@dataclasses.dataclass(frozen=True)
class View:
    """One score form of one setting, as the figures use it. Arrays (S, T); stop (S,) = last plotted step per seed."""

    title: str
    V_em: np.ndarray
    A_em: np.ndarray
    d_t: np.ndarray
    stop: np.ndarray
    n: int  # context length (uniform attention has d_t = 1/n)


def checkpoint_title(rule: str, steps: np.ndarray, scores: np.ndarray) -> str:
    """Panel title of one checkpoint row: the rule, the steps per seed, the seed-mean score, the stand-in note."""
    stand_in = int(np.sum(scores == 0))
    note = f"\nscore 0 at every step for {stand_in}/{scores.size} seeds: their end of training is shown"
    note = note if stand_in else ""
    return f"{rule}\nsteps {steps.tolist()}, seed-mean score {scores.mean():.2f}{note}"


# --------------------------------------------------------------------------- figures (one function per kind)


def _block_labels(d: int) -> list[str]:
    return [f"$x_{{{i + 1}}}$" for i in range(d)] + ["$r$", r"$\gamma v'$", "$v$"]


def plot_blocks(rows: list[tuple[str, np.ndarray, np.ndarray]]):
    """Fig. 3(a) / 6(e,f): one row per checkpoint (title, V (S, D, D), A (S, D, D)); seed means, each matrix divided by
    its max |entry|, colormap over [-1, 1], entries printed."""
    fig = plt.figure(layout="constrained", figsize=(8.4, 3.9 * len(rows)))
    for (title, V, A), sub in zip(rows, np.atleast_1d(fig.subfigures(len(rows), 1))):
        sub.suptitle(title, fontsize=9)
        axes = sub.subplots(1, 2)
        for M, name, ax in ((V, "V_0", axes[0]), (A, "A_0", axes[1])):
            mean = np.mean(M, 0)
            scale = np.max(np.abs(mean))
            shown = mean / scale if scale > 0 else mean
            image = ax.imshow(shown, cmap="RdBu_r", vmin=-1, vmax=1)
            labels = _block_labels(M.shape[-1] - 3)
            ax.set_xticks(range(len(labels)), labels)
            ax.set_yticks(range(len(labels)), labels)
            ax.grid(False)
            for (i, j), x in np.ndenumerate(shown):
                if x != 0:
                    ax.text(j, i, f"{x:.2f}", ha="center", va="center", fontsize=6,
                            color="w" if abs(x) > 0.6 else "k")
            ax.set_title(f"${name}$ / max|entry|  (max|entry| = {scale:.3g})", fontsize=8)
        sub.colorbar(image, ax=axes.tolist(), shrink=0.8)
    return fig


def plot_trajectories(grid: list[list[View]], window: int):
    """Fig. 5 / 6(a,b): per view, trailing average (``window``) per seed, truncated at ``stop``, mean +- s.e.m. over
    seeds; top V_em and A_em, bottom d_t. ``grid`` rows of views, each view taking two axes rows."""
    R, C = len(grid), len(grid[0])
    fig, axes = plots.figure(2 * R, C, width=5.2 * C, height=2.5 * 2 * R, squeeze=False)
    for r, views in enumerate(grid):
        for c, view in enumerate(views):
            top, bottom = axes[2 * r, c], axes[2 * r + 1, c]
            for data, ax, label, color in ((view.V_em, top, "$V_{em}$", "tab:blue"),
                                           (view.A_em, top, "$A_{em}$", "tab:orange"),
                                           (view.d_t, bottom, "$d_t$", "tab:green")):
                mean, sem, _ = truncated_mean_sem(trailing_mean(data, window), view.stop)
                steps = np.arange(mean.size)
                ax.plot(steps, mean, color=color, lw=1.2, label=label)
                ax.fill_between(steps, mean - sem, mean + sem, color=color, alpha=0.25, lw=0)
            bottom.axhline(1 / view.n, color="0.4", ls=":", lw=1, label=f"uniform attention 1/n = {1 / view.n:.2g}")
            truncated = np.sum(view.stop < view.V_em.shape[1] - 1)
            top.set(ylim=(-0.03, 1.03), ylabel="score",
                    title=f"{view.title}\n({truncated}/{view.stop.size} seeds truncated at their best step)")
            bottom.set(xlabel="training step", ylabel="$d_t$")
            top.legend(loc="best")
            bottom.legend(loc="best")
    return fig


def plot_emergence_vs_dt(grid: list[list[View]], num_bins: int):
    """Fig. 3(b) / 6(c,d): V_em and A_em against d_t in ``num_bins`` equal-width bins (pooled mean, per-seed IQR)."""
    R, C = len(grid), len(grid[0])
    fig, axes = plots.figure(R, C, width=5.2 * C, height=3.4 * R, squeeze=False)
    for r, views in enumerate(grid):
        for c, view in enumerate(views):
            ax = axes[r, c]
            b = binned_by_dt(view.d_t, {"V": view.V_em, "A": view.A_em}, num_bins)
            for name, color in (("V", "tab:blue"), ("A", "tab:orange")):
                ax.plot(b["centers"], b[f"{name}_mean"], "o-", ms=3, color=color, label=f"${name}_{{em}}$ (mean)")
                ax.fill_between(b["centers"], b[f"{name}_q25"], b[f"{name}_q75"], color=color, alpha=0.25, lw=0,
                                label="25–75 % of the per-seed bin means" if name == "V" else None)
            ax.axvline(1 / view.n, color="0.4", ls=":", lw=1, label="uniform attention 1/n")
            ax.set(xlabel="kernel diagonal mean $d_t$ (eq. 34)", ylabel="score", ylim=(-0.03, 1.03),
                   title=view.title)
            ax.legend(loc="best", fontsize=7)
    return fig


def emergence_along_dt(view: View, num_bins: int, d_start: float, d_end: float, high: float = 0.5) -> dict:
    """Numbers behind the Fig. 3(b) claims, with the d_t bins ordered from the start-of-training d_t toward its end:
    the fraction of occupied bins with mean A_em >= ``high``, the pooled V_em over the first third of the occupied
    bins, the largest binned V_em over the last third, and the direction (+1 / -1) d_t moved in."""
    b = binned_by_dt(view.d_t, {"V": view.V_em, "A": view.A_em}, num_bins)
    occupied = b["count"] > 0
    direction = 1.0 if d_end >= d_start else -1.0
    order = [int(i) for i in np.argsort(direction * b["centers"]) if occupied[i]]
    third = max(1, len(order) // 3)
    first, last = order[:third], order[-third:]
    return {"A_high_fraction": float(np.mean(b["A_mean"][occupied] >= high)),
            "V_first_third": float(np.sum((b["V_mean"] * b["count"])[first]) / np.sum(b["count"][first])),
            "V_last_third_max": float(np.max(b["V_mean"][last])), "direction": direction}

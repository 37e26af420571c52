"""``pissm.stability``'s figures: Fig. 8 (loss and ||U||_inf over training) and the starts' survival of random
steps. Pure functions of the numbers; the experiment saves the files."""

from __future__ import annotations

import numpy as np

from memlab import plots
from memlab.pissm.experiments.stability_rows import nonfinite_step
from memlab.pissm.runs import FitRecord

__all__ = ["plot_stability", "plot_start_survival"]

FAILED = {True: " (failed)", False: ""}  # Fig. 8's panel titles


def plot_stability(model: str, panels: list[tuple[str, float, FitRecord]]):
    """Fig. 8: per panel (label, value, training record of ``runs.fit``), the training loss per epoch and
    ||U||_inf / radius after every optimiser step. Returns the figure."""
    fig, axes = plots.figure(1, len(panels), width=4.5 * len(panels), height=3.2)
    for ax, (label, value, record) in zip(axes, panels):
        ratio = np.asarray(record.recurrent_norm, float) / np.asarray(record.radius, float)
        steps = np.arange(1, ratio.size + 1)
        epochs = np.arange(1, len(record.train_loss) + 1) * ratio.size / max(len(record.train_loss), 1)
        loss = ax.plot(epochs, record.train_loss, "C0o-", label="training loss (epoch mean, left)")
        ax.set_xlabel("optimiser step")
        ax.set_ylabel("loss = -log q per step", color="C0")
        twin = ax.twinx()
        norm = twin.plot(steps, ratio, "C3", lw=1, label="||U||_inf / l1 radius (right)")
        bound = [twin.axhline(1.0, color="k", ls=":", lw=1, label="ISS bound: ratio 1")]
        twin.set_ylabel("||U||_inf / l1 radius", color="C3")
        handles = loss + norm + bound
        ax.set_title(f"{model}, {label} = {value:g}{FAILED[record.failed]}")
        if record.failed_epoch >= 0:  # training stopped there: say so where the loss curve ends
            first = nonfinite_step(record)
            where = f"\nparameters non-finite after optimiser step {first}" if first else ""
            ax.text(0.02, 0.86, f"stopped in epoch {record.failed_epoch + 1}: a non-finite value{where}",
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

"""Shared figure helpers: the Agg backend (no display needed) and one consistent style.

Save figures with ``Run.save_figure(fig, "name.png")`` (PNG, dpi 150, atomic, closes the figure).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.5,
    "lines.markersize": 4,
    "figure.dpi": 100,
    "savefig.dpi": 150,
}
plt.rcParams.update(STYLE)

PANEL_WIDTH = 4.0  # inches per column
PANEL_HEIGHT = 3.0  # inches per row


def figure(nrows: int = 1, ncols: int = 1, width: float | None = None, height: float | None = None, **kwargs):
    """A new figure with an ``nrows x ncols`` grid of axes in the memlab style.

    ``width``/``height`` are the whole figure's size in inches (default: 4.0 per column, 3.0 per row).
    Returns ``(fig, axes)`` like ``plt.subplots``: one Axes for 1 x 1, else an array of shape (nrows, ncols)
    squeezed like matplotlib does. Extra keyword arguments go to ``plt.subplots`` (e.g. ``sharex=True``).
    """
    if nrows < 1 or ncols < 1:
        raise ValueError(f"figure needs nrows >= 1 and ncols >= 1, got {nrows} x {ncols}")
    size = (width or PANEL_WIDTH * ncols, height or PANEL_HEIGHT * nrows)
    kwargs.setdefault("layout", "constrained")
    return plt.subplots(nrows, ncols, figsize=size, **kwargs)

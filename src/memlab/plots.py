"""Shared figure helpers: the Agg backend (no display needed) and one consistent style.

Save figures with ``Run.save_figure(fig, "name.png")`` (PNG, dpi 150, atomic, closes the figure).
"""

from __future__ import annotations

import matplotlib
import matplotlib.collections
import numpy as np

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


def blank_panels(fig) -> list[str]:
    """The panels of ``fig`` that show nothing: visible axes with no finite data point (lines, markers, bars,
    images, filled areas) and no text on them. A panel whose data are all NaN (a run that did not train) must say
    so in words instead (``ax.text``), or be hidden. Returns each blank panel's title (or 'panel i')."""
    def finite(values) -> bool:
        values = np.ma.filled(np.ma.asarray(values, float), np.nan)
        return bool(values.size and np.isfinite(values).any())

    def shows_data(ax) -> bool:  # reference lines (axhline, axvline: not in data coordinates) are not data
        if any(finite(line.get_xydata()[:, 1]) for line in ax.lines
               if line.get_visible() and line.get_transform() == ax.transData):
            return True
        for c in ax.collections:
            if not c.get_visible():
                continue
            if isinstance(c, matplotlib.collections.PathCollection):  # scatter: the points are its offsets
                if len(c.get_offsets()) and finite(np.asarray(c.get_offsets())[:, 1]):
                    return True
            elif c.get_array() is not None:  # an image-like mesh: its values
                if finite(c.get_array()):
                    return True
            elif any(len(p.vertices) and finite(p.vertices[:, 1]) for p in c.get_paths()):  # error bars, areas
                return True
        if any(image.get_visible() and finite(image.get_array()) for image in ax.images):
            return True
        return any(p.get_visible() and finite([p.get_height()]) for p in ax.patches if hasattr(p, "get_height"))

    blank = []
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible() or not ax.axison or ax.texts or shows_data(ax):
            continue
        blank.append(ax.get_title() or f"panel {i}")
    return blank


def key(label: str, color: str = "0.35", **style):
    """A legend entry for a line style that several curves share (e.g. ``key("fit", ls="--")``), drawn in grey so
    that it names the style, not a curve. Pass it in ``handles`` to ``legend``."""
    from matplotlib.lines import Line2D

    return Line2D([], [], color=color, label=label, **style)


def legend_outside(ax, handles=None, **kwargs):
    """The legend of ``ax`` to the right of its axes, where it covers no data (constrained layout makes room)."""
    kwargs = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0, **kwargs}
    return ax.legend(handles=handles, **kwargs) if handles is not None else ax.legend(**kwargs)

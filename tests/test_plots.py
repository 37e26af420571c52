"""plots.blank_panels: a panel whose data are all NaN and that says nothing of why is found; any data or words pass."""

import numpy as np

from memlab import plots


def _blank(draw) -> list[str]:
    fig, ax = plots.figure()
    ax.set_title("p")
    draw(ax)
    blank = plots.blank_panels(fig)
    plots.plt.close(fig)
    return blank


NAN2 = [np.nan, np.nan]


def test_all_nan_panels_are_blank():
    assert _blank(lambda ax: ax.plot([1, 2], NAN2)) == ["p"]
    assert _blank(lambda ax: ax.bar([0, 1], NAN2)) == ["p"]
    assert _blank(lambda ax: ax.scatter([1], [np.nan])) == ["p"]
    assert _blank(lambda ax: ax.errorbar([1, 2], NAN2, yerr=[1, 1])) == ["p"]
    assert _blank(lambda ax: (ax.plot([1, 2], NAN2), ax.axhline(1.0))) == ["p"]  # a reference line is not data
    assert _blank(lambda ax: None) == ["p"]


def test_panels_with_data_or_words_are_not_blank():
    assert _blank(lambda ax: ax.plot([1, 2], [1.0, np.nan])) == []
    assert _blank(lambda ax: ax.bar([0, 1], [np.nan, 2.0])) == []
    assert _blank(lambda ax: ax.fill_between([0, 1], [0, 1], [1, 2])) == []
    assert _blank(lambda ax: ax.imshow(np.ones((2, 2)))) == []
    assert _blank(lambda ax: ax.scatter([1], [2.0])) == []
    assert _blank(lambda ax: (ax.plot([1, 2], NAN2), ax.text(0.5, 0.5, "no run trained"))) == []
    assert _blank(lambda ax: (ax.plot([1, 2], NAN2), ax.set_visible(False))) == []
    assert _blank(lambda ax: (ax.plot([1, 2], NAN2), ax.axis("off"))) == []

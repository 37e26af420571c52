"""What every pi-SSM experiment's summary shares: the choices it lists (``CHOICES``), the paper's row of a model
name, and a table's empty entry. The paper's numbers beside our typed rows are in ``table1_rows`` and
``stability_rows``, each experiment's figures in ``<experiment>_figures``."""

from __future__ import annotations

from memlab.files import summary_text

__all__ = ["CHOICES", "blank", "paper_row"]

# The choices every pi-SSM experiment's summary.md lists (the paper leaves them open, or memlab departs from its text).
CHOICES = summary_text(__package__, "report_choices")


def paper_row(model: str) -> str:
    """The paper's row of a model name: eq. (7)'s gain is the paper's pi-SSM-GRU / LSTM whichever way its readout
    starts (``runs.TRACKING_INIT``) and whether its inputs are normalised."""
    return model.removesuffix("-tracking").removesuffix("-normalised")


def blank(value):
    """A table entry: None (no paper number) as an empty cell."""
    return "" if value is None else value

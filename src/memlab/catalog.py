"""The one place that imports every study's experiments and names them.

A study registers its experiments as a list ``EXPERIMENTS`` in ``memlab/<study>/experiments.py``;
add the module to ``_STUDIES`` below.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from memlab.arena import experiments as arena
from memlab.belief import experiments as belief
from memlab.ictd import experiments as ictd
from memlab.pissm import experiments as pissm
from memlab.recall import experiments as recall
from memlab.runner import Experiment

_STUDIES = (belief, ictd, recall, pissm, arena)


def _build(experiments: Iterable[Experiment]) -> dict[str, Experiment]:
    catalog: dict[str, Experiment] = {}
    for exp in experiments:
        if not isinstance(exp, Experiment):
            raise TypeError(f"EXPERIMENTS must hold Experiment instances, got {type(exp).__name__}")
        if exp.name in catalog:
            raise ValueError(f"experiment name {exp.name!r} is registered twice")
        catalog[exp.name] = exp
    return catalog


EXPERIMENTS: dict[str, Experiment] = _build(exp for study in _STUDIES for exp in study.EXPERIMENTS)


def get(name: str) -> Experiment:
    """The experiment called ``name``; ValueError (with a close-match suggestion) if there is none."""
    if name in EXPERIMENTS:
        return EXPERIMENTS[name]
    close = difflib.get_close_matches(name, list(EXPERIMENTS), n=1)
    hint = f" did you mean '{close[0]}'?" if close else ""
    known = ", ".join(EXPERIMENTS) or "(none registered yet)"
    raise ValueError(f"unknown experiment '{name}';{hint} known: {known}")

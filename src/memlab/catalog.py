"""The one place that knows every study's experiments and names them.

A study registers its experiments as a list ``EXPERIMENTS`` in ``memlab/<study>/experiments/__init__.py``; add the
study to ``_STUDIES`` below. The studies are imported when first asked for: :func:`get` imports only the study an
experiment's name starts with (``memlab run arena.leaderboard`` never imports the other four, whose imports cost
every process CPU time), ``EXPERIMENTS`` all of them.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable

from memlab.runner import Experiment

_STUDIES = ("belief", "ictd", "recall", "pissm", "arena")


def _study(study: str) -> list[Experiment]:
    return importlib.import_module(f"memlab.{study}.experiments").EXPERIMENTS


def _build(experiments: Iterable[Experiment]) -> dict[str, Experiment]:
    catalog: dict[str, Experiment] = {}
    for exp in experiments:
        if not isinstance(exp, Experiment):
            raise TypeError(f"EXPERIMENTS must hold Experiment instances, got {type(exp).__name__}")
        if exp.name in catalog:
            raise ValueError(f"experiment name {exp.name!r} is registered twice")
        catalog[exp.name] = exp
    return catalog


def __getattr__(name: str):
    if name == "EXPERIMENTS":  # dict[str, Experiment]: every study's experiments, in study order; built once
        globals()["EXPERIMENTS"] = _build(exp for study in _STUDIES for exp in _study(study))
        return globals()["EXPERIMENTS"]
    raise AttributeError(f"module 'memlab.catalog' has no attribute {name!r}")


def get(name: str) -> Experiment:
    """The experiment called ``name``; ValueError (with a close-match suggestion) if there is none."""
    study = name.split(".")[0]
    if "EXPERIMENTS" not in globals() and study in _STUDIES:  # before the whole catalog is built: one study
        for exp in _study(study):
            if exp.name == name:
                return exp
    everything = globals()["EXPERIMENTS"] if "EXPERIMENTS" in globals() else __getattr__("EXPERIMENTS")
    if name in everything:
        return everything[name]
    close = difflib.get_close_matches(name, list(everything), n=1)
    hint = f" did you mean '{close[0]}'?" if close else ""
    known = ", ".join(everything) or "(none registered yet)"
    raise ValueError(f"unknown experiment '{name}';{hint} known: {known}")

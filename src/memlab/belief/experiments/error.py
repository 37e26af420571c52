"""``belief.error-vs-epsilon`` (Fig. 1) and ``belief.error-vs-time`` (Fig. 7): the decoding error p_k, eq. (19),
of the LOF and five ALFs (delta schedules eq. (48)-(49)) on the two-state HMM of eq. (47), by Monte Carlo.

Choices the paper leaves open, fixed here: w_0 = 0 for every filter and pi0 = [1, 0] (App. E.1); all filters
see the same sampled trajectories (``montecarlo.error_curves``); ties of the MAP decoder are broken uniformly
at random, so delta = 0 (never leaving w = 0) scores a coin flip, 0.5. A valid schedule "decreases" when the
least-squares slope of p_1000 on 1/eps has t < -3 and p_1000 at least halves over the grid.

The two experiments, one module each: ``error_epsilon.py`` (Fig. 1) and ``error_time.py`` (Fig. 7); here what they
share.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from memlab.belief.alf import DELTA_SCHEDULES
from memlab.belief.examples import example_filters, two_state_example
from memlab.belief.montecarlo import error_curves
from memlab.checks import check_choices, check_int, check_real

PAPER = "linear-recurrent-memory-pomdp"


@dataclasses.dataclass(frozen=True)
class ExampleConfig:
    """What Fig. 1 and Fig. 7 share: the HMM of eq. (47), the filters and the Monte-Carlo size."""

    seed: int = 0
    num_runs: int = 20_000
    num_steps: int = 1000
    emission: float = 0.9
    lam: float = 0.7  # lambda of the schedule delta = lambda / log(1/eps), eq. (48)
    schedules: tuple[str, ...] = ("sqrt", "log", "eps2", "zero", "one")

    def validate(self):
        check_int("num_runs", self.num_runs)
        check_int("num_steps", self.num_steps, low=20)
        check_real("emission", self.emission, 0.5, 1.0, open_low=True, open_high=True)
        check_real("lam", self.lam, 0.0, open_low=True)
        check_choices("schedules", self.schedules, DELTA_SCHEDULES)


class ExampleRuns(NamedTuple):
    """What a cell of either experiment reads: ``num_runs`` trajectories of ``num_steps`` steps of eq. (47) with
    emission probability ``emission``, filtered by the LOF and the ALFs of ``schedules`` (lambda ``lam``)."""

    num_runs: int
    num_steps: int
    emission: float
    lam: float
    schedules: tuple[str, ...]

    @classmethod
    def of(cls, cfg: ExampleConfig) -> ExampleRuns:
        return cls(cfg.num_runs, cfg.num_steps, cfg.emission, cfg.lam, cfg.schedules)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FilterErrors:
    """The cells of the error figures: ``names`` (F,) of the filters, the LOF then every ALF, and their error
    probabilities ``p`` (eq. (19)): (K, F) p_k for k = 1..K (``belief.p-curves``), or (F,) p_K (``belief.p-final``)."""

    names: list[str]
    p: list


def example_p_curves(runs: ExampleRuns, eps: float, key) -> tuple[list[str], np.ndarray]:
    """The filters' names and p_k, k = 1..K (eq. (19)), (K, F): the LOF, then every ALF, at ``eps``."""
    hmm, D = two_state_example(eps, runs.emission, flip=True)
    names, filters = example_filters(hmm, D, eps, runs.schedules, runs.lam)
    return names, error_curves(hmm, filters, key, runs.num_runs, runs.num_steps).p

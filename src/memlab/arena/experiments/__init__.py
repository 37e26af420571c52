"""Experiments of the arena: an index, one module per experiment.

* ``arena.leaderboard`` — every layer against the optimal predictor on every task (``leaderboard.py``).
* ``arena.compiled`` — compiled solutions (weights set by theory) against the optimal predictor (``compiled.py``).
"""

from __future__ import annotations

from memlab.arena.experiments import compiled, leaderboard

EXPERIMENTS = [*leaderboard.EXPERIMENTS, *compiled.EXPERIMENTS]

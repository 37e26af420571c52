"""Experiments of the arena: an index, one module per experiment.

* ``arena.leaderboard`` — every layer against the optimal predictor on every task (``leaderboard.py``).
"""

from __future__ import annotations

from memlab.arena.experiments import leaderboard

EXPERIMENTS = [*leaderboard.EXPERIMENTS]

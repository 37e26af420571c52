"""Experiments of the arena: an index, one module per experiment.

* ``arena.leaderboard`` — every layer against the optimal predictor on every task (``leaderboard.py``).
* ``arena.compiled`` — compiled solutions (weights set by theory) against the optimal predictor (``compiled.py``).
* ``arena.scaling`` — every layer's gap against its state size, the leaderboard's cells at several widths
  (``scaling.py``).
* ``arena.mqar-zoology`` — MQAR at Zoology's configuration, accuracy beside the published numbers
  (``mqar_zoology.py``; its cell in ``mqar_train.py``).
"""

from __future__ import annotations

from memlab.arena.experiments import compiled, leaderboard, mqar_zoology, scaling

EXPERIMENTS = [*leaderboard.EXPERIMENTS, *compiled.EXPERIMENTS, *scaling.EXPERIMENTS, *mqar_zoology.EXPERIMENTS]

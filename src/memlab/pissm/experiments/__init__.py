"""The experiments of the pi-SSM study (paper: pi-ssm-hybrid-state-space.md), one module per theme; an index only.

* ``pissm.table1``      — Table 1, Tables 7-8: every model on every data set (``table1.py``).
* ``pissm.stability``   — Tables 2 and 6, Fig. 8: ISS projection vs gradient clipping (``stability.py``).
* ``pissm.pong-modes``  — Fig. 4 / 9, App. H.1: inferred modes, predictive ellipses, eigenvalues (``modes.py``).
* ``pissm.imputation``  — App. H.1: 50 % missing observations (``imputation.py``).

Shared by them: ``cells.py`` (every cell function) and ``report.py`` (the paper's tables beside typed rows, the
figures, the choices every summary lists).
"""

from __future__ import annotations

from memlab.pissm.experiments import imputation, modes, stability, table1

EXPERIMENTS = [*table1.EXPERIMENTS, *stability.EXPERIMENTS, *modes.EXPERIMENTS,
               *imputation.EXPERIMENTS]

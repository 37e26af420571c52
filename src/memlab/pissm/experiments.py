"""The experiments of the pi-SSM study (paper: pi-ssm-hybrid-state-space.md), one module per theme; an index only.

* ``pissm.table1``      — Table 1, Tables 7-8: every model on every data set (``exp_table1.py``).
* ``pissm.stability``   — Tables 2 and 6, Fig. 8: ISS projection vs gradient clipping (``exp_stability.py``).
* ``pissm.pong-modes``  — Fig. 4 / 9, App. H.1: inferred modes, predictive ellipses, eigenvalues (``exp_modes.py``).
* ``pissm.imputation``  — App. H.1: 50 % missing observations (``exp_imputation.py``).
"""

from __future__ import annotations

from memlab.pissm import exp_imputation, exp_modes, exp_stability, exp_table1

EXPERIMENTS = [*exp_table1.EXPERIMENTS, *exp_stability.EXPERIMENTS, *exp_modes.EXPERIMENTS,
               *exp_imputation.EXPERIMENTS]

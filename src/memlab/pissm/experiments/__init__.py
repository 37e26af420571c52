"""The experiments of the pi-SSM study (paper: pi-ssm-hybrid-state-space.md), one module per theme; an index only.

* ``pissm.table1``      — Table 1, Tables 7-8: every model on every data set (``table1.py``; the paper's numbers
  beside typed rows ``table1_rows.py``, claims ``table1_claims.py``, figure ``table1_figures.py``).
* ``pissm.stability``   — Tables 2 and 6, Fig. 8: ISS projection vs gradient clipping (``stability.py``; config and
  sweeps ``stability_sweep.py``, rows ``stability_rows.py``, analysis ``stability_stats.py``, claims
  ``stability_claims.py``, figures ``stability_figures.py``).
* ``pissm.pong-modes``  — Fig. 4 / 9, App. H.1: inferred modes, predictive ellipses, eigenvalues (``modes.py``; the
  oracle's reading ``modes_reading.py``, figure ``modes_figures.py``).
* ``pissm.imputation``  — App. H.1: 50 % missing observations (``imputation.py``, figure ``imputation_figures.py``).

Shared by them: ``cells.py`` (every cell function) and ``report.py`` (the choices every summary lists, a model's
paper row, a table's empty entry).
"""

from __future__ import annotations

from memlab.pissm.experiments import imputation, modes, stability, table1

EXPERIMENTS = [*table1.EXPERIMENTS, *stability.EXPERIMENTS, *modes.EXPERIMENTS,
               *imputation.EXPERIMENTS]

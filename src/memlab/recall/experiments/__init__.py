"""Experiments of the recall study (paper: mamba-measure-valued-recall.md): an index, one module per experiment.

* ``recall.rate``             — App. A.2, Fig. 1: risk vs n, rate fit of eq. (1) (``rate.py``).
* ``recall.sweep``            — App. A.4, Figs. 2-4: alpha x T x n with the two-layer student (``sweep.py``).
* ``recall.attention-vs-s6``  — §7: the S6 student beside the softmax-attention comparator (``compare.py``).
* ``recall.context-limit``    — Prop. 4.2: F^(T) as T grows and the contraction factor r (``context.py``).

The first three share their risk-vs-n grid: its cells through ``cells.py``, its tables and figure through
``report.py``.
"""

from __future__ import annotations

from memlab.recall.experiments import compare, context, rate, sweep

EXPERIMENTS = [*rate.EXPERIMENTS, *sweep.EXPERIMENTS, *compare.EXPERIMENTS, *context.EXPERIMENTS]

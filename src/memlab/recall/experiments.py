"""Experiments of the recall study (paper: mamba-measure-valued-recall.md), one module per theme.

* ``recall.rate``             — App. A.2, Fig. 1: risk vs n, rate fit of eq. (1) (``exp_rate.py``).
* ``recall.sweep``            — App. A.4, Figs. 2-4: alpha x T x n with the two-layer student (``exp_rate.py``).
* ``recall.attention-vs-s6``  — the S6 student beside the softmax-attention comparator (``exp_rate.py``).
* ``recall.context-limit``    — Prop. 4.2: F^(T) as T grows and the contraction factor r (``exp_context.py``).
"""

from __future__ import annotations

from memlab.recall import exp_context, exp_rate

EXPERIMENTS = [*exp_rate.EXPERIMENTS, *exp_context.EXPERIMENTS]

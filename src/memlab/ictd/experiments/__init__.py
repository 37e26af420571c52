"""Experiments of the ictd study (paper: softmax-transformers-in-context-td.md): an index, one module per theme.

* ``ictd.verify``             — Fig. 7 / App. F.6: Theorem 1 and Lemma 1 in float64, four kernels (``verify.py``).
* ``ictd.depth-convergence``  — Theorem 2: ||v_L - v_pi|| vs depth and context length (``depth.py``; its config and
  cells ``depth_cells.py``, its analysis ``depth_analysis.py``).
* ``ictd.msve-vs-context``    — Fig. 1: MSVE of the 15-layer theta* transformer vs context length (``msve.py``; its
  config and cell ``msve_cells.py``, its analysis ``msve_analysis.py``).
* ``ictd.neu``                — Theorem 3: the NEU objective of theta* on the looped space (``neu.py``).
* ``ictd.pretrain``           — Algorithm 1, Fig. 3 and Fig. 5: emergence under TD pretraining (``pretrain.py``).
* ``ictd.mask-relaxation``    — App. F.5 / Fig. 6: full vs relaxed A mask (``mask.py``).

The last two share ``cells.py`` (the Algorithm 1 cells), ``setting.py`` (a training config's seeds stacked),
``diagnostics.py`` (the numbers read from a setting), ``report.py`` (claims and summary sections), ``setting_tables.py``
and ``setting_figures.py``; ``neu_figures.py`` holds the figures and tables of ``neu.py``. Every ``analyse`` returns a
frozen dataclass.
"""

from __future__ import annotations

from memlab.ictd.experiments import depth, mask, msve, neu, pretrain, verify

EXPERIMENTS = [*verify.EXPERIMENTS, *depth.EXPERIMENTS, *msve.EXPERIMENTS, *neu.EXPERIMENTS,
               *pretrain.EXPERIMENTS, *mask.EXPERIMENTS]

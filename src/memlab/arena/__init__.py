"""The arena (issue 31): every memory layer against the optimal algorithm on every task family.

    task.py    the task interface (sample, reference, trivial, loss, distance) and the normalised gap
    hmm.py     next-observation prediction on HMMs; reference: the exact filter (``memlab.belief``)
    lgssm.py   next-observation prediction on linear-Gaussian models; reference: the Kalman filter
               (``memlab.pissm.kalman``)

The arena sits above the four paper studies: it uses their public references and no study imports it.
"""

from memlab.arena.hmm import HMMTask, mess3, random_hmm, two_state
from memlab.arena.lgssm import LGSSMTask, random_lgssm
from memlab.arena.task import Batch, Task, categorical_kl, cross_entropy, normalised_gap, squared_error

__all__ = ["Batch", "HMMTask", "LGSSMTask", "Task", "categorical_kl", "cross_entropy", "mess3", "normalised_gap",
           "random_hmm", "random_lgssm", "squared_error", "two_state"]

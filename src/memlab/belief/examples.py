"""The paper's worked examples as models (paper 1: section 6.1, Appendices A.1, B.1, E.1).

* ``two_state_example`` — the two-state HMM of eq. (47) (D = swap, Fig. 1 and Fig. 7) or eq. (54)
  (D = I, Fig. 5), with pi0 = [1, 0] as in Appendix E.1.
* ``example_filters``   — the filters compared on it: the LOF and one ALF per delta schedule, w_0 = 0.
* ``EXAMPLE1_P``, ``EXAMPLE1_E`` — Example 1 of Appendix A.1, eq. (50): two 2-cycles whose states x1 and
  x3 emit alike, yet Assumption 5.6 holds; ``EXAMPLE1_BAD_E`` makes x2 and x4 alike too, so it fails.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from memlab.belief.alf import ALF, delta_label, delta_schedule
from memlab.belief.filters import LOF
from memlab.belief.hmm import HMM

SWAP = np.array([[0.0, 1.0], [1.0, 0.0]])  # the backbone D of eq. (47)

# Example 1 of Appendix A.1, eq. (50): two 2-cycles, E_tilde with identical columns for x1 and x3.
EXAMPLE1_P = np.array([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]], float)
EXAMPLE1_E = np.array([[0.5, 0.8, 0.5, 0.2], [0.5, 0.2, 0.5, 0.8]])
# The same P with x2 and x4 also alike: the stacked columns of x1, x3 coincide (5.6b fails).
EXAMPLE1_BAD_E = np.array([[0.5, 0.8, 0.5, 0.8], [0.5, 0.2, 0.5, 0.2]])


def two_state_example(eps: float, e: float, flip: bool) -> tuple[HMM, np.ndarray]:
    """The two-state HMM of eq. (47) (flip=True: D = swap) or eq. (54) (flip=False: D = I), and D (2, 2).

    T = (1 - eps) D + eps (1 - D), E = [[e, 1-e], [1-e, e]] (S = N = 2), pi0 = [1, 0] (Appendix E.1);
    float32, as the Monte-Carlo engine runs it.
    """
    D = SWAP if flip else np.eye(2)
    T = (1.0 - eps) * D + eps * (1.0 - D)  # eq. (47) / eq. (54)
    E = np.array([[e, 1.0 - e], [1.0 - e, e]])
    return HMM(jnp.asarray(T, jnp.float32), jnp.asarray(E, jnp.float32), jnp.asarray([1.0, 0.0])), D


def example_filters(hmm: HMM, D: np.ndarray, eps: float, schedules, lam: float) -> tuple[list[str], list]:
    """The LOF and one time-invariant ALF eq. (24) per delta schedule (``alf.DELTA_SCHEDULES``, eq. (48)-(49)),
    all started at w_0 = 0 (Appendix E.1). Returns (names, filters), the LOF first."""
    w0 = np.zeros(2, np.float32)
    names, filters = ["LOF"], [LOF.of(hmm, w0=w0)]
    for s in schedules:
        delta = np.float32(delta_schedule(s, eps, lam))
        names.append(f"ALF {delta_label(s, lam)}")
        filters.append(ALF.time_invariant(D, np.asarray(hmm.E), delta, w0=w0))
    return names, filters

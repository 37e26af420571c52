"""The belief study's experiments (paper: linear-recurrent-memory-pomdp.md), registered by name — an index only.

* ``exp_error``        — ``belief.error-vs-epsilon`` (Fig. 1: p_1000 against 1/eps) and ``belief.error-vs-time``
  (Fig. 7: p_k against k at eps = 0.005), on the HMM of eq. (47).
* ``exp_logit_trace``  — ``belief.logit-trace`` (Fig. 5: w_k(x2) - w_k(x1) of LOF and ALF on eq. (54)).
* ``exp_exact_linear`` — ``belief.exact-linear-filter`` (Theorem 4.4, Corollary 4.5, Example 1 of App. A.1).

* ``exp_ringworld_env`` — ``belief.ringworld-env`` (Figs. 2 and 8: RingWorld, its ceiling and floor returns).
* ``exp_ringworld_ppo`` — ``belief.ringworld-returns`` (Fig. 3) and ``belief.deep-alf-inits`` (Figs. 9, 10): PPO
  with linear memories on RingWorld.
* ``exp_ringworld_trajectory`` — ``belief.ringworld-trajectory`` (Fig. 6: a trained ALF agent's trajectory).

A new theme is a new ``exp_<theme>.py`` with its own ``EXPERIMENTS`` list, appended below.
"""

from __future__ import annotations

from memlab.belief import (
    exp_error,
    exp_exact_linear,
    exp_logit_trace,
    exp_ringworld_env,
    exp_ringworld_ppo,
    exp_ringworld_trajectory,
)

EXPERIMENTS = [*exp_error.EXPERIMENTS, *exp_logit_trace.EXPERIMENTS, *exp_exact_linear.EXPERIMENTS,
               *exp_ringworld_env.EXPERIMENTS, *exp_ringworld_ppo.EXPERIMENTS,
               *exp_ringworld_trajectory.EXPERIMENTS]

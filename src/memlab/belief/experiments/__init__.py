"""The belief study's experiments (paper: linear-recurrent-memory-pomdp.md), registered by name — an index only.

* ``error_epsilon`` — ``belief.error-vs-epsilon`` (Fig. 1: p_1000 against 1/eps), ``error_time`` —
  ``belief.error-vs-time`` (Fig. 7: p_k against k at eps = 0.005), on the HMM of eq. (47) (``error``: what they share).
* ``logit_trace``  — ``belief.logit-trace`` (Fig. 5: w_k(x2) - w_k(x1) of LOF and ALF on eq. (54)).
* ``exact_linear`` — ``belief.exact-linear-filter`` (Theorem 4.4, Corollary 4.5, Example 1 of App. A.1).

* ``ringworld_env`` — ``belief.ringworld-env`` (Figs. 2 and 8: RingWorld, its ceiling and floor returns).
* ``ringworld_ppo`` — ``belief.ringworld-returns`` (Fig. 3) and ``belief.deep-alf-inits`` (Figs. 9, 10): PPO
  with linear memories on RingWorld (config and sweep ``ringworld_ppo_sweep``, analysis ``ringworld_ppo_stats``,
  claims, figures, summary ``ringworld_ppo_claims`` / ``_figures`` / ``_summary``).
* ``ringworld_trajectory`` — ``belief.ringworld-trajectory`` (Fig. 6: a trained ALF agent's trajectory).

A new theme is a new ``experiments/<theme>.py`` with its own ``EXPERIMENTS`` list, appended below.
"""

from __future__ import annotations

from memlab.belief.experiments import (
    error_epsilon,
    error_time,
    exact_linear,
    logit_trace,
    ringworld_env,
    ringworld_ppo,
    ringworld_trajectory,
)

EXPERIMENTS = [*error_epsilon.EXPERIMENTS, *error_time.EXPERIMENTS, *logit_trace.EXPERIMENTS,
               *exact_linear.EXPERIMENTS, *ringworld_env.EXPERIMENTS, *ringworld_ppo.EXPERIMENTS,
               *ringworld_trajectory.EXPERIMENTS]

"""What ``pissm.pong-modes``' oracle runs say: the sentence (``READINGS``) the oracle's and the hand-coded rule's
scores support, and why an estimator misses the reflections (``WHY``)."""

from __future__ import annotations

from memlab.pissm.experiments.cells import EstimatorStats, SelectionScores
from memlab.pissm.runs import ESTIMATORS

READINGS = {
    "learnable": "Selection of the true maps is learnable here by {estimator}: a failure of the full model lies in "
                 "learning the modes' dynamics (its sampled A_z reflects at {model_hits:.0%} of the wall hits, "
                 "{model_next:.0%} at the hit or the step after, and at {model_else:.0%} of the other steps).",
    "learnable-and-learned": "Selection of the true maps is learnable here by {estimator}, and the full model learns "
                             "reflecting modes too: its sampled A_z reflects at {model_hits:.0%} of the wall hits "
                             "({model_next:.0%} at the hit or the step after) and at {model_else:.0%} of the other "
                             "steps.",
    "free-flight": "{estimator} does not find the reflections even when they are given: its q(z | x) settled on "
                   "free flight (right at {hits:.0%} of the hits; {learned:.3f} per step) although the hand-coded "
                   "rule scores {rule:.3f} on the same objective, so the objective prefers switching and the "
                   "estimator does not reach it.",
    "none": "{estimator}: q(z | x) has not learned a selection in this budget (hand-coded rule {rule:.3f}, learned "
            "{learned:.3f} per step).",
}
WHY = {  # what the estimator's gradient does at a wall, by objective
    "reinforce": " Under eq. (9) a mode is trained only on the steps where it is sampled, and a reflection sampled "
                 "in mid-flight costs tens of nats, so the advantage pushes every reflection's probability down "
                 "before the rare steps at a wall can raise it.",
    "mixture": " The exact mixture gives each reflection the gradient of its posterior responsibility at every step, "
               "but the sampled x_{{t-1}} places a wall crossing only to within its spread: the hand-coded rule, "
               "reading the same sample, is right at {rule_hits:.0%} of the hits.",
}


def oracle_reading(estimator: str, oracle: SelectionScores, rule: SelectionScores, st: EstimatorStats) -> str:
    """The READINGS sentence the oracle's and the hand-coded ``rule``'s scores (and the full model's statistics
    ``st``) support."""
    if oracle.selects():
        kind = "learnable-and-learned" if st.learns_reflections() else "learnable"
    else:
        kind = "free-flight" if oracle.in_flight >= 0.9 else "none"
    reading = READINGS[kind].format(estimator=f"`{estimator}`", learned=oracle.test_ll, hits=oracle.at_hits,
                                    rule=rule.test_ll, model_hits=st.reflecting_at_bounces,
                                    model_next=st.reflecting_next_to_bounces, model_else=st.reflecting_elsewhere)
    why = WHY[ESTIMATORS[estimator][0]].format(rule_hits=rule.at_hits)
    return reading + why * (kind == "free-flight")

"""The arena's tasks by name (each a fixed process, so a name means the same sequences everywhere)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from memlab.arena.hmm import HMMTask, mess3, noisy_cycle, random_hmm, ringworld, two_state
from memlab.arena.layers import source_fingerprint
from memlab.arena.lgssm import random_lgssm
from memlab.arena.mqar import MQARTask
from memlab.arena.policy import PolicyEvalTask
from memlab.arena.recall_predict import RecallPredictTask
from memlab.arena.switching import random_switching_lgssm
from memlab.arena.task import Task
from memlab.plugins import load_plugins

__all__ = ["TASKS", "TaskSpec", "make_task", "register_task"]


class TaskSpec(NamedTuple):
    make: Callable[[], Task]
    description: str
    paper: str  # the paper whose reference algorithm this task's optimum is
    source: str = ""  # a fingerprint of a registered task's code ("" for memlab's own): layers.source_fingerprint


TASKS: dict[str, TaskSpec] = {
    "hmm-mess3": TaskSpec(lambda: HMMTask(mess3(), name="hmm-mess3"),
                          "Mess3 (x = 0.05, alpha = 0.85): 3 states, 3 symbols", "linear-recurrent-memory-pomdp"),
    "hmm-random": TaskSpec(lambda: HMMTask(random_hmm(0, 8, 4, concentration=0.5), name="hmm-random"),
                           "random HMM, 8 states, 4 symbols, Dirichlet(0.5) columns (seed 0)",
                           "linear-recurrent-memory-pomdp"),
    "hmm-two-state": TaskSpec(lambda: HMMTask(two_state(0.05, 0.8), name="hmm-two-state"),
                              "paper 1's two-state example, eq. (47), eps = 0.05, e = 0.8",
                              "linear-recurrent-memory-pomdp"),
    "hmm-cycle": TaskSpec(lambda: HMMTask(noisy_cycle(), name="hmm-cycle"),
                          "deterministic 5-cycle, 3 symbols, emission accuracy 0.7 (its exact filter is linear)",
                          "linear-recurrent-memory-pomdp"),
    "hmm-ringworld": TaskSpec(lambda: HMMTask(ringworld(), name="hmm-ringworld"),
                              "RingWorld's observation stream under uniformly random actions (paper 1, section 6.2: "
                              "12 ring states, actions CW1, CW2, CCW1, CCW2 slipping or overshooting with eps = 0.05 "
                              "each, 4 beacons): reads the action a_t and the beacon y_t, predicts y_{t+1}; reference: "
                              "the exact filter given the actions", "linear-recurrent-memory-pomdp"),
    "lgssm": TaskSpec(lambda: random_lgssm(0, 4, 2), "random stable linear-Gaussian model, 4 states, 2 outputs, "
                      "spectral radius 0.95, observation noise 0.1 (seed 0)", "pi-ssm-hybrid-state-space"),
    "policy-eval": TaskSpec(PolicyEvalTask, "value of the query state in context, a fresh randomised Boyan chain per "
                            "sequence (paper 2's Algorithm 2 and Table 1: 64 states, d = 4, gamma = 0.9); reference: "
                            "the ridge TD fixed point of the context so far (approximate)",
                            "softmax-transformers-in-context-td"),
    "recall-predict": TaskSpec(RecallPredictTask, "paper 4's recall-predict task, well-posed linear target, A.1's "
                               "content law (alpha = 1, 32-point grid) and tags +-1, query inserted before and after "
                               "the length - 2 context tokens; reference: the recall band's fitted predictor "
                               "(approximate)", "mamba-measure-valued-recall"),
    "mqar": TaskSpec(MQARTask, "Zoology's multi-query associative recall: vocabulary 128 (63 keys, 64 values, filler "
                     "0), 4 key-value pairs, query gaps of power law 0.01; reference: exact lookup", ""),
    "switching": TaskSpec(lambda: random_switching_lgssm(0), "switching linear-Gaussian model, 3 modes turning the "
                          "state by pi/4, pi/2, 3 pi/4 per step, stay probability 0.95, 4 states, 2 outputs, "
                          "radius 0.95, observation noise 0.1 (seed 0); reference: a 32-particle Rao-Blackwellised "
                          "particle filter (approximate)", "pi-ssm-hybrid-state-space"),
}


def register_task(name: str, make: Callable[[], Task], description: str, paper: str = "") -> None:
    """Add a task to :data:`TASKS` (ValueError if the name is taken)."""
    if name in TASKS:
        raise ValueError(f"task {name!r} is already registered")
    TASKS[name] = TaskSpec(make, description, paper, source_fingerprint(make))


def make_task(name: str) -> Task:
    """The task called ``name``; ValueError naming the known ones otherwise."""
    if name not in TASKS:
        load_plugins()
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    return TASKS[name].make()

"""The arena: every memory layer against the optimal algorithm on every task family.

    task.py    the task interface (sample, reference, trivial, loss, distance) and the normalised gap
    hmm.py     next-observation prediction on HMMs, with or without actions (RingWorld); reference: the exact filter
               (``memlab.belief``)
    lgssm.py   next-observation prediction on linear-Gaussian models; reference: the Kalman filter
               (``memlab.kalman``)
    switching.py  the same for switching linear-Gaussian models (K modes); reference: a Rao-Blackwellised
               particle filter (approximate), beside the exact enumeration of mode histories for short sequences
    small_kalman.py  the Kalman step for small matrices, fused under vmap (the particle filter's engine)
    policy.py  the value of a state in context on random MRPs (``memlab.ictd``); reference: the TD fixed point of the
               context (approximate)
    recall_predict.py  paper 4's recall-predict task (well-posed variant); reference: the recall band's predictor
               (``memlab.recall.band``, approximate)
    mqar.py    Zoology's multi-query associative recall; reference: exact lookup
    tasks.py   the tasks by name (``register_task`` adds one)
    layers.py  the sequence layers by name, one interface (``register_layer`` adds one)
    logit_layers.py  paper 1's LOF and ALF as trainable layers
    model.py   the one model every layer runs in: embed -> pre-norm blocks -> head
    train.py   make_train(...) -> train(key); score a model beside the reference and trivial predictors; compare two
    compiled.py  compiled solutions: the steady-state Kalman predictor as an LRU, the ALF, the exact filter with
                 actions, theta* as softmax attention, attention as exact lookup

Experiments, in ``experiments/``: ``arena.leaderboard``, ``arena.compiled``, ``arena.scaling``. The arena sits above
the four paper studies: it uses their public references, and no study imports it.
"""

from memlab.arena.compiled import Compiled, compiled_model
from memlab.arena.hmm import HMMTask, mess3, random_hmm, ringworld, two_state
from memlab.arena.layers import LAYERS, LayerSpec, make_layer, register_layer, state_size
from memlab.arena.lgssm import LGSSMTask, random_lgssm
from memlab.arena.model import SequenceModel, parameter_count
from memlab.arena.mqar import MQARTask
from memlab.arena.policy import PolicyEvalTask, value_losses
from memlab.arena.policy_posterior import posterior_predictor
from memlab.arena.recall_predict import RecallPredictTask
from memlab.arena.switching import SwitchingLGSSMTask, exact_predictive_mean, random_switching_lgssm
from memlab.arena.task import (
    Batch,
    Task,
    categorical_kl,
    cross_entropy,
    masked_mean,
    normalised_gap,
    reference_is_exact,
    squared_error,
)
from memlab.arena.tasks import TASKS, TaskSpec, make_task, register_task
from memlab.arena.train import (
    Baselines,
    Comparison,
    Scores,
    TrainConfig,
    TrainResult,
    baselines,
    compare,
    make_model,
    make_train,
    score,
)

__all__ = ["LAYERS", "TASKS", "Baselines", "Batch", "Comparison", "Compiled", "HMMTask", "LGSSMTask", "LayerSpec",
           "MQARTask", "PolicyEvalTask", "RecallPredictTask", "Scores", "SequenceModel", "SwitchingLGSSMTask", "Task",
           "TaskSpec", "TrainConfig", "TrainResult", "baselines", "categorical_kl", "compare", "compiled_model",
           "cross_entropy", "exact_predictive_mean", "make_layer", "make_model", "make_task", "make_train",
           "masked_mean", "mess3", "normalised_gap", "parameter_count", "posterior_predictor", "random_hmm",
           "random_lgssm", "random_switching_lgssm", "reference_is_exact", "register_layer", "register_task",
           "ringworld", "score", "squared_error", "state_size", "two_state", "value_losses"]

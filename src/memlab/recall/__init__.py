"""recall study (paper: mamba-measure-valued-recall.md): Mamba (S6) as measure-valued associative memory.

task.py       the recall-predict task (Def. 3.1), the synthetic instance of App. A.1 and a well-posed (linear) target,
              baseline risks
band.py       the achievable band: float64 predictors that see the recalled pmf or a length-T context of it
encoding.py   query insertion (section 4.1)
students.py   the Mamba students (A.1 one-block, section 4.4 two-layer) and the softmax-attention comparator
train.py      training as A.1/A.4 (or on an equal step budget): make_train(config) -> train(key, train_set, val_set)
runs.py       students by name, one training cell (seeds vmapped) with caller-given keys, model (de)serialisation
rate.py       the rate fit log L(n) = A - C (log n)^{alpha/(alpha+1)} (App. A.2, eq. (1))
metrics.py    learning curves with their rate fits, the monotonicity rule, the coupling rate
limit.py      Prop. 4.2 / Assumption 4.1 on a trained student: Monte-Carlo F^(T), coupling distance, per-step bound
experiments/  the experiments (rate, sweep, compare, context) and the risk-vs-n grid the first three
              share, indexed in experiments/__init__.py
"""

from memlab.recall.band import AchievableBand, achievable_band, fit_predictor, predictor_risk
from memlab.recall.encoding import encode, token_dim
from memlab.recall.limit import coupling_distance, finite_context_values, per_step_bound
from memlab.recall.metrics import LearningCurve, coupling_rate, is_monotone, learning_curves
from memlab.recall.rate import RateFit, fit_rate, rate_axis
from memlab.recall.runs import (
    STUDENTS,
    TrainingRecord,
    deserialise,
    make_student,
    serialise,
    train_students,
    training_pools,
)
from memlab.recall.students import AttentionStudent, MambaStudent, num_params
from memlab.recall.task import (
    Batch,
    RecallTask,
    baseline_mse,
    baseline_predictions,
    check_tags,
    orthogonal_tags,
    sample,
    sample_context,
    scale_floor_mse,
    value_moments,
)
from memlab.recall.train import TrainConfig, TrainResult, make_train, mse, predictions

__all__ = [
    "STUDENTS",
    "AchievableBand",
    "AttentionStudent",
    "Batch",
    "LearningCurve",
    "MambaStudent",
    "RateFit",
    "RecallTask",
    "TrainConfig",
    "TrainResult",
    "TrainingRecord",
    "achievable_band",
    "baseline_mse",
    "baseline_predictions",
    "check_tags",
    "coupling_distance",
    "coupling_rate",
    "deserialise",
    "encode",
    "fit_rate",
    "finite_context_values",
    "fit_predictor",
    "is_monotone",
    "learning_curves",
    "make_student",
    "make_train",
    "mse",
    "num_params",
    "orthogonal_tags",
    "per_step_bound",
    "predictions",
    "predictor_risk",
    "rate_axis",
    "sample",
    "sample_context",
    "scale_floor_mse",
    "serialise",
    "token_dim",
    "train_students",
    "training_pools",
    "value_moments",
]

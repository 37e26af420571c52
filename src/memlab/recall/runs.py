"""The recall study's runs: the students by name (``STUDENTS``) and one training run of one, a student trained on n
examples of a task, several seeds in one call (the sweeps' cell).

Keys come from the caller (an experiment passes its named streams, ``run.key_for(...)``):

* ``val_key``: the validation set of a task, ``sample(val_key, num_val, task)``; one key per experiment, so the
  set is the same for every n and every student of a (task, seed) (A.1: "held-out examples generated with a
  different seed"). A cell builds it itself (:func:`curve_cell`): it is a pure function of (task, num_val, key),
  and drawing it costs less than one of the 30 validation passes of a paper-scale cell, while shipping it would
  pickle ~80 MB into every cell.
* ``pool_key``: seed s draws one pool of ``capacity`` training examples from ``fold_in(pool_key, s)`` and the run
  at size n trains on its first n: the training sets are nested (common random numbers along the learning
  curve), and one compiled ``train`` serves every n of an experiment.
* ``init_key``: split into the seeds' keys of ``train`` (initialisation and shuffling); one per n.
"""

from __future__ import annotations

import dataclasses
import functools
import io

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_choice, check_int
from memlab.progress import run_in_chunks
from memlab.recall.encoding import token_dim
from memlab.recall.students import AttentionStudent, MambaStudent
from memlab.recall.task import Batch, RecallTask, baseline_mse, baseline_predictions, sample
from memlab.recall.train import ChunkedTrain, TrainConfig, TrainResult, make_chunked_train, make_train
from memlab.store import cell

__all__ = ["STUDENTS", "TrainingRecord", "compiled_train", "curve_cell", "deserialise", "first_seed", "make_student",
           "serialise", "train_students", "training_pools"]

STUDENTS = {
    "mamba-1": "MLP -> S6 -> MLP (App. A.1)",
    "mamba-2": "Phi_3 o S6 o Phi_2 o S6 o Phi_1 (section 4.4, App. A.4)",
    "mamba-1-residual": "MLP -> S6 -> MLP, the S6 block in a pre-norm residual wrapper (public Mamba code)",
    "mamba-2-residual": "Phi_3 o S6 o Phi_2 o S6 o Phi_1, each S6 block in a pre-norm residual wrapper",
    "attention": "MLP -> softmax attention -> MLP (comparator, Kawata & Suzuki 2026)",
}


def make_student(kind: str, tag_dim: int, key: Array) -> eqx.Module:
    """The untrained student ``kind`` (a key of STUDENTS) for tags in R^{tag_dim}, at the paper's sizes."""
    check_choice("student", kind, STUDENTS)
    if kind == "attention":
        return AttentionStudent(token_dim(tag_dim), d_model=16, key=key)
    return MambaStudent(token_dim(tag_dim), num_blocks=int(kind.split("-")[1]), d_model=16, d_state=32, d_conv=4,
                        expand=2, residual=kind.endswith("-residual"), key=key)


@functools.cache
def compiled_train(kind: str, tag_dim: int, config: TrainConfig, callback=None):
    """``train(keys (S,), pools (S, capacity, ...), val_set, n) -> TrainResult`` with seed axis S; jitted once per
    callback (``train.make_train``'s, called once per seed and epoch).

    The seeds run one after another (``lax.map``), not vmapped: on a CPU a vmapped seed axis, even of size 1, makes
    the training step's backward pass several times slower (its per-token reductions over the batch gain an axis), and
    batching seeds buys nothing there.
    """
    train = make_train(config, lambda key: make_student(kind, tag_dim, key), callback)

    def seed_by_seed(keys: Array, pools: Batch, val_set: Batch, n: Array):
        static = None

        def one(seed):
            nonlocal static  # the model's non-array leaves (activations), the same for every seed
            arrays, static = eqx.partition(train(*seed, val_set, n), eqx.is_array)
            return arrays

        arrays = jax.lax.map(one, (keys, pools))
        return eqx.combine(arrays, static)

    return eqx.filter_jit(seed_by_seed)


@functools.cache
def chunked_train(kind: str, tag_dim: int, config: TrainConfig) -> ChunkedTrain:
    """``compiled_train(kind, tag_dim, config)`` in three jitted parts (``train.make_chunked_train``), each with
    arguments ``(keys (S,), pools (S, capacity, ...), val_set, n)`` after the loop state, the seeds one after
    another as there: what ``train_cell`` trains with, in chunks of epochs (the same numbers)."""
    parts = make_chunked_train(config, lambda key: make_student(kind, tag_dim, key))

    def start(keys, pools, val_set, n):
        return jax.lax.map(lambda seed: parts.start(*seed, val_set, n), (keys, pools))

    def run(loops, stop, keys, pools, val_set, n):
        return jax.lax.map(lambda seed: parts.run(seed[0], stop, *seed[1:], val_set, n), (loops, keys, pools))

    def result(loops, keys, pools, val_set, n):
        static = None

        def one(seed):
            nonlocal static  # the model's non-array leaves, as in compiled_train
            arrays, static = eqx.partition(parts.result(*seed, val_set, n), eqx.is_array)
            return arrays

        return eqx.combine(jax.lax.map(one, (loops, keys, pools)), static)

    return ChunkedTrain(*(eqx.filter_jit(f) for f in (start, run, result)))


def train_in_chunks(training: ChunkedTrain, epochs: int, *args) -> TrainResult:
    """``training`` (``chunked_train``) run in chunks of epochs (``progress.training_chunks``), reporting the epochs
    done and the seeds' mean validation and training MSE of the last between them (``progress.training_step``: only
    where a run shows its cells' progress)."""
    def report(loop, stop):
        val_mse, train_mse = (np.asarray(h[:, stop - 1]) for h in loop.history[:2])
        return stop, {"val mse": val_mse, "train mse": train_mse}

    loop = run_in_chunks(training.start(*args), lambda loop, stop: training.run(loop, stop, *args), epochs, report)
    return training.result(loop, *args)


def training_pools(task: RecallTask, capacity: int, num_seeds: int, pool_key: Array) -> Batch:
    """(num_seeds, capacity, ...) independent pools of training examples; seed s from ``fold_in(pool_key, s)``."""
    pools = [sample(jax.random.fold_in(pool_key, s), capacity, task) for s in range(num_seeds)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *pools)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingRecord:
    """``num_seeds`` students trained on n examples of a task (:func:`train_students`; the ``recall.curve`` cell's
    result). Lists are stored, and read back, as lists.

    alpha, T, target: the task's (``RecallTask``); n: training examples per seed; student: a key of ``STUDENTS``;
        num_val: validation examples.
    best_val_mse: (seeds,) each seed's best validation MSE; mse, mse_stderr: their mean and standard error over
        seeds (NaN with one seed); best_epoch: (seeds,) the epoch of each seed's best.
    val_curve, train_curve: (epochs,) validation MSE and training loss per epoch, mean over seeds.
    baseline_mean, baseline_tag_only: the exact risks of the mean and the tag-only predictor E[Y | q];
        val_baseline_mean, val_baseline_tag_only: the same predictors on the validation set.
    step_budget: the Adam steps the student was given (None: A.1's epochs); adam_steps: the steps it took.
    Records from before memlab kept the last four lack them: None.
    """

    alpha: float
    T: int
    n: int
    student: str
    num_val: int
    best_val_mse: list[float]
    mse: float
    mse_stderr: float
    best_epoch: list[int]
    val_curve: list[float]
    train_curve: list[float]
    baseline_mean: float
    baseline_tag_only: float
    val_baseline_mean: float | None = None
    val_baseline_tag_only: float | None = None
    target: str
    step_budget: int | None = None
    adam_steps: int | None = None


def train_students(task: RecallTask, n: int, kind: str, config: TrainConfig, val_set: Batch, num_seeds: int,
                   pool_key: Array, init_key: Array, capacity: int | None = None
                   ) -> tuple[TrainingRecord, eqx.Module]:
    """Train ``num_seeds`` students ``kind`` on the first n examples of each seed's pool of ``capacity`` (>= n,
    default n); returns (their record, the trained models with a leading seed axis). Not a cell itself: the
    models are no JSON; the cells that call it store the record (:func:`curve_cell`) or a model's bytes too."""
    check_int("num_seeds", num_seeds)
    capacity = n if capacity is None else capacity
    if not 1 <= n <= capacity:
        raise ValueError(f"need 1 <= n <= capacity; got n = {n}, capacity = {capacity}")
    training = chunked_train(kind, task.tag_array.shape[1], config)
    keys = jax.random.split(init_key, num_seeds)
    result = train_in_chunks(training, config.epochs, keys, training_pools(task, capacity, num_seeds, pool_key),
                             val_set, jnp.asarray(n, jnp.int32))
    best = np.asarray(result.best_val_mse, dtype=float)
    baselines = baseline_mse(task)
    on_val = {name: float(jnp.mean((val_set.y - predicted) ** 2))  # the same references on the validation set
              for name, predicted in baseline_predictions(val_set, task).items()}
    record = TrainingRecord(
        alpha=task.alpha, T=task.context_length, n=n, student=kind, num_val=int(val_set.y.shape[0]),
        best_val_mse=best.tolist(), mse=float(best.mean()),
        mse_stderr=float(best.std(ddof=1) / np.sqrt(num_seeds)) if num_seeds > 1 else float("nan"),
        best_epoch=np.asarray(result.best_epoch).tolist(),
        val_curve=np.asarray(result.val_mse, dtype=float).mean(0).tolist(),
        train_curve=np.asarray(result.train_loss, dtype=float).mean(0).tolist(),
        baseline_mean=baselines["mean"], baseline_tag_only=baselines["tag_only"],
        val_baseline_mean=on_val["mean"], val_baseline_tag_only=on_val["tag_only"],
        target=task.target, step_budget=config.steps, adam_steps=int(np.asarray(result.num_steps)[0]))
    return record, result.model


@cell("recall.curve", result=TrainingRecord)
def curve_cell(task: RecallTask, n: int, kind: str, config: TrainConfig, num_val: int, num_seeds: int,
               capacity: int, val_key: Array, pool_key: Array, init_key: Array) -> TrainingRecord:
    """One point of a learning curve, as a sweep cell: draws the validation set, trains, returns the record."""
    val_set = sample(val_key, num_val, task)
    return train_students(task, n, kind, config, val_set, num_seeds, pool_key, init_key, capacity)[0]


def first_seed(models: eqx.Module) -> eqx.Module:
    """The model of seed 0 from models with a leading seed axis (what ``train_students`` returns)."""
    return jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, models)


def serialise(model: eqx.Module) -> bytes:
    """The model's leaves as bytes (``eqx.tree_serialise_leaves``): how a cell returns a trained model."""
    buf = io.BytesIO()
    eqx.tree_serialise_leaves(buf, model)
    return buf.getvalue()


def deserialise(data: bytes, kind: str, tag_dim: int) -> eqx.Module:
    """The student ``kind`` whose leaves ``serialise`` wrote (exact: float32 leaves round-trip bit for bit)."""
    return eqx.tree_deserialise_leaves(io.BytesIO(data), make_student(kind, tag_dim, jax.random.key(0)))


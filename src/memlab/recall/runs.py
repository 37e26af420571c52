"""One training cell of the recall experiments: a student trained on n examples of a task, several seeds vmapped.

Data keys (so every experiment draws its data the same way): the validation set of a (task, seed) is drawn
from ``fold_in(key(seed), 0)`` and is shared by every n and every student (A.1: "held-out examples generated
with a different seed"). Seed s draws one pool of ``capacity`` training examples from
``fold_in(fold_in(key(seed), 1), s)`` and the run at size n trains on its first n: the training sets are nested
(common random numbers along the learning curve), and one compiled ``train`` serves every n of an experiment.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.recall.encoding import token_dim
from memlab.recall.students import AttentionStudent, MambaStudent
from memlab.recall.task import Batch, RecallTask, baseline_mse, sample
from memlab.recall.train import TrainConfig, make_train

STUDENTS = {
    "mamba-1": "MLP -> S6 -> MLP (App. A.1)",
    "mamba-2": "Phi_3 o S6 o Phi_2 o S6 o Phi_1 (section 4.4, App. A.4)",
    "attention": "MLP -> softmax attention -> MLP (comparator, Kawata & Suzuki 2026)",
}


def make_student(kind: str, tag_dim: int, key: Array) -> eqx.Module:
    """The untrained student ``kind`` (a key of STUDENTS) for tags in R^{tag_dim}, at the paper's sizes."""
    if kind == "attention":
        return AttentionStudent(token_dim(tag_dim), d_model=16, key=key)
    if kind in ("mamba-1", "mamba-2"):
        return MambaStudent(token_dim(tag_dim), num_blocks=int(kind[-1]), d_model=16, d_state=32, d_conv=4,
                            expand=2, key=key)
    raise ValueError(f"unknown student {kind!r}; known: {', '.join(STUDENTS)}")


@functools.cache
def compiled_train(kind: str, tag_dim: int, config: TrainConfig):
    """``train(keys (S,), pools (S, capacity, ...), val_set, n) -> TrainResult`` with seed axis S; jitted once."""
    train = make_train(config, lambda key: make_student(kind, tag_dim, key))
    return eqx.filter_jit(eqx.filter_vmap(train, in_axes=(0, 0, None, None)))


def validation_set(task: RecallTask, num_val: int, seed: int) -> Batch:
    return sample(jax.random.fold_in(jax.random.key(seed), 0), num_val, task)


def training_pools(task: RecallTask, capacity: int, num_seeds: int, seed: int) -> Batch:
    """(num_seeds, capacity, ...) independent pools of training examples."""
    base = jax.random.fold_in(jax.random.key(seed), 1)
    pools = [sample(jax.random.fold_in(base, s), capacity, task) for s in range(num_seeds)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *pools)


def train_cell(task: RecallTask, n: int, kind: str, config: TrainConfig, val_set: Batch, num_seeds: int,
               seed: int, capacity: int | None = None) -> tuple[dict, eqx.Module]:
    """Train ``num_seeds`` students ``kind`` on the first n examples of each seed's pool of ``capacity`` (>= n,
    default n); returns (JSON-able record, the trained models with a leading seed axis)."""
    if not isinstance(num_seeds, int) or num_seeds < 1:
        raise ValueError(f"num_seeds must be a positive integer; got {num_seeds!r}")
    capacity = n if capacity is None else capacity
    if not 1 <= n <= capacity:
        raise ValueError(f"need 1 <= n <= capacity; got n = {n}, capacity = {capacity}")
    train = compiled_train(kind, task.tag_array.shape[1], config)
    keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), 10_000 + n), num_seeds)
    result = train(keys, training_pools(task, capacity, num_seeds, seed), val_set, jnp.asarray(n, jnp.int32))
    best = np.asarray(result.best_val_mse, dtype=float)
    baselines = baseline_mse(task)
    record = {
        "alpha": task.alpha, "T": task.context_length, "n": n, "student": kind, "num_val": int(val_set.y.shape[0]),
        "best_val_mse": best.tolist(), "mse": float(best.mean()),
        "mse_stderr": float(best.std(ddof=1) / np.sqrt(num_seeds)) if num_seeds > 1 else float("nan"),
        "best_epoch": np.asarray(result.best_epoch).tolist(),
        "val_curve": np.asarray(result.val_mse, dtype=float).mean(0).tolist(),
        "train_curve": np.asarray(result.train_mse, dtype=float).mean(0).tolist(),
        "baseline_mean": baselines["mean"], "baseline_tag_only": baselines["tag_only"],
    }
    return record, result.model

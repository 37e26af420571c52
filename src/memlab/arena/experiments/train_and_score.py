"""The leaderboard's cell: one layer trained on one task, every seed, scored on one held-out batch.

:func:`train_and_score` trains the seeds one after the other with one compiled program (in chunks that checkpoint,
under a time limit) and scores each by its normalised gap g = (L_model - L_ref) / (L_trivial - L_ref), also on longer
sequences, and against the task's compiled model where it has one. ``arena.leaderboard`` and ``arena.scaling`` sweep
it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from memlab import checkpoints
from memlab.arena.compiled import compiled_model
from memlab.arena.layers import state_size
from memlab.arena.model import parameter_count
from memlab.arena.task import Batch, masked_mean
from memlab.arena.tasks import make_task
from memlab.arena.train import (
    Baselines,
    Comparison,
    Scores,
    Target,
    TrainConfig,
    Training,
    TrainResult,
    TrainState,
    baselines,
    chunk_batches,
    compare_to,
    comparison_target,
    make_training,
    score,
    static_part,
)
from memlab.kept import KeptLast
from memlab.progress import training_chunks, training_step
from memlab.store import cell

__all__ = ["ScoredSeeds", "held_out_side", "score_seeds", "task_side", "train_and_score"]

NAN = float("nan")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScoredSeeds:
    """One layer trained on one task, every seed scored on the held-out batch (the result of
    :func:`train_and_score`; arrays are stored, and read back, as lists). The losses are means over the held-out
    steps; NaN where a record from before they were kept lacks them.

    gap: (seeds,) the normalised gap g = (L_model - L_ref) / (L_trivial - L_ref).
    model_loss, reference_loss, trivial_loss, distance_loss: (seeds,) L_model, L_ref, L_trivial and the mean distance
        from the reference's predictions (KL or squared error).
    eval_gap: (seeds, evaluations) the gap on the held-out batch during training, every ``eval_every`` steps.
    compiled_distance, gradient_cosine: (seeds,) against the task's compiled model (NaN without one).
    longer_gap: (multiples, seeds) the gap on sequences ``longer`` times as long (absent in older records).
    parameters: the model's number of parameters; state: its recurrent state size, all blocks.
    """

    gap: list[float]
    model_loss: list[float] | float = NAN
    reference_loss: list[float] | float = NAN
    trivial_loss: list[float] | float = NAN
    distance_loss: list[float] | float = NAN
    eval_gap: list[list[float]]
    compiled_distance: list[float]
    gradient_cosine: list[float]
    longer_gap: list[list[float]] = ()
    parameters: int
    state: int


@cell("arena.train-and-score", unkeyed=("checkpoint",), result=ScoredSeeds)
def train_and_score(task: str, layer: str, width: int, depth: int, train: TrainConfig, keys, test_key,
                    test_batch: int, longer: tuple[int, ...] = (), code: str = "", checkpoint: str | None = None
                    ) -> ScoredSeeds:
    """Train one model per key and score each on one held-out batch (and on batches ``longer`` times as long).
    ``code``: the fingerprints of a user's layer and task files (part of the cell's key only); ``checkpoint``: a
    path to save the training state to after every ``eval_every`` steps and resume from (not part of the key)."""
    spec = make_task(task)
    side = task_side(task, code, test_key, test_batch, train.length, tuple(longer))
    test, base, target = side.test, side.base, side.target
    static = static_part(spec, layer, width, depth, keys[0])
    result = _train_seeds(spec, layer, width, depth, train, keys, test, static, checkpoint)
    scores, to_compiled = score_seeds(spec, static, result.params, test, base, target)
    if to_compiled is None:
        to_compiled = Comparison(*np.full((2, len(keys)), np.nan))
    longer_gaps = [score_seeds(spec, static, result.params, long_test, long_base)[0].gap
                   for long_test, long_base in side.longer]
    reference, trivial = (float(masked_mean(x, test.mask)) for x in (base.reference, base.trivial))
    per_seed = {f"{n}_loss": np.nanmean(getattr(scores, n), -1) for n in ("model", "reference", "trivial", "distance")}
    return ScoredSeeds(gap=np.asarray(scores.gap), **per_seed,
                       eval_gap=(np.asarray(result.val_loss) - reference) / (trivial - reference),
                       compiled_distance=np.asarray(to_compiled.distance),
                       gradient_cosine=np.asarray(to_compiled.gradient_cosine),
                       longer_gap=np.asarray(longer_gaps).reshape(len(longer), len(keys)),
                       parameters=parameter_count(eqx.combine(jax.tree.map(lambda a: a[0], result.params), static)),
                       state=state_size(layer, width, train.length) * depth)


class TaskSide(NamedTuple):
    """What a cell scores its models against, the same for every layer of the task: the held-out batch, its
    :class:`Baselines` and the compiled model's :class:`Target` (None without one), and for every multiple of
    ``longer`` its own held-out batch and baselines."""

    test: Batch
    base: Baselines
    target: Target | None
    longer: list[tuple[Batch, Baselines]]


_kept_side: KeptLast[TaskSide] = KeptLast()  # the last task side this process computed, by what it depends on


def task_side(task: str, code: str, test_key, test_batch: int, length: int, longer: tuple[int, ...]) -> TaskSide:
    """The task's side of a cell's scores (:class:`TaskSide`), kept for the next cell of this process: a sweep
    runs a task's layers one after the other, and computing it in each cell cost ~1 CPU-second there (the compiled
    model is a new closure in every cell, so its program was compiled again). ``code`` (a user's files'
    fingerprints) and the x64 setting (``KeptLast``) are part of what it depends on, as they are of the cell's key."""

    def compute() -> TaskSide:
        spec = make_task(task)
        test = spec.sample(test_key, test_batch, length)
        compiled = compiled_model(spec)
        base, target = held_out_side(spec, test, None if compiled is None else compiled.model)
        long_sides = []
        for multiple in longer:  # each its own held-out batch, the same for every layer of the task
            long_test = spec.sample(jax.random.fold_in(test_key, multiple), test_batch, multiple * length)
            long_sides.append((long_test, held_out_side(spec, long_test)[0]))
        return TaskSide(test, base, target, long_sides)

    key_data = tuple(np.asarray(jax.random.key_data(test_key)).ravel().tolist())
    return _kept_side.get((task, code, key_data, test_batch, length, tuple(longer)), compute)


class _Progress(NamedTuple):
    """A cell's training between chunks: every seed's state (stacked), the losses so far (seeds, chunks,
    eval_every) and held-out losses (seeds, chunks), zero where not yet run, and the number of chunks ``done``."""

    state: TrainState
    losses: np.ndarray
    eval_loss: np.ndarray
    done: np.ndarray


def _train_seeds(spec, layer: str, width: int, depth: int, config: TrainConfig, keys, test, static,
                 checkpoint: str | None) -> TrainResult:
    """Every seed trained (a stacked :class:`TrainResult`), a chunk of ``eval_every`` steps per call of one compiled
    program; with a ``checkpoint`` the progress is saved after each chunk and resumed from, and under a time limit
    (``memlab.deadline``) training stops, saved, before a chunk that would not finish in time.

    The program takes every array as an argument (the held-out batch baked in as constants cost XLA seconds of
    constant folding) and runs the seeds one after the other: vmapping them doubled the compile time and ran no
    faster per seed on the 2-core CPU. What the program does not hold, because it would be compiled again in every
    cell of the task: the models' initialisation (:func:`_initial_states`) and the drawing of the training batches
    (:func:`_chunk_batches`, one program per task, which every layer's cell reuses)."""
    run = jax.jit(lambda state, batches, held_out: jax.lax.map(
        lambda a: make_training(spec, layer, width, depth, config, held_out, static).run_on(*a), (state, batches)))
    state, chunk_keys = _initial_states(make_training(spec, layer, width, depth, config, None, static), keys)
    seeds, chunks = chunk_keys.shape[:2]
    progress = _Progress(state, np.zeros((seeds, chunks, config.eval_every), np.float32),
                         np.zeros((seeds, chunks), np.float32), np.int32(0))
    identity = json.dumps({"task": spec.name, "layer": layer, "width": width, "depth": depth,
                           "config": dataclasses.asdict(config), "keys": jax.random.key_data(keys).tolist()})
    with checkpoints.owned(checkpoint) if checkpoint else contextlib.nullcontext() as path:
        if path is not None and path.exists():
            progress = checkpoints.load_checkpoint(path, progress, identity)[0]
        # under a time limit no chunk starts that would overrun (by the last one's wall time): OutOfTime there
        # leaves the last checkpoint to resume from
        for done, _ in training_chunks(int(progress.done), chunks, 1, time_limit=path is not None):
            batches = _chunk_batches(spec, config, chunk_keys[:, done:done + 1])
            state, (losses, eval_loss) = run(progress.state, batches, test)
            progress = _Progress(state, progress.losses.copy(), progress.eval_loss.copy(), np.int32(done + 1))
            progress.losses[:, done], progress.eval_loss[:, done] = losses[:, 0], eval_loss[:, 0]
            if path is not None:
                checkpoints.save_checkpoint(path, progress, {}, identity)
            training_step((done + 1) * config.eval_every, config.steps,
                          {"loss": losses[:, 0, -1], "held-out loss": eval_loss[:, 0]})  # memlab.progress
    return TrainResult(progress.state.params, progress.losses.reshape(seeds, -1), progress.eval_loss)


@eqx.filter_jit
def _chunk_batches(spec, config: TrainConfig, chunk_keys) -> Batch:
    """:func:`chunk_batches` of every key of ``chunk_keys`` (seeds, chunks): leading axes (seeds, chunks,
    eval_every). Compiled once per task and sizes, the same program for every layer's cell. It holds one chunk's
    batches of every seed at once (the largest, mqar's one-hot inputs at the paper profile's sizes: 0.8 GB)."""
    return jax.vmap(jax.vmap(lambda k: chunk_batches(spec, config, k)))(chunk_keys)


def _initial_states(training: Training, keys) -> tuple[TrainState, jax.Array]:
    """``training.init`` of every key, stacked, computed op by op rather than compiled. A model's initialisation is
    mostly random draws, and a compiled program holds a copy of the random generator's rounds for every weight it
    draws: compiled into each cell's program it took 1.0-1.6 CPU-seconds per cell at the quick sizes, while op by op
    each draw is a small program JAX compiles once per shape and reuses in every later cell of the process
    (the quick leaderboard's 54 cells share most of their shapes)."""
    return jax.tree.map(lambda *a: jnp.stack(a), *(training.init(k) for k in keys))


@eqx.filter_jit
def held_out_side(spec, test, compiled=None) -> tuple[Baselines, Target | None]:
    """The task's baselines on ``test`` and, given the task's compiled model, its :func:`comparison_target`."""
    return baselines(spec, test), None if compiled is None else comparison_target(spec, compiled, test)


@eqx.filter_jit
def score_seeds(spec, static, params, test, base, target=None) -> tuple[Scores, Comparison | None]:
    """Every seed's :func:`score` (``params`` stacked over seeds) and, given the compiled model's ``target``, every
    seed's :func:`compare_to` with it; one seed after the other (the memory of one seed's scoring)."""
    def one_seed(p):
        model = eqx.combine(p, static)
        return score(spec, model, test, base), None if target is None else compare_to(spec, model, target, test)

    return jax.lax.map(one_seed, params)

"""``arena.mqar-zoology``'s cell: one layer trained on MQAR as Zoology trains it, scored by its accuracy at the query
positions (what Zoology reports) beside the normalised gap g.

Zoology's recipe (``zoology/train.py`` and ``zoology/config.py`` of HazyResearch/zoology at d88d6f5): AdamW with
weight decay 0.1 on every parameter, no gradient clipping, the learning rate decayed by a cosine to 0 over the run
with no warm-up; held-out accuracy after every epoch, training stopped once it exceeds 0.99. Here the cosine runs
over Adam steps (Zoology steps it once per epoch), the held-out accuracy is taken every ``eval_every`` steps, and
every step draws a fresh batch (Zoology cycles a fixed set of 100,000 sequences).

The model is the arena's ``SequenceModel`` at the task's sizes, run by a cheaper program with the same numbers: the
one-hot embedding as a row lookup (a one-hot of 8,192 tokens times the embedding matrix is a lookup), and the head
only at the K query positions, the only ones scored (tested equal to the model's own outputs there).
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
import optax
from jax import Array

from memlab import checkpoints
from memlab.arena.layers import state_size
from memlab.arena.model import SequenceModel, parameter_count
from memlab.arena.mqar import MQARTask
from memlab.arena.train import SCORING_CHUNK, TrainConfig, static_part
from memlab.checks import check_real
from memlab.layers import apply_linear
from memlab.progress import training_chunks, training_step
from memlab.store import cell

__all__ = ["MQARAccuracy", "ZoologyTraining", "mqar_accuracy", "query_logits"]


@dataclasses.dataclass(frozen=True)
class ZoologyTraining:
    """``steps`` AdamW steps (peak ``learning_rate``, ``weight_decay``, cosine decay to 0) on batches of ``batch``
    fresh sequences of ``length`` tokens; every ``eval_every`` steps the held-out accuracy, training stopped once it
    exceeds ``stop_at`` (Zoology's early stopping; 1.0 never stops)."""

    steps: int = 12_500
    batch: int = 512
    length: int = 64
    learning_rate: float = 1e-3
    weight_decay: float = 0.1
    eval_every: int = 250
    stop_at: float = 0.99

    def validate(self) -> None:
        TrainConfig(self.steps, self.batch, self.length, self.learning_rate, eval_every=self.eval_every).validate()
        check_real("weight_decay", self.weight_decay, 0.0)
        check_real("stop_at", self.stop_at, 0.0, 1.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MQARAccuracy:
    """One layer at one learning rate, every seed scored on one held-out batch.

    accuracy, gap: (seeds,) held-out accuracy at the query positions (argmax over the values = the stored value) and
        g = L_model / log(V/2) (the reference's loss is 0, the trivial one's log(V/2)), when training ended.
    steps: (seeds,) the Adam steps trained (fewer than asked where the accuracy passed ``stop_at``).
    eval_accuracy, eval_gap: (seeds, evaluations) both every ``eval_every`` steps; NaN after a run stopped.
    parameters: the model's number of parameters; state: its recurrent state size, all blocks.
    """

    accuracy: list[float]
    gap: list[float]
    steps: list[int]
    eval_accuracy: list[list[float]]
    eval_gap: list[list[float]]
    parameters: int
    state: int


class Queries(NamedTuple):
    """B sequences' tokens (B, L) int, and at their K query positions ``where`` (B, K) the stored value class
    ``answers`` (B, K)."""

    tokens: Array
    where: Array
    answers: Array


def queries(task: MQARTask, key: Array, batch: int, length: int) -> Queries:
    """``batch`` MQAR sequences as :class:`Queries` (the one-hot inputs are never made)."""
    b = task.sample(key, batch, length)
    where = jax.vmap(lambda m: jnp.nonzero(m, size=task.num_pairs)[0])(b.mask)  # each sequence has K queries
    return Queries(b.aux, where, jnp.take_along_axis(b.targets, where, 1))


def query_logits(model: SequenceModel, tokens: Array, where: Array) -> Array:
    """``model``'s logits (K, V/2) at positions ``where`` (K,) of one sequence of ``tokens`` (L,): the model's own
    outputs there (``model(one_hot(tokens))[where]``), the embedding a row lookup and the head only where asked."""
    h = model.embed.weight.T[tokens] + model.embed.bias  # (L, width) = one_hot(tokens) @ W.T + b
    for block in model.blocks:
        h = block(h)
    return apply_linear(model.head, jax.vmap(model.norm)(h[where]))


def _scores(model: SequenceModel, q: Queries) -> tuple[Array, Array]:
    """(B, K) cross-entropy and correctness at every query of ``q``."""
    logits = jax.vmap(lambda t, w: query_logits(model, t, w))(q.tokens, q.where)
    loss = -jnp.take_along_axis(jax.nn.log_softmax(logits), q.answers[..., None], -1)[..., 0]
    return loss, jnp.argmax(logits, -1) == q.answers


def held_out(model: SequenceModel, q: Queries) -> tuple[Array, Array]:
    """Mean loss and accuracy over every query of the held-out ``q``, :data:`SCORING_CHUNK` sequences at a time."""
    loss, right = jax.lax.map(lambda s: _scores(model, jax.tree.map(lambda a: a[None], s)), q,
                              batch_size=SCORING_CHUNK)
    return jnp.mean(loss), jnp.mean(right)


class _Progress(NamedTuple):
    """A cell's training between chunks: the current seed's params and AdamW state, the held-out loss and accuracy
    of every seed (seeds, evaluations; NaN where not run), the steps each seed trained, and where it stands (the seed
    being trained, chunks done of it)."""

    params: eqx.Module
    opt_state: optax.OptState
    eval_loss: np.ndarray
    eval_accuracy: np.ndarray
    steps: np.ndarray
    seed: np.ndarray
    done: np.ndarray


def _programs(task: MQARTask, layer: str, width: int, depth: int, train: ZoologyTraining, static):
    """``init(key) -> (params, opt_state)`` and the jitted ``chunk(params, opt_state, key, test)``: ``eval_every``
    AdamW steps, then the held-out loss and accuracy."""
    optimizer = optax.adamw(optax.cosine_decay_schedule(train.learning_rate, train.steps),
                            weight_decay=train.weight_decay)

    def init(key):
        params = eqx.filter(SequenceModel(layer, task.input_size, task.output_size, width, depth, key=key),
                            eqx.is_inexact_array)
        return params, optimizer.init(params)

    def step(carry, k):
        params, opt_state = carry
        q = queries(task, k, train.batch, train.length)
        loss, grads = jax.value_and_grad(lambda p: jnp.mean(_scores(eqx.combine(p, static), q)[0]))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    def chunk(params, opt_state, key, test):
        (params, opt_state), _ = jax.lax.scan(step, (params, opt_state), jax.random.split(key, train.eval_every))
        return params, opt_state, held_out(eqx.combine(params, static), test)

    return jax.jit(init), jax.jit(chunk)


@cell("arena.mqar-accuracy", unkeyed=("checkpoint",), result=MQARAccuracy)
def mqar_accuracy(layer: str, vocab_size: int, num_pairs: int, width: int, depth: int, train: ZoologyTraining, keys,
                  test_key, test_batch: int, checkpoint: str | None = None) -> MQARAccuracy:
    """Train one model of ``layer`` per key on MQAR (``vocab_size``, ``num_pairs``) with Zoology's recipe (module
    docstring), the seeds one after the other, and score each on one held-out batch; ``checkpoint``: a path saved
    after every chunk and resumed from (not part of the key), under a time limit stopping before a chunk that would
    not finish in time."""
    train.validate()
    task = MQARTask(vocab_size=vocab_size, num_pairs=num_pairs)
    test = queries(task, test_key, test_batch, train.length)
    init, chunk = _programs(task, layer, width, depth, train, static_part(task, layer, width, depth))
    chunks, seeds = train.steps // train.eval_every, len(keys)
    nan = np.full((seeds, chunks), np.nan, np.float32)
    progress = _Progress(*init(keys[0]), nan, nan.copy(), np.zeros(seeds, np.int32), np.int32(0), np.int32(0))
    identity = json.dumps({"layer": layer, "vocab": vocab_size, "pairs": num_pairs, "width": width, "depth": depth,
                           "train": dataclasses.asdict(train), "keys": jax.random.key_data(keys).tolist()})
    with checkpoints.owned(checkpoint) if checkpoint else contextlib.nullcontext() as path:
        if path is not None and path.exists():
            progress = checkpoints.load_checkpoint(path, progress, identity)[0]
        for s in range(int(progress.seed), seeds):
            if int(progress.done) == 0:  # a seed not yet started (its initialisation depends on its key alone)
                progress = progress._replace(**dict(zip(("params", "opt_state"), init(keys[s]), strict=True)))
            chunk_keys = jax.random.split(jax.random.fold_in(keys[s], 1), chunks)
            for done, _ in training_chunks(int(progress.done), chunks, 1, time_limit=path is not None):
                params, opt_state, (loss, accuracy) = chunk(progress.params, progress.opt_state, chunk_keys[done], test)
                progress = _after_chunk(progress, s, done, float(loss), float(accuracy), train, chunks)
                progress = progress._replace(params=params, opt_state=opt_state)
                if path is not None:
                    checkpoints.save_checkpoint(path, progress, {}, identity)
                training_step(int(progress.steps[s]), train.steps, {"held-out accuracy": float(accuracy)})
                if int(progress.done) == 0:  # this seed has stopped
                    break
    last, rows = progress.steps // train.eval_every - 1, np.arange(seeds)
    gap = progress.eval_loss / np.log(task.output_size)
    return MQARAccuracy(accuracy=progress.eval_accuracy[rows, last], gap=gap[rows, last], steps=progress.steps,
                        eval_accuracy=progress.eval_accuracy, eval_gap=gap, parameters=parameter_count(progress.params),
                        state=state_size(layer, width, train.length) * depth)


def _after_chunk(progress: _Progress, s: int, done: int, loss: float, accuracy: float, train: ZoologyTraining,
                 chunks: int) -> _Progress:
    """``progress`` with seed ``s``'s chunk ``done`` recorded; moved on to the next seed (done 0) if that was its
    last chunk or its accuracy passed ``train.stop_at``."""
    eval_loss, eval_accuracy, steps = progress.eval_loss.copy(), progress.eval_accuracy.copy(), progress.steps.copy()
    eval_loss[s, done], eval_accuracy[s, done], steps[s] = loss, accuracy, (done + 1) * train.eval_every
    stop = done + 1 == chunks or accuracy > train.stop_at
    return progress._replace(eval_loss=eval_loss, eval_accuracy=eval_accuracy, steps=steps,
                             seed=np.int32(s + 1 if stop else s), done=np.int32(0 if stop else done + 1))

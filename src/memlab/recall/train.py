"""Training of a recall student as App. A.1 / A.4, in the PureJaxRL style.

``make_train(config, make_model)`` returns one pure, jittable ``train(key, train_set, val_set)``: the whole run
(every epoch: a shuffled pass of Adam steps, then the validation MSE) is one ``lax.scan``, so it can be jitted once
and vmapped over seeds (``jax.vmap(train, in_axes=(0, 0, None))`` with one training set per seed).
``make_chunked_train`` is the same run in parts, its epochs in chunks of one compiled program, so that a cell
reports its epochs between them (``runs.train_in_chunks``, ``memlab.progress``): the same numbers.

A.1 / A.4: Adam at 2e-3 decayed by 0.95 per epoch, batch min(16, n), global-norm clipping at 1.0, 30 (A.1) or 120
(A.4) epochs, the lowest validation MSE (early stopping). Choices the paper leaves open: the last partial batch of an
epoch is dropped; ``TrainConfig.steps`` gives every n the same number of Adam steps (not in the paper; see
docs/studies/recall.md, "Training").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax import Array

from memlab.checks import check_int, check_real
from memlab.devices import over_devices
from memlab.recall.encoding import encode
from memlab.recall.task import Batch

EVAL_TOKENS = 12_000  # tokens per validation chunk (``default_chunk``)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    epochs: int = 30  # A.1 (A.4: 120)
    learning_rate: float = 2e-3
    decay: float = 0.95  # per epoch
    batch_size: int = 16  # the batch is min(batch_size, n)
    clip_norm: float = 1.0
    eval_chunk: int | None = None  # validation examples per chunk; None: ``default_chunk(T)`` (speed, not results)
    steps: int | None = None  # equal step budget: Adam steps at every n, in ``epochs`` rounds; None: A.1's epochs

    def __post_init__(self):
        for name in ("epochs", "batch_size"):
            check_int(name, getattr(self, name))
        if self.steps is not None and check_int("steps", self.steps) % self.epochs:
            raise ValueError(f"steps must be a multiple of epochs (the rounds of a step budget have equal length); "
                             f"got steps = {self.steps}, epochs = {self.epochs}")
        if self.eval_chunk is not None:
            check_int("eval_chunk", self.eval_chunk)
        for name in ("learning_rate", "clip_norm"):
            check_real(name, getattr(self, name), 0.0, open_low=True)
        check_real("decay", self.decay, 0.0, 1.0, open_low=True)


class TrainResult(NamedTuple):
    best_val_mse: Array  # ()
    best_epoch: Array  # () int, 0-based
    val_mse: Array  # (epochs,) after each epoch
    train_loss: Array  # (epochs,) mean minibatch loss (squared error) of each epoch
    model: eqx.Module  # the model at the best epoch
    num_steps: Array  # () int: optimiser updates applied


def default_chunk(context_length: int) -> int:
    """Default validation chunk: about EVAL_TOKENS tokens, so a chunk's (T+2, chunk, ...) intermediates stay in
    cache (T = 5000: chunks of 2, T = 500: chunks of 23; with ``outputs`` the validation pass runs faster than in the
    batch-major chunks of 100 these replaced)."""
    return max(1, EVAL_TOKENS // (context_length + 2))


def outputs(model: eqx.Module, query: Array, context_tags: Array, context_content: Array) -> Array:
    """Student outputs (B,) for B examples: query (B, d_1), context_tags (B, T, d_1), context_content (B, T).

    Time-major: the encoded sequences are laid out (T+2, B, d_in) and the model is vmapped over their axis 1,
    so a scan steps through contiguous (B, ...) slices and no batch-major intermediate is transposed.
    """
    sequences = jax.vmap(encode, out_axes=1)(query, context_tags, context_content)  # (T+2, B, d_in)
    return jax.vmap(model, in_axes=1)(sequences)


def predictions(model: eqx.Module, data: Batch, chunk: int | None = None) -> Array:
    """Student outputs (n,) for every example of ``data``, ``chunk`` examples at a time (default
    ``default_chunk(T)``), the examples split over this process's CPU devices (``devices.over_devices``); the
    chunk size and the device count change speed and memory, not the outputs."""
    chunk = default_chunk(data.context_content.shape[1]) if chunk is None else chunk

    def chunked(*examples):
        n = examples[0].shape[0]
        size = min(n, chunk)
        whole = n // size * size  # examples in whole chunks; the rest form one smaller chunk
        chunks = jax.tree.map(lambda x: x[:whole].reshape((-1, size) + x.shape[1:]), examples)
        out = jax.lax.map(lambda ex: outputs(model, *ex), chunks).reshape(-1)
        if whole == n:
            return out
        return jnp.concatenate([out, outputs(model, *(x[whole:] for x in examples))])

    return over_devices(chunked, data.query, data.context_tags, data.context_content)


def mse(model: eqx.Module, data: Batch, chunk: int | None = None) -> Array:
    """Mean squared error against the noisy targets ``data.y`` (what A.1 reports)."""
    return jnp.mean((predictions(model, data, chunk) - data.y) ** 2)


def make_train(config: TrainConfig, make_model: Callable[[Array], eqx.Module], callback=None, *,
               optimizer: optax.GradientTransformation | None = None):
    """``train(key, train_set, val_set, num_train=None) -> TrainResult``; ``make_model(key)`` builds the student.
    ``callback(epoch, {"val mse", "train mse"})``: on the host after every epoch (``jax.debug.callback``; see
    ``memlab.progress`` for what a callback costs). Default None: silent, and the program compiled without it.
    ``optimizer``: the direction of every step, which the epoch's learning rate ``config.learning_rate`` x
    ``config.decay`` ** epoch scales (A.1's decay, so a transformation without a learning rate of its own, e.g.
    ``optax.scale_by_lion()``, or ``optax.identity()`` for SGD); default A.1's global-norm clipping at
    ``config.clip_norm`` then Adam's scaling.

    Only the first ``num_train`` examples of ``train_set`` are used (default: all). ``num_train`` may be traced,
    so one compiled ``train`` serves every n up to the size of ``train_set``: an epoch is a fixed scan over
    ceil(capacity / batch) slots of ``batch`` examples, of which the first n // batch (one for n < batch)
    carry the shuffled valid examples and the rest are skipped (``lax.cond``: no gradient, no Adam step), and
    padding examples get weight zero. The effect is exactly the n-example run with batch min(16, n).
    With ``config.steps`` a round is a scan over steps / epochs slots, all active, whatever n (module doc).
    """

    def train(key: Array, train_set: Batch, val_set: Batch, num_train=None) -> TrainResult:
        epoch, init, static = make_epoch(config, make_model, optimizer, callback, key, train_set, val_set, num_train)
        (_, _, best_p, best_mse, best_epoch), (val_curve, train_curve, steps) = jax.lax.scan(
            epoch, init, jnp.arange(config.epochs))
        return TrainResult(best_mse, best_epoch, val_curve, train_curve, eqx.combine(best_p, static), jnp.sum(steps))

    return train


def make_epoch(config: TrainConfig, make_model, optimizer, callback, key, train_set: Batch, val_set: Batch,
              num_train):
    """(epoch, carry, static) of ``make_train``'s run: ``epoch(carry, index) -> (carry, (val mse, train mse,
    steps))``, the carry before the first epoch and the model's static part."""
    capacity = train_set.y.shape[0]
    slot = min(config.batch_size, capacity)  # static batch shape
    num_slots = -(-capacity // slot)
    n = jnp.asarray(capacity if num_train is None else num_train)
    batch = jnp.minimum(config.batch_size, n)  # the batch of the n-example run
    steps_per_epoch = jnp.maximum(n // batch, 1)
    k_model, k_epochs = jax.random.split(key)
    # pass p over the data is shuffled by pass_keys[p] (one pass per epoch without a step budget)
    pass_keys = jax.random.split(k_epochs, config.epochs if config.steps is None else config.steps)
    params, static = eqx.partition(make_model(k_model), eqx.is_inexact_array)
    optimiser = optax.chain(optax.clip_by_global_norm(config.clip_norm), optax.scale_by_adam()) \
        if optimizer is None else optimizer

    def loss(p, idx, weight):
        model = eqx.combine(p, static)
        prediction = outputs(model, train_set.query[idx], train_set.context_tags[idx],
                             train_set.context_content[idx])
        err = (prediction - train_set.y[idx]) ** 2
        return jnp.sum(weight * err) / jnp.sum(weight)

    def step(carry, inputs):
        p, opt_state, lr = carry
        idx, weight, active = inputs

        def update(p, opt_state):
            value, grads = jax.value_and_grad(loss)(p, idx, weight)
            updates, opt_state = optimiser.update(grads, opt_state, p)
            return optax.apply_updates(p, jax.tree.map(lambda u: -lr * u, updates)), opt_state, value

        p, opt_state, value = jax.lax.cond(active, update, lambda p, o: (p, o, jnp.zeros(())), p, opt_state)
        return (p, opt_state, lr), value

    def order(k):  # a random order of the n valid examples first, padding after
        return jnp.argsort(jnp.where(jnp.arange(capacity) < n, jax.random.uniform(k, (capacity,)), 2.0))

    def epoch_batches(index):  # A.1: pass ``index``; slot s takes positions s*batch ... of its order
        position = jnp.arange(num_slots)[:, None] * batch + jnp.arange(slot)[None, :]  # < num_slots * slot
        active = jnp.arange(num_slots) < steps_per_epoch
        in_batch = jnp.arange(slot)[None, :] < batch
        idx = jnp.pad(order(pass_keys[index]), (0, num_slots * slot - capacity))[position]
        return idx, (in_batch & active[:, None]).astype(jnp.float32), active

    def budget_batches(index):  # step budget: round ``index`` takes global steps g = index * per_round + s
        per_round = config.steps // config.epochs
        g = index * per_round + jnp.arange(per_round)
        within = g % steps_per_epoch  # step within pass g // steps_per_epoch
        position = jnp.minimum(within[:, None] * batch + jnp.arange(slot)[None, :], capacity - 1)
        idx = jnp.take_along_axis(jax.vmap(order)(pass_keys[g // steps_per_epoch]), position, axis=1)
        weight = jnp.broadcast_to(jnp.arange(slot)[None, :] < batch, idx.shape).astype(jnp.float32)
        return idx, weight, jnp.ones(per_round, bool)

    def epoch(carry, index):
        p, opt_state, best_p, best_mse, best_epoch = carry
        idx, weight, active = (epoch_batches if config.steps is None else budget_batches)(index)
        lr = config.learning_rate * config.decay ** index.astype(jnp.float32)  # staircase decay per epoch
        (p, opt_state, _), losses = jax.lax.scan(step, (p, opt_state, lr), (idx, weight, active))
        val = mse(eqx.combine(p, static), val_set, config.eval_chunk)
        better = val < best_mse
        best_p = jax.tree.map(lambda new, old: jnp.where(better, new, old), p, best_p)
        carry = (p, opt_state, best_p, jnp.minimum(val, best_mse), jnp.where(better, index, best_epoch))
        train_mse = jnp.sum(losses) / jnp.sum(active)
        if callback is not None:
            jax.debug.callback(callback, index + 1, {"val mse": val, "train mse": train_mse})
        return carry, (val, train_mse, jnp.sum(active))

    init = (params, optimiser.init(params), params, jnp.asarray(jnp.inf), jnp.asarray(0))
    return epoch, init, static


class EpochLoop(NamedTuple):
    """The epoch loop between chunks (``make_chunked_train``): ``index`` () epochs run, the loop's ``carry`` (model,
    Adam state, best model, best validation MSE, best epoch) and the ``history`` (val mse, train mse, steps), each
    (epochs,), zero where no epoch ran yet."""

    index: Array
    carry: tuple
    history: tuple


class ChunkedTrain(NamedTuple):
    """``make_train``'s run in three parts, so that its epochs run in chunks of one compiled program; ``args`` =
    (key, train_set, val_set, num_train) as ``train`` takes them."""

    start: Callable  # (*args) -> EpochLoop before the first epoch
    run: Callable  # (loop, stop, *args) -> EpochLoop: its epochs up to ``stop`` (an int array)
    result: Callable  # (loop, *args) -> TrainResult


def make_chunked_train(config: TrainConfig, make_model: Callable[[Array], eqx.Module], *,
                       optimizer: optax.GradientTransformation | None = None) -> ChunkedTrain:
    """The parts of ``make_train(config, make_model, optimizer=optimizer)``'s ``train``: the same epochs, the same
    numbers (tests/recall/test_train.py holds them equal), and a caller that sees the run between chunks without a
    host callback in the program (``memlab.progress``)."""

    def parts(*args):
        return make_epoch(config, make_model, optimizer, None, *args)

    def start(*args) -> EpochLoop:
        epoch, init, _ = parts(*args)
        index = jnp.zeros((), jnp.arange(1).dtype)  # the dtype of the one program's scan over jnp.arange(epochs)
        shapes = jax.eval_shape(epoch, init, index)[1]
        return EpochLoop(index, init, jax.tree.map(lambda s: jnp.zeros((config.epochs, *s.shape), s.dtype), shapes))

    def run(loop: EpochLoop, stop, *args) -> EpochLoop:
        epoch = parts(*args)[0]

        def next_epoch(state):
            index, carry, history = state
            carry, outputs = epoch(carry, index)
            return index + 1, carry, jax.tree.map(lambda h, o: h.at[index].set(o), history, outputs)

        return EpochLoop(*jax.lax.while_loop(lambda state: state[0] < stop, next_epoch, tuple(loop)))

    def result(loop: EpochLoop, *args) -> TrainResult:
        (_, _, best_p, best_mse, best_epoch), (val_curve, train_curve, steps) = loop.carry, loop.history
        return TrainResult(best_mse, best_epoch, val_curve, train_curve, eqx.combine(best_p, parts(*args)[2]),
                           jnp.sum(steps))

    return ChunkedTrain(start, run, result)

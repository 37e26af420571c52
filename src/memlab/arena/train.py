"""Training and scoring one arena model: ``make_train(task, layer, ...) -> train(key)``, pure and jittable (and
vmappable over keys, for seeds), in the style of PureJaxRL.

Every step draws a fresh batch from the task (no data set, no overfitting), takes one Adam step (or one step of
the ``optimizer`` given) on the mean loss, and every ``eval_every`` steps scores the model on the caller's held-out
batch, so a run returns its budget curve (one held-out batch for every layer and seed of a task: their curves are
comparable, and the reference is computed once).
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

from memlab.arena.model import SequenceModel
from memlab.arena.task import Batch, Task, masked_mean, normalised_gap, per_step_mean
from memlab.checks import check_int, check_real
from memlab.files import added_field

__all__ = ["SCORING_CHUNK", "Baselines", "Comparison", "Scores", "Target", "TrainConfig", "TrainResult", "TrainState",
           "Training", "apply", "baselines", "chunk_batches", "compare", "compare_to", "comparison_target",
           "learning_rate_schedule", "make_model", "make_train", "make_training", "score", "static_part"]

# how many held-out sequences a model reads at once when it is scored: the memory of a scoring program is this many
# sequences' intermediates, whatever the batch (causal linear attention's parallel form holds (L, d, d) a sequence;
# scored on the paper profile's 1024 sequences all at once, with input gradients, it ran out of memory)
SCORING_CHUNK = 64


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Sizes of one training run: ``steps`` Adam steps on batches of ``batch`` sequences of ``length`` steps,
    peak ``learning_rate`` (a linear warm-up over ``warmup`` steps, default the first 10 %, then a cosine decay to
    0), gradients clipped to global norm ``clip``; every ``eval_every`` steps the loss on the held-out batch."""

    steps: int = 2000
    batch: int = 32
    length: int = 64
    learning_rate: float = 3e-3
    clip: float = 1.0
    eval_every: int = 200
    warmup: int | None = added_field(None)  # None: steps // 10 (the cells stored before this field keep their keys)

    def warmup_steps(self) -> int:
        return max(1, self.steps // 10) if self.warmup is None else self.warmup

    def validate(self) -> None:
        for name in ("steps", "batch", "length", "eval_every"):
            check_int(name, getattr(self, name))
        if self.warmup is not None and check_int("warmup", self.warmup) >= self.steps:
            raise ValueError(f"warmup must be fewer steps than steps ({self.steps}); got {self.warmup}")
        check_real("learning_rate", self.learning_rate, 0.0, open_low=True)
        check_real("clip", self.clip, 0.0, open_low=True)
        if self.steps % self.eval_every:
            raise ValueError(f"steps ({self.steps}) must be a multiple of eval_every ({self.eval_every})")


class TrainResult(NamedTuple):
    """``params``: the trained model's arrays (``eqx.combine`` with ``make_model``'s static part); ``train_loss``
    (steps,): the mean loss of every training batch; ``val_loss`` (steps / eval_every,): the mean held-out loss
    after every ``eval_every`` steps."""

    params: eqx.Module
    train_loss: Array
    val_loss: Array


def make_model(task: Task, layer: str, width: int, depth: int, key: Array) -> SequenceModel:
    return SequenceModel(layer, task.input_size, task.output_size, width, depth, key=key)


def apply(model: Callable[[Array], Array], inputs: Array) -> Array:
    """``jax.vmap(model)(inputs)`` (B, L, input_size) -> (B, L, output_size), :data:`SCORING_CHUNK` sequences at a
    time."""
    return jax.lax.map(model, inputs, batch_size=SCORING_CHUNK)


def _mean_loss(task: Task, model: SequenceModel, batch: Batch) -> Array:
    return masked_mean(task.loss(jax.vmap(model)(batch.inputs), batch), batch.mask)


def _held_out_loss(task: Task, model: SequenceModel, batch: Batch) -> Array:
    return masked_mean(task.loss(apply(model, batch.inputs), batch), batch.mask)


class TrainState(NamedTuple):
    """One run's state between chunks of ``eval_every`` steps: the trainable ``params`` and the Adam state."""

    params: eqx.Module
    opt_state: optax.OptState


class Training(NamedTuple):
    """The pure pieces of :func:`make_train`'s ``train(key)``, for a caller that stops between chunks (a checkpoint,
    a time limit): ``init(key) -> (state, chunk_keys)``, the model initialised from ``key`` and (steps /
    eval_every,) keys, one per chunk; ``run(state, chunk_keys) -> (state, (losses, val_loss))``, one chunk of
    ``eval_every`` Adam steps per key (losses (chunks, eval_every)), each followed by the held-out loss (chunks,).
    ``run_on(state, batches)``: the same on batches drawn beforehand (:func:`chunk_batches` of every chunk key,
    stacked: leading axes (chunks, eval_every)), which a caller training many models on one task samples with one
    program for all of them; no callback. ``train(key)`` is ``run(*init(key))``."""

    init: Callable[[Array], tuple[TrainState, Array]]
    run: Callable[[TrainState, Array], tuple[TrainState, tuple[Array, Array]]]
    run_on: Callable[[TrainState, Batch], tuple[TrainState, tuple[Array, Array]]]


def learning_rate_schedule(config: TrainConfig) -> optax.Schedule:
    """The default optimizer's learning rate by step: a linear warm-up over ``config.warmup_steps()`` to
    ``config.learning_rate``, then a cosine decay to 0 at the last step."""
    return optax.warmup_cosine_decay_schedule(0.0, config.learning_rate, config.warmup_steps(), config.steps)


def make_training(task: Task, layer: str, width: int, depth: int, config: TrainConfig, held_out: Batch,
                  static: eqx.Module | None = None, callback=None, *,
                  optimizer: optax.GradientTransformation | None = None) -> Training:
    """:class:`Training` of the model of ``layer`` on ``task``, scored on ``held_out`` after every chunk.
    ``static``: the model's non-trainable part (:func:`static_part`; computed here if not given). ``callback(steps,
    {"loss", "held-out loss"})``: on the host after every chunk, with the Adam steps done in that call of ``run``
    (``jax.debug.callback``: see ``memlab.progress`` for what a callback costs; default None: silent, and the
    program is the one compiled without it). ``optimizer``: the update of every step; default global-norm clipping
    at ``config.clip`` then Adam under :func:`learning_rate_schedule`."""
    config.validate()
    if optimizer is None:
        optimizer = optax.chain(optax.clip_by_global_norm(config.clip), optax.adam(learning_rate_schedule(config)))
    static = static_part(task, layer, width, depth) if static is None else static

    def loss_fn(params, batch):
        return _mean_loss(task, eqx.combine(params, static), batch)

    def init(key: Array) -> tuple[TrainState, Array]:
        k_model, k_data = jax.random.split(key)
        params = eqx.filter(make_model(task, layer, width, depth, k_model), eqx.is_inexact_array)
        return TrainState(params, optimizer.init(params)), jax.random.split(k_data, config.steps // config.eval_every)

    def step_on(state: TrainState, batch: Batch) -> tuple[TrainState, Array]:
        loss, grads = jax.value_and_grad(loss_fn)(state.params, batch)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        return TrainState(optax.apply_updates(state.params, updates), opt_state), loss

    def step(state: TrainState, k: Array) -> tuple[TrainState, Array]:
        return step_on(state, task.sample(k, config.batch, config.length))

    def held_out_after(state: TrainState, losses: Array) -> tuple[TrainState, tuple[Array, Array]]:
        return state, (losses, _held_out_loss(task, eqx.combine(state.params, static), held_out))

    def chunk(state: TrainState, k: Array) -> tuple[TrainState, tuple[Array, Array]]:
        return held_out_after(*jax.lax.scan(step, state, jax.random.split(k, config.eval_every)))

    def chunk_on(state: TrainState, batches: Batch) -> tuple[TrainState, tuple[Array, Array]]:
        return held_out_after(*jax.lax.scan(step_on, state, batches))

    def reported_chunk(state: TrainState, inputs: tuple[Array, Array]):
        index, k = inputs
        state, (losses, eval_loss) = chunk(state, k)
        jax.debug.callback(callback, (index + 1) * config.eval_every, {"loss": losses[-1], "held-out loss": eval_loss})
        return state, (losses, eval_loss)

    def run_on(state: TrainState, batches: Batch):
        return jax.lax.scan(chunk_on, state, batches)

    if callback is None:
        return Training(init, lambda state, chunk_keys: jax.lax.scan(chunk, state, chunk_keys), run_on)
    return Training(init, lambda state, chunk_keys: jax.lax.scan(reported_chunk, state,
                                                                 (jnp.arange(len(chunk_keys)), chunk_keys)), run_on)


def chunk_batches(task: Task, config: TrainConfig, key: Array) -> Batch:
    """The ``eval_every`` training batches of the chunk keyed ``key``, stacked (leading axis eval_every): the batches
    ``Training.run`` draws inside that chunk, step k's from key k of ``split(key, eval_every)``."""
    return jax.vmap(lambda k: task.sample(k, config.batch, config.length))(jax.random.split(key, config.eval_every))


def make_train(task: Task, layer: str, width: int, depth: int, config: TrainConfig, held_out: Batch,
               static: eqx.Module | None = None, callback=None, *,
               optimizer: optax.GradientTransformation | None = None) -> Callable[[Array], TrainResult]:
    """``train(key)``: initialise the model of ``layer`` from ``key`` and train it on ``task``, scoring it on
    ``held_out`` every ``config.eval_every`` steps (module docstring). ``static``, ``callback``, ``optimizer``: as
    for :func:`make_training` (the callback's steps then count from the start)."""
    training = make_training(task, layer, width, depth, config, held_out, static, callback, optimizer=optimizer)

    def train(key: Array) -> TrainResult:
        state, (losses, val_loss) = training.run(*training.init(key))
        return TrainResult(state.params, losses.reshape(-1), val_loss)

    return train


def static_part(task: Task, layer: str, width: int, depth: int, key: Array | None = None) -> eqx.Module:
    """The model's non-trainable part (``eqx.partition``'s second half), from its shapes alone where it holds no
    arrays (no computation, no compile), else from the model itself (initialised from ``key``, default key 0: a
    layer's non-trainable arrays, such as index buffers, are expected not to depend on it)."""
    key = jax.random.key(0) if key is None else key
    trainable = lambda x: isinstance(x, jax.ShapeDtypeStruct) and jnp.issubdtype(x.dtype, jnp.inexact)  # noqa: E731
    static = eqx.partition(eqx.filter_eval_shape(make_model, task, layer, width, depth, key), trainable)[1]
    if any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(static)):
        return eqx.partition(make_model(task, layer, width, depth, key), eqx.is_inexact_array)[1]
    return static


class Baselines(NamedTuple):
    """The task's own predictors on a batch: ``reference_outputs`` (B, L, output_size); ``reference``,
    ``trivial`` (B, L): their per-step losses."""

    reference_outputs: Array
    reference: Array
    trivial: Array


def baselines(task: Task, batch: Batch) -> Baselines:
    reference = task.reference(batch)
    # a trivial predictor that is a constant (mqar's uniform logits) made XLA evaluate its loss over the whole batch
    # at compile time, in its slow constant folder (2.6 of the 3.2 CPU-seconds compiling mqar's held-out side); the
    # barrier keeps the outputs a value computed at run time
    trivial = jax.lax.optimization_barrier(task.trivial(batch))
    return Baselines(reference, task.loss(reference, batch), task.loss(trivial, batch))


class Scores(NamedTuple):
    """A model scored on held-out sequences beside the task's reference and trivial predictors.

    ``model``, ``reference``, ``trivial``, ``distance`` (L,): mean loss per step over the batch's scored entries,
    NaN at a step with none (distance: from the model's outputs to the reference's, ``task.distance``); ``gap``:
    the normalised gap over all scored steps."""

    model: Array
    reference: Array
    trivial: Array
    distance: Array
    gap: Array


def score(task: Task, model: Callable[[Array], Array], batch: Batch, base: Baselines | None = None) -> Scores:
    """Score ``model`` (one sequence (L, input_size) -> (L, output_size)) on ``batch`` (``base``: the batch's
    :func:`baselines`, if already computed)."""
    base = baselines(task, batch) if base is None else base
    outputs = apply(model, batch.inputs)
    losses = (task.loss(outputs, batch), base.reference, base.trivial)
    per_step = [per_step_mean(x, batch.mask) for x in (*losses, task.distance(outputs, base.reference_outputs))]
    return Scores(*per_step, normalised_gap(*losses, batch.mask))


class Comparison(NamedTuple):
    """How close two models are on a batch: ``distance`` the mean over scored steps of ``task.distance`` between
    their outputs (the first model's against the second's); ``gradient_cosine`` the mean over sequences (with a
    scored step) of the cosine between the gradients, with respect to the whole input sequence, of each model's
    loss at the sequence's last scored step (the final step where every step is scored; von Oswald et al. 2023
    compare models by the input gradients of their predictions; the loss's is the prediction's weighted by
    d loss / d prediction, one number per sequence), NaN if no sequence has one."""

    distance: Array
    gradient_cosine: Array


class Target(NamedTuple):
    """What :func:`compare_to` needs of the model compared against, on one batch: its ``outputs`` (B, L, output_size)
    and ``gradient`` (B, L * input_size), the input gradient of its loss at each sequence's last scored step."""

    outputs: Array
    gradient: Array


def _outputs_and_final_gradient(task: Task, model: Callable[[Array], Array], batch: Batch) -> tuple[Array, Array]:
    """``model``'s outputs (B, L, output_size) on ``batch`` and (B, L * input_size) the gradient, with respect to
    each input sequence, of its loss at that sequence's last scored step (zero for a sequence with none), a chunk
    of sequences at a time (:data:`SCORING_CHUNK`)."""
    def one(sequence: Batch) -> tuple[Array, Array]:
        alone = jax.tree.map(lambda a: a[None], sequence)  # a batch of one
        length = sequence.mask.shape[0]
        last = length - 1 - jnp.argmax(sequence.mask[::-1])  # the last scored step
        last_scored = jax.nn.one_hot(last, length, dtype=bool) & sequence.mask  # all False if no step is scored

        def final_loss(inputs):
            outputs = model(inputs)
            return jnp.sum(jnp.where(last_scored, task.loss(outputs[None], alone)[0], 0.0)), outputs

        gradient, outputs = jax.grad(final_loss, has_aux=True)(sequence.inputs)
        return outputs, gradient.reshape(-1)

    return jax.lax.map(one, batch, batch_size=SCORING_CHUNK)


def comparison_target(task: Task, model: Callable[[Array], Array], batch: Batch) -> Target:
    """``model``'s :class:`Target` on ``batch``: computed once, compared with many models by :func:`compare_to`."""
    return Target(*_outputs_and_final_gradient(task, model, batch))


def compare_to(task: Task, model: Callable[[Array], Array], target: Target, batch: Batch) -> Comparison:
    """:class:`Comparison` of ``model`` with the model whose :func:`comparison_target` on ``batch`` is ``target``."""
    outputs, g = _outputs_and_final_gradient(task, model, batch)
    distance = masked_mean(task.distance(outputs, target.outputs), batch.mask)
    h = target.gradient
    norms = jnp.linalg.norm(g, axis=-1) * jnp.linalg.norm(h, axis=-1)
    scored = jnp.any(batch.mask, axis=1) & (norms > 0)  # a sequence with no scored step has no gradient to compare
    cosine = jnp.sum(g * h, -1) / jnp.where(scored, norms, 1.0)
    return Comparison(distance, masked_mean(cosine, scored))  # 0 / 0 = NaN where no sequence has a scored step


def compare(task: Task, model: Callable[[Array], Array], other: Callable[[Array], Array], batch: Batch) -> Comparison:
    """:class:`Comparison` of ``model`` with ``other`` (each one sequence (L, input_size) -> (L, output_size))."""
    return compare_to(task, model, comparison_target(task, other, batch), batch)

"""Training by the surrogate predictive log-likelihood (section 6, App. C.4, App. F.1), in the PureJaxRL style.

``make_train(config)`` returns one pure, jittable ``train(key, model, train_y, train_mask, val_y, val_mask)``: every
epoch (a shuffled pass of optimiser steps, then the validation log-likelihood) in one ``lax.scan``, so it compiles
once and vmaps over seeds; it trains any model of the study (``predictions.py``'s interface). Objectives: eq. (8)-(9)
(``"reinforce"``, with App. F.1's moving-average baseline) or the exact mixture log-likelihood of C.4's eq. (60)
(``"mixture"``); stabilisers (section 6, Theorem 2, Table 2): ISS projection, gradient clipping or neither.
``make_chunked_train(config)`` is the same run in parts, its epochs in chunks of one compiled program, so that a
cell reports its epochs between them (``train_in_chunks``, ``memlab.progress``): the same numbers.

Choices the paper leaves open:

- two Adam optimisers as App. E.2 (phi, and theta = the mode network), theta not stepped during the warm-up;
- the learning rate x ``decay_rate`` every ``decay_every`` epochs; AR(1) time-correlated input noise of App. F.1;
- the loss per observed step; a run has failed if a value is not finite or validation fell ``DIVERGENCE_NATS``
  below the first epoch's; the best validation epoch's model is returned (early stopping).

The objectives, the optimisers, the gradient in parts and the failure rule: docs/studies/pissm.md, "Training".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array

from memlab.checks import check_choice, check_int, check_real
from memlab.devices import value_and_grad_in_parts
from memlab.layers import GATED_CELLS, iss_margin, project_model_iss
from memlab.pissm.predictions import Predictions
from memlab.progress import run_in_chunks

STABILITY = ("iss", "clip", "none")
OBJECTIVES = ("reinforce", "mixture")
DIVERGENCE_NATS = 1.0


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    epochs: int = 50
    batch_size: int = 32
    learning_rate: float = 0.011  # App. F.1
    decay_every: int = 10  # epochs, App. F.1
    decay_rate: float = 0.5  # not given by the paper
    warmup_epochs: int = 5  # not given by the paper
    mode_params: tuple[str, ...] = ("mode_net",)  # theta: own optimiser, not stepped during the warm-up
    fixed_params: tuple[str, ...] = ()  # never trained
    objective: str = "reinforce"
    stability: str = "iss"
    iss_eps: float = 0.1  # Table 2 / 6
    clip_norm: float = 10.0  # Table 2's delta, used when stability == "clip"
    baseline_decay: float = 0.95  # App. F.1
    input_noise_std: float = 0.0
    input_noise_corr: float = 0.9
    gradient_parts: int | None = 1  # None: one per CPU device (a divisor of the minibatch size)
    stop_on_failure: bool = True  # stop after the first non-finite epoch (False: train every epoch regardless)

    def __post_init__(self):
        for name in ("epochs", "batch_size", "decay_every"):
            check_int(name, getattr(self, name))
        if self.gradient_parts is not None:
            check_int("gradient_parts", self.gradient_parts)
        check_int("warmup_epochs", self.warmup_epochs, low=0)
        check_choice("stability", self.stability, STABILITY)
        check_choice("objective", self.objective, OBJECTIVES)
        for name in ("learning_rate", "clip_norm"):
            check_real(name, getattr(self, name), 0, open_low=True)
        for name in ("decay_rate", "baseline_decay"):
            check_real(name, getattr(self, name), 0, 1, open_low=True)
        check_real("iss_eps", self.iss_eps, 0, 1, open_low=True, open_high=True)
        check_real("input_noise_std", self.input_noise_std, 0)
        check_real("input_noise_corr", self.input_noise_corr, 0, 1, open_high=True)


class TrainResult(NamedTuple):
    model: eqx.Module  # at the best validation epoch
    best_val_ll: Array  # () best validation log-likelihood per observed step
    best_epoch: Array  # () int, 0-based; -1 if no epoch was finite
    failed: Array  # () bool: non-finite values or divergence (module doc)
    train_loss: Array  # (epochs,) mean minibatch loss
    val_ll: Array  # (epochs,) validation log-likelihood per observed step after each epoch
    recurrent_norm: Array  # (epochs, steps) ||U||_inf of the first gated cell after each step (NaN without one)
    radius: Array  # (epochs, steps) ||U||_inf at which its ISS gain reaches 1 (Fig. 8's l1 radius)
    failed_epoch: Array  # () int, 0-based: the epoch with the first non-finite value, after which training stopped
    # (the histories are NaN after it); -1 if every value was finite


def gated_cells(model) -> list:
    """Every GRUCell / LSTMCell inside ``model``."""
    leaves = jax.tree_util.tree_leaves(model, is_leaf=lambda x: isinstance(x, GATED_CELLS))
    return [x for x in leaves if isinstance(x, GATED_CELLS)]


def frozen_mask(model, names: tuple[str, ...]):
    """Pytree of bools like ``eqx.filter(model, eqx.is_inexact_array)``: True for leaves under an attribute in names."""
    def is_frozen(path, leaf):
        return any(isinstance(k, jax.tree_util.GetAttrKey) and k.name in names for k in path)
    return jax.tree_util.tree_map_with_path(is_frozen, eqx.filter(model, eqx.is_inexact_array))


def _optimizer(config: TrainConfig, steps_per_epoch: int):
    """Adam with App. F.1's staircase decay (per optimiser step count), gradient clipping first for GC."""
    schedule = optax.exponential_decay(config.learning_rate, config.decay_every * steps_per_epoch, config.decay_rate,
                                       staircase=True)
    optimizer = optax.adam(schedule)
    if config.stability == "clip":
        optimizer = optax.chain(optax.clip_by_global_norm(config.clip_norm), optimizer)
    return optimizer


def correlated_noise(key: Array, shape: tuple[int, ...], std: float, corr: float) -> Array:
    """Stationary AR(1) noise (B, T, N) along axis 1 with marginal standard deviation std and lag-1 correlation."""
    e = std * jax.random.normal(key, shape)

    def step(prev, e_t):
        n = corr * prev + np.sqrt(1.0 - corr**2) * e_t
        return n, n

    _, n = jax.lax.scan(step, e[:, 0], jnp.swapaxes(e[:, 1:], 0, 1))
    return jnp.concatenate([e[:, :1], jnp.swapaxes(n, 0, 1)], axis=1)


def predict_batch(model, y: Array, mask: Array, key: Array, num_samples: int = 1) -> Predictions:
    """``Predictions`` with leading axes (S, B): every sequence of y (B, T, N) filtered with S sampled paths."""
    B = y.shape[0]
    keys = jax.random.split(key, (num_samples, B))
    one = lambda y_b, m_b, k: model(y_b, m_b, key=k)  # noqa: E731
    return jax.vmap(jax.vmap(one), in_axes=(None, None, 0))(y, mask, keys)


def mean_log_likelihood(log_likelihoods: Array, mask: Array) -> Array:
    """Mean of log q(y_t | y_{1:t-1}) over observed steps (any leading axes broadcast against mask (B, T))."""
    return jnp.sum(jnp.where(mask, log_likelihoods, 0.0)) / (jnp.sum(mask) * log_likelihoods.size / mask.size)


def two_optimiser_update(optimizer, grads, opt_state, params, phi, theta, warm):
    """One step of App. E.2's two optimisers: ``optimizer`` (an optax transformation) run once on the gradients of
    the phi leaves and once on those of the theta leaves (``phi``, ``theta``: pytrees of bools like ``params``; each
    run sees zeros elsewhere, so its Adam updates there are exactly zero). opt_state = (phi's state, theta's).
    While ``warm`` (a bool), theta's optimiser is not stepped: its state, step count included, is kept and its
    updates are dropped. Returns (updates, new opt_state)."""
    def only(leaves):
        return jax.tree_util.tree_map(lambda g, keep: jnp.where(keep, g, 0.0), grads, leaves)

    phi_updates, phi_state = optimizer.update(only(phi), opt_state[0], params)
    theta_updates, theta_state = optimizer.update(only(theta), opt_state[1], params)
    theta_state = jax.tree_util.tree_map(lambda old, new: jnp.where(warm, old, new), opt_state[1], theta_state)
    updates = jax.tree_util.tree_map(lambda u, v: u + jnp.where(warm, 0.0, v), phi_updates, theta_updates)
    return updates, (phi_state, theta_state)


def _check_data(name, y, mask):
    if y.ndim != 3 or mask.shape != y.shape[:2] or mask.dtype != jnp.bool_:
        raise ValueError(f"{name}: y must be (B, T, N) and mask (B, T) bool, got {y.shape} and {mask.dtype} "
                         f"{mask.shape}")


def gradient_parts(parts: int | None, batch: int) -> int:
    """How many parts a minibatch of ``batch`` sequences is split into for its gradient: ``parts`` (it must divide
    the batch), or with None the largest divisor of the batch up to this process's CPU device count."""
    if parts is None:
        return max(p for p in range(1, jax.local_device_count() + 1) if batch % p == 0)
    if batch % parts:
        raise ValueError(f"gradient_parts = {parts} does not divide the minibatch of {batch} sequences")
    return parts


def _surrogate_loss(config: TrainConfig, static):
    """``loss(params, (y, mask, keys), baseline, observed) -> (loss, rewards)``: minus the objective over a
    minibatch (or any part of it: ``observed`` is the whole minibatch's count of observed steps)."""

    def loss(params, examples, baseline, observed):
        y, mask, keys = examples
        preds = jax.vmap(lambda y_b, m_b, k: eqx.combine(params, static)(y_b, m_b, key=k))(y, mask, keys)
        reward = preds.rewards
        if config.objective == "reinforce":
            surrogate = reward + jax.lax.stop_gradient(reward - baseline) * preds.score_log_probs  # eq. (8), (9)
        else:
            surrogate = preds.log_likelihoods  # log sum_k q(k | x_{t-1}) N(y_t | k), section 6 / eq. (60)
        return -jnp.sum(jnp.where(mask, surrogate, 0.0)) / observed, reward

    return loss


class EpochLoop(NamedTuple):
    """The epoch loop between chunks (``make_chunked_train``): ``index`` () epochs run, the loop's ``carry`` (model,
    optimiser states, best model so far, ..., last: no failure yet), the ``history`` of every epoch's outputs (NaN
    where none ran) and the ``epoch_keys`` (epochs,) its epochs draw from."""

    index: Array
    carry: tuple
    history: tuple
    epoch_keys: Array


def _start_epochs(epoch, carry, key, config: TrainConfig) -> EpochLoop:
    """The loop of ``epoch(carry, (index, key)) -> (carry, outputs)`` before its first epoch."""
    epoch_keys = jax.random.split(key, config.epochs)
    shapes = jax.eval_shape(epoch, carry, (jnp.asarray(0), epoch_keys[0]))[1]
    history = jax.tree_util.tree_map(lambda s: jnp.full((config.epochs, *s.shape), jnp.nan, s.dtype), shapes)
    return EpochLoop(jnp.asarray(0), carry, history, epoch_keys)


def _run_epochs(epoch, loop: EpochLoop, stop, config: TrainConfig, callback=None) -> EpochLoop:
    """The epochs of ``loop`` up to ``stop`` (an int, or traced: one program for every chunk), stopping after the
    first that fails (``carry[-1]`` false) if ``config.stop_on_failure``: the run has failed then and nothing after
    it changes the result (best model, best epoch, failure). ``callback(epochs done, {"train loss", "val log-lik"})``,
    if given, after each epoch."""
    epoch_keys = loop.epoch_keys

    def running(state):
        index, carry, _ = state
        return (index < stop) & (carry[-1] | (not config.stop_on_failure))

    def next_epoch(state):
        index, carry, history = state
        carry, outputs = epoch(carry, (index, epoch_keys[index]))
        history = jax.tree_util.tree_map(lambda h, o: h.at[index].set(o), history, outputs)
        if callback is not None:  # on the host while the loop runs (None: the program has no callback)
            jax.debug.callback(callback, index + 1, {"train loss": outputs[0], "val log-lik": outputs[1]})
        return index + 1, carry, history

    return EpochLoop(*jax.lax.while_loop(running, next_epoch, loop[:3]), epoch_keys)


def make_epoch(config: TrainConfig, optimizer, model, train_y, train_mask, val_y, val_mask):
    """(epoch, carry, static) of ``make_train``'s run on these data: ``epoch(carry, (index, key)) -> (carry,
    outputs)``, the carry before the first epoch and the model's static part."""
    _check_data("train", train_y, train_mask)
    _check_data("validation", val_y, val_mask)
    B, T, _ = train_y.shape
    batch = min(config.batch_size, B)
    steps = B // batch
    cells = gated_cells(model)
    if config.stability == "iss" and not cells:
        raise ValueError(f"stability='iss' needs a GRU/LSTM cell; {type(model).__name__} has none")
    transformation = _optimizer(config, steps) if optimizer is None else optimizer  # for phi and theta
    if config.stability == "iss":
        model = project_model_iss(model, config.iss_eps)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    fixed = frozen_mask(model, config.fixed_params)
    theta = jax.tree_util.tree_map(lambda t, f: t and not f, frozen_mask(model, config.mode_params), fixed)
    phi = jax.tree_util.tree_map(lambda t, f: not (t or f), theta, fixed)
    # each optimiser sees zero gradients outside its own leaves, so its Adam updates there are exactly zero
    opt_state = (transformation.init(params), transformation.init(params))

    value_and_grad = value_and_grad_in_parts(_surrogate_loss(config, static),
                                             gradient_parts(config.gradient_parts, batch))

    def iss_state(params):
        if not cells:
            return jnp.nan, jnp.nan
        margin = iss_margin(gated_cells(eqx.combine(params, static))[0])
        return margin.recurrent_norm, margin.radius

    def sgd_step(carry, inputs):
        params, opt_state, baseline, started = carry
        idx, key, warm = inputs
        k_noise, k_paths = jax.random.split(key)
        y, mask = train_y[idx], train_mask[idx]
        if config.input_noise_std > 0:
            y = y + correlated_noise(k_noise, y.shape, config.input_noise_std, config.input_noise_corr)
        (loss, ll), grads = value_and_grad(params, (y, mask, jax.random.split(k_paths, batch)), baseline,
                                           jnp.sum(mask))
        updates, opt_state = two_optimiser_update(transformation, grads, opt_state, params, phi, theta, warm)
        params = eqx.apply_updates(params, updates)
        if config.stability == "iss":
            params = eqx.filter(project_model_iss(eqx.combine(params, static), config.iss_eps),
                                eqx.is_inexact_array)
        step_mean = jnp.sum(jnp.where(mask, ll, 0.0), 0) / jnp.maximum(jnp.sum(mask, 0), 1)
        baseline = jnp.where(started, config.baseline_decay * baseline + (1 - config.baseline_decay) * step_mean,
                             step_mean)  # App. F.1
        return (params, opt_state, baseline, jnp.asarray(True)), (loss, *iss_state(params))

    def evaluate(params, key):
        preds = predict_batch(eqx.combine(params, static), val_y, val_mask, key)
        return mean_log_likelihood(preds.log_likelihoods, val_mask)

    def epoch(carry, inputs):
        params, opt_state, baseline, started, best_params, best_val, best_epoch, ok = carry
        index, key = inputs
        k_perm, k_steps, k_val = jax.random.split(key, 3)
        order = jax.random.permutation(k_perm, B)[: steps * batch].reshape(steps, batch)
        warm = jnp.broadcast_to(index < config.warmup_epochs, (steps,))
        (params, opt_state, baseline, started), (losses, norms, radii) = jax.lax.scan(
            sgd_step, (params, opt_state, baseline, started), (order, jax.random.split(k_steps, steps), warm))
        val = evaluate(params, k_val)
        ok = ok & jnp.all(jnp.isfinite(losses)) & jnp.isfinite(val)
        better = ok & (val > best_val)
        best_params = jax.tree_util.tree_map(lambda new, old: jnp.where(better, new, old), params, best_params)
        best_val = jnp.where(better, val, best_val)
        best_epoch = jnp.where(better, index, best_epoch)
        carry = (params, opt_state, baseline, started, best_params, best_val, best_epoch, ok)
        return carry, (jnp.mean(losses), val, norms, radii)

    dtype = train_y.dtype
    carry = (params, opt_state, jnp.zeros(T, dtype), jnp.asarray(False), params, jnp.asarray(-jnp.inf, dtype),
             jnp.asarray(-1), jnp.asarray(True))
    return epoch, carry, static


def _result(config: TrainConfig, static, loop: EpochLoop) -> TrainResult:
    """The ``TrainResult`` of a finished epoch loop."""
    ran, carry, (train_loss, val_ll, norms, radii) = loop[:3]
    best_params, best_val, best_epoch, ok = carry[4:]
    bad = ~(jnp.isfinite(train_loss) & jnp.isfinite(val_ll)) & (jnp.arange(config.epochs) < ran)
    first_failure = jnp.where(jnp.any(bad), jnp.argmax(bad), -1)
    diverged = val_ll[-1] < val_ll[0] - DIVERGENCE_NATS
    return TrainResult(eqx.combine(best_params, static), best_val, best_epoch, ~ok | diverged, train_loss, val_ll,
                       norms, radii, first_failure)


def make_train(config: TrainConfig, callback=None, *, optimizer: optax.GradientTransformation | None = None):
    """Return ``train(key, model, train_y, train_mask, val_y, val_mask) -> TrainResult`` (module doc). Jittable with
    the model marked static by ``eqx.filter_jit``; the arrays may be vmapped over (e.g. seeds).

    ``callback(epoch, metrics)``: called on the host after every epoch (``jax.debug.callback``; once per seed when
    vmapped) with the epochs done and ``{"train loss", "val log-lik"}`` (see ``memlab.progress`` for what a callback
    costs). Default None: silent, and the program is the one compiled without it. ``optimizer``: the
    transformation each of the two optimisers runs (default App. F.1's Adam with its staircase decay, clipped first
    with stability 'clip': ``_optimizer``)."""

    def train(key, model, train_y, train_mask, val_y, val_mask) -> TrainResult:
        epoch, carry, static = make_epoch(config, optimizer, model, train_y, train_mask, val_y, val_mask)
        loop = _run_epochs(epoch, _start_epochs(epoch, carry, key, config), config.epochs, config, callback)
        return _result(config, static, loop)

    return train


class ChunkedTrain(NamedTuple):
    """``make_train``'s run in three parts, each jittable with the model marked static (``eqx.filter_jit``), so that
    its epochs run in chunks of one compiled program (``train_in_chunks``); ``data`` = (train_y, train_mask, val_y,
    val_mask) as ``train`` takes them."""

    start: Callable  # (key, model, *data) -> EpochLoop before the first epoch
    run: Callable  # (loop, stop, model, *data) -> EpochLoop: its epochs up to ``stop`` (an int array)
    result: Callable  # (loop, model, *data) -> TrainResult


def make_chunked_train(config: TrainConfig, *, optimizer: optax.GradientTransformation | None = None
                       ) -> ChunkedTrain:
    """The parts of ``make_train(config, optimizer=optimizer)``'s ``train``: the same epochs, the same numbers
    (tests/pissm/test_train.py holds them equal), and a caller that sees the run between chunks without a host
    callback in the program (``memlab.progress``: a program with one is never in the persistent compile cache)."""

    def start(key, model, *data) -> EpochLoop:
        epoch, carry, _ = make_epoch(config, optimizer, model, *data)
        return _start_epochs(epoch, carry, key, config)

    def run(loop, stop, model, *data) -> EpochLoop:
        return _run_epochs(make_epoch(config, optimizer, model, *data)[0], loop, stop, config)

    def result(loop, model, *data) -> TrainResult:
        return _result(config, make_epoch(config, optimizer, model, *data)[2], loop)

    return ChunkedTrain(start, run, result)


def train_in_chunks(training: ChunkedTrain, epochs: int, key, model, *data) -> TrainResult:
    """``training`` (``make_chunked_train``'s parts, jitted) run in chunks of epochs (``progress.training_chunks``),
    reporting the epochs done and the last one's loss and validation log-likelihood between them
    (``progress.training_step``: only where a run shows its cells' progress). A run that failed stops early."""
    def report(loop, stop):  # epochs run: fewer than stop after a failure (TrainConfig.stop_on_failure)
        ran = int(loop.index)
        train_loss, val_ll = (np.asarray(h[ran - 1]) for h in loop.history[:2])
        return ran, {"train loss": train_loss, "val log-lik": val_ll}

    loop = run_in_chunks(training.start(key, model, *data), lambda loop, stop: training.run(loop, stop, model, *data),
                         epochs, report)
    return training.result(loop, model, *data)

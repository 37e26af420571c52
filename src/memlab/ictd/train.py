"""Algorithm 1's training loop (section 8, App. F): ``make_train(config) -> train(key)`` (PureJaxRL style, one
compiled program), the same epochs in chunks that report their progress (``make_chunked_train``,
``train_in_chunks``), and seeds vmapped (``train_seeds``). The model, its loss and its evaluation are in
``pretrain.py``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array

from memlab.ictd.emergence import a_emergence, kernel_diagonal_mean, v_emergence
from memlab.ictd.pretrain import (
    Checkpoint,
    PretrainConfig,
    Trace,
    TrainResult,
    apply_mask,
    init_params,
    masks,
    rho_schedule,
    sample_windows,
    td_loss,
)
from memlab.progress import run_in_chunks

__all__ = ["ChunkedTrain", "make_chunked_train", "make_train", "train_in_chunks", "train_seeds"]


def make_train(config: PretrainConfig, callback=None, *, optimizer: optax.GradientTransformation | None = None):
    """Return ``train(key) -> TrainResult``, pure and jit-able; one run of Algorithm 1 with ``config``.

    ``callback(epoch, {"loss", "V_em", "A_em"})``: on the host after every epoch, with its last step's values
    (``jax.debug.callback``: see ``memlab.progress`` for what a callback costs). Default None: silent, and the
    program is the one compiled without it. ``optimizer``: the update of every step, default Algorithm 1's Adam at
    ``config.learning_rate`` (its gradients and updates masked either way).
    """
    config.validate()
    optimizer = optax.adam(config.learning_rate) if optimizer is None else optimizer
    epoch = _epoch(config, optimizer, callback)

    def train(key: Array) -> TrainResult:
        carry, xs = _start(config, optimizer, key)
        (params, _, best, best_mirrored), trace = jax.lax.scan(epoch, carry, xs)
        return _result(config, params, best, best_mirrored, trace)

    return train


def _start(config: PretrainConfig, optimizer, key: Array):
    """(carry, xs) of ``make_train``'s scan over epochs: (params, Adam state, the two checkpoints) and (epoch key,
    epoch index) per epoch."""
    k_init, k_epochs = jax.random.split(key)
    params = init_params(k_init, config)
    carry = (params, optimizer.init(params), Checkpoint.start(params), Checkpoint.start(params))
    return carry, (jax.random.split(k_epochs, config.num_epochs), jnp.arange(config.num_epochs))


def _result(config: PretrainConfig, params, best, best_mirrored, trace) -> TrainResult:
    return TrainResult(params, best, best_mirrored, jax.tree.map(lambda a: a.reshape(config.num_steps), trace))


def _epoch(config: PretrainConfig, optimizer, callback):
    """``epoch(carry, (key, index)) -> (carry, Trace of its steps)``: one sampled MRP, ``minibatches_per_epoch``
    Adam steps on its windows (Algorithm 1)."""
    mask = masks(config.d, config.a_mask)
    M, B = config.minibatches_per_epoch, config.batch_size
    grad_fn = jax.value_and_grad(td_loss, has_aux=True)
    d_t_fn = jax.vmap(kernel_diagonal_mean, in_axes=(0, None, None))

    def epoch(carry, xs):
        k, epoch_index = xs
        windows = sample_windows(k, config)

        def step(carry, j):
            params, opt_state, best, best_mirrored = carry
            mb = windows.minibatch(j * B, B)  # windows jB .. jB+B-1, consecutive
            t = epoch_index * M + j
            rho = rho_schedule(config, t)
            (loss, delta), grads = grad_fn(params, mb, config, rho)
            updates, opt_state = optimizer.update(apply_mask(grads, mask), opt_state, params)
            params = optax.apply_updates(params, apply_mask(updates, mask))
            v_em, a_em = v_emergence(params.V), a_emergence(params.A)
            d_t = jnp.mean(d_t_fn(windows.Z0, params.A, config.tau))  # eq. (34), this epoch's contexts
            mirrored = (v_emergence(-params.V), a_emergence(-params.A))
            record = Trace(v_em, a_em, *mirrored, d_t, loss, jnp.mean(jnp.abs(delta)), rho)
            best = best.keep_better(params, jnp.minimum(v_em, a_em), t)
            best_mirrored = best_mirrored.keep_better(params, jnp.minimum(*mirrored), t)
            return (params, opt_state, best, best_mirrored), record

        carry, records = jax.lax.scan(step, carry, jnp.arange(M))
        if callback is not None:
            jax.debug.callback(callback, epoch_index + 1,
                               {"loss": records.loss[-1], "V_em": records.V_em[-1], "A_em": records.A_em[-1]})
        return carry, records

    return epoch


class EpochLoop(NamedTuple):
    """The epoch loop between chunks (``make_chunked_train``): ``index`` () epochs run, the loop's ``carry`` (params,
    Adam state, the two checkpoints), the ``trace`` so far (a Trace of (num_epochs, minibatches_per_epoch) arrays,
    zero where no epoch ran yet) and ``xs`` (epoch keys, epoch indices) of every epoch."""

    index: Array
    carry: tuple
    trace: Trace
    xs: tuple


class ChunkedTrain(NamedTuple):
    """``make_train``'s run in three parts, so that its epochs run in chunks of one compiled program."""

    start: Callable  # (key) -> EpochLoop before the first epoch
    run: Callable  # (loop, stop) -> EpochLoop: its epochs up to ``stop`` (an int array)
    result: Callable  # (loop) -> TrainResult


def make_chunked_train(config: PretrainConfig, *, optimizer: optax.GradientTransformation | None = None
                       ) -> ChunkedTrain:
    """The parts of ``make_train(config, optimizer=optimizer)``'s ``train``: the same epochs, the same numbers
    (tests/test_training_chunks.py holds them equal), and a caller that sees the run between chunks without a host
    callback in the program (``memlab.progress``)."""
    config.validate()
    optimizer = optax.adam(config.learning_rate) if optimizer is None else optimizer
    epoch = _epoch(config, optimizer, None)

    def start(key: Array) -> EpochLoop:
        carry, xs = _start(config, optimizer, key)
        index = xs[1][0]
        shapes = jax.eval_shape(epoch, carry, (xs[0][0], index))[1]
        return EpochLoop(jnp.zeros_like(index), carry,
                         jax.tree.map(lambda s: jnp.zeros((config.num_epochs, *s.shape), s.dtype), shapes), xs)

    def run(loop: EpochLoop, stop) -> EpochLoop:
        keys, indices = loop.xs

        def next_epoch(state):
            index, carry, trace = state
            carry, records = epoch(carry, (keys[index], indices[index]))
            return index + 1, carry, jax.tree.map(lambda h, r: h.at[index].set(r), trace, records)

        return EpochLoop(*jax.lax.while_loop(lambda state: state[0] < stop, next_epoch, tuple(loop[:3])), loop.xs)

    def result(loop: EpochLoop) -> TrainResult:
        params, _, best, best_mirrored = loop.carry
        return _result(config, params, best, best_mirrored, loop.trace)

    return ChunkedTrain(start, run, result)


def train_in_chunks(training: ChunkedTrain, num_epochs: int, key: Array) -> TrainResult:
    """``training`` (``make_chunked_train``'s parts, jitted) run in chunks of epochs (``progress.training_chunks``),
    reporting the epochs done and the last step's loss, V_em and A_em between them (``progress.training_step``: only
    where a run shows its cells' progress)."""
    def report(loop, stop):
        return stop, {name: np.asarray(getattr(loop.trace, name)[stop - 1, -1]) for name in ("loss", "V_em", "A_em")}

    return training.result(run_in_chunks(training.start(key), training.run, num_epochs, report))


def train_seeds(config: PretrainConfig, key: Array) -> TrainResult:
    """``config.num_seeds`` independent runs (keys ``jax.random.split(key, num_seeds)``), vmapped and jitted.

    Every leaf of the result gains a leading (num_seeds,) axis. The jitted function is cached per config.
    """
    config.validate()
    return _vmapped_train(config)(jax.random.split(key, config.num_seeds))


@functools.lru_cache(maxsize=8)
def _vmapped_train(config: PretrainConfig):
    return jax.jit(jax.vmap(make_train(config)))

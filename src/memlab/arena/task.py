"""The arena's task interface: sequences drawn on the fly, the optimal predictor, a predictor without memory.

A task is a family of sequence-prediction problems with a known optimal predictor. At every step t = 1..L a model
reads ``inputs[t]`` and predicts ``targets[t]``; the task scores a prediction with a per-step ``loss``. Three
predictors are scored the same way:

* the model's outputs;
* ``reference(batch)``: the outputs of the optimal predictor given everything up to step t (the exact filter, the
  Kalman filter, ...); no predictor can have a lower expected loss;
* ``trivial(batch)``: the outputs of the best predictor that sees only the current input and the step t (no memory
  of earlier inputs).

A task whose reference is not the exact optimum (a particle filter, the TD fixed point, ...) says so with a class
attribute ``reference_exact = False`` (see :func:`reference_is_exact`): a trained model may then beat it, and the
arena's check that none does skips the task.

The headline number is the normalised gap g = (L_model - L_ref) / (L_trivial - L_ref): 0 is optimal, 1 is no better
than having no memory. Outputs are logits over classes (``targets`` int) or real vectors (``targets`` float).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
from jax import Array

__all__ = ["Batch", "Task", "categorical_kl", "cross_entropy", "masked_mean", "normalised_gap", "reference_is_exact",
           "squared_error"]


class Batch(NamedTuple):
    """A batch of B sequences of L steps.

    ``inputs`` (B, L, input_size) float: what a model reads at each step; ``targets`` (B, L) int or
    (B, L, output_size) float: what it predicts; ``mask`` (B, L) bool: the steps that are scored; ``aux``: what
    the task's reference needs besides the inputs (e.g. the raw observations), a pytree with leading axis B.
    """

    inputs: Array
    targets: Array
    mask: Array
    aux: Any = None


class Task(Protocol):
    """What the arena needs of a task (see the module docstring). Tasks are Equinox modules: their arrays are
    pytree leaves and their sizes static fields, so jitted functions take a task as an ordinary argument."""

    name: str
    input_size: int
    output_size: int

    def sample(self, key: Array, batch: int, length: int) -> Batch: ...

    def loss(self, outputs: Array, batch: Batch) -> Array:
        """(B, L): the loss of ``outputs`` (B, L, output_size) at every step."""

    def reference(self, batch: Batch) -> Array:
        """(B, L, output_size): the optimal predictor's outputs."""

    def trivial(self, batch: Batch) -> Array:
        """(B, L, output_size): the outputs of the best predictor without memory."""

    def distance(self, outputs: Array, reference: Array) -> Array:
        """(B, L): how far ``outputs`` are from the reference's (KL for classes, squared error for vectors)."""


def reference_is_exact(task: Task) -> bool:
    """Whether ``task.reference`` is the exact optimal predictor (True unless the task sets ``reference_exact``)."""
    return bool(getattr(task, "reference_exact", True))


def cross_entropy(logits: Array, targets: Array) -> Array:
    """-log softmax(logits)[target]: logits (..., C), targets (...) int -> (...)."""
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], axis=-1)[..., 0]


def categorical_kl(logits_p: Array, logits_q: Array) -> Array:
    """KL(p || q) of the categorical distributions softmax(logits_p), softmax(logits_q): (..., C) -> (...).
    Classes that p rules out (logit -inf) contribute nothing."""
    log_p, log_q = jax.nn.log_softmax(logits_p), jax.nn.log_softmax(logits_q)
    p = jnp.exp(log_p)
    return jnp.sum(jnp.where(p > 0, p * (log_p - log_q), 0.0), axis=-1)


def squared_error(outputs: Array, targets: Array) -> Array:
    """||outputs - targets||^2 over the last axis: (..., d) -> (...)."""
    return jnp.sum((outputs - targets) ** 2, axis=-1)


def normalised_gap(model_loss: Array, reference_loss: Array, trivial_loss: Array, mask: Array) -> Array:
    """g = (L_model - L_ref) / (L_trivial - L_ref), each L the mean over the scored steps (mask) of a (B, L) loss."""
    ref = masked_mean(reference_loss, mask)
    return (masked_mean(model_loss, mask) - ref) / (masked_mean(trivial_loss, mask) - ref)


def masked_mean(x: Array, mask: Array) -> Array:
    """The mean of ``x`` over the entries where ``mask`` is True (same shapes)."""
    return jnp.sum(jnp.where(mask, x, 0.0)) / jnp.sum(mask)


def per_step_mean(x: Array, mask: Array) -> Array:
    """(L,) the mean of a (B, L) ``x`` over each step's entries where ``mask`` is True, NaN at a step with none."""
    count = jnp.sum(mask, 0)
    return jnp.where(count > 0, jnp.sum(jnp.where(mask, x, 0.0), 0) / jnp.maximum(count, 1), jnp.nan)

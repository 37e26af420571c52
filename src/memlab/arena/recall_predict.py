"""The recall-predict task of paper 4 (Definition 3.1) in its well-posed variant, as an arena task.

A sequence is paper 4's query insertion (section 4.1, ``memlab.recall.encode``): the query q = v_{i*}, T context
tokens X_t = (V_t, Z_t) drawn i.i.d. from the balanced mixture nu = (1/I) sum_i delta_{v_i} (x) mu_i, the query
again; length L = T + 2, inputs (marker (3), tag (d_1), content (1)). Only the last step is scored: the model
predicts Y = q_1 L(mu_{i*}) + xi (the well-posed linear target of ``memlab.recall.task``), by squared error. The
sampler is the recall study's (``memlab.recall.sample``), with T = length - 2.

* reference: the exact-recall predictor of the recall band (``memlab.recall.band``, its ``context`` predictor): it
  reads exactly the queried tag's tokens, forms their empirical content pmf and predicts q_1 m(pmf), m the band's
  least-squares regression of L(mu) on features of that pmf, fitted on 20,000 draws of a length-T context. It is
  not the exact posterior mean E[Y | sequence] (that has no closed form through the clamp-and-renormalise of the
  content density), only an achievable upper bound on its risk: a model may beat it by a little, so
  ``reference_exact = False``.
* trivial: the tag-only predictor E[Y | q] = q_1 E[L(mu)] (``memlab.recall.baseline_predictions``): the best
  predictor of the last step that keeps no memory of the stored items (it sees only the final query token).
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.arena.task import Batch, squared_error
from memlab.checks import check_int
from memlab.recall import RecallTask, baseline_predictions, encode, fit_predictor
from memlab.recall import sample as sample_examples

__all__ = ["RecallPredictTask", "context_predictor", "seen_pmf"]

NUM_FIT = 20_000  # draws the band's predictor is fitted on (recall.band's default)


class RecallPredictTask(eqx.Module):
    """Recall-predict on ``recall`` (a :class:`memlab.recall.RecallTask` with ``target="linear"``; its
    ``context_length`` is replaced by length - 2 at every call)."""

    recall: RecallTask = eqx.field(static=True, default=RecallTask(target="linear"))
    name: str = eqx.field(static=True, default="recall-predict")
    reference_exact = False  # the band's predictor is a fitted regression (module docstring)

    def __check_init__(self):
        if self.recall.target != "linear":
            raise ValueError("the arena's recall-predict task is the well-posed variant: target must be 'linear', "
                             f"got {self.recall.target!r} (App. A.1's target is not a function of the recalled "
                             "measure)")

    @property
    def input_size(self) -> int:
        return self.recall.tag_array.shape[1] + 4  # memlab.recall.token_dim

    @property
    def output_size(self) -> int:
        return 1

    def at_length(self, context_length: int) -> RecallTask:
        return dataclasses.replace(self.recall, context_length=context_length)

    def sample(self, key: Array, batch: int, length: int) -> Batch:
        """``batch`` sequences of ``length`` = T + 2 tokens; targets (B, L, 1): Y at the last step, 0 elsewhere;
        mask: the last step; aux: the recall study's :class:`memlab.recall.Batch` of the same examples."""
        check_int("batch", batch)
        check_int("length (T + 2 tokens)", length, low=3)
        examples = sample_examples(key, batch, self.at_length(length - 2))
        inputs = jax.vmap(encode)(examples.query, examples.context_tags, examples.context_content)
        targets = jnp.zeros((batch, length, 1)).at[:, -1, 0].set(examples.y)
        mask = jnp.zeros((batch, length), bool).at[:, -1].set(True)
        return Batch(inputs, targets, mask, examples)

    def loss(self, outputs: Array, batch: Batch) -> Array:
        return squared_error(outputs, batch.targets)

    def reference(self, batch: Batch) -> Array:
        """(B, L, 1): q_1 m(empirical pmf of the queried tag's tokens) at the last step (module docstring)."""
        examples = batch.aux
        task = self.at_length(examples.context_content.shape[1])
        m = context_predictor(task)
        seen = seen_pmf(examples, task)

        def predict(p):
            return np.asarray(m(np.asarray(p, np.float64)), np.float32)

        value = jax.pure_callback(predict, jax.ShapeDtypeStruct(seen.shape[:1], jnp.float32), seen,
                                  vmap_method="sequential")
        g = examples.query[:, 0] if task.query_dependent else 1.0  # Y = g(q) L(mu) + xi
        return _at_last_step(g * value, batch.inputs.shape[1])

    def trivial(self, batch: Batch) -> Array:
        """(B, L, 1): E[Y | q] at the last step."""
        return _at_last_step(baseline_predictions(batch.aux, self.recall)["tag_only"], batch.inputs.shape[1])

    def distance(self, outputs: Array, reference: Array) -> Array:
        return squared_error(outputs, reference)


def _at_last_step(values: Array, length: int) -> Array:
    """(B,) -> (B, length, 1), zero before the last step (which only is scored)."""
    return jnp.zeros((values.shape[0], length, 1), jnp.float32).at[:, -1, 0].set(values)


def seen_pmf(examples, task: RecallTask) -> Array:
    """(B, G): the empirical content pmf of the queried tag's context tokens (all zeros where there are none), what
    ``memlab.recall.band.seen_pmf`` simulates, here read off the sampled contexts. Content values are grid points."""
    queried = jnp.all(examples.context_tags == examples.query[:, None, :], axis=-1)  # (B, T)
    cell = jnp.round(examples.context_content * (task.grid_size - 1)).astype(int)  # x_i = i / (G - 1)
    counts = jnp.sum(jax.nn.one_hot(cell, task.grid_size) * queried[..., None], axis=1)  # (B, G)
    return counts / jnp.maximum(counts.sum(-1, keepdims=True), 1.0)


@functools.cache
def context_predictor(task: RecallTask):
    """The band's predictor m: pmfs (N, G) -> L(mu) predictions (N,), fitted for contexts of
    ``task.context_length`` tokens (cached: a fit takes a few seconds)."""
    return fit_predictor(task, task.context_length, NUM_FIT)

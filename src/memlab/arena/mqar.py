"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology: measuring and improving recall in efficient
language models", section 3 and ``zoology/data/associative_recall.py``) as an arena task.

A sequence of L tokens from a vocabulary of V: K key-value pairs k_1 v_1 ... k_K v_K (keys drawn without
replacement from 1..V/2 - 1, values from V/2..V - 1), then the query region, where key k_m reappears once at
position 2K + 2 g_m; the gaps g_1..g_K are drawn without replacement from 0..(L - 2K)/2 - 1 with probability
proportional to a i^(a - 1) (i = g + 1, a = ``power_a``: most queries come soon after the pairs, as repeated bigrams do
in text), and every other token is the filler 0. At a query position the model, having read k_m, predicts v_m
(cross-entropy over the V/2 values); only the query positions are scored (every queried key was stored, so every
scored answer is defined).

* reference: exact lookup of the queried key among the stored pairs (read off the sequence itself): probability 1 on
  the stored value, loss 0. Its logits are 0 on the stored value and -1e4 on the others (finite, so that
  log-softmax and KL(reference || model) stay finite; exp(-1e4) is 0 in float32, so the loss is exactly 0).
* trivial: uniform over the V/2 values, loss log(V/2) at every query. Exactly the best predictor without memory:
  the values are a uniform draw without replacement independent of the keys and of the query positions, so the
  value of any one key, given that key and the position alone, is uniform over the value vocabulary.

What differs from Zoology: the vocabulary (V = 128 here against Zoology's 8,192: the arena's models read one-hot
inputs through a linear embedding and train on a CPU); the filler is 0, as in Zoology's figure-2 configurations
(``random_non_queries=False``; its generator's default draws fillers at random, which may repeat a stored key);
the loss covers the value vocabulary only (a model that puts mass on a key token is only worse); K is a property of
the task, not of the length (Zoology's figure 2 scales K with L: (64, 4), (128, 8), (256, 16)), so sequences longer
than the training length hold the same K pairs with more filler.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.arena.task import Batch, categorical_kl, cross_entropy
from memlab.checks import check_int, check_real

__all__ = ["CERTAIN", "MQARTask"]

CERTAIN = 1e4  # the reference's logit margin: exp(-CERTAIN) underflows to 0, so its loss is exactly 0


class MQARTask(eqx.Module):
    """MQAR with ``vocab_size`` tokens (even: filler 0, keys 1..V/2 - 1, values V/2..V - 1), ``num_pairs`` K pairs
    and query gaps of power law ``power_a`` (Zoology's default 0.01)."""

    vocab_size: int = eqx.field(static=True, default=128)
    num_pairs: int = eqx.field(static=True, default=4)
    power_a: float = eqx.field(static=True, default=0.01)
    name: str = eqx.field(static=True, default="mqar")

    def __check_init__(self):
        check_int("vocab_size", self.vocab_size, low=4)
        if self.vocab_size % 2:
            raise ValueError(f"vocab_size must be even (keys and values take half each), got {self.vocab_size}")
        check_int("num_pairs", self.num_pairs)
        if self.num_pairs > self.vocab_size // 2 - 1:
            raise ValueError(f"num_pairs ({self.num_pairs}) must be at most the {self.vocab_size // 2 - 1} keys")
        check_real("power_a", self.power_a, 0.0, 1.0, open_low=True)

    @property
    def input_size(self) -> int:
        return self.vocab_size

    @property
    def output_size(self) -> int:
        return self.vocab_size // 2  # the values V/2..V-1, as classes 0..V/2-1

    def sample(self, key: Array, batch: int, length: int) -> Batch:
        """``batch`` sequences of ``length`` >= 4K tokens (Zoology's bound: room for K queries); inputs one-hot
        (B, L, V), targets (B, L) the value class at query positions (0 elsewhere), mask the query positions, aux
        the tokens (B, L) int."""
        check_int("batch", batch)
        if check_int("length", length) < 4 * self.num_pairs:
            raise ValueError(f"length must be at least 4 x num_pairs = {4 * self.num_pairs}, got {length}")
        tokens, targets, mask = jax.vmap(lambda k: self._sequence(k, length))(jax.random.split(key, batch))
        return Batch(jax.nn.one_hot(tokens, self.vocab_size), targets, mask, tokens)

    def _sequence(self, key: Array, length: int) -> tuple[Array, Array, Array]:
        K, half = self.num_pairs, self.vocab_size // 2
        k_keys, k_values, k_gaps = jax.random.split(key, 3)
        keys = 1 + _without_replacement(k_keys, jnp.zeros(half - 1), K)
        values = half + _without_replacement(k_values, jnp.zeros(half), K)
        i = jnp.arange(1, (length - 2 * K) // 2 + 1)
        gaps = _without_replacement(k_gaps, (self.power_a - 1.0) * jnp.log(i), K)  # Zoology's power law a i^(a-1)
        where = 2 * K + 2 * gaps  # the query positions
        tokens = jnp.zeros(length, int).at[: 2 * K].set(jnp.stack([keys, values], 1).reshape(-1)).at[where].set(keys)
        targets = jnp.zeros(length, int).at[where].set(values - half)
        return tokens, targets, jnp.zeros(length, bool).at[where].set(True)

    def loss(self, outputs: Array, batch: Batch) -> Array:
        return cross_entropy(outputs, batch.targets)

    def reference(self, batch: Batch) -> Array:
        """(B, L, V/2): at a step whose token is a key stored at an earlier pair, logits 0 on its value and -CERTAIN
        elsewhere; uniform (0) at every other step."""
        return jax.vmap(self._lookup)(batch.aux)

    def _lookup(self, tokens: Array) -> Array:
        K, half = self.num_pairs, self.vocab_size // 2
        stored_keys, stored_values = tokens[0 : 2 * K : 2], tokens[1 : 2 * K : 2]  # (K,)
        t = jnp.arange(tokens.shape[0])[:, None]
        match = (tokens[:, None] == stored_keys[None, :]) & (2 * jnp.arange(K)[None, :] < t)  # (L, K): seen before t
        value = jnp.sum(jnp.where(match, stored_values[None, :], 0), axis=1) - half  # keys are distinct: <= 1 match
        certain = jnp.where(jax.nn.one_hot(value, half) > 0, 0.0, -CERTAIN)
        return jnp.where(jnp.any(match, axis=1)[:, None], certain, 0.0)

    def trivial(self, batch: Batch) -> Array:
        """(B, L, V/2): uniform over the values (module docstring)."""
        return jnp.zeros((*batch.aux.shape, self.output_size))

    def distance(self, outputs: Array, reference: Array) -> Array:
        return categorical_kl(reference, outputs)


def _without_replacement(key: Array, log_weights: Array, num: int) -> Array:
    """``num`` distinct indices drawn one after another with probability proportional to exp(log_weights) among
    those left (what ``numpy.random.choice(..., replace=False, p=...)`` draws): the largest ``num`` of log_weights
    plus independent Gumbel noise, in order (the Gumbel-top-k trick)."""
    return jax.lax.top_k(log_weights + jax.random.gumbel(key, log_weights.shape), num)[1]

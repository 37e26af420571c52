"""The memory interface that PPO trains through. ``memlab.rl`` knows no study: any module with these methods works.

A memory is an Equinox module (a pytree) that processes ONE environment's stream; callers vmap over environments:
``init_state() -> h``, ``step(h, obs, prev_action, start) -> (h, features)``, ``sequence(h, obs, prev_actions,
starts) -> (h_last, features)`` (equal to scanning ``step``), ``num_features`` and ``trainable``. :class:`Memory`
states each method's contract.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array


class Memory(eqx.Module):
    """Base class: subclasses define ``init_state``, ``step`` and ``num_features``; ``sequence`` scans ``step``.

    Every leaf must be an array (put other attributes in ``eqx.field(static=True)``), so that PPO's training state
    can be jitted, vmapped over seeds and serialised. ``trainable`` is False when the features do not depend on
    trainable parameters (the fixed LOF / ALF filters): PPO then stores the rollout's features instead of
    recomputing them in every epoch, and never differentiates through them. Optionally ``diagnostics() ->
    dict[str, scalar]``: PPO logs each entry as the metric ``memory_<name>`` after every update.
    """

    trainable: ClassVar[bool] = True

    @property
    def num_features(self) -> int:
        """F, the length of the features ``step`` returns."""
        raise NotImplementedError

    def init_state(self):
        """The hidden state before the first step (any pytree of arrays)."""
        raise NotImplementedError

    def step(self, h, obs: Array, prev_action: Array, start: Array):
        """One step -> (h, features (F,)). obs (O,) float observation, prev_action () int32 (the action that led to
        ``obs``; 0 at an episode's start), start () bool: ``obs`` is the first observation of an episode, so the
        memory forgets ``h`` (what a reset means is the memory's own business, e.g. the logit filters return their
        initial logits)."""
        raise NotImplementedError

    def sequence(self, h, obs: Array, prev_actions: Array, starts: Array):
        """Scan ``step`` over an unroll: obs (L, O), prev_actions (L,), starts (L,) -> (h_last, features (L, F)).
        A memory may override it (e.g. with a parallel scan) but must return what scanning ``step`` does."""

        def body(h, inputs):
            return self.step(h, *inputs)

        return jax.lax.scan(body, h, (obs, jnp.asarray(prev_actions, jnp.int32), jnp.asarray(starts, bool)))


class ObservationMemory(Memory):
    """No memory: the features are the observation itself (a memoryless agent; on a fully observed
    environment this is the true-state agent whose return is the fully informed optimum)."""

    size: int = eqx.field(static=True)
    trainable = False

    @property
    def num_features(self) -> int:
        return self.size

    def init_state(self):
        return jnp.zeros((), jnp.float32)

    def step(self, h, obs, prev_action, start):
        return h, jnp.asarray(obs, jnp.float32)

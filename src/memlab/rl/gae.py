"""Generalised advantage estimation (Schulman et al. 2016) over one unroll, with the done flag aligned to the
transition.

``dones[t]`` says "the episode ended at transition t" (the step that produced ``rewards[t]``): the next
observation then belongs to a new episode, so neither the TD error nor the advantage of step t may look past
it. With V_L = ``last_value`` (the value of the observation after the unroll):

    delta_t = r_t + gamma * (1 - d_t) * V_{t+1} - V_t
    A_t     = delta_t + gamma * lambda * (1 - d_t) * A_{t+1},       A_L = 0
    target_t = A_t + V_t                                             (the value-function regression target)

A truncated episode (time limit) is treated like a terminated one: no bootstrap across the boundary. That is
exact for finite-horizon tasks whose return is the sum over the episode (RingWorld's K steps, eq. (196)).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array

__all__ = ["gae"]


def gae(rewards: Array, values: Array, dones: Array, last_value: Array, gamma: float, lam: float
        ) -> tuple[Array, Array]:
    """Advantages and value targets of one unroll, time on axis 0.

    **Arguments:** ``rewards``, ``values``, ``dones`` of shape (L, ...) (any trailing batch shape, e.g. (L, N)
    for N environments), ``last_value`` of shape (...), the value of the observation that follows step L - 1.

    **Returns:** ``(advantages, targets)``, each (L, ...).
    """
    rewards, values = jnp.asarray(rewards), jnp.asarray(values)
    continues = 1.0 - jnp.asarray(dones, values.dtype)
    next_values = jnp.concatenate([values[1:], jnp.asarray(last_value, values.dtype)[None]], axis=0)
    deltas = rewards + gamma * continues * next_values - values

    def backward(next_advantage, inputs):
        delta, cont = inputs
        advantage = delta + gamma * lam * cont * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(values[0]), (deltas, continues), reverse=True)
    return advantages, advantages + values

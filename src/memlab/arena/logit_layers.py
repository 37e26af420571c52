"""Paper 1's logit filters as trainable arena layers: the LOF (eq. 7) and the ALF (eq. 24) over ``states`` hidden
states, with the same parametrisation, so that the two differ only where the paper's filters do.

Both read per-state log-likelihoods l_t = emission(x_t) from the layer's input (log E^T y_t when x_t is the one-hot
y_t), move their logits with a learned column-stochastic T = softmax(transition_logits) (column by column) and read
out the (proxy) belief softmax(w_t) (eq. 8 / 10) through a linear map:

    LOF   w_t = log(T exp(w_{t-1})) + l_t,  normalised (log beliefs, eq. 8),  w_0 = log_softmax(initial_logits)
    ALF   w_t = (1 - delta) T w_{t-1} + delta l_t,                            w_0 = 0 (Assumption 5.8)

The LOF is the exact filter's own model class (with an HMM's T, E and pi0 it is that HMM's filter); the ALF is a
linear recurrence in the logits, exact as eq. (24) when T is a permutation P (r = 0: no transient states).

What the paper leaves open for a learned ALF, and what we chose. Its fixed filters take delta from a schedule in the
drift eps (eq. 48: sqrt(eps), 0.7 / log(1/eps)) or the empirically good 0.1 (section 6.2), and need the backbone P.
A layer knows neither eps nor P, so both are learned: delta = sigmoid(delta_logit), started at the PPO ALF's 0.1
(``memlab.belief.ALF_DELTA``), as Deep ALF learns it (App. E.2.2); the permutation P is relaxed to a
column-stochastic T (the LOF layer's parametrisation; a permutation is its limit, and (1 - delta) T keeps the
recurrence stable). Deep ALF instead learns P in the complex eigenbasis shared by circulant permutations (eq. 202),
which needs that basis (RingWorld's DFT); without it, it is a free diagonal complex recurrence, as the arena's LRU
and S5 are.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.belief import ALF_DELTA, alf_update
from memlab.layers import apply_linear
from memlab.logspace import log_matvec, normalize_logits

__all__ = ["AdaptiveLogitFilter", "LogitFilter"]


def transition(layer: LogitFilter | AdaptiveLogitFilter) -> Array:
    """The learned column-stochastic T = softmax(transition_logits) (column by column)."""
    return jax.nn.softmax(layer.transition_logits, axis=0)


def _lof_update(T: Array, w: Array, l_t: Array) -> Array:
    return normalize_logits(log_matvec(T, w) + l_t)  # eq. (7), (8)


class LogitFilter(eqx.Module):
    """The LOF of paper 1 (eq. (7)) as a trainable layer over ``states`` hidden states: the exact HMM filter's own
    model class, learned (module docstring). With T, E and pi0 of an HMM it computes that HMM's exact log beliefs
    (``memlab.belief.log_belief``; tested), so on the hmm tasks a gap above 0 is an optimisation failure, not a lack
    of expressiveness (given enough states)."""

    transition_logits: Array
    initial_logits: Array
    emission: eqx.nn.Linear
    readout: eqx.nn.Linear

    def __init__(self, width: int, states: int, *, key: Array):
        k_t, k_e, k_r = jax.random.split(key, 3)
        self.transition_logits = jax.random.normal(k_t, (states, states))
        self.initial_logits = jnp.zeros(states)
        self.emission = eqx.nn.Linear(width, states, key=k_e)
        self.readout = eqx.nn.Linear(states, width, key=k_r)

    def init_state(self) -> Array:
        """w_0 = log_softmax(initial_logits) (states,)."""
        return jax.nn.log_softmax(self.initial_logits)

    def step(self, w: Array, x: Array) -> tuple[Array, Array]:
        """One input: (w_{t-1}, x_t (width,)) -> (w_t, the read-out belief (width,))."""
        w = _lof_update(transition(self), w, self.emission(x))
        return w, self.readout(jax.nn.softmax(w))

    def log_beliefs(self, x: Array) -> Array:
        """w_1..w_L (L, states): the normalised logits after each input."""
        T = transition(self)

        def step(w, l_t):
            w = _lof_update(T, w, l_t)
            return w, w

        return jax.lax.scan(step, self.init_state(), apply_linear(self.emission, x))[1]

    def __call__(self, x: Array) -> Array:
        return apply_linear(self.readout, jax.nn.softmax(self.log_beliefs(x)))


class AdaptiveLogitFilter(eqx.Module):
    """The ALF of paper 1 (eq. (24)) as a trainable layer over ``states`` hidden states: T, delta, the emission
    and the readout learned (module docstring). With a permutation T = P, E and delta it computes
    ``memlab.belief.alf_filter`` of the time-invariant ALF from w_0 = 0 (tested)."""

    transition_logits: Array
    delta_logit: Array
    emission: eqx.nn.Linear
    readout: eqx.nn.Linear

    def __init__(self, width: int, states: int, *, key: Array):
        k_t, k_e, k_r = jax.random.split(key, 3)
        self.transition_logits = jax.random.normal(k_t, (states, states))
        self.delta_logit = jnp.log(ALF_DELTA) - jnp.log1p(-ALF_DELTA)  # sigmoid^-1(0.1)
        self.emission = eqx.nn.Linear(width, states, key=k_e)
        self.readout = eqx.nn.Linear(states, width, key=k_r)

    @property
    def delta(self) -> Array:
        return jax.nn.sigmoid(self.delta_logit)

    def init_state(self) -> Array:
        """w_0 = 0 (states,)."""
        return jnp.zeros(self.transition_logits.shape[0], self.transition_logits.dtype)

    def step(self, w: Array, x: Array) -> tuple[Array, Array]:
        """One input: (w_{t-1}, x_t (width,)) -> (w_t, the read-out proxy belief (width,))."""
        w = alf_update(self.delta, transition(self) @ w, self.emission(x))  # eq. (24)
        return w, self.readout(jax.nn.softmax(w))

    def logits(self, x: Array) -> Array:
        """w_1..w_L (L, states): the ALF's logits after each input."""
        T, delta = transition(self), self.delta

        def step(w, l_t):
            w = alf_update(delta, T @ w, l_t)  # eq. (24): (1 - delta) T w_{t-1} + delta l_t
            return w, w

        return jax.lax.scan(step, self.init_state(), apply_linear(self.emission, x))[1]

    def __call__(self, x: Array) -> Array:
        return apply_linear(self.readout, jax.nn.softmax(self.logits(x)))  # the proxy belief, eq. (10)

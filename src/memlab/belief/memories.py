"""The belief filters as agent memories (the ``memlab.rl.memory`` interface), for PPO on RingWorld (section 6.2).

* ``LogitFilterMemory`` — a fixed filter built from the environment's own matrices:
  the LOF, eq. (7), ``w_k = log(T(a_{k-1}) exp(w_{k-1})) + log(E^T y_k)``, or the time-varying ALF, eq. (46),
  ``w_k = P(a_{k-1}) (1 - delta) w_{k-1} + delta log(E^T y_k)``; the features are the logits w_k or, with
  ``softmax=True``, the (proxy) belief softmax(w_k), eq. (8)/(10). Only the actor and critic train.

Observations are one-hot vectors (S,); an episode's first observation is the null observation (all zeros), since the
paper's first observation y_1 is emitted by x_1: at a start the memory returns its initial logits w_0 (log pi0 for the
LOF, 0 for the ALF, Assumption 5.8) and ignores the observation and action. So the features of an episode are
w_0, w_1, ..., exactly ``filters.lof_reference`` / ``alf.alf_filter`` on the same (ys, actions) after w_0 (tested).
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.belief.alf import alf_step, permutation_sources
from memlab.belief.filters import lof_step
from memlab.belief.hmm import ControlledHMM
from memlab.checks import check_real
from memlab.logspace import safe_log
from memlab.rl import Memory

ALF_DELTA = 0.1  # the empirically good delta of section 6.2 / App. E.2.2


def observation_index(obs: Array) -> Array:
    """The index s of a one-hot observation u_s (S,) -> () int32 (0 for the null observation, which is never used)."""
    return jnp.argmax(obs).astype(jnp.int32)


class LogitFilterMemory(Memory):
    """A fixed logit filter as memory: ``kind`` 'lof' (eq. 7) or 'alf' (eq. 46); features w_k (N,) or softmax(w_k).

    Fields: ``T`` (A, N, N) transition matrices (LOF), ``src`` (A, N) gather indices of the permutations P(a) (ALF),
    ``log_E`` (S, N), ``delta`` () (ALF), ``w0`` (N,). Build with ``LogitFilterMemory.lof`` / ``.alf``.
    """

    T: Array
    src: Array
    log_E: Array
    delta: Array
    w0: Array
    kind: str = eqx.field(static=True)
    softmax: bool = eqx.field(static=True)
    trainable: ClassVar[bool] = False

    @classmethod
    def lof(cls, model: ControlledHMM, softmax: bool = False) -> LogitFilterMemory:
        """The logit optimal filter of ``model`` (eq. 7), w_0 = log pi0."""
        N = model.num_states
        no_src = jnp.zeros((model.num_actions, N), jnp.int32)
        return cls(model.T, no_src, safe_log(model.E), jnp.zeros((), model.T.dtype), safe_log(model.pi0), "lof",
                   softmax)

    @classmethod
    def alf(cls, P, model: ControlledHMM, delta: float = ALF_DELTA, softmax: bool = False) -> LogitFilterMemory:
        """The time-varying ALF (eq. 46) on the permutation backbones ``P`` (A, N, N) of ``model``; w_0 = 0."""
        check_real("delta", delta, 0.0, 1.0)
        src = jnp.asarray(permutation_sources(np.asarray(P)))
        if src.shape != (model.num_actions, model.num_states):
            raise ValueError(f"P must have shape (A, N, N) = {model.T.shape}, got {np.shape(P)}")
        dtype = model.T.dtype
        return cls(model.T, src, safe_log(model.E), jnp.asarray(delta, dtype), jnp.zeros(model.num_states, dtype),
                   "alf", softmax)

    @property
    def num_features(self) -> int:
        return self.w0.shape[0]

    def init_state(self) -> Array:
        return self.w0

    def step(self, h: Array, obs: Array, prev_action: Array, start: Array) -> tuple[Array, Array]:
        y = observation_index(obs)
        if self.kind == "lof":
            w = lof_step(self.T[prev_action], self.log_E, h, y)  # eq. (7)
        else:
            w = alf_step(self.src[prev_action], self.log_E, self.delta, h, y)  # eq. (46)
        w = jnp.where(start, self.w0, w)
        return w, self.features(w)

    def features(self, w: Array) -> Array:
        """What the actor and critic see: the logits, or softmax(w) (eq. 8 / 10)."""
        return jax.nn.softmax(w) if self.softmax else w

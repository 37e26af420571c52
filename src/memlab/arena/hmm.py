"""The hmm task family: predict the next observation of a hidden Markov model.

At step t the model has read y_1..y_t (one-hot) and predicts y_{t+1}, scored by cross-entropy. The reference is
the exact filter's predictive distribution p(y_{t+1} | y_{1:t}) = E T alpha_t (paper 1, eq. 6; alpha_t from
``memlab.belief.log_belief``), whose expected loss per step tends to the process's entropy rate. The trivial
predictor is p(y_{t+1} | y_t) under the model, exact at every t (a memoryless model that knows t can reach it).

Processes: ``random_hmm`` (a stated Dirichlet prior), ``two_state`` (paper 1's example, eq. 47 / 54), ``mess3``
(the three-state process of the belief-geometry literature), ``noisy_cycle`` (a deterministic cycle whose exact
filter is linear in the logits).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.arena.task import Batch, categorical_kl, cross_entropy
from memlab.belief import HMM, log_belief, sample, two_state_example
from memlab.checks import check_int, check_real

__all__ = ["HMMTask", "mess3", "noisy_cycle", "predictive_logits", "random_hmm", "two_state"]


class HMMTask(eqx.Module):
    """Next-observation prediction on ``hmm`` (T (N, N) and E (S, N) column-stochastic, pi0 (N,))."""

    hmm: HMM
    name: str = eqx.field(static=True, default="hmm")

    @property
    def input_size(self) -> int:
        return self.hmm.num_obs

    @property
    def output_size(self) -> int:
        return self.hmm.num_obs

    def sample(self, key: Array, batch: int, length: int) -> Batch:
        """``batch`` sequences: inputs one-hot y_1..y_L, targets y_2..y_{L+1}; aux: y_1..y_L (B, L) int."""
        check_int("batch", batch)
        check_int("length", length)
        ys = sample(self.hmm, key, length + 1, batch).observations  # (B, L + 1): y_1..y_{L+1}
        seen = ys[:, :-1]
        return Batch(jax.nn.one_hot(seen, self.input_size), ys[:, 1:], jnp.ones(seen.shape, bool), seen)

    def loss(self, outputs: Array, batch: Batch) -> Array:
        return cross_entropy(outputs, batch.targets)

    def reference(self, batch: Batch) -> Array:
        """log p(y_{t+1} | y_{1:t}) (B, L, S): the exact filter's belief alpha_t pushed through T, then E."""
        log_alpha = jax.vmap(lambda ys: log_belief(self.hmm, ys))(batch.aux)  # (B, L, N)
        return predictive_logits(self.hmm, log_alpha)

    def trivial(self, batch: Batch) -> Array:
        """log p(y_{t+1} | y_t) (B, L, S), from the prior marginals p(x_t) = T^t pi0 (no memory of y_{1:t-1})."""
        T, E = self.hmm.T, self.hmm.E

        def marginal(p, _):
            p = T @ p
            return p, p

        _, p = jax.lax.scan(marginal, self.hmm.pi0, None, length=batch.aux.shape[1])  # p(x_t), t = 1..L
        joint = jnp.einsum("an,tn,bn->tab", E, p, E @ T)  # p(y_t = a, y_{t+1} = b)
        conditional = jnp.log(joint) - jnp.log(joint.sum(-1, keepdims=True))
        return jax.vmap(lambda ys: conditional[jnp.arange(ys.shape[0]), ys])(batch.aux)

    def distance(self, outputs: Array, reference: Array) -> Array:
        return categorical_kl(reference, outputs)


def predictive_logits(hmm: HMM, log_alpha: Array) -> Array:
    """log (E T alpha) (..., S) from log alpha (..., N), in log space: beliefs may underflow float32."""
    log_prior = jax.nn.logsumexp(jnp.log(hmm.T) + log_alpha[..., None, :], axis=-1)  # log T alpha
    return jax.nn.logsumexp(jnp.log(hmm.E) + log_prior[..., None, :], axis=-1)


def random_hmm(seed: int, num_states: int, num_obs: int, concentration: float = 1.0) -> HMM:
    """An HMM with every column of T and E drawn from Dirichlet(concentration * 1) and pi0 uniform (NumPy's
    generator seeded with ``seed``, so the process is fixed by its arguments)."""
    check_int("num_states", num_states)
    check_int("num_obs", num_obs, low=2)
    check_real("concentration", concentration, low=0.0, open_low=True)
    rng = np.random.default_rng(seed)
    T = rng.dirichlet(np.full(num_states, concentration), size=num_states).T
    E = rng.dirichlet(np.full(num_obs, concentration), size=num_states).T
    pi0 = np.full(num_states, 1.0 / num_states)
    return HMM(*(jnp.asarray(a, jnp.float32) for a in (T, E, pi0)))


def two_state(eps: float = 0.1, e: float = 0.8, flip: bool = True) -> HMM:
    """Paper 1's two-state example, eq. (47) (``flip``) or eq. (54)."""
    return two_state_example(eps, e, flip)[0]


def noisy_cycle(num_states: int = 5, num_obs: int = 3, accuracy: float = 0.7) -> HMM:
    """A deterministic cycle x -> x + 1 (mod N), state x emitting x mod S with probability ``accuracy`` and each other
    symbol with the rest shared equally; pi0 uniform. Its exact filter is a linear recurrence in the logits (paper 1,
    Theorem 4.4): the arena's exactly compilable HMM."""
    check_int("num_states", num_states)
    check_int("num_obs", num_obs, low=2)
    check_real("accuracy", accuracy, low=0.0, high=1.0, open_low=True, open_high=True)
    T = np.roll(np.eye(num_states), 1, axis=0)  # column x has its 1 in row x + 1
    E = np.full((num_obs, num_states), (1.0 - accuracy) / (num_obs - 1))
    E[np.arange(num_states) % num_obs, np.arange(num_states)] = accuracy
    pi0 = np.full(num_states, 1.0 / num_states)
    return HMM(*(jnp.asarray(a, jnp.float32) for a in (T, E, pi0)))


def mess3(x: float = 0.05, alpha: float = 0.85) -> HMM:
    """Mess3 (Marzen & Crutchfield 2017; Shai et al. 2024 use x = 0.05, alpha = 0.85): three states that stay with
    probability 1 - 2x and move to each other state with probability x; state j emits j with probability alpha and
    each other symbol with (1 - alpha) / 2. pi0 is the stationary (uniform) distribution."""
    check_real("x", x, low=0.0, high=0.5, open_low=True, open_high=True)
    check_real("alpha", alpha, low=0.0, high=1.0)
    T = np.full((3, 3), x) + (1.0 - 3.0 * x) * np.eye(3)
    E = np.full((3, 3), (1.0 - alpha) / 2.0) + (alpha - (1.0 - alpha) / 2.0) * np.eye(3)
    return HMM(jnp.asarray(T, jnp.float32), jnp.asarray(E, jnp.float32), jnp.full(3, 1.0 / 3.0, jnp.float32))

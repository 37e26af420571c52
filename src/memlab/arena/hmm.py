"""The hmm task family: predict the next observation of a hidden Markov model, with or without actions.

At step t the model has read y_1..y_t (one-hot) and predicts y_{t+1}, scored by cross-entropy. The reference is
the exact filter's predictive distribution p(y_{t+1} | y_{1:t}) = E T alpha_t (paper 1, eq. 6; alpha_t from
``memlab.belief.log_belief``), whose expected loss per step tends to the process's entropy rate. The trivial
predictor is p(y_{t+1} | y_t) under the model, exact at every t (a memoryless model that knows t can reach it).

An action-controlled HMM (``memlab.belief.ControlledHMM``, T(a) per action) makes it an input-output HMM: the
actions a_0, a_1, ... are drawn uniformly at random, and at step t the model reads the action a_t taken after y_t
and y_t itself (one-hot, concatenated: [a_t, y_t]) and predicts y_{t+1}, the observation that action leads to. The
reference is the exact filter conditioned on the actions (eq. 6 with T(a_{t-1})), pushed through T(a_t) and E; the
trivial predictor is p(y_{t+1} | y_t, a_t) under the prior marginals p(x_t) (T-bar^t pi0, T-bar the mean of T(a)).
The model never sees a_0 (it moves x_0 to x_1 before the first observation): the task requires T(a) pi0 to be the
same for every a, so the reference, which conditions on a_0, is the optimum given what the model sees. An HMM is the
single-action case (no action in the input: ``input_size`` is the number of symbols).

Processes: ``random_hmm`` (a stated Dirichlet prior), ``two_state`` (paper 1's example, eq. 47 / 54), ``mess3``
(the three-state process of the belief-geometry literature), ``noisy_cycle`` (a deterministic cycle whose exact
filter is linear in the logits), ``ringworld`` (paper 1's RingWorld POMDP, section 6.2, under random actions).
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.arena.task import Batch, categorical_kl, cross_entropy
from memlab.belief import HMM, ControlledHMM, RingWorld, log_belief, sample, two_state_example
from memlab.checks import STOCHASTIC_ATOL, check_int, check_real, is_concrete
from memlab.logspace import log_matvec_fast

__all__ = ["ActionHistory", "HMMTask", "mess3", "noisy_cycle", "predictive_logits", "random_hmm", "ringworld",
           "two_state"]


class ActionHistory(NamedTuple):
    """What the reference of a controlled task needs (a batch's ``aux``): ``observations`` (B, L) y_1..y_L and
    ``actions`` (B, L + 1) a_0..a_L."""

    observations: Array
    actions: Array


class HMMTask(eqx.Module):
    """Next-observation prediction on ``hmm``: an HMM (T (N, N)) or a ControlledHMM (T (A, N, N), uniformly random
    actions); E (S, N) and T column-stochastic, pi0 (N,). The batch's ``aux``: y_1..y_L (B, L) int for an HMM, an
    :class:`ActionHistory` for a ControlledHMM."""

    hmm: HMM | ControlledHMM
    name: str = eqx.field(static=True, default="hmm")

    def __check_init__(self):
        if isinstance(self.hmm, ControlledHMM) and is_concrete(self.hmm.T, self.hmm.pi0):
            first = np.asarray(self.hmm.T) @ np.asarray(self.hmm.pi0)  # (A, N): p(x_1 | a_0)
            if np.max(np.abs(first - first.mean(0))) > STOCHASTIC_ATOL:
                raise ValueError("a controlled hmm task needs T(a) pi0 to be the same for every action a: the model "
                                 "never sees the first action a_0")

    @property
    def controlled(self) -> bool:
        return isinstance(self.hmm, ControlledHMM)

    @property
    def num_actions(self) -> int:
        return self.hmm.num_actions if self.controlled else 1

    @property
    def input_size(self) -> int:
        return self.hmm.num_obs + (self.num_actions if self.controlled else 0)

    @property
    def output_size(self) -> int:
        return self.hmm.num_obs

    def sample(self, key: Array, batch: int, length: int) -> Batch:
        """``batch`` sequences: inputs one-hot y_1..y_L (after one-hot a_1..a_L if controlled), targets
        y_2..y_{L+1}; aux: see the class docstring."""
        check_int("batch", batch)
        check_int("length", length)
        if not self.controlled:
            ys = sample(self.hmm, key, length + 1, batch).observations  # (B, L + 1): y_1..y_{L+1}
            seen = ys[:, :-1]
            return Batch(jax.nn.one_hot(seen, self.input_size), ys[:, 1:], jnp.ones(seen.shape, bool), seen)
        k_actions, k_path = jax.random.split(key)
        actions = jax.random.randint(k_actions, (batch, length + 1), 0, self.num_actions)  # a_0..a_L, uniform
        ys = sample(self.hmm, k_path, length + 1, batch, actions=actions).observations  # y_1..y_{L+1}
        seen = ys[:, :-1]
        inputs = jnp.concatenate([jax.nn.one_hot(actions[:, 1:], self.num_actions),
                                  jax.nn.one_hot(seen, self.hmm.num_obs)], axis=-1)  # [a_t, y_t]
        return Batch(inputs, ys[:, 1:], jnp.ones(seen.shape, bool), ActionHistory(seen, actions))

    def loss(self, outputs: Array, batch: Batch) -> Array:
        return cross_entropy(outputs, batch.targets)

    def reference(self, batch: Batch) -> Array:
        """log p(y_{t+1} | y_{1:t}, a_{0:t}) (B, L, S): the exact filter's belief alpha_t pushed through T (T(a_t)),
        then E."""
        if not self.controlled:
            log_alpha = jax.vmap(lambda ys: log_belief(self.hmm, ys).logits)(batch.aux)  # (B, L, N)
            return predictive_logits(self.hmm, log_alpha)
        history = batch.aux
        log_alpha = jax.vmap(lambda ys, a: log_belief(self.hmm, ys, a).logits)(history.observations,
                                                                               history.actions[:, :-1])  # eq. (6)
        return predictive_logits(self.hmm, log_alpha, history.actions[:, 1:])

    def trivial(self, batch: Batch) -> Array:
        """log p(y_{t+1} | y_t, a_t) (B, L, S), from the prior marginals p(x_t) = T-bar^t pi0 (no memory of
        y_{1:t-1}; T-bar = T for an HMM)."""
        E = self.hmm.E
        transitions = self.hmm.T if self.controlled else self.hmm.T[None]  # (A, N, N)
        T_bar = self.hmm.T.mean(0) if self.controlled else self.hmm.T  # actions are uniform

        def marginal(p, _):
            p = T_bar @ p
            return p, p

        _, p = jax.lax.scan(marginal, self.hmm.pi0, None, length=batch.mask.shape[1])  # p(x_t), t = 1..L
        joint = jnp.stack([jnp.einsum("an,tn,bn->tab", E, p, E @ T) for T in transitions])  # p(y_t, y_{t+1} | a)
        conditional = jnp.log(joint) - jnp.log(joint.sum(-1, keepdims=True))  # (A, L, S, S)
        steps = jnp.arange(batch.mask.shape[1])
        if not self.controlled:
            return jax.vmap(lambda ys: conditional[0, steps, ys])(batch.aux)
        return jax.vmap(lambda ys, a: conditional[a[1:], steps, ys])(batch.aux.observations, batch.aux.actions)

    def distance(self, outputs: Array, reference: Array) -> Array:
        return categorical_kl(reference, outputs)


def predictive_logits(hmm: HMM | ControlledHMM, log_alpha: Array, actions: Array | None = None) -> Array:
    """log (E T alpha) (..., S) from log alpha (..., N), in log space: beliefs may underflow float32. A
    ControlledHMM needs ``actions`` (...,): T(a) per step, every action's prior computed by a matmul (a state's prior
    below e^-87 of the largest rounds to 0, which moves no predictive probability) and the step's one kept."""
    if actions is None:
        log_prior = jax.nn.logsumexp(jnp.log(hmm.T) + log_alpha[..., None, :], axis=-1)  # log T alpha
    else:
        priors = log_matvec_fast(hmm.T, log_alpha[..., None, :])  # (..., A, N): log T(a) alpha for every a
        log_prior = jnp.take_along_axis(priors, actions[..., None, None], axis=-2)[..., 0, :]
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


def ringworld(epsilon: float = 0.05) -> ControlledHMM:
    """RingWorld's action-controlled HMM (paper 1, section 6.2 and App. E.2.1; ``memlab.belief.RingWorld``'s own
    matrices): 12 states on a ring, actions CW1, CW2, CCW1, CCW2 that slip or overshoot with probability ``epsilon``
    each, 4 beacon observations, pi0 uniform. Every T(a) is doubly stochastic, so p(x_t) stays uniform: the trivial
    predictor p(y_{t+1} | y_t, a_t) is the same at every t."""
    hmm = RingWorld(epsilon=epsilon).default_params.hmm
    return ControlledHMM(*(jnp.asarray(a, jnp.float32) for a in (hmm.T, hmm.E, hmm.pi0)))

"""The policy-evaluation task family: predict the value of a state in context, from transitions of a random MRP.

Every sequence is its own task, drawn as the ictd study draws its pretraining tasks: a randomised Boyan chain with a
random feature map (paper 2, Algorithm 2 of App. F.3, ``memlab.ictd.boyan.boyan_chain``): m states, features
x(s) ~ U(-1, 1)^d, w* ~ U(-1, 1)^d, rewards r = (I - gamma P) X w*, so that v = (I - gamma P)^{-1} r = X w* is linear
in the features; one trajectory S_0, R_1, S_1, ..., R_n, S_n from Algorithm 2's p0 (``ictd.mrp.sample_trajectory``,
R_k = r(S_{k-1})). The canonical sizes are Table 1's: m = 64, d = 4, gamma = 0.9. Table 1 trains at one context
length, n = 10; here every context length from the burn-in to n = length / 2 is scored (4..32 at the leaderboard's
length 64, which contains n = 10).

The sequence alternates two kinds of step (2n steps; n = ceil(length / 2) transitions):

    step 2k - 2, transition k:  [x(S_{k-1}), R_k, x(S_k), 0]    not scored
    step 2k - 1, query k:       [x(S_k),     0,   0_d,    1]    target v(S_k), scored once k >= burn_in

This is the paper's prompt (eq. 13) read one column at a time: its query is S_n, the successor of the last context
transition, whose reward is not in the prompt (Section 3; Algorithm 1's x_q = x_{t+n}). Querying after every
transition asks the paper's in-context question at every context length k = 1..n of one trajectory, a dense signal
(one scored step in two) that stays faithful to it. The query has a step of its own so that a step which holds the
query holds no reward: every reward carries information about w*, so a single step with both (e.g. predicting
v(S_k) at transition k) would let a memoryless predictor beat the prior and make the trivial predictor an
approximate, Monte-Carlo one. Here it is exact: the query step shows x(S_k) only, and w* is symmetric about 0 and
independent of the features and the trajectory, so E[v(S_k) | x(S_k), k] = E[w*]^T x(S_k) = 0: the trivial
predictor is 0, with expected loss E[(w*^T x)^2] = d / 9.

Training target: the true value v(S_k) = ((I - gamma P)^{-1} r)[S_k] (``ictd.mrp.value_function``); the oracle that
outputs it has loss 0. Reference: the linear TD fixed point of the context so far (LSTD, the fixed point of batch
linear TD, i.e. of the linear-attention ICTD of Wang et al. 2025a, which the paper's softmax ICTD generalises),
A_k w = b_k with A_k = sum_{j<=k} x_{j-1} (x_{j-1} - gamma x_j)^T and b_k = sum_{j<=k} x_{j-1} R_j, read out at the
query, w_k^T x(S_k). It is NOT the Bayes-optimal predictor of v(S_k) (that would use the prior of w* and of P), so a
model may beat it: ``reference_exact = False``. Two choices make it well-posed:

* burn-in: for k < d transitions rank A_k <= k < d and the fixed point is not unique; those query steps are not
  scored (``burn_in`` = d by default);
* ridge: for k >= d, A_k can still be nearly singular, and the plain LSTD solution is heavy-tailed (a few nearly
  singular contexts dominate its mean squared error, far above its median). memlab solves the fixed-point
  equation in the ridge-regularised (Tikhonov) sense, w_k = argmin |A_k w - b_k|^2 + lambda |w|^2
  = (A_k^T A_k + lambda I)^{-1} A_k^T b_k, whose lambda -> 0 limit is the minimum-norm solution (the LSTD
  solution when A_k is invertible) and whose weight fades as A_k grows with k. lambda = 1 (``ridge``): of 0.03,
  0.1, 0.3, 1, 3 it had, with 0.3, the lowest mean loss over k = 1..32, and the lighter tail.

With these the reference's loss is far below the trivial predictor's (tests/arena/test_policy_task.py);
``value_losses`` reports both, and the TD loss per context length, which falls as the context grows.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.arena.task import Batch, masked_mean, squared_error
from memlab.checks import check_gamma, check_int, check_real
from memlab.ictd import Task as MRPTask
from memlab.ictd import boyan_chain, sample_trajectory, value_function

__all__ = ["PolicyContexts", "PolicyEvalTask", "ValueLosses", "td_fixed_point", "value_losses"]


class PolicyContexts(NamedTuple):
    """What a batch's sequences were drawn from: ``tasks`` (an ``ictd.mrp.Task`` with a leading (B,) axis: the MRP,
    features (B, m, d), w_star, v_star), ``states`` (B, n + 1) S_0..S_n, ``rewards`` (B, n) R_1..R_n, ``values``
    (B, m) the true value function (I - gamma P)^{-1} r."""

    tasks: MRPTask
    states: Array
    rewards: Array
    values: Array


class PolicyEvalTask(eqx.Module):
    """Value prediction in context on random Boyan-chain MRPs (module docstring): ``num_states`` m, ``feature_dim``
    d, discount ``gamma``, ``ridge`` lambda of the reference's TD fixed point, ``burn_in`` (transitions before the
    first scored query; 0 means d)."""

    num_states: int = eqx.field(static=True, default=64)
    feature_dim: int = eqx.field(static=True, default=4)
    gamma: float = eqx.field(static=True, default=0.9)
    ridge: float = eqx.field(static=True, default=1.0)
    burn_in: int = eqx.field(static=True, default=0)
    name: str = eqx.field(static=True, default="policy-eval")
    reference_exact = False  # the TD fixed point is the paper's in-context algorithm, not the Bayes predictor

    def __check_init__(self):
        check_int("num_states", self.num_states, 2)
        check_int("feature_dim", self.feature_dim)
        check_gamma(self.gamma)
        check_real("ridge", self.ridge, low=0.0, open_low=True)
        check_int("burn_in", self.burn_in, 0)

    @property
    def input_size(self) -> int:
        return 2 * self.feature_dim + 2

    @property
    def output_size(self) -> int:
        return 1

    @property
    def first_scored(self) -> int:
        """The first scored context length k (transitions seen before the query)."""
        return self.burn_in or self.feature_dim

    def sample(self, key: Array, batch: int, length: int) -> Batch:
        """``batch`` sequences of ``length`` steps (module docstring); aux: :class:`PolicyContexts`."""
        check_int("batch", batch)
        check_int("length", length)
        n = (length + 1) // 2
        k_task, k_traj = jax.random.split(key)
        tasks = jax.vmap(lambda k: boyan_chain(k, self.num_states, self.feature_dim, self.gamma))(
            jax.random.split(k_task, batch))
        states, rewards = jax.vmap(lambda mrp, k: sample_trajectory(mrp, k, n))(tasks.mrp,
                                                                               jax.random.split(k_traj, batch))
        values = jax.vmap(value_function)(tasks.mrp)  # (B, m): v = (I - gamma P)^{-1} r, eq. (7)
        x = jnp.take_along_axis(tasks.features, states[..., None], axis=1)  # (B, n + 1, d): x(S_0..S_n)
        B, d = batch, self.feature_dim
        transition = jnp.concatenate([x[:, :-1], rewards[..., None], x[:, 1:], jnp.zeros((B, n, 1))], -1)
        query = jnp.concatenate([x[:, 1:], jnp.zeros((B, n, d + 1)), jnp.ones((B, n, 1))], -1)
        inputs = jnp.stack([transition, query], 2).reshape(B, 2 * n, -1)[:, :length]
        v_next = jnp.take_along_axis(values, states[:, 1:], axis=1)  # (B, n): v(S_1..S_n)
        targets = jnp.repeat(v_next, 2, axis=1)[:, :length, None]  # both steps of pair k: v(S_k)
        step = jnp.arange(length)
        scored = (step % 2 == 1) & (step // 2 + 1 >= self.first_scored)  # query steps with k >= burn-in
        return Batch(inputs, targets, jnp.broadcast_to(scored, (B, length)),
                     PolicyContexts(tasks, states, rewards, values))

    def loss(self, outputs: Array, batch: Batch) -> Array:
        return squared_error(outputs, batch.targets)

    def reference(self, batch: Batch) -> Array:
        """(B, L, 1): w_k^T x(S_k), the ridge TD fixed point of transitions 1..k read at the query, at both steps of
        pair k; computed from the inputs alone (the context the model sees)."""
        L = batch.inputs.shape[1]
        x_prev, rewards, x_next = self.transitions(batch)
        w = jax.vmap(lambda a, r, b: td_fixed_point(a, r, b, self.gamma, self.ridge))(x_prev, rewards, x_next)
        v_hat = jnp.sum(w * x_next, -1)  # (B, n): the query S_k is transition k's successor
        return jnp.repeat(v_hat, 2, axis=1)[:, :L, None]

    def transitions(self, batch: Batch) -> tuple[Array, Array, Array]:
        """The context's transitions as the model sees them: x(S_{k-1}) (B, n, d), R_k (B, n), x(S_k) (B, n, d)."""
        d = self.feature_dim
        steps = batch.inputs[:, 0::2]  # (B, n, 2d + 2)
        return steps[..., :d], steps[..., d], steps[..., d + 1:2 * d + 1]

    def trivial(self, batch: Batch) -> Array:
        """(B, L, 1) zeros: E[v(S_k) | x(S_k), k] = 0, since w* is symmetric and independent of x (exact)."""
        return jnp.zeros(batch.targets.shape)

    def distance(self, outputs: Array, reference: Array) -> Array:
        return squared_error(outputs, reference)


def td_fixed_point(x_prev: Array, rewards: Array, x_next: Array, gamma: float, ridge: float) -> Array:
    """The ridge-regularised linear TD fixed point of every prefix of one trajectory: w (n, d), row k - 1 the
    solution for transitions 1..k.

    x_prev (n, d) x(S_{k-1}), rewards (n,) R_k, x_next (n, d) x(S_k). A_k w = b_k is the fixed point of batch linear
    TD (the TD error R + gamma x'^T w - x^T w of eq. (8), averaged with weights x); it is solved as
    argmin |A_k w - b_k|^2 + ridge |w|^2 through the SVD A_k = U diag(s) V^T: w = V diag(s / (s^2 + ridge)) U^T b_k
    (stable in float32 where the normal equations are not).
    """
    A = jnp.cumsum(x_prev[:, :, None] * (x_prev - gamma * x_next)[:, None, :], axis=0)  # (n, d, d)
    b = jnp.cumsum(x_prev * rewards[:, None], axis=0)  # (n, d)
    U, s, Vt = jnp.linalg.svd(A)
    coefficients = s / (s**2 + ridge) * jnp.einsum("kij,ki->kj", U, b)  # diag(s / (s^2 + ridge)) U^T b
    return jnp.einsum("kji,kj->ki", Vt, coefficients)  # V (...)


class ValueLosses(NamedTuple):
    """Mean squared value errors over a batch's scored steps: ``oracle`` (the true value: 0 by construction),
    ``td_fixed_point`` (the reference), ``trivial`` (the prior mean 0); and per context length ``context`` (K,)
    k = 1..n, ``td_by_context``, ``trivial_by_context`` (K,) over the query steps with that k (scored or not)."""

    oracle: float
    td_fixed_point: float
    trivial: float
    context: Array
    td_by_context: Array
    trivial_by_context: Array


def value_losses(task: PolicyEvalTask, batch: Batch) -> ValueLosses:
    """The losses of the oracle, the TD fixed point and the trivial predictor on ``batch`` (for summaries)."""
    oracle, td, trivial = (task.loss(p, batch) for p in (batch.targets, task.reference(batch), task.trivial(batch)))
    means = [float(masked_mean(x, batch.mask)) for x in (oracle, td, trivial)]
    query = slice(1, None, 2)
    return ValueLosses(*means, jnp.arange(1, td[:, query].shape[1] + 1), td[:, query].mean(0),
                       trivial[:, query].mean(0))

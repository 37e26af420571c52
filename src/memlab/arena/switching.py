"""The switching task: predict the next observation of a switching linear-Gaussian model (an SLDS, paper 3, eq. 16).

Model, in the lgssm task's time convention (``memlab.kalman``): a mode chain z_0 ~ pi0, z_t | z_{t-1} ~
T[:, z_{t-1}] (T column-stochastic, K modes; z_0 acts on nothing), x_0 ~ N(m_0, P_0), and for t = 1, 2, ...

    x_t = A_{z_t} x_{t-1} + q_t,  q_t ~ N(0, Q_{z_t});        y_t = C x_t + r_t,  r_t ~ N(0, R)     (eq. 16)

At step t the model has read y_1..y_t and predicts y_{t+1}, scored by squared error (as the lgssm task).

* The optimal predictor E[y_{t+1} | y_{1:t}] is a mixture over the K^t mode histories z_{1:t}: each history is a
  Kalman filter (eq. 17-21) with the likelihood p(y_{1:t} | z_{1:t}), so E[y_{t+1} | y_{1:t}] = sum over histories
  of p(z_{1:t} | y_{1:t}) sum_k T[k, z_t] C A_k m_{t|t}(z_{1:t}). The mixture grows K-fold per step; no exact
  recursion of fixed size exists. :func:`exact_predictive_mean` enumerates it (a bank of K^t Kalman filters,
  feasible to t ~ 10, used by the tests).
* ``reference`` is :func:`particle_predictive_mean`, a Rao-Blackwellised particle filter over mode histories (each
  particle a Kalman filter; each particle's K successors weighted exactly; P of the P K children kept by Fearnhead
  & Clifford's (2003) optimal resampling, which keeps every history while there are at most P, so the filter is
  exact for t <= log_K P). ``num_particles`` = 32 by default: its predictions differ from those of many more
  particles, and at short L from the enumeration, by a negligible share of the canonical task's L_trivial - L_ref
  (tests/arena/test_switching_task.py). It is still approximate (``reference_exact = False``). It runs inside
  ``jax.jit`` with a fixed key: ``jax.random.fold_in(jax.random.key(reference_seed), b)`` for the b-th sequence of
  the batch, so the reference of a batch is a fixed function of the batch. Its Kalman steps are ``small_kalman``'s,
  fused for speed.
* ``trivial`` is the best *linear* memoryless predictor E[y_{t+1}] + Cov(y_{t+1}, y_t) Cov(y_t)^{-1} (y_t - E[y_t])
  from the exact prior moments (:func:`prior_moments`). E[y_{t+1} | y_t] of a mixture is not linear in y_t, so a
  nonlinear predictor without memory may beat it a little: a gap slightly below 1 needs no memory.

Why not pissm's bootstrap filter (``pissm.particle.bootstrap_particle_filter``)? It fits this model over (x_t, z_t),
but its transition sampler cannot see y_t, so a particle cannot carry a Kalman filter; with the arena's small
observation noise it degenerates: at short L, thousands of bootstrap particles end far further off the enumeration
than this filter with 32. The Kalman step is ``memlab.kalman``'s (``small_kalman`` is the same step, fused, for
the filter).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.arena.lgssm import best_linear_prediction
from memlab.arena.small_kalman import kalman_step_small
from memlab.arena.task import Batch, squared_error
from memlab.belief import HMM, sample
from memlab.checks import check_column_stochastic, check_distribution, check_int, check_real, is_concrete
from memlab.kalman import predict, sample_lgssm, update

__all__ = ["SwitchingLGSSMTask", "SwitchingMoments", "exact_predictive_mean", "optimal_resample",
           "particle_predictive_mean", "prior_moments", "random_switching_lgssm"]

MAX_HISTORIES = 2**20  # the largest bank exact_predictive_mean builds (K^t Kalman filters)


class SwitchingLGSSMTask(eqx.Module):
    """Next-observation prediction: A (K, M, M) and Q (K, M, M) per mode, C (D, M), R (D, D) shared, m0 (M,),
    P0 (M, M), the mode chain's T (K, K) column-stochastic and pi0 (K,); the reference's ``num_particles`` and
    ``reference_seed`` (module docstring)."""

    A: Array
    C: Array
    Q: Array
    R: Array
    m0: Array
    P0: Array
    T: Array
    pi0: Array
    name: str = eqx.field(static=True, default="switching")
    num_particles: int = eqx.field(static=True, default=32)
    reference_seed: int = eqx.field(static=True, default=0)
    reference_exact = False  # the particle filter approximates the optimum (task.reference_is_exact)

    def __check_init__(self):
        K, M = np.shape(self.A)[0], np.shape(self.m0)[-1]
        D = np.shape(self.C)[0]
        for name, x, shape in (("A", self.A, (K, M, M)), ("Q", self.Q, (K, M, M)), ("C", self.C, (D, M)),
                               ("R", self.R, (D, D)), ("P0", self.P0, (M, M)), ("T", self.T, (K, K)),
                               ("pi0", self.pi0, (K,))):
            if np.shape(x) != shape:
                raise ValueError(f"{name} must have shape {shape}, got {np.shape(x)}")
        if is_concrete(self.T, self.pi0):
            check_column_stochastic("T", self.T)
            check_distribution("pi0", self.pi0)
        check_int("num_particles", self.num_particles)

    @property
    def num_modes(self) -> int:
        return self.A.shape[0]

    @property
    def input_size(self) -> int:
        return self.C.shape[0]

    @property
    def output_size(self) -> int:
        return self.C.shape[0]

    def sample(self, key: Array, batch: int, length: int) -> Batch:
        """``batch`` sequences: inputs y_1..y_L (B, L, D), targets y_2..y_{L+1}; aux: the modes z_1..z_{L+1}
        (B, L + 1) int (the reference does not read them)."""
        check_int("batch", batch)
        check_int("length", length)
        k_modes, k_states = jax.random.split(key)
        chain = HMM(self.T, jnp.ones((1, self.num_modes), self.T.dtype), self.pi0)  # one uninformative symbol
        modes = sample(chain, k_modes, length + 1, batch).states[:, 1:]  # (B, L + 1): z_1..z_{L+1}

        def draw(k, z):
            return sample_lgssm(k, self.A[z], self.C, self.Q[z], self.R, self.m0, self.P0, length + 1)[1]

        ys = jax.vmap(draw)(jax.random.split(k_states, batch), modes)
        return Batch(ys[:, :-1], ys[:, 1:], jnp.ones((batch, length), bool), modes)

    def loss(self, outputs: Array, batch: Batch) -> Array:
        return squared_error(outputs, batch.targets)

    def reference(self, batch: Batch) -> Array:
        """(B, L, D): the particle filter's E[y_{t+1} | y_{1:t}], key fixed per sequence (module docstring)."""
        base = jax.random.key(self.reference_seed)
        keys = jax.vmap(lambda b: jax.random.fold_in(base, b))(jnp.arange(batch.inputs.shape[0]))
        return jax.vmap(lambda k, ys: particle_predictive_mean(self, ys, k, self.num_particles))(keys, batch.inputs)

    def trivial(self, batch: Batch) -> Array:
        """(B, L, D): the best linear predictor of y_{t+1} from y_t, from the exact prior moments."""
        moments = prior_moments(self, batch.inputs.shape[1] + 1)
        return best_linear_prediction(batch.inputs, moments.y_mean[:-1], moments.y_cov[:-1], moments.y_mean[1:],
                                      moments.y_cross)

    def distance(self, outputs: Array, reference: Array) -> Array:
        return squared_error(outputs, reference)


# ---------------------------------------------------------------- the bank of Kalman filters over mode histories


class Bank(NamedTuple):
    """P mode histories z_{1:t}, each with its Kalman filter: ``means`` (P, M), ``covs`` (P, M, M) of
    p(x_t | y_{1:t}, z_{1:t}); ``next_modes`` (P, K): p(z_{t+1} = k | z_t) = T[k, z_t]; ``log_weights`` (P,):
    log p(z_{1:t} | y_{1:t}) (normalised; a particle's share of it after resampling)."""

    means: Array
    covs: Array
    next_modes: Array
    log_weights: Array


def _initial_bank(task: SwitchingLGSSMTask, size: int) -> Bank:
    """x_0 ~ N(m0, P0) and p(z_1) = T pi0 in entry 0 (weight 1); ``size - 1`` empty entries (weight 0) beside it."""
    M = task.m0.shape[0]
    log_weights = jnp.full(size, -jnp.inf, task.m0.dtype).at[0].set(0.0)
    return Bank(jnp.broadcast_to(task.m0, (size, M)), jnp.broadcast_to(task.P0, (size, M, M)),
                jnp.broadcast_to(task.T @ task.pi0, (size, task.num_modes)), log_weights)


def _plain_step(mean, cov, y, A, Q, C, R):
    return update(*predict(mean, cov, A, Q), y, C, R)  # eq. (18), then eq. (19)-(21)


def _extend(task: SwitchingLGSSMTask, bank: Bank, y: Array, kalman_step=_plain_step) -> Bank:
    """Every history followed by every mode k and updated with y_t: P -> P K entries (eq. 17-21), weighted by
    p(z_{1:t} | y_{1:t}) proportional to p(z_{1:t-1} | y_{1:t-1}) T[k, z_{t-1}] p(y_t | y_{1:t-1}, z_{1:t}).
    ``kalman_step``: pissm's plain predict-update or ``small_kalman.kalman_step_small`` (the same numbers)."""
    def child(mean, cov, A, Q):
        return kalman_step(mean, cov, y, A, Q, task.C, task.R)

    per_mode = jax.vmap(child, in_axes=(None, None, 0, 0))  # the K successors of one history
    means, covs, log_liks = jax.vmap(per_mode, in_axes=(0, 0, None, None))(bank.means, bank.covs, task.A, task.Q)
    log_w = (bank.log_weights[:, None] + jnp.log(bank.next_modes) + log_liks).reshape(-1)  # (P K,)
    P, K = bank.next_modes.shape
    return Bank(means.reshape(P * K, -1), covs.reshape(P * K, *covs.shape[-2:]),
                jnp.broadcast_to(task.T.T, (P, K, K)).reshape(P * K, K), jax.nn.log_softmax(log_w))


def optimal_resample(key: Array, weights: Array, num: int) -> tuple[Array, Array]:
    """Fearnhead & Clifford's (2003) resampling of ``num`` of N > num weighted entries: indices (num,) and their new
    weights (num,), summing to 1. With c solving sum_i min(c w_i, 1) = num, every entry with c w_i >= 1 is kept
    with its weight; of the rest, num - kept are drawn by systematic resampling (points 1 / c apart, so none twice),
    each with weight 1 / c. Fewer than num entries of positive weight are all kept (the rest weight 0): no
    history is lost while there are no more than num of them."""
    N = weights.shape[0]
    order = jnp.argsort(-weights)  # largest first
    v = weights[order]
    tail = jnp.cumsum(v[::-1])[::-1]  # tail[m] = sum_{j >= m} v_j, summed smallest first
    m = jnp.arange(num + 1)
    kept = jnp.argmax(((num - m) * v[m] < tail[m]) | (tail[m] <= 0))  # the first m whose next entry has c v < 1
    rest, drawn = tail[kept], num - kept
    spacing = rest / jnp.maximum(drawn, 1)  # 1 / c
    cumulative = jnp.cumsum(jnp.where(jnp.arange(N) >= kept, v, 0.0))
    points = (jax.random.uniform(key, (), v.dtype) + jnp.arange(num, dtype=v.dtype)) * spacing
    chosen = jnp.minimum(jnp.searchsorted(cumulative, points, side="right"), N - 1)
    slot = jnp.arange(num)
    draw = jnp.clip(slot - kept, 0, num - 1)
    position = jnp.where(slot < kept, slot, chosen[draw])
    new_weights = jnp.where(slot < kept, v[jnp.minimum(slot, N - 1)],
                            jnp.where((draw < drawn) & (rest > 0), spacing, 0.0))
    return order[position], new_weights


def _predict_next(task: SwitchingLGSSMTask, bank: Bank) -> Array:
    """E[y_{t+1} | y_{1:t}] (D,) = sum_histories w sum_k T[k, z_t] C A_k m_{t|t}."""
    per_mode = jnp.einsum("dm,kmn,pn->pkd", task.C, task.A, bank.means)  # C A_k m, (P, K, D)
    return jnp.einsum("p,pk,pkd->d", jnp.exp(bank.log_weights), bank.next_modes, per_mode)


@jax.jit
def exact_predictive_mean(task: SwitchingLGSSMTask, ys: Array) -> Array:
    """E[y_{t+1} | y_{1:t}] (L, D) for one sequence ys (L, D) by enumerating all K^t mode histories (a Kalman
    filter for each; a Python loop, the bank growing K-fold per step; jitted, compiled once per task structure and
    L). ValueError past ``MAX_HISTORIES``."""
    L = ys.shape[0]
    if task.num_modes**L > MAX_HISTORIES:
        raise ValueError(f"enumerating {task.num_modes}^{L} mode histories exceeds {MAX_HISTORIES}; use "
                         "particle_predictive_mean for long sequences")
    bank, out = _initial_bank(task, 1), []
    for t in range(L):
        bank = _extend(task, bank, ys[t])
        out.append(_predict_next(task, bank))
    return jnp.stack(out)


def particle_predictive_mean(task: SwitchingLGSSMTask, ys: Array, key: Array, num_particles: int) -> Array:
    """E[y_{t+1} | y_{1:t}] (L, D) for one sequence ys (L, D) by the Rao-Blackwellised particle filter of the
    module docstring with P = ``num_particles`` mode histories (``lax.scan``; vmap and jit outside). It is
    :func:`exact_predictive_mean` at every step t with K^(t-1) <= P (``optimal_resample`` keeps every history while
    they fit), and at every step when all modes are equal."""
    P = check_int("num_particles", num_particles)

    def step(bank, inputs):
        y, k = inputs
        children = _extend(task, bank, y, kalman_step_small)
        prediction = _predict_next(task, children)  # before resampling: no resampling noise in it
        keep, weights = optimal_resample(k, jnp.exp(children.log_weights), P)  # P of the P K children
        bank = Bank(children.means[keep], children.covs[keep], children.next_modes[keep], jnp.log(weights))
        return bank, prediction

    _, predictions = jax.lax.scan(step, _initial_bank(task, P), (ys, jax.random.split(key, ys.shape[0])))
    return predictions


# ---------------------------------------------------------------- prior moments and the trivial predictor


class SwitchingMoments(NamedTuple):
    """Exact prior moments of y_1..y_n: ``y_mean`` (n, D), ``y_cov`` (n, D, D) Cov(y_t), ``y_cross`` (n - 1, D, D)
    Cov(y_{t+1}, y_t)."""

    y_mean: Array
    y_cov: Array
    y_cross: Array


def prior_moments(task: SwitchingLGSSMTask, length: int) -> SwitchingMoments:
    """The moments of y_1..y_length, from the mode-conditional moments p_k = P(z_t = k), m_k = E[x_t 1{z_t = k}],
    S_k = E[x_t x_t^T 1{z_t = k}]: with u_k = sum_j T[k, j] u_j(t - 1) for u = p, m, S,
    p_k(t) = u_k, m_k(t) = A_k u_k, S_k(t) = A_k u_k A_k^T + p_k(t) Q_k; and E[x_{t+1} x_t^T] = sum_k A_k
    sum_j T[k, j] S_j(t) (z_{t+1} depends on z_t alone, q_{t+1} on nothing)."""
    check_int("length", length, low=2)
    A, C, Q, T = task.A, task.C, task.Q, task.T
    second0 = task.P0 + jnp.outer(task.m0, task.m0)

    def step(carry, _):
        p, m, S = carry  # at t - 1
        p, m, S = T @ p, jnp.einsum("kj,jm->km", T, m), jnp.einsum("kj,jmn->kmn", T, S)  # z_t drawn
        cross = jnp.einsum("kmn,kpn->mp", A, S)  # E[x_t x_{t-1}^T]
        m, S = jnp.einsum("kmn,kn->km", A, m), jnp.einsum("kmn,knp,kqp->kmq", A, S, A) + p[:, None, None] * Q
        return (p, m, S), (m.sum(0), S.sum(0), cross)

    start = (task.pi0, task.pi0[:, None] * task.m0, task.pi0[:, None, None] * second0)
    _, (x_mean, x_second, x_cross) = jax.lax.scan(step, start, None, length=length)  # t = 1..length
    y_mean = x_mean @ C.T
    x_cov = x_second - jnp.einsum("tm,tn->tmn", x_mean, x_mean)
    y_cov = jnp.einsum("dm,tmn,en->tde", C, x_cov, C) + task.R
    cross = x_cross[1:] - jnp.einsum("tm,tn->tmn", x_mean[1:], x_mean[:-1])  # Cov(x_{t+1}, x_t)
    return SwitchingMoments(y_mean, y_cov, jnp.einsum("dm,tmn,en->tde", C, cross, C))


# ---------------------------------------------------------------- a random model with distinguishable modes


def random_switching_lgssm(seed: int, num_modes: int = 3, latent_size: int = 4, obs_size: int = 2,
                           radius: float = 0.95, noise: float = 0.1, stay: float = 0.95, **fields
                           ) -> SwitchingLGSSMTask:
    """Modes that differ in how fast the state turns: in a random orthogonal basis V (shared), mode k rotates every
    plane of the state by the angle pi (k + 1) / (K + 1) per step, A_k = radius V R_k V^T (a state of odd size
    keeps one real direction with eigenvalue ``radius`` in every mode). Modes one notch apart move the predicted
    state by 2 sin(pi / (2 K + 2)) |x| (0.77 |x| for K = 3; |x| ~ 6 at stationarity) against a process noise of
    std 1 per coordinate, so one or two observations tell the modes apart and the task does not reduce to lgssm.
    On the canonical task the reference comes close to a Kalman filter told the true modes so far and is far
    below the trivial predictor, Kalman filters that assume one mode and one with the modes' mean dynamics
    (mean squared error per step). The mode chain stays with probability ``stay`` and moves
    to each other mode with (1 - stay) / (K - 1); pi0 uniform (its stationary law). C, Q = I, R = noise^2 I and
    x_0 ~ N(0, I / (1 - radius^2)) as ``random_lgssm``: every A_k keeps that law, so x_t ~ N(0, I / (1 - radius^2))
    at every t. ``fields``: ``name``, ``num_particles``, ``reference_seed``."""
    check_int("num_modes", num_modes, low=2)
    check_int("latent_size", latent_size)
    check_int("obs_size", obs_size)
    check_real("radius", radius, low=0.0, high=1.0, open_high=True)
    check_real("noise", noise, low=0.0, open_low=True)
    check_real("stay", stay, low=0.0, high=1.0)
    rng = np.random.default_rng(seed)
    V, _ = np.linalg.qr(rng.standard_normal((latent_size, latent_size)))
    C = rng.standard_normal((obs_size, latent_size)) / np.sqrt(latent_size)
    A = np.zeros((num_modes, latent_size, latent_size))
    for k in range(num_modes):
        angle = math.pi * (k + 1) / (num_modes + 1)
        turn = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
        R_k = np.eye(latent_size)
        for i in range(latent_size // 2):
            R_k[2 * i:2 * i + 2, 2 * i:2 * i + 2] = turn
        A[k] = radius * V @ R_k @ V.T
    T = np.full((num_modes, num_modes), (1.0 - stay) / (num_modes - 1)) + (stay - (1.0 - stay) / (num_modes - 1)) \
        * np.eye(num_modes)
    arrays = (A, C, np.broadcast_to(np.eye(latent_size), A.shape), noise**2 * np.eye(obs_size),
              np.zeros(latent_size), np.eye(latent_size) / (1.0 - radius**2), T, np.full(num_modes, 1.0 / num_modes))
    return SwitchingLGSSMTask(*(jnp.asarray(a, jnp.float32) for a in arrays), **fields)

"""Hidden Markov models and action-controlled HMMs (paper 1, section 3.3).

Column convention of the paper, eq. (3)-(4):

    T[i, j]    = P(x_{k+1} = x_i | x_k = x_j)               columns sum to 1
    T[a, i, j] = P(x_{k+1} = x_i | x_k = x_j, a_k = a)      controlled HMM
    E[s, j]    = P(y_k = u_s | x_k = x_j)                    shape (S, N)

Observations are integer indices s in [0, S) standing for the one-hot u_s, so
log(E^T y_k) is the row ``log E[y_k]``. Time starts at x_0 ~ pi0; the first
observation is y_1 (emitted by x_1), as in eq. (5)-(6).

Containers are Equinox modules (pytrees): they pass through ``jit``/``vmap``.
Validation runs when they are built from concrete arrays, not on tracers.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_column_stochastic, check_distribution, check_indices, check_int, is_concrete
from memlab.logspace import safe_log


class _Model(eqx.Module):
    """Fields and checks shared by ``HMM`` and ``ControlledHMM``."""

    T: Array
    E: Array
    pi0: Array

    def __check_init__(self):
        if not all(is_concrete(a) for a in (self.T, self.E, self.pi0)):
            return
        check_distribution("pi0", self.pi0)
        N = np.shape(self.pi0)[0]
        T = np.asarray(self.T)
        expected = (N, N) if isinstance(self, HMM) else ("A", N, N)
        if T.ndim != len(expected) or T.shape[-2:] != (N, N):
            raise ValueError(f"T must have shape {expected}, got {T.shape}".replace("'", ""))
        check_column_stochastic("T", T)
        E = np.asarray(self.E)
        if E.ndim != 2 or E.shape[1] != N:
            raise ValueError(f"E must have shape (S, N) = (S, {N}), got {E.shape}")
        check_column_stochastic("E", E)

    @property
    def num_states(self) -> int:
        return self.T.shape[-1]

    @property
    def num_obs(self) -> int:
        return self.E.shape[0]


class HMM(_Model):
    """HMM with fixed transition matrix.

    Fields: ``T`` (N, N) column-stochastic, ``E`` (S, N) column-stochastic,
    ``pi0`` (N,) initial distribution of x_0.
    """

    def transition(self, action=None) -> Array:
        """T, shape (N, N); ``action`` is ignored (fixed transitions)."""
        return self.T


class ControlledHMM(_Model):
    """Action-controlled HMM, eq. (3)-(4): ``T`` (A, N, N), ``E`` (S, N), ``pi0`` (N,)."""

    @property
    def num_actions(self) -> int:
        return self.T.shape[0]

    def transition(self, action) -> Array:
        """T(a), shape (N, N)."""
        return self.T[action]


class Trajectory(eqx.Module):
    """Sampled trajectories, batch dimensions first.

    ``states`` (..., K+1): x_0..x_K; ``observations`` (..., K): y_1..y_K;
    ``actions`` (..., K): a_0..a_{K-1} (zeros for a plain HMM).
    """

    states: Array
    observations: Array
    actions: Array


def sample(model: HMM | ControlledHMM, key: Array, num_steps: int, batch: int | None = None,
           actions: Array | None = None, policy=None) -> Trajectory:
    """Sample trajectories of ``num_steps`` steps.

    For a ``ControlledHMM`` give either ``actions`` (shape (K,) or (batch, K),
    a fixed open-loop sequence) or ``policy(key, y, k) -> a`` (closed-loop on the
    last observation, y = -1 before the first one; vmapped over the batch; pass the
    same function object each time to reuse the compiled sampler).
    Returns a ``Trajectory`` with a leading batch axis when ``batch`` is given.
    """
    check_int("num_steps", num_steps)
    if batch is not None:
        check_int("batch", batch)
    controlled = isinstance(model, ControlledHMM)
    if controlled and (actions is None) == (policy is None):
        raise ValueError("a ControlledHMM needs exactly one of `actions` or `policy`")
    if not controlled and (actions is not None or policy is not None):
        raise ValueError("actions/policy given for an HMM with fixed transitions; use ControlledHMM")
    if actions is not None:
        actions = jnp.asarray(actions, dtype=jnp.int32)
        if actions.shape[-1] != num_steps or actions.ndim > 2:
            raise ValueError(f"actions must have shape (K,) or (batch, K) with K = num_steps = {num_steps}, "
                             f"got {actions.shape}")
        check_indices("actions", actions, model.num_actions)
        if batch is not None:
            actions = jnp.broadcast_to(actions, (batch, num_steps))
    return _sample(model, key, actions, num_steps, batch, policy)


@functools.partial(jax.jit, static_argnames=("num_steps", "batch", "policy"))
def _sample(model, key, actions, num_steps, batch, policy) -> Trajectory:
    def one(key, acts):
        k0, kscan = jax.random.split(key)
        x0 = jax.random.categorical(k0, safe_log(model.pi0)).astype(jnp.int32)

        def step(carry, inp):
            x, y_prev = carry
            k, key_k, a_given = inp
            ka, kx, ky = jax.random.split(key_k, 3)
            a = jnp.asarray(policy(ka, y_prev, k), jnp.int32) if policy is not None else a_given
            x_next = jax.random.categorical(kx, safe_log(model.transition(a)[:, x])).astype(jnp.int32)
            y = jax.random.categorical(ky, safe_log(model.E[:, x_next])).astype(jnp.int32)
            return (x_next, y), (x_next, y, a)

        acts_in = acts if acts is not None else jnp.zeros(num_steps, jnp.int32)
        steps = (jnp.arange(num_steps), jax.random.split(kscan, num_steps), acts_in)
        _, (xs, ys, as_) = jax.lax.scan(step, (x0, jnp.int32(-1)), steps)
        return Trajectory(jnp.concatenate([x0[None], xs]), ys, as_)

    if batch is None:
        return one(key, actions)
    return jax.vmap(one, in_axes=(0, 0 if actions is not None else None))(jax.random.split(key, batch), actions)

"""Monte-Carlo estimate of the instantaneous decoding error p_k, eq. (19).

p_k = P[argmax_x w_k(x) != x*_k] (ties broken at random, see ``decoding_error``) for every filter at
once, on common sampled trajectories (the same states and observations feed every filter, so the curves
are compared on equal footing). One jitted ``lax.scan`` over time carries the
whole batch of runs — true states (B,) and each filter's logits (B, N) — and
stores only the per-step error counts (K, F): beliefs are never stored.

Sampling is by inverse CDF, one uniform per draw: x_{k+1} = #{i : C[i, x_k] <= u}
with C the column-wise cumulative sum of T, cheaper than Gumbel-max sampling
(one uniform instead of N per draw).

A filter is any pytree with ``w0`` (N,) and ``step(w (B, N), y (B,), a (B,)) ->
(B, N)``: ``filters.LOF`` and ``alf.ALF`` are the two used here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.belief.hmm import HMM, ControlledHMM
from memlab.checks import check_int


class ErrorCurves(NamedTuple):
    """``p`` (K, F): p_k for k = 1..K (row k-1) per filter; ``num_runs``: MC runs behind each estimate."""

    p: np.ndarray
    num_runs: int

    def stderr(self) -> np.ndarray:
        """Binomial standard error of every p_k, shape (K, F)."""
        return np.sqrt(self.p * (1.0 - self.p) / self.num_runs)


def cumulative_columns(M: Array) -> Array:
    """Column-wise CDFs of a column-stochastic (..., n, m), transposed to (..., m, n) and scaled so each ends at 1."""
    C = jnp.cumsum(M, axis=-2)
    return jnp.swapaxes(C / C[..., -1:, :], -1, -2)


def draw(cdf_rows: Array, u: Array) -> Array:
    """Inverse-CDF draw: index #{i : C[i] <= u} for CDF rows (B, n) and uniforms u (B,) in [0, 1).

    A zero-probability state i has C[i] = C[i-1] and is never drawn; the last CDF
    entry is exactly 1, so the index is at most n - 1.
    """
    return jnp.sum(cdf_rows <= u[:, None], axis=-1).astype(jnp.int32)


def decoding_error(w: Array, x_onehot: Array) -> Array:
    """Error of the MAP decoder argmax_x w(x) against the true state, (B, N), (B, N) one-hot -> (B,).

    Ties are broken uniformly at random, and the *expected* error of that
    randomised decoder is returned: 1 - 1{w(x) is maximal} / #maximisers. It equals
    the 0/1 error whenever the maximiser is unique, and it gives an uninformative
    filter (e.g. ALF with delta = 0 and w_0 = 0, which never leaves a tie) the error
    of a coin flip instead of a bias towards the lowest-index state.
    """
    is_max = w == jnp.max(w, axis=-1, keepdims=True)
    hit = jnp.sum(is_max & x_onehot, axis=-1)
    return 1.0 - hit / jnp.sum(is_max, axis=-1)


@eqx.filter_jit
def _error_counts(model, filters, key: Array, num_runs: int, num_steps: int) -> Array:
    controlled = isinstance(model, ControlledHMM)
    T_cdf = cumulative_columns(model.T if controlled else model.T[None])  # (A, N, N): [a, j] = CDF of column j
    E_cdf = cumulative_columns(model.E)  # (N, S)
    num_actions, N = T_cdf.shape[0], T_cdf.shape[-1]
    k0, kscan = jax.random.split(key)
    pi0_cdf = cumulative_columns(model.pi0[:, None])  # (1, N)
    x0 = draw(jnp.broadcast_to(pi0_cdf, (num_runs, N)), jax.random.uniform(k0, (num_runs,)))
    ws0 = tuple(jnp.broadcast_to(f.w0, (num_runs, f.w0.shape[-1])) for f in filters)

    def step(carry, k):
        x, ws = carry
        ka, kx, ky = jax.random.split(jax.random.fold_in(kscan, k), 3)
        # open-loop uniformly random actions for a controlled HMM (a_{k-1})
        a = jax.random.randint(ka, (num_runs,), 0, num_actions) if controlled else jnp.zeros(num_runs, jnp.int32)
        x = draw(T_cdf[a, x], jax.random.uniform(kx, (num_runs,)))
        y = draw(E_cdf[x], jax.random.uniform(ky, (num_runs,)))
        ws = tuple(f.step(w, y, a) for f, w in zip(filters, ws))
        x_onehot = x[:, None] == jnp.arange(N)
        errors = jnp.stack([jnp.sum(decoding_error(w, x_onehot)) for w in ws])  # eq. (19)
        return (x, ws), errors

    _, errors = jax.lax.scan(step, (x0, ws0), jnp.arange(num_steps))
    return errors


def error_curves(model: HMM | ControlledHMM, filters: Sequence, key: Array, num_runs: int,
                 num_steps: int, chunk: int = 20_000) -> ErrorCurves:
    """Estimate p_k, k = 1..num_steps, for every filter from ``num_runs`` trajectories.

    Runs are processed in chunks of at most ``chunk`` (memory: chunk x N per filter);
    chunk c uses key fold_in(key, c), so results do not depend on anything but
    (key, num_runs, chunk). For a ControlledHMM the actions are drawn uniformly at random.
    """
    for name, value in (("num_runs", num_runs), ("num_steps", num_steps), ("chunk", chunk)):
        check_int(name, value)
    if not filters:
        raise ValueError("give at least one filter")
    N = model.num_states
    for i, f in enumerate(filters):
        if f.w0.shape != (N,):
            raise ValueError(f"filter {i} has w0 of shape {f.w0.shape}, expected ({N},) for this model")
    total = np.zeros((num_steps, len(filters)))
    done, c = 0, 0
    while done < num_runs:
        n = min(chunk, num_runs - done)
        total += np.asarray(_error_counts(model, tuple(filters), jax.random.fold_in(key, c), n, num_steps))
        done, c = done + n, c + 1
    return ErrorCurves(total / num_runs, num_runs)

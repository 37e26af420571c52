"""Exact Kalman filter of a linear-Gaussian state-space model (the pi-SSM paper, App. A.2, eq. 17-21; App. G.1,
eq. 197-198): shared numerics, the reference of pi-SSM (``memlab.pissm``) and of the arena's lgssm and switching tasks.

Model, in the time convention of that paper's eq. (1) and Algorithm "Inference in pi-SSM" (App. E.1): a prior
x_0 ~ N(m_0, P_0), then for t = 1..T

    x_t = A_t x_{t-1} + q_t,  q_t ~ N(0, Q_t);        y_t = C_t x_t + r_t,  r_t ~ N(0, R_t).

Each step predicts (eq. 18) then, if y_t is observed, updates (eq. 19-21); a missing y_t is predict only (App.
H.1); ``observe_initial=True`` when y[0] observes x_0. The covariance update is the Joseph form, not eq. (21)'s
P - K S K^T (equal in exact arithmetic, not in float32). Plain functions in the style of dynamax; one sequence per
call (vmap and jit outside). Arrays, missing steps and the numerics: docs/studies/pissm.md, "The Kalman filter".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.scipy.linalg import cho_factor, cho_solve

from memlab.checks import check_covariance, check_int, check_matrix, is_concrete

__all__ = ["KalmanFiltered", "check_observations", "filter_step", "kalman_filter", "predict", "psd_sqrt",
           "sample_lgssm", "scan_filter", "symmetrise", "update"]


class KalmanFiltered(NamedTuple):
    """Output of ``kalman_filter`` for T steps, state size M.

    ``means`` (T, M) and ``covariances`` (T, M, M): filtered p(x_t | y_{1:t}), t = 1..T.
    ``predicted_means`` (T, M), ``predicted_covariances`` (T, M, M): predictive p(x_t | y_{1:t-1}).
    ``log_likelihoods`` (T,): log p(y_t | y_{1:t-1}) = log N(y_t; C_t m_{t|t-1}, C_t P_{t|t-1} C_t^T + R_t),
    0 where y_t is missing; their sum is the exact log marginal likelihood of the observed y's.
    """

    means: Array
    covariances: Array
    predicted_means: Array
    predicted_covariances: Array
    log_likelihoods: Array


def symmetrise(P: Array) -> Array:
    """(P + P^T) / 2 over the last two axes: exactly symmetric in floating point."""
    return 0.5 * (P + jnp.swapaxes(P, -1, -2))


def predict(mean: Array, cov: Array, A: Array, Q: Array) -> tuple[Array, Array]:
    """Eq. (18): N(m, P) -> N(A m, A P A^T + Q). mean (M,), cov (M, M), A (M, M), Q (M, M)."""
    return A @ mean, symmetrise(A @ cov @ A.T + Q)


def update(mean: Array, cov: Array, y: Array, C: Array, R: Array) -> tuple[Array, Array, Array]:
    """Eq. (19)-(21) with the Joseph-form covariance. mean (M,), cov (M, M), y (N,), C (N, M), R (N, N).

    Returns the filtered mean (M,), covariance (M, M) and log N(y; C mean, C cov C^T + R) (scalar).
    """
    S = symmetrise(C @ cov @ C.T + R)
    S_chol = cho_factor(S, lower=True)
    residual = y - C @ mean
    K = cho_solve(S_chol, C @ cov).T  # eq. (19): P C^T S^{-1}, S symmetric
    whitened = jax.scipy.linalg.solve_triangular(S_chol[0], residual, lower=True)
    log_det = 2.0 * jnp.sum(jnp.log(jnp.diagonal(S_chol[0])))
    log_lik = -0.5 * (y.shape[-1] * math.log(2 * math.pi) + log_det + whitened @ whitened)
    I_KC = jnp.eye(mean.shape[-1], dtype=cov.dtype) - K @ C
    cov = symmetrise(I_KC @ cov @ I_KC.T + K @ R @ K.T)  # Joseph form of eq. (21)
    return mean + K @ residual, cov, log_lik  # eq. (20)


def filter_step(
    mean: Array, cov: Array, y: Array, observed: Array, A: Array, C: Array, Q: Array, R: Array
) -> tuple[Array, Array, Array, Array, Array]:
    """One predict-then-update step from p(x_{t-1} | y_{1:t-1}); the update is skipped where ``observed`` is False.

    Returns (filtered mean, filtered cov, predicted mean, predicted cov, log p(y_t | y_{1:t-1}) or 0).
    """
    pred_mean, pred_cov = predict(mean, cov, A, Q)
    y = jnp.where(observed, y, jnp.zeros_like(y))  # a NaN at a missing step must not reach the arithmetic
    new_mean, new_cov, log_lik = update(pred_mean, pred_cov, y, C, R)
    new_mean = jnp.where(observed, new_mean, pred_mean)
    new_cov = jnp.where(observed, new_cov, pred_cov)
    return new_mean, new_cov, pred_mean, pred_cov, jnp.where(observed, log_lik, 0.0)


def kalman_filter(
    y: Array,
    A: Array,
    C: Array,
    Q: Array,
    R: Array,
    initial_mean: Array,
    initial_cov: Array,
    mask: Array | None = None,
    observe_initial: bool = False,
) -> KalmanFiltered:
    """Filter y (T, N) through the model of the module docstring with a ``lax.scan`` over time.

    A (M, M) or (T, M, M); C (N, M) or (T, N, M); Q (M, M) or (T, M, M); R (N, N) or (T, N, N);
    initial_mean (M,), initial_cov (M, M) of x_0; mask (T,) bool, True where y_t is observed (None: all).
    ``observe_initial``: y[0] observes x_0 itself (no prediction before the first update).
    """
    y, mask = check_observations(y, mask)
    T, N = y.shape
    M = initial_mean.shape[-1] if jnp.ndim(initial_mean) == 1 else -1
    if M < 1:
        raise ValueError(f"initial_mean must have shape (M,) with M >= 1, got {jnp.shape(initial_mean)}")
    matrices = {"A": (A, (M, M)), "C": (C, (N, M)), "Q": (Q, (M, M)), "R": (R, (N, N))}
    fixed, varying = {}, {}
    for name, (X, shape) in matrices.items():
        (fixed if check_matrix(name, X, shape, T) else varying)[name] = X
    check_matrix("initial_cov", initial_cov, (M, M))
    for name, P in (("initial_cov", initial_cov), ("Q", Q), ("R", R)):
        check_covariance(name, P)

    def step_matrices(previous_mean, varying_t):
        m = {**fixed, **varying_t}
        return m["A"], m["C"], m["Q"], m["R"], None

    filtered, _ = scan_filter(y, mask, initial_mean, initial_cov, step_matrices, varying, observe_initial)
    return filtered


def scan_filter(
    y: Array,
    mask: Array,
    initial_mean: Array,
    initial_cov: Array,
    step_matrices: Callable,
    inputs=None,
    observe_initial: bool = False,
) -> tuple[KalmanFiltered, object]:
    """The filter loop (``lax.scan``) for matrices that may depend on the previous filtered mean (unchecked inputs).

    ``step_matrices(m_{t-1|t-1} (M,), inputs_t) -> (A_t, C_t, Q_t, R_t, aux_t)``, where ``inputs_t`` is the t-th
    slice of the pytree ``inputs`` (leading axis T, or None). Returns the ``KalmanFiltered`` record and the aux_t
    stacked over time. ``kalman_filter`` and pi-SSM's LG variant (``memlab.pissm.lg``: A_t and C_t mixed from
    m_{t-1|t-1}) use it.
    """
    T = y.shape[0]
    skip_predict = jnp.zeros(T, bool).at[0].set(bool(observe_initial))

    def step(carry, inputs_t):
        mean, cov = carry
        y_t, observed, skip, extra = inputs_t
        A_t, C_t, Q_t, R_t, aux = step_matrices(mean, extra)
        M = mean.shape[-1]
        A_t = jnp.where(skip, jnp.eye(M, dtype=mean.dtype), A_t)
        Q_t = jnp.where(skip, jnp.zeros((M, M), mean.dtype), Q_t)
        out = filter_step(mean, cov, y_t, observed, A_t, C_t, Q_t, R_t)
        return out[:2], (out, aux)

    carry = (jnp.asarray(initial_mean), jnp.asarray(initial_cov))
    _, (out, aux) = jax.lax.scan(step, carry, (y, mask, skip_predict, inputs))
    return KalmanFiltered(*out), aux


def sample_lgssm(
    key: Array, A: Array, C: Array, Q: Array, R: Array, initial_mean: Array, initial_cov: Array, num_steps: int
) -> tuple[Array, Array]:
    """Draw x_{1:T} (T, M) and y_{1:T} (T, N) from the model of the module docstring (x_0 from the prior).

    Same matrix shapes as ``kalman_filter`` (fixed or with a leading axis T = num_steps). Singular Q, R, initial
    covariances are allowed (noise is drawn through a symmetric square root).
    """
    check_int("num_steps", num_steps)
    M = jnp.shape(initial_mean)[-1]
    N = jnp.shape(C)[-2]
    per_step = {}
    for name, X, shape in (("A", A, (M, M)), ("C", C, (N, M)), ("Q", Q, (M, M)), ("R", R, (N, N))):
        fixed = check_matrix(name, X, shape, num_steps)
        if name in ("Q", "R"):
            check_covariance(name, X)
            name, X = f"sqrt_{name}", psd_sqrt(X)  # noise is drawn through it; once for a fixed matrix
        per_step[name] = jnp.broadcast_to(X, (num_steps, *shape)) if fixed else jnp.asarray(X)
    check_matrix("initial_cov", initial_cov, (M, M))
    check_covariance("initial_cov", initial_cov)
    k0, kq, kr = jax.random.split(key, 3)
    x0 = initial_mean + psd_sqrt(initial_cov) @ jax.random.normal(k0, (M,), jnp.result_type(initial_mean))
    q = jnp.einsum("tij,tj->ti", per_step["sqrt_Q"], jax.random.normal(kq, (num_steps, M), x0.dtype))
    r = jnp.einsum("tij,tj->ti", per_step["sqrt_R"], jax.random.normal(kr, (num_steps, N), x0.dtype))

    def step(x, inputs):
        A_t, q_t = inputs
        x = A_t @ x + q_t
        return x, x

    _, xs = jax.lax.scan(step, x0, (per_step["A"], q))
    return xs, jnp.einsum("tij,tj->ti", per_step["C"], xs) + r


def psd_sqrt(P: Array) -> Array:
    """Symmetric square root S (..., M, M) with S S^T = P of a positive semi-definite P (eigenvalues clipped at 0)."""
    eigenvalues, vectors = jnp.linalg.eigh(symmetrise(jnp.asarray(P)))
    return (vectors * jnp.sqrt(jnp.clip(eigenvalues, 0.0))[..., None, :]) @ jnp.swapaxes(vectors, -1, -2)


# ---------------------------------------------------------------- input checks (shared with pissm's filters)


def check_observations(y, mask) -> tuple[Array, Array]:
    """y (T, N) with T, N >= 1 and finite where observed; mask (T,) bool or None (all observed)."""
    y = jnp.asarray(y)
    if y.ndim != 2 or y.shape[0] < 1 or y.shape[1] < 1:
        raise ValueError(f"y must have shape (T, N) with T, N >= 1 (one sequence; vmap for a batch), got {y.shape}")
    mask = jnp.ones(y.shape[0], bool) if mask is None else jnp.asarray(mask)
    if mask.shape != y.shape[:1] or mask.dtype != jnp.bool_:
        raise ValueError(f"mask must be a bool array of shape {y.shape[:1]}, got {mask.dtype} {mask.shape}")
    if is_concrete(y, mask):
        bad = ~np.all(np.isfinite(np.asarray(y)), axis=-1) & np.asarray(mask)
        if np.any(bad):
            raise ValueError(f"y is not finite at observed step {int(np.argmax(bad))}; mark missing steps in mask")
    return y, mask



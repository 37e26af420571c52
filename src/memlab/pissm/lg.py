"""The LG variant of the ablation study (App. G.1): exact Kalman filtering with transition and emission matrices
that are convex mixtures of K trainable base matrices, the weights given by an MLP on the previous state.

    x_t = A_t x_{t-1} + q_t,  q_t ~ N(0, Q)             eq. (197)
    y_t = C_t x_t + r_t,      r_t ~ N(0, R)             eq. (198)
    A_t = sum_k alpha_t^(k) A^(k),  C_t = sum_k alpha_t^(k) C^(k),  alpha_t = softmax(MLP(x_{t-1}))   eq. (199)

Choices the paper leaves open: the MLP reads the filtered mean m_{t-1|t-1} (x_{t-1} is latent), so the Kalman
recursion stays exact; one hidden layer of ``hidden_size`` ReLU units; Q and the prior learned as pi-SSM learns its
own, R known. Why: docs/studies/pissm.md, "The LG variant".
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_covariance, check_int, check_matrix
from memlab.kalman import check_observations, psd_sqrt, scan_filter


class LGFiltered(NamedTuple):
    """Output of ``LGVariant.__call__`` for T steps: the fields of ``memlab.kalman.KalmanFiltered`` plus the weights.

    ``means`` (T, M), ``covariances`` (T, M, M): filtered; ``predicted_means`` (T, M), ``predicted_covariances``
    (T, M, M): one-step predictive; ``log_likelihoods`` (T,): log p(y_t | y_{1:t-1}), 0 where y_t is missing;
    ``weights`` (T, K): alpha_t of eq. (199).
    """

    means: Array
    covariances: Array
    predicted_means: Array
    predicted_covariances: Array
    log_likelihoods: Array
    weights: Array


class LGVariant(eqx.Module):
    """App. G.1 LG model: K base matrices A^(k) (M, M), C^(k) (N, M), an MLP x (M,) -> logits (K,), Q, R."""

    A: Array  # (K, M, M) base transition matrices, eq. (199)
    C: Array  # (K, N, M) base emission matrices, eq. (199)
    mixer: eqx.nn.MLP  # m_{t-1|t-1} (M,) -> mixture logits (K,)
    Q_sqrt: Array  # (M, M), Q = Q_sqrt Q_sqrt^T
    R_sqrt: Array  # (N, N), R = R_sqrt R_sqrt^T
    initial_mean: Array  # (M,) prior mean of x_0
    initial_cov_sqrt: Array  # (M, M), prior covariance of x_0 = initial_cov_sqrt initial_cov_sqrt^T
    learn_noise: bool = eqx.field(static=True)

    def __init__(
        self,
        latent_size: int,
        observation_size: int,
        num_modes: int,
        *,
        Q,
        R,
        key: Array,
        A=None,
        C=None,
        hidden_size: int = 10,
        initial_mean=None,
        initial_cov=None,
        learn_noise: bool = False,
    ):
        """Q (M, M), R (N, N) positive semi-definite. A (K, M, M) and C (K, N, M) default to I + N(0, 0.01^2) and
        N(0, 1/M) entries; initial_mean defaults to 0, initial_cov to I."""
        for name, n in (
            ("latent_size", latent_size), ("observation_size", observation_size),
            ("num_modes", num_modes), ("hidden_size", hidden_size),
        ):
            check_int(name, n)
        M, N, K = int(latent_size), int(observation_size), int(num_modes)
        dtype = jnp.result_type(float)
        k_A, k_C, k_mlp = jax.random.split(key, 3)
        if A is None:
            A = jnp.eye(M, dtype=dtype) + 0.01 * jax.random.normal(k_A, (K, M, M), dtype)
        if C is None:
            C = jax.random.normal(k_C, (K, N, M), dtype) / np.sqrt(M)
        initial_mean = jnp.zeros(M, dtype) if initial_mean is None else initial_mean
        initial_cov = jnp.eye(M, dtype=dtype) if initial_cov is None else initial_cov
        for name, X, shape in (
            ("A", A, (K, M, M)), ("C", C, (K, N, M)), ("Q", Q, (M, M)), ("R", R, (N, N)),
            ("initial_mean", initial_mean, (M,)), ("initial_cov", initial_cov, (M, M)),
        ):
            check_matrix(name, X, shape)
        for name, P in (("Q", Q), ("R", R), ("initial_cov", initial_cov)):
            check_covariance(name, P)
        self.A, self.C = jnp.asarray(A, dtype), jnp.asarray(C, dtype)
        self.mixer = eqx.nn.MLP(M, K, hidden_size, depth=1, activation=jax.nn.relu, key=k_mlp, dtype=dtype)
        self.Q_sqrt, self.R_sqrt = psd_sqrt(jnp.asarray(Q, dtype)), psd_sqrt(jnp.asarray(R, dtype))
        self.initial_mean = jnp.asarray(initial_mean, dtype)
        self.initial_cov_sqrt = psd_sqrt(jnp.asarray(initial_cov, dtype))
        self.learn_noise = bool(learn_noise)

    @property
    def latent_size(self) -> int:
        return self.A.shape[-1]

    @property
    def num_modes(self) -> int:
        return self.A.shape[0]

    def covariances(self) -> tuple[Array, Array, Array]:
        """(Q, R, initial covariance); R's gradient stopped unless ``learn_noise``."""
        Q, R, P0 = (S @ S.T for S in (self.Q_sqrt, self.R_sqrt, self.initial_cov_sqrt))
        if not self.learn_noise:
            R = jax.lax.stop_gradient(R)
        return Q, R, P0

    def weights(self, previous_mean: Array) -> Array:
        """alpha_t = softmax(MLP(m_{t-1|t-1})), (M,) -> (K,): convex weights of eq. (199)."""
        return jax.nn.softmax(self.mixer(previous_mean))

    def __call__(self, y: Array, mask: Array | None = None) -> LGFiltered:
        """Filter one sequence y (T, N); mask (T,) bool, True where y_t is observed (None: all). vmap for a batch."""
        y, mask = check_observations(y, mask)
        if y.shape[1] != self.C.shape[1]:
            raise ValueError(f"y must have shape (T, {self.C.shape[1]}), got {y.shape}")
        Q, R, P0 = self.covariances()

        def step_matrices(previous_mean, _):
            alpha = self.weights(previous_mean)
            A_t = jnp.einsum("k,kij->ij", alpha, self.A)  # eq. (199)
            C_t = jnp.einsum("k,kij->ij", alpha, self.C)
            return A_t, C_t, Q, R, alpha

        filtered, alphas = scan_filter(y.astype(self.A.dtype), mask, self.initial_mean, P0, step_matrices)
        return LGFiltered(*filtered, weights=alphas)

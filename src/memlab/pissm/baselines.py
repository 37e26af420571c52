"""Baselines of Table 1 / Table 8 in the ``Predictions`` interface (predictions.py), so the training loop, the
metrics and the experiments treat them like pi-SSM.

- ``ObservationOnly``: the "Observation" row, "a simple observation model without latent parameterization"
  (section 7, Pong paragraph): a Gaussian random walk in observation space.
- ``DirectRNN``: the "GRU" / "LSTM" rows, "GRU and LSTM cells that directly parameterize the output observations"
  (section 7): the cell reads the previous observation and emits a Gaussian over the next one.
- ``LGBaseline``: the "LG" row, the App. G.1 variant (``lg.LGVariant``, exact Kalman filtering with mixed base
  matrices) seen through the ``Predictions`` interface.

Covariances are parameterised by a Cholesky factor with a softplus diagonal (``cholesky_factor``), so every
parameter value gives a symmetric positive definite covariance and gradient steps cannot leave that set.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_choice, check_covariance, check_int, check_matrix
from memlab.kalman import check_observations, symmetrise
from memlab.layers import BoundedInput, GRUCell, LSTMCell
from memlab.pissm.lg import LGVariant
from memlab.pissm.metrics import gaussian_log_density
from memlab.pissm.predictions import Predictions


def cholesky_factor(raw: Array) -> Array:
    """Unconstrained (..., N, N) -> lower-triangular L with diagonal softplus(diag raw) > 0 (upper part ignored)."""
    diagonal = jax.nn.softplus(jnp.diagonal(raw, axis1=-2, axis2=-1))
    return jnp.tril(raw, -1) + diagonal[..., None] * jnp.eye(raw.shape[-1], dtype=raw.dtype)


def cholesky_raw(cov) -> np.ndarray:
    """Inverse of ``cholesky_factor``: the raw parameter whose factor L has L L^T = cov (symmetric positive
    definite, float64 NumPy). softplus^-1(d) = d + log(1 - exp(-d)), stable for every d > 0."""
    L = np.linalg.cholesky(np.asarray(cov, np.float64))
    d = np.diagonal(L)
    return np.tril(L, -1) + np.diag(d + np.log(-np.expm1(-d)))


def _check_input(y, mask, N: int) -> tuple[Array, Array]:
    """``check_observations`` plus the observation size; missing entries set to 0 (NaN must not reach a gradient)."""
    y, mask = check_observations(y, mask)
    if y.shape[1] != N:
        raise ValueError(f"y must have shape (T, {N}), got {y.shape}")
    return jnp.where(mask[:, None], y, 0.0), mask


class ObservationOnly(eqx.Module):
    """Gaussian random walk in observation space, no latent state (the "Observation" row of Table 1):

        y_0 ~ N(m_0, P_0),   y_t = y_{t-1} + e_t,  e_t ~ N(0, Sigma),   all learned (Sigma full covariance).

    Its exact one-step predictive given the observed past: N(y_s, (t - s) Sigma) with s the last observed step
    before t (so N(y_{t-1}, Sigma) without gaps: the last observed y carries through missing steps and the
    variance grows with the gap, as the random walk requires), or N(m_0, P_0 + t Sigma) before any observation.
    The log-likelihoods therefore sum to the exact log marginal likelihood of the observed y's under this model.
    ``filtered_obs`` is y_t itself at observed steps (the model has no noise model separate from Sigma: the raw
    observation is its estimate of the position) and the carried prediction at missing ones (the imputation).
    No modes: ``score_log_probs`` are zeros. ``fit`` gives the maximum-likelihood parameters in closed form.
    """

    initial_mean: Array  # (N,) m_0
    initial_cov_raw: Array  # (N, N), P_0 = L L^T with L = cholesky_factor(initial_cov_raw)
    step_cov_raw: Array  # (N, N), Sigma = L L^T with L = cholesky_factor(step_cov_raw)

    def __init__(self, observation_size: int, *, initial_mean=None, initial_cov=None, step_cov=None):
        """Defaults: m_0 = 0, P_0 = I, Sigma = I. Covariances must be symmetric positive definite."""
        N = check_int("observation_size", observation_size)
        dtype = jnp.result_type(float)
        initial_mean = np.zeros(N) if initial_mean is None else initial_mean
        check_matrix("initial_mean", initial_mean, (N,))
        raws = []
        for name, cov in (("initial_cov", initial_cov), ("step_cov", step_cov)):
            cov = np.eye(N) if cov is None else cov
            check_matrix(name, cov, (N, N))
            check_covariance(name, cov)
            if np.min(np.linalg.eigvalsh(np.asarray(cov, np.float64))) <= 0:
                raise ValueError(f"{name} must be positive definite")
            raws.append(jnp.asarray(cholesky_raw(cov), dtype))
        self.initial_mean = jnp.asarray(initial_mean, dtype)
        self.initial_cov_raw, self.step_cov_raw = raws

    @classmethod
    def fit(cls, y, mask=None) -> ObservationOnly:
        """Maximum-likelihood parameters from training sequences y (B, T, N), mask (B, T) (None: all observed).

        An increment d between consecutive observed steps s < t is N(0, (t - s) Sigma), so Sigma is the mean of
        d d^T / (t - s); m_0, P_0 are the mean and (1/n) covariance of the observed y_0's. This is the exact MLE
        when every sequence observes step 0 (otherwise the first observed y of a sequence also involves Sigma
        and P_0, and the estimate is the usual moment fit). Needs 2 observed y_0's and 1 increment at least.
        """
        y = np.asarray(y, np.float64)
        if y.ndim != 3 or min(y.shape) < 1:
            raise ValueError(f"y must have shape (B, T, N), got {y.shape}")
        mask = np.ones(y.shape[:2], bool) if mask is None else np.asarray(mask)
        if mask.shape != y.shape[:2] or mask.dtype != np.bool_:
            raise ValueError(f"mask must be a bool array of shape {y.shape[:2]}, got {mask.dtype} {mask.shape}")
        if not np.all(np.isfinite(y[mask])):
            raise ValueError("y must be finite at observed steps")
        first = y[mask[:, 0], 0]
        increments, gaps = [], []
        for seq, observed in zip(y, mask, strict=True):
            steps = np.flatnonzero(observed)
            increments.append(np.diff(seq[steps], axis=0))
            gaps.append(np.diff(steps))
        increments, gaps = np.concatenate(increments), np.concatenate(gaps)
        if len(first) < 2 or len(increments) < 1:
            raise ValueError(f"fit needs >= 2 sequences observing step 0 and >= 1 increment, got {len(first)} and "
                             f"{len(increments)}")
        step_cov = np.einsum("ki,kj,k->ij", increments, increments, 1.0 / gaps) / len(gaps)
        centred = first - first.mean(0)
        return cls(y.shape[2], initial_mean=first.mean(0), initial_cov=centred.T @ centred / len(first),
                   step_cov=step_cov)

    @property
    def initial_cov(self) -> Array:
        L = cholesky_factor(self.initial_cov_raw)
        return L @ L.T

    @property
    def step_cov(self) -> Array:
        L = cholesky_factor(self.step_cov_raw)
        return L @ L.T

    def __call__(self, y: Array, mask: Array | None = None, key: Array | None = None) -> Predictions:
        """One sequence y (T, N), mask (T,) bool (None: all observed); ``key`` is unused (deterministic model)."""
        y, mask = _check_input(y, mask, self.initial_mean.shape[0])
        steps = jnp.arange(y.shape[0])
        last_observed = jax.lax.cummax(jnp.where(mask, steps, -1))  # at or before t
        previous = jnp.concatenate([jnp.array([-1]), last_observed[:-1]])  # strictly before t, -1 if none
        seen = previous >= 0
        gap = (steps - previous).astype(y.dtype)[:, None, None]
        t = steps.astype(y.dtype)[:, None, None]
        means = jnp.where(seen[:, None], y[jnp.maximum(previous, 0)], self.initial_mean)
        covs = jnp.where(seen[:, None, None], gap * self.step_cov, self.initial_cov + t * self.step_cov)
        log_likelihoods = jnp.where(mask, gaussian_log_density(y, means, covs), 0.0)
        filtered = jnp.where(mask[:, None], y, means)
        return Predictions(log_likelihoods, means, covs, filtered, jnp.zeros_like(log_likelihoods))


class DirectRNN(eqx.Module):
    """A GRU or LSTM cell that predicts y_t from y_{1:t-1} directly, without a latent state model (the "GRU" /
    "LSTM" rows of Table 1).

    Step t feeds u_t = [B(ytilde_{t-1}) * o_{t-1}, o_{t-1}] (N + 1 inputs; o = observed flag, ytilde the
    standardised observation (y - obs_offset) / obs_scale, B the learned ``BoundedInput`` (tanh, initial width 2);
    u_0 = 0) to the cell, h_t = cell(h_{t-1}, u_t) (LSTM: its h), and a
    linear head maps h_t to N means and N (N + 1) / 2 Cholesky entries in standardised units:
        q(y_t | y_{1:t-1}) = N(obs_offset + obs_scale * mu_t, D L_t L_t^T D),   D = diag(obs_scale).
    Missing steps feed o = 0 and the network predicts through them. The cells are ``memlab.layers.gated_rnn``
    cells, so ``project_model_iss`` applies to this model as to pi-SSM, and B keeps ||u_t||_inf <= 1, the input
    bound its margin is certified for.

    The model has no filtering estimate of y_t given y_{1:t}, so ``filtered_obs`` is the one-step predictive mean
    (an estimate from y_{1:t-1} only). No modes: ``score_log_probs`` are zeros.
    ``obs_offset``, ``obs_scale`` (N,) are set by the caller from the training data (e.g. mean and std of the
    observed y's) and stored as static tuples: not trained, not seen by the optimiser.
    """

    obs_input: BoundedInput
    cell: GRUCell | LSTMCell
    head: eqx.nn.Linear  # h (n_h,) -> [mu (N,), Cholesky entries (N (N + 1) / 2,)]
    obs_offset: tuple[float, ...] = eqx.field(static=True)
    obs_scale: tuple[float, ...] = eqx.field(static=True)

    def __init__(self, observation_size: int, *, key: Array, cell: str = "gru", hidden_size: int = 32,
                 obs_offset=None, obs_scale=None):
        """``cell`` "gru" or "lstm"; obs_offset (N,) (default 0), obs_scale (N,) > 0 (default 1). At the default
        hidden size 32 a GRU on N = 2 has 3.6k parameters, an LSTM 4.8k (pi-SSM: a few thousand at default)."""
        N = check_int("observation_size", observation_size)
        hidden_size = check_int("hidden_size", hidden_size)
        cells = {"gru": GRUCell, "lstm": LSTMCell}
        check_choice("cell", cell, cells)
        offset = np.zeros(N) if obs_offset is None else np.asarray(obs_offset, np.float64)
        scale = np.ones(N) if obs_scale is None else np.asarray(obs_scale, np.float64)
        if offset.shape != (N,) or scale.shape != (N,) or not np.all(np.isfinite(offset)):
            raise ValueError(f"obs_offset and obs_scale must be finite arrays of shape ({N},), got {offset.shape} "
                             f"and {scale.shape}")
        if not np.all(np.isfinite(scale) & (scale > 0)):
            raise ValueError(f"obs_scale must be finite and > 0, got {scale}")
        k_cell, k_head = jax.random.split(key)
        self.obs_input = BoundedInput(np.zeros(N), np.full(N, 2.0))
        self.cell = cells[cell](N + 1, hidden_size, key=k_cell)
        self.head = eqx.nn.Linear(hidden_size, N + N * (N + 1) // 2, key=k_head)
        self.obs_offset = tuple(float(v) for v in offset)
        self.obs_scale = tuple(float(v) for v in scale)

    def __call__(self, y: Array, mask: Array | None = None, key: Array | None = None) -> Predictions:
        """One sequence y (T, N), mask (T,) bool (None: all observed); ``key`` is unused (deterministic model)."""
        N = len(self.obs_offset)
        y, mask = _check_input(y, mask, N)
        dtype = self.head.weight.dtype
        offset, scale = jnp.asarray(self.obs_offset, dtype), jnp.asarray(self.obs_scale, dtype)
        observed = mask.astype(dtype)[:, None]
        standardised = jax.vmap(self.obs_input)((y - offset) / scale)
        read = jnp.concatenate([standardised * observed, observed], axis=-1)  # (T, N + 1)
        inputs = jnp.concatenate([jnp.zeros((1, N + 1), dtype), read[:-1]])  # u_t carries y_{t-1}: causal
        is_lstm = isinstance(self.cell, LSTMCell)

        def step(state, u):
            state = self.cell(state, u)
            return state, self.head(state[0] if is_lstm else state)

        _, out = jax.lax.scan(step, self.cell.init_state(), inputs)
        rows, cols = np.tril_indices(N)
        raw = jnp.zeros((y.shape[0], N, N), dtype).at[:, rows, cols].set(out[:, N:])
        L = scale[:, None] * cholesky_factor(raw)  # D L_t
        means = offset + scale * out[:, :N]
        covs = L @ jnp.swapaxes(L, -1, -2)
        log_likelihoods = jnp.where(mask, gaussian_log_density(y, means, covs), 0.0)
        return Predictions(log_likelihoods, means, covs, means, jnp.zeros_like(log_likelihoods))


class LGBaseline(eqx.Module):
    """The App. G.1 LG variant (``lg.LGVariant``) in the ``Predictions`` interface, with C_t = sum_k alpha_t^(k)
    C^(k) (eq. 199):

        obs_means = C_t m_{t|t-1},  obs_covs = C_t P_{t|t-1} C_t^T + R,  filtered_obs = C_t m_{t|t},
        log_likelihoods = LGVariant's exact log p(y_t | y_{1:t-1}); means, covariances = filtered moments.

    Deterministic: ``key`` is unused, ``score_log_probs`` are zeros; the mixture weights alpha_t are not a mode
    posterior, so ``modes`` and ``mode_probs`` are None. LGVariant predicts before its first update (x_0 is the
    prior state, y[0] observes x_1 = A_1 x_0 + q_1); on data whose y[0] observes the initial state this only
    reparameterises the prior, which the learned m_0 absorbs.
    """

    lg: LGVariant

    def __call__(self, y: Array, mask: Array | None = None, key: Array | None = None) -> Predictions:
        """One sequence y (T, N), mask (T,) bool (None: all observed). vmap for a batch."""
        out = self.lg(y, mask)
        _, R, _ = self.lg.covariances()
        C = jnp.einsum("tk,kij->tij", out.weights, self.lg.C)  # eq. (199)
        obs_means = jnp.einsum("tij,tj->ti", C, out.predicted_means)
        obs_covs = symmetrise(C @ out.predicted_covariances @ jnp.swapaxes(C, -1, -2) + R)
        filtered = jnp.einsum("tij,tj->ti", C, out.means)
        return Predictions(out.log_likelihoods, obs_means, obs_covs, filtered, jnp.zeros_like(out.log_likelihoods),
                           means=out.means, covariances=out.covariances)

"""Steps 7-8 of pi-SSM's inference (App. E.1): the factor L_t L_t^T of the gain K_t = Sigma_{t|t-1} C^T L_t L_t^T,
one module per variant. ``model.PiSSM`` holds one and calls it once per step; the variant is its type.

- ``ExactGain``: L L^T = S^{-1}, the Kalman gain (pi-SSM(LG), section 7).
- ``PaperGain``: eq. (7) as printed, L_t = RNN(Sigma_{t|t-1}, r_t) in absolute units, nothing around it; or with
  the inputs normalised to ||u_t||_inf < 1 (``normalise_inputs``: Assumption 4 of Theorem 2, "enforced via input
  normalization", App. C.7), L_t still in absolute units.
- ``WhitenedGain``: memlab's gain, L_t = G^{-T} Ltilde around the exact gain (S = G G^T), from scale-free features,
  Ltilde bounded (``bounded=True``) or not (the ablation).

A gain is called as ``gain(S_chol (N, N), pred_cov (M, M), residual (N,), state, observed) -> (L L^T (N, N), new
state)``; the RNN state is kept where y_t is missing. Why each variant is built as it is (the bound, the features,
the initialisation): docs/studies/pissm.md, "The π-SSM model".
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.layers import BoundedInput, GRUCell, LSTMCell
from memlab.small_matmul import fused_matmul, fused_matvec

__all__ = ["GAIN_BOUND", "OFF_DIAGONAL_BOUND", "ExactGain", "PaperGain", "WhitenedGain", "rnn_features"]

GAIN_BOUND = math.sqrt(2.0)  # Ltilde's diagonal lies in (0, GAIN_BOUND) (module doc)
OFF_DIAGONAL_BOUND = 0.5
_DIAGONAL_OFFSET = math.log(1.0 / (GAIN_BOUND - 1.0))  # sigmoid(offset) * GAIN_BOUND = 1: Ltilde starts at I


class ExactGain(eqx.Module):
    """L L^T = S^{-1}: K_t = Sigma_{t|t-1} C^T S^{-1}, the Kalman gain (section 7's pi-SSM(LG)). No parameters, no
    RNN state."""

    def init_state(self) -> None:
        return None

    def __call__(self, S_chol: Array, pred_cov: Array, residual: Array, state, observed: Array):
        S_chol_inv = _inverse_cholesky(S_chol)
        return fused_matmul(S_chol_inv.T, S_chol_inv), state


class PaperGain(eqx.Module):
    """Eq. (7) as printed: a GRU / LSTM cell on u_t = [tril Sigma_{t|t-1} (M(M+1)/2), r_t (N)], layer norm, readout
    to L_t's N(N+1)/2 lower-triangular entries; L_t L_t^T unbounded. With ``input_norm`` (a ``BoundedInput``), the
    cell reads u_t through it: ||u_t||_inf < 1, each entry on its own scale (Assumption 4, App. C.7)."""

    cell: GRUCell | LSTMCell
    norm: eqx.nn.LayerNorm
    readout: eqx.nn.Linear
    input_norm: BoundedInput | None

    def __init__(self, latent_size: int, observation_size: int, S_0: Array, cell_type: type[GRUCell | LSTMCell],
                 hidden_size: int, *, key_cell: Array, key_readout: Array, dtype, normalise_inputs: bool = False):
        """S_0 (N, N) = C P_0 C^T + R: the readout's bias starts at chol(S_0^{-1}) (the exact gain of the first step),
        its weights at 0.01 x their default. ``normalise_inputs``: an input normalisation centred on 0 with S_0's
        scale (variances: mean diag S_0; residuals: its square root); ``gain_fit`` sets it from filter paths."""
        M, N = latent_size, observation_size
        D = M * (M + 1) // 2 + N
        self.cell = cell_type(D, hidden_size, key=key_cell)
        if normalise_inputs:
            variance = float(np.mean(np.diag(np.asarray(S_0, np.float64))))
            self.input_norm = BoundedInput(np.zeros(D), np.r_[np.full(D - N, variance), np.full(N, np.sqrt(variance))])
        else:
            self.input_norm = None
        self.norm = eqx.nn.LayerNorm(hidden_size, dtype=dtype)
        readout = eqx.nn.Linear(hidden_size, N * (N + 1) // 2, key=key_readout, dtype=dtype)
        L_0 = jnp.linalg.cholesky(jnp.linalg.inv(S_0))
        self.readout = eqx.tree_at(lambda r: (r.weight, r.bias), readout,
                                   (0.01 * readout.weight, L_0[np.tril_indices(N)].astype(dtype)))

    def init_state(self):
        return self.cell.init_state()

    def cell_input(self, u: Array) -> Array:
        """What the cell reads of u_t = [tril Sigma_{t|t-1}, r_t]: u_t itself, or normalised (``input_norm``). The
        normalisation is fixed, not trained: its centre is in Sigma's absolute units (~1e-4 on Pong), where one Adam
        step of App. F.1's 0.011 would move it by a hundred of its scales."""
        return u if self.input_norm is None else jax.lax.stop_gradient(self.input_norm)(u)

    def __call__(self, S_chol: Array, pred_cov: Array, residual: Array, state, observed: Array):
        M, N = pred_cov.shape[0], S_chol.shape[0]
        u = jnp.concatenate([pred_cov[np.tril_indices(M)], residual])  # eq. (7): L_t = RNN(Sigma_{t|t-1}, r_t)
        entries, state = _rnn_readout(self, self.cell_input(u), state, observed)
        L = _lower_triangular(entries, N, S_chol.dtype)
        return fused_matmul(L, L.T), state


class WhitenedGain(eqx.Module):
    """memlab's gain: L = G^{-T} Ltilde with S = G G^T, Ltilde lower-triangular from a GRU / LSTM cell fed the
    scale-free features [log diag Sigma_{t|t-1}, log diag S, G^{-1} r_t] through ``BoundedInput`` (||u||_inf < 1:
    Theorem 2's input bound). Ltilde = I is the exact gain, and the gain starts there. ``bounded``: Ltilde's
    spectral norm <= sqrt 2, so the filter contracts for any learned gain; without it (the ablation)
    Ltilde = tril(raw, -1) + diag(exp(diag raw))."""

    gain_input: BoundedInput
    cell: GRUCell | LSTMCell
    norm: eqx.nn.LayerNorm
    readout: eqx.nn.Linear
    bounded: bool = eqx.field(static=True)

    def __init__(self, latent_size: int, observation_size: int, R, cell_type: type[GRUCell | LSTMCell],
                 hidden_size: int, *, bounded: bool, key_cell: Array, key_readout: Array, dtype):
        """R (N, N): the log-variance features are centred on log mean diag R."""
        M, N = latent_size, observation_size
        # log-variances centred on log mean diag R with an e-fold width of 3; whitened residuals (~N(0, 1))
        # near-linear within +-2
        log_r = math.log(float(np.mean(np.diag(np.asarray(R, np.float64)))))
        self.gain_input = BoundedInput(np.r_[np.full(M + N, log_r), np.zeros(N)],
                                       np.r_[np.full(M + N, 3.0), np.full(N, 2.0)])
        self.cell = cell_type(M + 2 * N, hidden_size, key=key_cell)
        self.norm = eqx.nn.LayerNorm(hidden_size, dtype=dtype)
        readout = eqx.nn.Linear(hidden_size, N * (N + 1) // 2, key=key_readout, dtype=dtype)
        # Ltilde starts near I: small weights, zero bias (exp(0) = 1 on the diagonal).
        self.readout = eqx.tree_at(lambda r: (r.weight, r.bias), readout,
                                   (0.01 * readout.weight, jnp.zeros_like(readout.bias)))
        self.bounded = bool(bounded)

    def init_state(self):
        return self.cell.init_state()

    def __call__(self, S_chol: Array, pred_cov: Array, residual: Array, state, observed: Array):
        N = S_chol.shape[0]
        S_chol_inv = _inverse_cholesky(S_chol)
        white = fused_matvec(S_chol_inv, residual)
        S_diagonal = jnp.sum(S_chol * S_chol, axis=1)
        features = jnp.concatenate([jnp.log(jnp.diagonal(pred_cov)), jnp.log(S_diagonal), white])
        # ||u||_inf < 1: Theorem 2's input bound
        entries, state = _rnn_readout(self, self.gain_input(features), state, observed)
        raw = _lower_triangular(entries, N, S_chol.dtype)
        if self.bounded:
            diagonal = GAIN_BOUND * jax.nn.sigmoid(jnp.diagonal(raw) + _DIAGONAL_OFFSET)  # in (0, sqrt 2), starts at 1
            L_tilde = jnp.tril(OFF_DIAGONAL_BOUND * jnp.tanh(raw), -1) + jnp.diag(diagonal)
            # spectral norm <= sqrt(||L||_1 ||L||_inf) <= GAIN_BOUND, so eig(Ltilde Ltilde^T) <= 2 (module doc)
            holder = jnp.sqrt(jnp.max(jnp.sum(jnp.abs(L_tilde), 0)) * jnp.max(jnp.sum(jnp.abs(L_tilde), 1)))
            L_tilde = L_tilde * jnp.minimum(1.0, GAIN_BOUND / holder)
        else:  # the ablation: the same features and units, no bound (starts at I)
            L_tilde = jnp.tril(raw, -1) + jnp.diag(jnp.exp(jnp.diagonal(raw)))
        L = fused_matmul(S_chol_inv.T, L_tilde)
        return fused_matmul(L, L.T), state


def rnn_features(gain: PaperGain | WhitenedGain, u: Array, state, observed: Array):
    """The layer-normalised state (H,) after one step of ``gain``'s cell on u, and the new state (the old one kept
    where y_t is missing): what the readout reads (gain_fit.py fits the readout on it)."""
    new_state = gain.cell(state, u)
    state = jax.tree_util.tree_map(lambda new, old: jnp.where(observed, new, old), new_state, state)
    h = state[0] if isinstance(state, tuple) else state
    return gain.norm(h), state


def _rnn_readout(gain: PaperGain | WhitenedGain, u: Array, state, observed: Array):
    """The readout (N(N+1)/2,) of ``rnn_features`` after one cell step on u, and the new state."""
    features, state = rnn_features(gain, u, state, observed)
    return gain.readout(features), state


def _inverse_cholesky(S_chol: Array) -> Array:
    """G^{-1} (N, N) of the lower-triangular Cholesky factor G of S."""
    return jax.scipy.linalg.solve_triangular(S_chol, jnp.eye(S_chol.shape[0], dtype=S_chol.dtype), lower=True)


def _lower_triangular(entries: Array, N: int, dtype) -> Array:
    """The (N, N) lower-triangular matrix with ``entries`` (N(N+1)/2,) in ``np.tril_indices`` order."""
    rows, cols = np.tril_indices(N)
    return jnp.zeros((N, N), dtype).at[rows, cols].set(entries)

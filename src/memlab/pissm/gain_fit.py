"""An initialisation of eq. (7)'s gain under which the untrained filter tracks: the readout fitted to the exact
Kalman factor along exact-gain filter paths.

Why: ``PaperGain`` reads L_t from an RNN fed [tril Sigma_{t|t-1}, r_t] in absolute units. Started with its readout
bias at the first step's factor chol(S_0^{-1}) (S_0 from the broad prior: L L^T ~ 12 I on Pong) and near-zero
weights, it keeps that factor at every step while the Kalman factor grows by an order of magnitude within a few
steps: the untrained filter has lost track before training starts (on quick Pong its test log-likelihood is far
below the exact gain's).
Training from there tests that initialisation, not eq. (7) or the stability schemes. The paper states none.

The fit (``fit_readout_to_exact_gain``), in three steps:

1. Paths. The same model with the exact gain (``ExactGain``) filters the given sequences, one sampled path each:
   along it the gain RNN's inputs u_t and the exact factor L*_t = chol(S_t^{-1}) are known
   (``gain_inputs_along_paths``). Three sets of paths (``PATHS``): the model as it is, with 10 Q (larger
   covariances than the model's own), and with observations 10 noise standard deviations off (larger residuals).
2. The residual's input weights at zero. The exact gain does not depend on r_t; random weights on r_t moved the RNN
   state wherever the untrained model's residuals were larger than on the fitted paths (its random A_z drift: up
   to tens of noise standard deviations), and there the filter diverged (on some quick Pong test sequences).
   Zeroed, the gain starts reading Sigma_{t|t-1} only, as the Kalman gain does; training may change that.
3. The readout (weights and bias; the cell's other weights and the layer norm keep their random values) by least
   squares on the RNN states along those paths, each step weighted by 1 / ||L*_t|| (the filter's gain error is
   S_t L L^T - I, relative: a step with a small factor counts as much as one with a large one).

On quick Pong, over model seeds and GRU and LSTM cells, the untrained filter's test log-likelihood is a little above
the exact gain's (a misspecified model's exact gain is not the best gain), and very few filters diverge
(tests/pissm/test_gain_fit.py checks the fitted start tracks).

A gain whose inputs are normalised (``PaperGain.input_norm``, gain form "paper-normalised") first gets its
normalisation from the same paths: each input centred on its median, scaled to its 90th percentile of distance
from it. Its fitted readout's weights are then an order of magnitude smaller than the unnormalised gain's (which
reads tiny state differences), but where the tanh saturates (a covariance far outside the paths) the gain cannot
shrink with Sigma, and a few filters diverge on quick Pong. Tested: tests/pissm/test_gain_fit.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.kalman import check_observations
from memlab.pissm.gain import ExactGain, PaperGain, rnn_features
from memlab.pissm.model import PiSSM

__all__ = ["PATHS", "fit_readout_to_exact_gain", "gain_inputs_along_paths"]

# (factor on the model's Q, factor on the data's noise: y plus noise of (factor - 1) R) of each set of exact-gain
# paths (module doc). Tried on quick Pong and rejected: without the third set 3-6 diverging sequences per seed; with
# 100 Q or with 3 Q and 30 Q added the fit worsens on the usual range (0.1-0.8 nats per step below the exact gain,
# more divergences).
PATHS = ((1.0, 1.0), (10.0, 1.0), (1.0, 100.0))
ALL_NON_FINITE = "the exact-gain filter gave non-finite values on every sequence; cannot fit the gain"
SCALE_FLOOR = 1e-6  # an input that never varies along the paths gets this fraction of the widest input's scale
RIDGE = 1e-6  # relative to the weighted normal matrix's mean diagonal: keeps the solve defined, changes no fit
# PATHS, RIDGE and runs.GAIN_FIT_SEQUENCES determine the tracking models' start, which no cell digest sees: changing
# one changes stored results (bump the pissm cells' versions)


def gain_inputs_along_paths(model: PiSSM, y: Array, mask: Array, key: Array) -> tuple[Array, Array]:
    """Along one path of ``model``'s filter per sequence of y (B, T, N) (mask (B, T)): the gain RNN's inputs u (B,
    T, M(M+1)/2 + N) = [tril Sigma_{t|t-1}, r_t] and the exact factors' entries (B, T, N(N+1)/2) = tril
    chol(S_t^{-1}) of the path's own S_t, in ``np.tril_indices`` order (gain.py)."""
    B = y.shape[0]
    preds = eqx.filter_vmap(lambda y_b, m_b, k: model(y_b, m_b, key=k))(y, mask, jax.random.split(key, B))
    Q, _, P0 = model.noise()
    M, N = model.latent_size, y.shape[-1]

    def predicted_cov(mean, cov, mode):  # step 6 of the sampled mode from the previous filtered moments
        return model.predict(mean, cov, Q)[1][mode]

    later = jax.vmap(jax.vmap(predicted_cov))(preds.means[:, :-1], preds.covariances[:, :-1], preds.modes[:, 1:])
    pred_cov = jnp.concatenate([jnp.broadcast_to(P0, (B, 1, M, M)), later], axis=1)  # step 1 updates the prior
    residual = jnp.where(mask[..., None], jnp.nan_to_num(y) - preds.obs_means, 0.0)
    rows, cols = np.tril_indices(M)
    inputs = jnp.concatenate([pred_cov[..., rows, cols], residual], axis=-1)
    factor = jnp.linalg.cholesky(jnp.linalg.inv(preds.obs_covs))
    rows, cols = np.tril_indices(N)
    return inputs, factor[..., rows, cols]


def fit_readout_to_exact_gain(model: PiSSM, y: Array, mask: Array | None, key: Array,
                              prepare: Callable[[PiSSM], PiSSM] | None = None) -> PiSSM:
    """``model`` (a pi-SSM with eq. (7)'s gain, ``PaperGain``) with its gain cell's weights on r_t at zero and its
    readout fitted to the exact Kalman factor along exact-gain paths on y (B, T, N) (mask (B, T) bool, True where
    observed; None: all) (module doc). ``prepare``: applied to the model after its input weights are set and before
    the readout is fitted (e.g. the ISS projection that training applies first). Deterministic given ``key``."""
    if not isinstance(model, PiSSM) or not isinstance(model.gain, PaperGain):
        raise ValueError("fit_readout_to_exact_gain needs a PiSSM with eq. (7)'s gain (gain_form 'paper' or "
                         "'paper-normalised')")
    y = jnp.asarray(y)
    if y.ndim != 3 or y.shape[0] < 1:
        raise ValueError(f"y must have shape (B, T, N) with B >= 1, got {y.shape}")
    mask = jnp.ones(y.shape[:2], bool) if mask is None else jnp.asarray(mask, bool)
    if mask.shape != y.shape[:2]:
        raise ValueError(f"mask must have shape {y.shape[:2]}, got {mask.shape}")
    check_observations(y[0], mask[0])  # one sequence checks the layout: shapes, NaN only where missing
    exact = eqx.tree_at(lambda m: m.gain, model, ExactGain())
    _, R, _ = model.noise()
    R_chol = jnp.linalg.cholesky(R).astype(y.dtype)
    observed = np.asarray(mask)
    paths = []
    for (process, observation), path_key in zip(PATHS, jax.random.split(key, len(PATHS))):
        noise_key, path_key = jax.random.split(path_key)
        paths_of = eqx.tree_at(lambda m: m.log_q, exact, exact.log_q + np.log(process))
        y_paths = y + np.sqrt(observation - 1.0) * jax.random.normal(noise_key, y.shape, y.dtype) @ R_chol.T
        paths.append(_paths_jit(paths_of, y_paths, mask, path_key))
    N = y.shape[-1]
    if model.gain.input_norm is not None:
        model = _normalisation_from_paths(model, [inputs for inputs, _ in paths], observed)
    model = _without_residual_inputs(model, N)
    if prepare is not None:
        model = prepare(model)
    X, Y = [], []
    for inputs, targets in paths:
        x = np.asarray(_features_jit(model.gain, inputs, mask), np.float64)[observed]
        t = np.asarray(targets, np.float64)[observed]
        finite = np.all(np.isfinite(x), axis=1) & np.all(np.isfinite(t), axis=1)
        X.append(x[finite])
        Y.append(t[finite])
    weight, bias = _weighted_least_squares(np.concatenate(X), np.concatenate(Y))
    dtype = model.gain.readout.weight.dtype
    return eqx.tree_at(lambda m: (m.gain.readout.weight, m.gain.readout.bias), model,
                       (jnp.asarray(weight, dtype), jnp.asarray(bias, dtype)))


def _normalisation_from_paths(model: PiSSM, inputs: list[Array], observed: np.ndarray) -> PiSSM:
    """``model`` with its gain's input normalisation centred on each input's median along the paths and scaled to
    its 90th percentile of distance from it (so 90 % of the steps fall where tanh is near-linear: |u| < 0.76)."""
    u = np.concatenate([np.asarray(x, np.float64)[observed] for x in inputs])
    u = u[np.all(np.isfinite(u), axis=1)]
    if not len(u):
        raise ValueError(ALL_NON_FINITE)
    centre = np.median(u, axis=0)
    spread = np.quantile(np.abs(u - centre), 0.9, axis=0)
    scale = np.maximum(spread, SCALE_FLOOR * np.max(spread))
    norm = model.gain.input_norm
    return eqx.tree_at(lambda m: (m.gain.input_norm.shift, m.gain.input_norm.log_scale), model,
                       (jnp.asarray(centre, norm.shift.dtype), jnp.asarray(np.log(scale), norm.log_scale.dtype)))


def _without_residual_inputs(model: PiSSM, N: int) -> PiSSM:
    """``model`` with the last N input columns (r_t) of every W_x of its gain cell at zero (module doc, step 2)."""
    cell = model.gain.cell
    names = [f.name for f in dataclasses.fields(cell) if f.name.startswith("W_")]
    return eqx.tree_at(lambda m: [getattr(m.gain.cell, n) for n in names], model,
                       [getattr(cell, n).at[:, -N:].set(0.0) for n in names])


def _readout_features(gain: PaperGain, inputs: Array, observed: Array) -> Array:
    """The layer-normalised RNN states (T, H) that the readout reads, driven by ``inputs`` (T, D) (u_t before the
    gain's normalisation), as in the filter (``gain.rnn_features``)."""

    def step(state, u_and_observed):
        u, seen = u_and_observed
        features, state = rnn_features(gain, gain.cell_input(u), state, seen)
        return state, features

    return jax.lax.scan(step, gain.init_state(), (inputs, observed))[1]


_paths_jit = eqx.filter_jit(gain_inputs_along_paths)  # one compiled program per model structure and data shape
_features_jit = eqx.filter_jit(jax.vmap(_readout_features, in_axes=(None, 0, 0)))


def _weighted_least_squares(X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(weight (P, H), bias (P,)) minimising sum_t ||W x_t + b - y_t||^2 / ||y_t||^2 (module doc, step 3)."""
    if not len(X):
        raise ValueError(ALL_NON_FINITE)
    X = np.c_[X, np.ones(len(X))]
    weight = 1.0 / np.linalg.norm(Y, axis=1)
    Xw, Yw = X * weight[:, None], Y * weight[:, None]
    normal = Xw.T @ Xw
    solution = np.linalg.solve(normal + RIDGE * np.mean(np.diag(normal)) * np.eye(len(normal)), Xw.T @ Yw)
    return solution[:-1].T, solution[-1]

"""Metrics of the pi-SSM study (section 7, Table 1; App. H.1, H.3 Table 8; NCLT Table 7).

Plain functions on batched ``Predictions`` fields. Axes: S Monte-Carlo samples (independent runs of a stochastic
model over the same sequence: pi-SSM samples x_{t-1} and z_t; deterministic models have S = 1), B sequences,
T steps, N observation coordinates, K modes. The per-sequence metrics return (B,) so callers report mean and std.

- ``gaussian_log_density``: log N(y; mean, cov) through the Cholesky factor.
- ``predictive_log_likelihood``: the average per observed step of log (1/S) sum_s exp(ll_s), the Monte-Carlo
  estimate of log q(y_t | y_{1:t-1}) of section 6 (Theorem 1): q(y_t | y_{1:t-1}) is an expectation over the
  sampled past, estimated by the sample mean of the per-sample predictive densities, then logged. By Jensen the
  log of the mean is biased low by O(1/S), and it is never below the average of the per-sample logs.
- ``position_mse`` and ``to_db``: MSE of the filtered (or imputed) position against the ground truth C x_t
  (Table 8; in dB, 10 log10, for NCLT, Table 7).
- ``imputation_mask``: App. H.1's random removal of half the observations.
- Mode recovery on Pong (App. H.1 "uniqueness" and "persistence"): ``modes_in_use``, ``mode_persistence``,
  ``mode_agreement``. These take concrete arrays (NumPy / SciPy, for evaluation outside jit).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from scipy.optimize import linear_sum_assignment

from memlab.checks import check_int, check_real, is_concrete
from memlab.kalman import symmetrise


def gaussian_log_density(y: Array, mean: Array, cov: Array) -> Array:
    """log N(y; mean, cov) for y (..., N), mean (..., N), cov (..., N, N) (leading axes broadcast) -> (...).

    cov must be symmetric positive definite (it is symmetrised, then Cholesky-factored: cov = L L^T, so
    log det cov = 2 sum log diag L and the Mahalanobis term is ||L^{-1} (y - mean)||^2).
    """
    y, mean, cov = jnp.asarray(y), jnp.asarray(mean), jnp.asarray(cov)
    N = y.shape[-1] if y.ndim else 0
    if N < 1 or mean.shape[-1:] != (N,) or cov.shape[-2:] != (N, N):
        raise ValueError(f"expected y (..., N), mean (..., N), cov (..., N, N) with N >= 1, got y {y.shape}, "
                         f"mean {mean.shape}, cov {cov.shape}")
    batch = jnp.broadcast_shapes(y.shape[:-1], mean.shape[:-1], cov.shape[:-2])
    return gaussian_log_density_from_cholesky(y, mean, jnp.linalg.cholesky(jnp.broadcast_to(symmetrise(cov),
                                                                                           (*batch, N, N))))


def gaussian_log_density_from_cholesky(y: Array, mean: Array, L: Array) -> Array:
    """log N(y; mean, L L^T) for y (..., N), mean (..., N) and the lower Cholesky factor L (B..., N, N) of the
    covariance, whose leading axes B... are the broadcast of all three (unchecked: ``gaussian_log_density``
    checks, callers that already hold the factor skip a second factorisation) -> (B...)."""
    N = L.shape[-1]
    residual = jnp.broadcast_to(y - mean, L.shape[:-1])
    whitened = jax.scipy.linalg.solve_triangular(L, residual[..., None], lower=True)[..., 0]
    log_det = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
    return -0.5 * (N * math.log(2 * math.pi) + log_det + jnp.sum(whitened**2, axis=-1))


def _check_mask(mask, shape: tuple[int, ...], name: str = "mask") -> Array:
    """A bool mask of ``shape`` (None: all True) with at least one True per row (checked when concrete)."""
    mask = jnp.ones(shape, bool) if mask is None else jnp.asarray(mask)
    if mask.shape != shape or mask.dtype != jnp.bool_:
        raise ValueError(f"{name} must be a bool array of shape {shape}, got {mask.dtype} {mask.shape}")
    if is_concrete(mask) and not np.all(np.any(np.asarray(mask), axis=-1)):
        raise ValueError(f"{name} selects no step in sequence {int(np.argmin(np.any(np.asarray(mask), -1)))}")
    return mask


def predictive_log_likelihood(log_likelihoods: Array, mask: Array | None = None) -> Array:
    """Average predictive log-likelihood per observed step, one value per sequence.

    log_likelihoods (S, B, T): log q(y_t | y_{1:t-1}) of each sample (``Predictions.log_likelihoods``, vmapped
    over samples and sequences). mask (B, T) bool, True at observed steps (None: all). Returns (B,):
        (1 / #observed) sum_{t observed} log (1/S) sum_s exp(ll[s, b, t]).
    """
    ll = jnp.asarray(log_likelihoods)
    if ll.ndim != 3 or min(ll.shape) < 1:
        raise ValueError(f"log_likelihoods must have shape (S, B, T) with S, B, T >= 1, got {ll.shape}")
    mask = _check_mask(mask, ll.shape[1:])
    per_step = jax.nn.logsumexp(ll, axis=0) - math.log(ll.shape[0])  # MC estimate of log q(y_t | y_{1:t-1})
    return jnp.sum(jnp.where(mask, per_step, 0.0), axis=-1) / jnp.sum(mask, axis=-1)


def position_mse(estimates: Array, truth: Array, steps: Array | None = None) -> Array:
    """Per-sequence MSE of the sample-mean estimate against the ground-truth position, (B,).

    estimates (S, B, T, N): e.g. ``Predictions.filtered_obs`` per sample; truth (B, T, N) = C x_t; steps (B, T)
    bool selects the steps to score (None: all; for imputation, the removed steps). The S samples are averaged
    first, then the squared error is averaged over the selected steps AND the N coordinates (a mean, not a sum:
    the expected squared Euclidean distance is N times this value).
    """
    estimates, truth = jnp.asarray(estimates), jnp.asarray(truth)
    if estimates.ndim != 4 or min(estimates.shape) < 1 or truth.shape != estimates.shape[1:]:
        raise ValueError(f"expected estimates (S, B, T, N) and truth (B, T, N), got {estimates.shape} and "
                         f"{truth.shape}")
    steps = _check_mask(steps, truth.shape[:2], "steps")
    squared = jnp.mean((jnp.mean(estimates, axis=0) - truth) ** 2, axis=-1)  # (B, T)
    return jnp.sum(jnp.where(steps, squared, 0.0), axis=-1) / jnp.sum(steps, axis=-1)


def to_db(mse):
    """10 log10(mse), the decibel scale of NCLT's Table 7. mse >= 0 (0 gives -inf)."""
    if is_concrete(mse) and np.any(np.asarray(mse) < 0):
        raise ValueError(f"mse must be >= 0, got {mse}")
    return 10.0 * jnp.log10(mse)


def imputation_mask(key: Array, num_sequences: int, num_steps: int, fraction: float = 0.5,
                    keep_first: int = 1) -> Array:
    """Observation mask (B, T) bool, True = kept, for App. H.1's "randomly remove half of the observations".

    Each sequence loses exactly round(fraction * T) steps (half-up rounding), drawn uniformly without replacement
    among steps keep_first..T-1, independently per sequence; the first ``keep_first`` steps are always kept (a
    filter needs at least one observation to start from). ValueError if fewer than that many steps are eligible.
    """
    for name, n, low in (("num_sequences", num_sequences, 1), ("num_steps", num_steps, 1),
                         ("keep_first", keep_first, 0)):
        check_int(name, n, low)
    check_real("fraction", fraction, 0, 1)
    num_removed = math.floor(fraction * num_steps + 0.5)
    if num_removed > num_steps - keep_first:
        raise ValueError(f"cannot remove {num_removed} of {num_steps} steps while keeping the first {keep_first}")
    return _random_removal(key, int(num_sequences), int(num_steps), int(keep_first), num_removed)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _random_removal(key, num_sequences, num_steps, keep_first, num_removed):
    priority = jax.random.uniform(key, (num_sequences, num_steps))
    priority = priority.at[:, :keep_first].set(jnp.inf)  # never among the smallest
    rank = jnp.argsort(jnp.argsort(priority, axis=-1), axis=-1)  # a uniformly random permutation per row
    return rank >= num_removed


# ------------------------------------------------------------------------- mode recovery (App. H.1, Pong)


def _int_modes(name: str, modes) -> np.ndarray:
    modes = np.asarray(modes)
    if not np.issubdtype(modes.dtype, np.integer) or modes.ndim < 1 or modes.size == 0:
        raise ValueError(f"{name} must be a non-empty integer array, got {modes.dtype} {modes.shape}")
    if np.any(modes < 0):
        raise ValueError(f"{name} must be >= 0")
    return modes


def _paired(modes, true_modes) -> tuple[np.ndarray, np.ndarray]:
    """modes (B, T) or (S, B, T) and true_modes (B, T) -> both (S, B, T) (S = 1 for (B, T))."""
    modes, true_modes = _int_modes("modes", modes), _int_modes("true_modes", true_modes)
    if true_modes.ndim != 2 or modes.shape[-2:] != true_modes.shape or modes.ndim not in (2, 3):
        raise ValueError(f"expected modes (B, T) or (S, B, T) and true_modes (B, T), got {modes.shape} and "
                         f"{true_modes.shape}")
    modes = modes.reshape(-1, *true_modes.shape)
    return modes, np.broadcast_to(true_modes, modes.shape)


def modes_in_use(modes, num_modes: int, threshold: float = 0.01) -> int:
    """Number of the K = ``num_modes`` modes whose share of all sampled steps (every entry of modes (..., T),
    pooled over samples, sequences and steps) is >= threshold: App. H.1's "uniqueness" (pruned modes drop out)."""
    modes = _int_modes("modes", modes)
    check_int("num_modes", num_modes)
    if np.any(modes >= num_modes):
        raise ValueError(f"modes must lie in [0, {num_modes}), got max {int(modes.max())}")
    check_real("threshold", threshold, 0, 1, open_low=True)
    share = np.bincount(modes.ravel(), minlength=num_modes) / modes.size
    return int(np.sum(share >= threshold))


def mode_persistence(modes, true_modes) -> float:
    """App. H.1 "persistence": how consistently one mode is sampled inside each interval of constant true mode.

    modes (B, T) or (S, B, T) sampled modes; true_modes (B, T) ground truth (Pong: the velocity quadrant, which
    changes exactly at wall hits, so its maximal constant runs are the intervals between consecutive bounces).
    For each run, the fraction of its steps whose sampled mode equals the run's most frequent sampled mode; the
    result is the mean over all runs of all sequences (and samples), each run counting once. 1 means one mode per
    interval; it ignores WHICH mode (a relabelling scores 1; ``mode_agreement`` checks the labels). A mode
    z_t ~ q(z_t | x_{t-1}) can only react to a bounce one step late, which costs at most one step per run.
    """
    modes, true_modes = _paired(modes, true_modes)
    S, B, T = modes.shape
    run_start = np.concatenate([np.ones((S, B, 1), bool), true_modes[..., 1:] != true_modes[..., :-1]], axis=-1)
    run_id = np.cumsum(run_start.reshape(S * B, T), axis=-1) - 1  # 0.. within each sequence
    run_id = run_id + T * np.arange(S * B)[:, None]  # unique across sequences
    counts = np.zeros((S * B * T, int(modes.max()) + 1), np.int64)
    np.add.at(counts, (run_id.ravel(), modes.ravel()), 1)
    lengths = counts.sum(axis=1)
    used = lengths > 0
    return float(np.mean(counts.max(axis=1)[used] / lengths[used]))


def mode_agreement(modes, true_modes) -> float:
    """Accuracy of the sampled modes under the best one-to-one relabelling of sampled to true modes.

    modes (B, T) or (S, B, T); true_modes (B, T). One relabelling for the whole batch (mode indices are global
    to a model), found by the Hungarian algorithm on the confusion matrix (scipy ``linear_sum_assignment``);
    sampled modes left unmatched (more modes than true ones) count as errors. Returns matched steps / all steps.
    """
    modes, true_modes = _paired(modes, true_modes)
    confusion = np.zeros((int(modes.max()) + 1, int(true_modes.max()) + 1), np.int64)
    np.add.at(confusion, (modes.ravel(), true_modes.ravel()), 1)
    rows, cols = linear_sum_assignment(confusion, maximize=True)
    return float(confusion[rows, cols].sum() / modes.size)

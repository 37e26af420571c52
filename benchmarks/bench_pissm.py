"""pi-SSM training and inference speed on the CPU at the paper's Pong size, and the exact Kalman filter side by side
with filterpy.

* one training epoch (Table 5: ~56 s per epoch on a GTX 1050 Ti, ~18k parameters; our target: <= 30 s per epoch on
  the 2-core machine) = a shuffled pass over 4000 sequences x 80 steps in minibatches of 32 (125 Adam steps with
  BPTT + REINFORCE and the ISS projection after each), the whole epoch one jitted ``lax.scan`` (``make_train`` with
  epochs=1, validation on 500 sequences included), for pi-SSM-GRU, pi-SSM-LSTM and pi-SSM(LG); parameter counts
  beside;
* inference: filtered steps per second of one sampled path over the 500 x 80 test split (vmapped sequences);
* Kalman filter (``timing.side_by_side``): B = 256 sequences of T = 1000 steps from one random stable
  linear-Gaussian model with state size M = 4 (observations N = 2) and M = 32 (N = 8), filtered by memlab's
  ``memlab.kalman.kalman_filter`` (the public API, jitted and vmapped over the sequences; float32, and float64 under
  ``jax.enable_x64``), by filterpy's ``KalmanFilter.batch_filter`` (one call per sequence: filterpy filters one
  sequence at a time, in float64 NumPy; it is the reference of the ratio) and by a NumPy reference that runs the
  covariance recursion once for the whole batch (it does not depend on the data when every sequence shares the model
  and is fully observed) and only the means per sequence; and the bound: that same split in JAX (float32, jitted):
  the covariance recursion once for the batch, then only the mean recursion per sequence, the least any filter
  returning these means must do (not an API: memlab's public filter runs the covariance recursion per sequence,
  as it must when the model or the mask varies). Compared: the filtered means (B, T, M).
  Conventions: memlab's prior N(m_0, P_0) is the state before the first step, and each step predicts then updates
  (``observe_initial=False``); filterpy's ``batch_filter`` does the same from ``kf.x = m_0``, ``kf.P = P_0`` (its
  default order, predict then update), and both update the covariance in Joseph form.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from timing import peer, side_by_side, timed  # benchmarks/timing.py (run.py puts benchmarks/ on sys.path)

from memlab.kalman import kalman_filter, sample_lgssm
from memlab.pissm.data import PONG_LAYOUT
from memlab.pissm.runs import full_mask, load_dataset, make_model, predict_jit
from memlab.pissm.train import TrainConfig, make_train

MODELS = ("pissm-gru", "pissm-lstm", "pissm-lg")
KALMAN_SIZES = ((4, 2), (32, 8))  # (state size M, observation size N)
KALMAN_STEPS, KALMAN_BATCH = 1000, 256
FILTERPY_MISSING = "pip install -e '.[bench]' adds filterpy"


def run() -> list[dict]:
    return pong_rows() + [row for M, N in KALMAN_SIZES for row in kalman_rows(M, N)]


def parameter_count(model) -> int:
    return int(sum(x.size for x in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))))


def pong_rows() -> list[dict]:
    data = load_dataset("pong", PONG_LAYOUT, key=jax.random.key(0))
    test = data.test
    rows = []
    for name in MODELS:
        model = make_model(name, "pong", data, jax.random.key(0))
        config = TrainConfig(epochs=1, batch_size=32, stability="iss" if name != "pissm-lg" else "none")
        train = eqx.filter_jit(make_train(config))
        args = (jax.random.key(1), model, data.train.y, full_mask(data.train), data.validation.y,
                full_mask(data.validation))
        epoch = timed(lambda train=train, args=args: train(*args).best_val_ll)
        infer = timed(lambda model=model: predict_jit(model, test.y, full_mask(test), jax.random.key(2),
                                                      1).log_likelihoods, repeats=3)
        rows.append({"model": name, "parameters": parameter_count(model), "sequences": int(data.train.y.shape[0]),
                     "steps": int(data.train.y.shape[1]), "batch": 32, "seconds_per_epoch": epoch,
                     "paper_seconds_per_epoch": {"pissm-gru": 56.0, "pissm-lstm": 57.0}.get(name, np.nan),
                     "inference_steps_per_s": test.y.shape[0] * test.y.shape[1] / infer})
    return rows


# ------------------------------------------------------------------------------------------------ Kalman filter


def random_stable_model(M: int, N: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A (M, M) with spectral radius 0.95, C (N, M) ~ N(0, 1/M), Q = 0.1 x and R a random symmetric positive definite
    matrix, m_0 ~ N(0, 1), P_0 = I (float64)."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(M, M))
    A *= 0.95 / np.max(np.abs(np.linalg.eigvals(A)))

    def spd(n, scale):
        B = rng.normal(size=(n, n))
        return scale * (B @ B.T / n + 0.5 * np.eye(n))

    return {"A": A, "C": rng.normal(size=(N, M)) / np.sqrt(M), "Q": spd(M, 0.1), "R": spd(N, 1.0),
            "initial_mean": rng.normal(size=M), "initial_cov": np.eye(M)}


def sample_observations(model: dict[str, np.ndarray], key, T: int, B: int) -> np.ndarray:
    """y (B, T, N) float64: B sequences drawn from ``model`` by ``kalman.sample_lgssm`` (float32)."""
    m = {k: jnp.asarray(v, jnp.float32) for k, v in model.items()}
    sample = jax.vmap(lambda k: sample_lgssm(k, m["A"], m["C"], m["Q"], m["R"], m["initial_mean"],
                                             m["initial_cov"], T)[1])
    return np.asarray(jax.jit(sample)(jax.random.split(key, B)), np.float64)


def memlab_filter(model: dict[str, np.ndarray], y: np.ndarray, dtype):
    """() -> filtered means (B, T, M) by ``kalman_filter`` vmapped over the sequences (jitted) in ``dtype``."""
    m = {k: jnp.asarray(v, dtype) for k, v in model.items()}
    ys = jnp.asarray(y, dtype)
    means = jax.jit(jax.vmap(lambda y: kalman_filter(y, m["A"], m["C"], m["Q"], m["R"], m["initial_mean"],
                                                     m["initial_cov"]).means))
    return lambda: means(ys)


def memlab_filter_x64(model: dict[str, np.ndarray], y: np.ndarray):
    """``memlab_filter`` in float64 (traced and run inside ``jax.enable_x64``)."""
    with jax.enable_x64(True):
        fn = memlab_filter(model, y, jnp.float64)

    def run_x64():
        with jax.enable_x64(True):
            return fn()

    return run_x64


def filterpy_filter(filterpy_kalman, model: dict[str, np.ndarray], y: np.ndarray):
    """() -> filtered means (B, T, M): filterpy's ``KalmanFilter.batch_filter`` once per sequence (predict, then
    update, from x = m_0, P = P_0)."""
    M, N = model["C"].shape[1], model["C"].shape[0]

    def run_filterpy():
        means = []
        for sequence in y:
            kf = filterpy_kalman.KalmanFilter(dim_x=M, dim_z=N)
            kf.F, kf.H, kf.Q, kf.R = model["A"], model["C"], model["Q"], model["R"]
            kf.x, kf.P = model["initial_mean"].copy(), model["initial_cov"].copy()
            means.append(kf.batch_filter(sequence)[0])
        return np.stack(means)

    return run_filterpy


def numpy_shared_covariance_filter(model: dict[str, np.ndarray], y: np.ndarray):
    """() -> filtered means (B, T, M): eq. (18)-(21) in NumPy float64 with one covariance recursion for the batch
    (Joseph form) and the means of all sequences updated together."""
    A, C, Q, R = model["A"], model["C"], model["Q"], model["R"]
    I = np.eye(A.shape[0])

    def run_numpy():
        mean = np.broadcast_to(model["initial_mean"], (y.shape[0], A.shape[0]))
        cov = model["initial_cov"]
        means = np.empty((*y.shape[:2], A.shape[0]))
        for t in range(y.shape[1]):
            mean, cov = mean @ A.T, A @ cov @ A.T + Q
            gain = np.linalg.solve(C @ cov @ C.T + R, C @ cov).T
            mean = mean + (y[:, t] - mean @ C.T) @ gain.T
            I_KC = I - gain @ C
            cov = I_KC @ cov @ I_KC.T + gain @ R @ gain.T
            means[:, t] = mean
        return means

    return run_numpy


def bound_shared_covariance_filter(model: dict[str, np.ndarray], y: np.ndarray):
    """() -> filtered means (B, T, M) in float32: one covariance recursion (eq. 18-21, Joseph form) giving the T
    gains, then the mean recursion m = A m + K_t (y_t - C A m) for the whole batch, both a jitted ``lax.scan``."""
    A, C, Q, R, m0, P0 = (jnp.asarray(model[k], jnp.float32) for k in ("A", "C", "Q", "R", "initial_mean",
                                                                       "initial_cov"))
    I = jnp.eye(A.shape[0])

    def covariance_step(cov, _):
        cov = A @ cov @ A.T + Q
        gain = jnp.linalg.solve(C @ cov @ C.T + R, C @ cov).T
        I_KC = I - gain @ C
        return I_KC @ cov @ I_KC.T + gain @ R @ gain.T, gain

    @jax.jit
    def means(ys):  # ys (B, T, N)
        _, gains = jax.lax.scan(covariance_step, P0, None, length=ys.shape[1])

        def mean_step(mean, inputs):  # mean (B, M)
            y_t, gain = inputs
            mean = mean @ A.T
            mean = mean + (y_t - mean @ C.T) @ gain.T
            return mean, mean

        mean0 = jnp.broadcast_to(m0, (ys.shape[0], A.shape[0]))
        return jnp.swapaxes(jax.lax.scan(mean_step, mean0, (jnp.swapaxes(ys, 0, 1), gains))[1], 0, 1)

    ys = jnp.asarray(y, jnp.float32)
    return lambda: means(ys)


def kalman_rows(M: int, N: int, T: int = KALMAN_STEPS, B: int = KALMAN_BATCH) -> list[dict]:
    model = random_stable_model(M, N)
    y = sample_observations(model, jax.random.key(M), T, B)
    implementations = [("memlab kalman_filter (vmapped, float32)", memlab_filter(model, y, jnp.float32)),
                       ("memlab kalman_filter (vmapped, float64)", memlab_filter_x64(model, y)),
                       ("NumPy, one covariance recursion for the batch (float64)",
                        numpy_shared_covariance_filter(model, y)),
                       ("bound: one covariance recursion, then the means (float32, not an API)",
                        bound_shared_covariance_filter(model, y))]
    filterpy_kalman = peer("filterpy.kalman")
    if filterpy_kalman is not None:
        implementations.append(("filterpy KalmanFilter.batch_filter per sequence (float64)",
                                filterpy_filter(filterpy_kalman, model, y)))
    return side_by_side(f"Kalman filter M={M} N={N} T={T} B={B}", implementations,
                        missing=None if filterpy_kalman is not None else FILTERPY_MISSING,
                        extra={"state_size": M, "observation_size": N})

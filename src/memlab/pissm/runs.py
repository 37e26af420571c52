"""The pi-SSM study's runs, the pieces every pi-SSM experiment shares: the data sets and the models by name (section 7's
rows, ``DATASETS``, ``MODELS``), the training of one model (``fit``), a trained model as bytes and back (a sweep cell
returns its model as bytes), the evaluation of a model on a split, and the true-dynamics particle filter as Table 1's
reference row.

Latent sizes and mode counts follow App. F.1-F.2 and G.4 (``LATENT_SIZE``, ``NUM_MODES``). Choices the paper leaves
open: every model starts from the training data (the emission at the data set's C, the prior from the first
observations, the process variance at 0.1 x the observation noise); everything but the known R is trained, Q and the
prior included, for pi-SSM and LG alike; the estimators of ``ESTIMATORS``; the input-noise level.

The models, the data sets and the initialisation in full: docs/studies/pissm.md, "Models and data sets by name".
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from memlab.checks import check_choice
from memlab.layers import project_model_iss
from memlab.pissm import metrics, reference
from memlab.pissm.baselines import DirectRNN, LGBaseline, ObservationOnly
from memlab.pissm.data import (
    LORENZ_LAYOUT,
    NAVIER_STOKES_LAYOUT,
    NAVIER_STOKES_QUICK_LAYOUT,
    NCLT_LAYOUT,
    PONG_LAYOUT,
    Dataset,
    SplitLayout,
    generate_lorenz,
    generate_navier_stokes,
    generate_pong,
    load_nclt,
)
from memlab.pissm.data.pong import NOISE_STD as PONG_NOISE_STD
from memlab.pissm.data.splits import Split
from memlab.pissm.gain_fit import fit_readout_to_exact_gain
from memlab.pissm.lg import LGVariant
from memlab.pissm.model import PiSSM, PiSSMConfig
from memlab.pissm.train import ChunkedTrain, TrainConfig, make_chunked_train, make_train, predict_batch, train_in_chunks

MODELS = ("pissm-gru", "pissm-lstm", "pissm-gru-tracking", "pissm-lstm-tracking", "pissm-gru-bounded",
          "pissm-lstm-bounded", "pissm-lg", "lg", "gru", "lstm", "observation", "pissm-gru-unbounded",
          "pissm-gru-normalised", "pissm-lstm-normalised", "pissm-lg-one-mode", "lg-one-mode")
PISSM_GAINS = {"pissm-gru": ("gru", "paper"), "pissm-lstm": ("lstm", "paper"),
               "pissm-gru-tracking": ("gru", "paper"), "pissm-lstm-tracking": ("lstm", "paper"),
               "pissm-gru-bounded": ("gru", "bounded"), "pissm-lstm-bounded": ("lstm", "bounded"),
               "pissm-lg": ("exact", "bounded"), "pissm-gru-unbounded": ("gru", "unbounded"),
               "pissm-gru-normalised": ("gru", "paper-normalised"),
               "pissm-lstm-normalised": ("lstm", "paper-normalised"),
               "pissm-lg-one-mode": ("exact", "bounded")}  # (gain, gain_form)
# eq. (7)'s gain with its readout fitted to the exact Kalman factor before training (gain_fit.py: the untrained
# filter tracks), its inputs as they are or normalised (Assumption 4); "pissm-gru" / "pissm-lstm" keep the readout
# at the first step's factor (their stored cells too)
TRACKING_INIT = ("pissm-gru-tracking", "pissm-lstm-tracking", "pissm-gru-normalised", "pissm-lstm-normalised")
GAIN_FIT_SEQUENCES = 256  # training sequences the readout is fitted on (a linear least-squares fit: plenty)
# not Table 1 rows: the stability ablation of the gain's bound, eq. (7)'s gain from the first step's factor and with
# normalised inputs
ABLATIONS = ("pissm-gru-unbounded", "pissm-gru", "pissm-lstm", "pissm-gru-normalised", "pissm-lstm-normalised",
             "pissm-lg-one-mode", "lg-one-mode")
# the ablation of pi-SSM(LG)'s modes: with one mode pi-SSM(LG) and LG are both the Kalman filter of one linear model
# (the mode network and the mixture weights have nothing to choose), each trained its own way; the gap between them
# is then the training's, not the modes'
ONE_MODE = ("pissm-lg-one-mode", "lg-one-mode")
DATASETS = ("pong", "pong-0.01", "lorenz", "navier-stokes", "nclt")
PONG_NOISE = {"pong": PONG_NOISE_STD, "pong-0.01": 0.01}
LATENT_SIZE = {"pong": 4, "pong-0.01": 4, "lorenz": 3, "navier-stokes": 5, "nclt": 4}
NUM_MODES = {"pong": 18, "pong-0.01": 18, "lorenz": 18, "navier-stokes": 3, "nclt": 18}
TRANSITION_HIDDEN = {"pong": 0, "pong-0.01": 0, "lorenz": 16, "navier-stokes": 16, "nclt": 0}
ESTIMATORS = {"reinforce": ("reinforce", "prior"), "mixture": ("mixture", "posterior"),
              "reinforce-posterior": ("reinforce", "posterior"), "mixture-prior": ("mixture", "prior")}
# Quick Pong: 250 training sequences (was 500: an epoch costs half, and no quick claim holds or fails by the
# training-set size), 50 for early stopping, 100 test sequences as before.
QUICK_LAYOUT = {
    "pong": SplitLayout(train=(250, 80), validation=(50, 80), test=(100, 80)),
    "pong-0.01": SplitLayout(train=(250, 80), validation=(50, 80), test=(100, 80)),
    "lorenz": LORENZ_LAYOUT,  # the paper's 5k steps are cheap
    "navier-stokes": NAVIER_STOKES_QUICK_LAYOUT,
    "nclt": NCLT_LAYOUT,
}
PAPER_LAYOUT = {"pong": PONG_LAYOUT, "pong-0.01": PONG_LAYOUT, "lorenz": LORENZ_LAYOUT,
                "navier-stokes": NAVIER_STOKES_LAYOUT, "nclt": NCLT_LAYOUT}
TINY_LAYOUT = {  # for the tests: seconds, not minutes
    "pong": SplitLayout(train=(64, 40), validation=(16, 40), test=(16, 40)),
    "pong-0.01": SplitLayout(train=(64, 40), validation=(16, 40), test=(16, 40)),
    "lorenz": SplitLayout(train=(8, 50), validation=(2, 50), test=(2, 50)),
    "navier-stokes": SplitLayout(train=(16, 20), validation=(4, 20), test=(4, 20)),
    "nclt": NCLT_LAYOUT,
}
LAYOUTS = {"tiny": TINY_LAYOUT, "quick": QUICK_LAYOUT, "paper": PAPER_LAYOUT}


PARTICLE_REFERENCES = ("pong", "pong-0.01", "lorenz")  # data sets with a true-dynamics particle filter


def load_dataset(name: str, layout: SplitLayout, key=None, data_dir: str | None = None) -> Dataset:
    """The data set ``name`` (DATASETS) cut to ``layout``; generated from ``key`` (default ``jax.random.key(0)``)
    or (NCLT) read from data_dir."""
    check_choice("data set", name, DATASETS)
    key = jax.random.key(0) if key is None else key
    if name in PONG_NOISE:
        return generate_pong(key, layout, noise_std=PONG_NOISE[name])
    if name == "lorenz":
        return generate_lorenz(key, layout)
    if name == "navier-stokes":
        return generate_navier_stokes(key, layout)
    return load_nclt(data_dir, layout=layout)


def full_mask(split: Split) -> jax.Array:
    return jnp.ones(split.y.shape[:2], bool)


def make_model(name: str, data_name: str, data: Dataset, key, hidden_size: int = 64, train_mask=None,
               mode_sampling: str = "prior", fit_gain: bool = True, iss_eps: float | None = None):
    """An untrained model ``name`` (MODELS) sized and initialised for ``data`` (module docstring); ``train_mask``
    (B, T) bool marks the training observations the observation-only model and the gain fit may read (None: all);
    pi-SSM draws its modes from ``mode_sampling`` ("prior" or "posterior", model.py). The ``TRACKING_INIT`` models
    fit their gain's readout to the exact gain on the first ``GAIN_FIT_SEQUENCES`` training sequences
    (gain_fit.py) unless ``fit_gain`` is False (a template whose leaves are replaced); ``iss_eps``: the ISS
    projection that training will apply first is applied before that fit (the readout is fitted to the cell that
    training starts from: the projection changes its recurrent weights)."""
    check_choice("model", name, MODELS)
    y = np.asarray(data.train.y, np.float64)
    N, M = y.shape[-1], LATENT_SIZE[data_name]
    R = np.asarray(data.R, np.float64)
    if name == "observation":
        return ObservationOnly.fit(y, None if train_mask is None else np.asarray(train_mask))
    if name in ("gru", "lstm"):
        flat = y.reshape(-1, N)
        return DirectRNN(N, key=key, cell=name, hidden_size=hidden_size, obs_offset=flat.mean(0),
                         obs_scale=flat.std(0) + 1e-6)
    C = np.asarray(data.C, np.float64)
    if C.shape != (N, M):
        raise ValueError(f"{data_name}: the data set's C has shape {C.shape}, the model needs ({N}, {M})")
    initial_mean = np.linalg.pinv(C) @ y[:, 0].mean(0)
    initial_var = float(np.mean(y[:, 0].var(0)))
    process_var = 0.1 * float(np.mean(np.diag(R)))
    K = 1 if name in ONE_MODE else NUM_MODES[data_name]
    if name in ("lg", "lg-one-mode"):
        lg = LGVariant(M, N, K, Q=process_var * np.eye(M), R=R, key=key, C=np.broadcast_to(C, (K, N, M)),
                       initial_mean=initial_mean, initial_cov=initial_var * np.eye(M))
        return LGBaseline(lg)
    gain, gain_form = PISSM_GAINS[name]
    config = PiSSMConfig(M, N, K, gain=gain, gain_form=gain_form, mode_sampling=mode_sampling, hidden_size=hidden_size,
                         transition_hidden=TRANSITION_HIDDEN[data_name], process_var=process_var,
                         initial_var=initial_var)
    model = PiSSM(config, R=R, key=key, C=C, initial_mean=initial_mean, mode_input_mean=initial_mean,
                  mode_input_std=np.full(M, np.sqrt(initial_var)))
    if name in TRACKING_INIT and fit_gain:
        n = GAIN_FIT_SEQUENCES
        mask = None if train_mask is None else train_mask[:n]
        # a key of its own (fold_in): the other models' keys, and so their stored cells, stay as they were
        prepare = None if iss_eps is None else (lambda m: project_model_iss(m, iss_eps))
        model = fit_readout_to_exact_gain(model, data.train.y[:n], mask, jax.random.fold_in(key, 1), prepare)
    return model


def trains(name: str) -> bool:
    return name != "observation"


def default_stability(name: str) -> str:
    """ISS projection for models with a gated RNN (Table 1 trains pi-SSM with it), none otherwise."""
    gated = name in ("gru", "lstm") or PISSM_GAINS.get(name, ("exact",))[0] != "exact"
    return "iss" if gated else "none"


_TRAINERS: dict = {}


def compiled_train(config: TrainConfig, callback=None, optimizer: optax.GradientTransformation | None = None):
    """One jitted ``train`` per config, callback and optimizer (jit caches per model structure and data shape)."""
    if (config, callback, optimizer) not in _TRAINERS:
        _TRAINERS[config, callback, optimizer] = eqx.filter_jit(make_train(config, callback, optimizer=optimizer))
    return _TRAINERS[config, callback, optimizer]


_CHUNKED: dict = {}


def chunked_train(config: TrainConfig, optimizer: optax.GradientTransformation | None = None) -> ChunkedTrain:
    """One jitted ``make_chunked_train`` per config and optimizer: what ``fit`` trains with, in chunks of epochs
    (the same numbers as ``compiled_train``'s one program)."""
    if (config, optimizer) not in _CHUNKED:
        parts = make_chunked_train(config, optimizer=optimizer)
        _CHUNKED[config, optimizer] = ChunkedTrain(*map(eqx.filter_jit, parts))
    return _CHUNKED[config, optimizer]


def training_masks(data: Dataset, missing: float, key) -> tuple[jax.Array, jax.Array]:
    """Masks (B, T) of the training and validation sequences: all observed, or with a fraction ``missing`` of
    the steps removed at random (``metrics.imputation_mask``, first step kept; drawn from ``key``) so that models
    learn to predict through gaps."""
    if missing == 0:
        return full_mask(data.train), full_mask(data.validation)
    k_train, k_val = jax.random.split(key)
    return (metrics.imputation_mask(k_train, *data.train.y.shape[:2], missing),
            metrics.imputation_mask(k_val, *data.validation.y.shape[:2], missing))


def estimator_options(estimator: str) -> tuple[str, str]:
    """(objective of ``TrainConfig``, ``mode_sampling`` of the model) of an estimator name (``ESTIMATORS``)."""
    check_choice("estimator", estimator, ESTIMATORS)
    return ESTIMATORS[estimator]


@dataclasses.dataclass(frozen=True, kw_only=True)
class FitRecord:
    """The training record of a model that trains (``fit``): best_val, the best validation log-likelihood per step,
    at best_epoch; failed: training hit a non-finite value, at failed_epoch (training stopped there; -1 if it did not
    fail); per epoch train_loss and val_ll; recurrent_norm and radius after every optimiser step."""

    best_val: float
    best_epoch: int
    failed: bool
    failed_epoch: int
    train_loss: list[float]
    val_ll: list[float]
    recurrent_norm: list[float]
    radius: list[float]


@dataclasses.dataclass(frozen=True, kw_only=True)
class NotTrained:
    """The record of a model ``fit`` does not train (``trains(name)`` is False: nothing to learn)."""

    failed: bool = False
    best_epoch: int = -1


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeanScores:
    """``mean_scores``: the means over the test sequences of ``score``'s metrics: ll, the predictive log-likelihood
    per step; filtered_mse, predicted_mse, the squared position error of the filtered and the predicted means."""

    ll: float
    filtered_mse: float
    predicted_mse: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class MaskedScores(MeanScores):
    """``mean_scores`` on a split with removed steps: also imputation_mse, the squared position error of the filtered
    mean at the removed steps."""

    imputation_mse: float


def fit(name: str, data_name: str, data: Dataset, config: TrainConfig, key, missing: float = 0.0,
        estimator: str = "reinforce", input_noise: float = 0.0, callback=None, *,
        optimizer: optax.GradientTransformation | None = None):
    """Train model ``name`` on data.train with early stopping on data.validation (the batch shrinks so that an
    epoch has at least 8 minibatches); ``missing`` > 0 removes that fraction of the observations of both
    (``training_masks``); ``estimator`` (``ESTIMATORS``) sets the objective and the mode sampling; ``input_noise``
    > 0 adds App. F.1's AR(1) noise of that many observation-noise standard deviations to the training minibatches
    (``config.input_noise_corr``). ``key`` is split into the keys of the initialisation, the training run and the
    masks. ``callback(epoch, metrics)``: called after every epoch (``train.make_train``); default None: trained in
    chunks of epochs, the epochs done and the loss reported between them where a run shows its cells' progress
    (``train.train_in_chunks``; the same numbers).
    ``optimizer``: as for ``train.make_train`` (default App. F.1's Adam).

    Returns (model, record): a :class:`FitRecord`, or :class:`NotTrained` for a model without trained parameters
    (the runner times every cell, so a record holds results only and runs on any executor compare equal).
    """
    model, (train_mask, validation_mask), key_train = _start(name, data_name, data, config, key, missing, estimator)
    # at least 8 minibatches per epoch (Lorenz has 40 training sequences)
    objective, _ = estimator_options(estimator)
    noise_std = input_noise * float(np.sqrt(np.mean(np.diag(np.asarray(data.R, np.float64)))))
    config = dataclasses.replace(config, batch_size=max(1, min(config.batch_size, data.train.y.shape[0] // 8)),
                                 objective=objective, input_noise_std=noise_std)
    if not trains(name):
        return model, NotTrained()
    arrays = (data.train.y, train_mask, data.validation.y, validation_mask)
    if callback is None:
        result = train_in_chunks(chunked_train(config, optimizer), config.epochs, key_train, model, *arrays)
    else:
        result = compiled_train(config, callback, optimizer)(key_train, model, *arrays)
    record = FitRecord(
        best_val=float(result.best_val_ll),
        best_epoch=int(result.best_epoch),
        failed=bool(result.failed),
        failed_epoch=int(result.failed_epoch),  # the first non-finite epoch (training stopped there), or -1
        train_loss=np.asarray(result.train_loss).tolist(),
        val_ll=np.asarray(result.val_ll).tolist(),
        recurrent_norm=np.asarray(result.recurrent_norm).ravel().tolist(),  # after every optimiser step
        radius=np.asarray(result.radius).ravel().tolist(),
    )
    return result.model, record


def initial_model(name: str, data_name: str, data: Dataset, config: TrainConfig, key, missing: float = 0.0,
                  estimator: str = "reinforce"):
    """The untrained model that ``fit`` with the same arguments starts from."""
    return _start(name, data_name, data, config, key, missing, estimator)[0]


def _start(name, data_name, data, config, key, missing, estimator):
    """(initial model, (training mask, validation mask), training key) of ``fit``: ``key`` split into the keys of the
    initialisation, the training run and the masks."""
    key_model, key_train, key_masks = jax.random.split(key, 3)
    _, sampling = estimator_options(estimator)
    masks = training_masks(data, missing, key_masks)
    model = make_model(name, data_name, data, key_model, train_mask=masks[0], mode_sampling=sampling,
                       iss_eps=config.iss_eps if config.stability == "iss" else None)
    return model, masks, key_train


predict_jit = eqx.filter_jit(predict_batch)  # num_samples (an int) is static


def evaluate(model, data: Dataset, split: Split, key, num_samples: int = 8, mask=None, chunk: int = 250) -> dict:
    """Per-sequence metrics of ``model`` on ``split`` with S = num_samples sampled paths (lists of length B).

    ``ll``: average predictive log-likelihood per observed step (log-mean-exp over the samples);
    ``filtered_mse``: MSE of the filtered position estimate against the true position C x_t (observed steps);
    ``predicted_mse``: MSE of the one-step predictive mean of y_t against C x_t; with a ``mask``, also
    ``imputation_mse``: MSE of the estimate at the removed steps (the prediction through the gap, App. H.1).
    """
    mask = full_mask(split) if mask is None else mask
    truth = jnp.einsum("nm,btm->btn", data.C, split.x)
    parts = []
    for start in range(0, split.y.shape[0], chunk):
        stop = start + chunk
        y = jnp.where(mask[start:stop, :, None], split.y[start:stop], jnp.nan)  # removed steps are really gone
        p = predict_jit(model, y, mask[start:stop], jax.random.fold_in(key, start), num_samples)
        parts.append((p.log_likelihoods, p.filtered_obs, p.obs_means))
    ll, filtered, predicted = (jnp.concatenate(x, axis=1) for x in zip(*parts))
    return score(ll, filtered, predicted, truth, mask)


def score(log_likelihoods, filtered, predicted, truth, mask) -> dict:
    """The metrics of ``evaluate`` (lists of length B) from stacked Predictions fields with leading axes (S, B):
    log_likelihoods (S, B, T), filtered / predicted (S, B, T, N); truth (B, T, N) = C x_t; mask (B, T)."""
    out = {
        "ll": metrics.predictive_log_likelihood(log_likelihoods, mask),
        "filtered_mse": metrics.position_mse(filtered, truth, mask),
        "predicted_mse": metrics.position_mse(predicted, truth, mask),
    }
    if not bool(jnp.all(mask)):
        out["imputation_mse"] = metrics.position_mse(filtered, truth, ~mask)
    return {k: np.asarray(v).tolist() for k, v in out.items()}


def mean_scores(scores: dict) -> MeanScores | MaskedScores:
    """Per-sequence metric lists (``evaluate`` / ``score``) -> their means over the sequences, as floats
    (:class:`MaskedScores` where ``score`` also measured the removed steps)."""
    kind = MaskedScores if "imputation_mse" in scores else MeanScores
    return kind(**{k: float(np.mean(v)) for k, v in scores.items()})


def model_bytes(model) -> bytes:
    """A model's leaves as bytes (``eqx.tree_serialise_leaves``): what a training cell returns."""
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, model)
    return buffer.getvalue()


def model_from_bytes(blob: bytes, name: str, data_name: str, data: Dataset, estimator: str = "reinforce"):
    """The model ``name`` for ``data`` (trained with ``estimator``) with the leaves of ``blob`` (``model_bytes``);
    only the structure of a fresh ``make_model`` is used."""
    template = make_model(name, data_name, data, jax.random.key(0), mode_sampling=estimator_options(estimator)[1],
                          fit_gain=False)
    return eqx.tree_deserialise_leaves(io.BytesIO(blob), template)


def particle_reference(data_name: str, data: Dataset, key, particles: int):
    """``Predictions`` (leading axis B) of the true-dynamics bootstrap PF on the test split (PARTICLE_REFERENCES),
    vmapped over sequences."""
    check_choice("particle reference", data_name, PARTICLE_REFERENCES)
    split = data.test
    keys = jax.random.split(key, split.y.shape[0])
    if data_name in PONG_NOISE:
        pf = jax.vmap(lambda k, y: reference.pong_particle_filter(k, y, None, PONG_NOISE[data_name], particles))
    else:
        pf = jax.vmap(lambda k, y: reference.lorenz_particle_filter(k, y, None, data.R, particles))
    return jax.jit(pf)(keys, split.y)


def particle_scores(data_name: str, data: Dataset, key, particles: int) -> dict[str, Any]:
    """``score`` of ``particle_reference`` on the test split (one 'sample': the PF is not a sampled model)."""
    p = particle_reference(data_name, data, key, particles)
    truth = jnp.einsum("nm,btm->btn", data.C, data.test.x)
    return score(p.log_likelihoods[None], p.filtered_obs[None], p.obs_means[None], truth, full_mask(data.test))

"""The pi-SSM training loop (train.py) on a tiny Pong set: training raises the validation log-likelihood and its
bookkeeping (best epoch, best value, returned model) is consistent; warm-up leaves the mode network bit-identical;
the ISS projection holds after training for GRU and LSTM gains, with the documented history; gradient clipping
runs; a NaN run is flagged failed and returns the pre-NaN model; NaN at missing steps changes nothing; the AR(1)
input noise has the stated marginal std and autocorrelation; bad configs and data raise ValueError; on
linear-Gaussian data a GRU gain started far from Kalman's is trained to the Kalman filter's likelihood.

Every training is compiled once per module (fixtures) and reused; each compile costs ~10-20 s on 2 cores."""

import dataclasses
import operator

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from memlab.kalman import kalman_filter, sample_lgssm
from memlab.layers.gated_rnn import GRUCell, LSTMCell, iss_margin
from memlab.pissm.data.pong import NOISE_STD, OBSERVATION_MATRIX, simulate_pong
from memlab.pissm.gain import GAIN_BOUND
from memlab.pissm.model import PiSSM, PiSSMConfig
from memlab.pissm.train import (
    TrainConfig,
    correlated_noise,
    frozen_mask,
    gated_cells,
    make_train,
    mean_log_likelihood,
    predict_batch,
    two_optimiser_update,
)

NUM_TRAIN, NUM_VAL, STEPS = 64, 32, 20
BATCH = 16
EPS = 0.2
CFG_EXACT = TrainConfig(epochs=5, batch_size=BATCH, stability="clip", warmup_epochs=0)
CFG_GRU = TrainConfig(epochs=2, batch_size=BATCH, stability="iss", iss_eps=EPS, warmup_epochs=2)  # all warm-up
CFG_LSTM = TrainConfig(epochs=2, batch_size=BATCH, stability="iss", iss_eps=EPS, warmup_epochs=0)


@pytest.fixture(scope="module")
def data():
    split = simulate_pong(jax.random.key(0), NUM_TRAIN + NUM_VAL, STEPS)
    y = split.y
    mask = jnp.ones(y.shape[:2], bool)
    return y[:NUM_TRAIN], mask[:NUM_TRAIN], y[NUM_TRAIN:], mask[NUM_TRAIN:]


def make_model(gain, num_modes, **kwargs):
    return PiSSM(PiSSMConfig(4, 2, num_modes, gain=gain, hidden_size=16, **kwargs), R=NOISE_STD**2 * np.eye(2),
                 C=OBSERVATION_MATRIX, key=jax.random.key(1))


@eqx.filter_jit
def validation_ll(model, y, mask, key):
    return mean_log_likelihood(predict_batch(model, y, mask, key).log_likelihoods, mask)


def leaves(model):
    return jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))


def same(a, b) -> bool:
    return all(np.array_equal(x, y, equal_nan=True) for x, y in zip(leaves(a), leaves(b), strict=True))


class Trained:
    def __init__(self, config, gain, num_modes, data, **model_options):
        self.config, self.data = config, data
        self.train = eqx.filter_jit(make_train(config))
        self.initial = make_model(gain, num_modes, **model_options)
        self.result = self(self.initial)

    def __call__(self, model, train_y=None, train_mask=None, key=2):
        ty, tm, vy, vm = self.data
        ty = ty if train_y is None else train_y
        tm = tm if train_mask is None else train_mask
        return jax.block_until_ready(self.train(jax.random.key(key), model, ty, tm, vy, vm))


@pytest.fixture(scope="module")
def exact_run(data):
    return Trained(CFG_EXACT, "exact", 1, data)


@pytest.fixture(scope="module")
def gru_run(data):
    return Trained(CFG_GRU, "gru", 3, data)


@pytest.fixture(scope="module")
def lstm_run(data):
    return Trained(CFG_LSTM, "lstm", 3, data)


@pytest.fixture(scope="module")
def mixture_run(data):
    """The exact mixture objective with modes drawn from eq. (6), one warm-up epoch of three."""
    return Trained(dataclasses.replace(CFG_LSTM, objective="mixture", warmup_epochs=1, epochs=3), "gru", 3, data,
                   mode_sampling="posterior")


# --------------------------------------------------------------------------------------------- training works


def test_training_improves_validation_likelihood_and_bookkeeping_is_consistent(exact_run, data):
    r = exact_run.result
    _, _, val_y, val_mask = data
    untrained = float(validation_ll(exact_run.initial, val_y, val_mask, jax.random.key(0)))
    assert r.val_ll.shape == (CFG_EXACT.epochs,) and r.train_loss.shape == (CFG_EXACT.epochs,)
    assert np.all(np.isfinite(r.val_ll)) and np.all(np.isfinite(r.train_loss))
    assert not r.failed and r.train_loss[-1] < r.train_loss[0]  # stability="clip" ran and did not diverge
    assert int(r.best_epoch) == int(np.argmax(r.val_ll))
    assert float(r.best_val_ll) == float(r.val_ll[r.best_epoch])
    assert float(r.best_val_ll) > untrained + 0.1
    # K = 1 and the exact gain: the filter does not depend on the sampled path, so any key reproduces best_val_ll
    for seed in (0, 1):
        np.testing.assert_allclose(validation_ll(r.model, val_y, val_mask, jax.random.key(seed)), r.best_val_ll,
                                   rtol=1e-5)
    steps = NUM_TRAIN // BATCH
    assert r.recurrent_norm.shape == r.radius.shape == (CFG_EXACT.epochs, steps)
    assert np.all(np.isnan(r.recurrent_norm)) and np.all(np.isnan(r.radius))  # no gated cell in this model


def test_nan_model_is_reported_failed_and_the_untouched_model_returned(exact_run):
    broken = eqx.tree_at(lambda m: m.A, exact_run.initial, jnp.full_like(exact_run.initial.A, jnp.nan))
    r = exact_run(broken)
    assert bool(r.failed) and int(r.best_epoch) == -1 and float(r.best_val_ll) == -np.inf
    assert np.all(np.isnan(r.val_ll))
    assert same(r.model, broken)


def test_nan_observation_in_training_data_is_reported_failed(exact_run, data):
    train_y = data[0]
    r = exact_run(exact_run.initial, train_y=train_y.at[5, 7, 0].set(jnp.nan))
    assert bool(r.failed) and int(r.best_epoch) == -1
    assert not np.all(np.isfinite(r.train_loss))
    assert same(r.model, exact_run.initial)
    assert not bool(exact_run.result.failed)


def test_nan_at_missing_steps_changes_nothing(exact_run, data):
    train_y, train_mask, _, _ = data
    missing = jnp.asarray(np.random.default_rng(0).random(train_mask.shape) < 0.3)
    mask = train_mask & ~missing
    with_nan = exact_run(exact_run.initial, train_y=jnp.where(missing[..., None], jnp.nan, train_y), train_mask=mask)
    with_zero = exact_run(exact_run.initial, train_y=jnp.where(missing[..., None], 0.0, train_y), train_mask=mask)
    assert not bool(with_nan.failed)
    np.testing.assert_array_equal(with_nan.train_loss, with_zero.train_loss)
    np.testing.assert_array_equal(with_nan.val_ll, with_zero.val_ll)
    assert same(with_nan.model, with_zero.model)


# ------------------------------------------------------------------------------------------ warm-up, ISS, clip


def test_warmup_freezes_the_mode_network_only(gru_run):
    r = gru_run.result
    assert int(r.best_epoch) >= 0
    assert same(r.model.mode_net, gru_run.initial.mode_net)
    for name in ("A", "C", "gain.cell", "gain.readout", "log_q", "initial_mean"):
        part = operator.attrgetter(name)
        assert not same(part(r.model), part(gru_run.initial)), name


def test_mode_network_trains_without_warmup(lstm_run):
    r = lstm_run.result
    assert int(r.best_epoch) >= 0
    assert not same(r.model.mode_net, lstm_run.initial.mode_net)


def test_mixture_objective_with_posterior_sampling_trains(mixture_run, data):
    r = mixture_run.result
    _, _, val_y, val_mask = data
    assert not bool(r.failed) and np.all(np.isfinite(r.val_ll))
    before = float(validation_ll(mixture_run.initial, val_y, val_mask, jax.random.key(0)))
    assert float(r.best_val_ll) > before + 0.5
    assert not same(r.model.mode_net, mixture_run.initial.mode_net)  # theta trains after the warm-up


def test_two_optimisers_keep_theta_adam_at_its_start_through_the_warm_up():
    """App. E.2's two optimisers: after W = 2000 warm-up steps theta's first step is Adam's first step (|update| =
    lr for every entry, step count 1), while phi took W + 1 steps. One shared Adam with theta's gradients zeroed
    during the warm-up (memlab before issue 14) makes that step (0.1 / sqrt(0.001 / (1 - 0.999^W))) ~ 2.9 times
    too large (3.2 as W grows; the paper profile's 5 epochs are W = 625: 2.2), which the last lines confirm."""
    lr, W = 0.01, 2000
    optimizer = optax.adam(lr)
    params = {"phi": jnp.ones(3), "theta": jnp.ones(2)}
    phi, theta = {"phi": True, "theta": False}, {"phi": False, "theta": True}
    grads = {"phi": jnp.array([0.3, -2.0, 5.0]), "theta": jnp.array([0.7, -0.02])}

    def step(state, warm):
        updates, state = two_optimiser_update(optimizer, grads, state, params, phi, theta, warm)
        return state, updates["theta"]

    warm = jnp.arange(W + 1) < W
    state, theta_updates = jax.jit(lambda s: jax.lax.scan(step, s, warm))((optimizer.init(params),) * 2)
    np.testing.assert_array_equal(theta_updates[:W], 0.0)
    np.testing.assert_allclose(np.abs(theta_updates[W]), lr, rtol=1e-5)
    assert int(state[1][0].count) == 1 and int(state[0][0].count) == W + 1
    np.testing.assert_array_equal(state[1][0].mu["phi"], 0.0)  # theta's optimiser never saw phi's gradients

    def shared_step(state, warm):  # the old scheme: one Adam, theta's gradients zeroed while warm
        updates, state = optimizer.update(jnp.where(warm, 0.0, grads["theta"]), state)
        return state, updates

    _, old = jax.jit(lambda s: jax.lax.scan(shared_step, s, warm))(optimizer.init(params["theta"]))
    assert np.all(np.abs(np.asarray(old[W])) > 2.5 * lr)


def test_frozen_mask_and_gated_cells():
    model = make_model("gru", 3)
    mask = frozen_mask(model, ("mode_net",))
    flags = jax.tree_util.tree_leaves(mask)
    assert len(flags) == len(leaves(model))
    assert jax.tree_util.tree_leaves(mask.mode_net) and all(jax.tree_util.tree_leaves(mask.mode_net))
    assert sum(flags) == len(leaves(model.mode_net))
    cells = gated_cells(model)
    assert len(cells) == 1 and cells[0] is model.gain.cell and isinstance(model.gain.cell, GRUCell)
    assert gated_cells(make_model("exact", 3)) == []


@pytest.mark.parametrize("gain", ["gru", "lstm"])
def test_iss_condition_holds_after_training(gain, gru_run, lstm_run):
    run = {"gru": gru_run, "lstm": lstm_run}[gain]
    r, cell = run.result, run.result.model.gain.cell
    assert isinstance(cell, GRUCell if gain == "gru" else LSTMCell)
    before = iss_margin(run.initial.gain.cell)
    after = iss_margin(cell)
    if gain == "gru":
        assert before.margin < EPS  # the projection had work to do
        assert after.margin >= EPS - 1e-5
    else:  # projection: the U_c condition with buffer eps, the forget condition with forget_eps = 1e-3
        assert before.gain > 1 - EPS
        assert after.gain <= 1 - EPS + 1e-5
        assert after.forget_term <= 1 - 1e-3 + 1e-5
        assert after.margin >= min(EPS, 1e-3) - 1e-5
    steps = NUM_TRAIN // BATCH
    assert r.recurrent_norm.shape == r.radius.shape == (run.config.epochs, steps)
    ratio = np.asarray(r.recurrent_norm / r.radius)  # GRU: c of eq. (68); LSTM: the U_c term of eq. (79)
    assert np.all(np.isfinite(ratio)) and np.all(ratio <= 1 - EPS + 1e-5)
    assert np.max(ratio) > 1 - EPS - 1e-3  # the l1 ball was binding
    assert not bool(r.failed) and np.all(np.isfinite(r.val_ll))


def test_iss_needs_a_gated_cell(data):
    with pytest.raises(ValueError, match="iss"):
        make_train(TrainConfig(stability="iss"))(jax.random.key(0), make_model("exact", 1), *data)


def test_bad_data_raise_value_error(data):
    train = make_train(CFG_EXACT)
    ty, tm, vy, vm = data
    model = make_model("exact", 1)
    with pytest.raises(ValueError, match="train"):
        train(jax.random.key(0), model, ty[..., 0], tm, vy, vm)
    with pytest.raises(ValueError, match="train"):
        train(jax.random.key(0), model, ty, tm.astype(float), vy, vm)
    with pytest.raises(ValueError, match="validation"):
        train(jax.random.key(0), model, ty, tm, vy, vm[:, :-1])


# ---------------------------------------------------------------------------------------- noise and config


@pytest.mark.parametrize("std, corr", [(0.3, 0.9), (1.5, 0.0)])
def test_correlated_noise_is_stationary_ar1(std, corr):
    B, T, N = 2000, 100, 2
    n = np.asarray(correlated_noise(jax.random.key(0), (B, T, N), std, corr), np.float64)
    assert n.shape == (B, T, N)
    # all B T N values: var(sample variance) ~ 2 s^4 (1 + r^2) / (1 - r^2) / count for AR(1), and the relative
    # standard error of the std is half that of the variance; 5 standard errors
    count = B * T * N
    rel_se_std = 0.5 * np.sqrt(2 * (1 + corr**2) / (1 - corr**2) / count)
    np.testing.assert_allclose(np.std(n), std, rtol=5 * rel_se_std)
    # stationarity: the first and last steps alone have the same std (B N = 4000 values each, 5 standard errors)
    for t in (0, T - 1):
        np.testing.assert_allclose(np.std(n[:, t]), std, rtol=5 / np.sqrt(2 * B * N))
    # autocorrelation at lags 1 and 2 is corr and corr^2; Bartlett's variances for AR(1), 5 standard errors
    bartlett = {1: 1 - corr**2, 2: (1 + corr**2) ** 2 - 4 * corr**4}
    for lag in (1, 2):
        r = np.mean(n[:, lag:] * n[:, :-lag]) / np.mean(n**2)
        assert abs(r - corr**lag) < 5 * np.sqrt(bartlett[lag] / count), (lag, r)
    # the two coordinates are independent: cross-correlation ~ 0 with variance (1 + r^2) / (1 - r^2) / (B T)
    cross = np.mean(n[..., 0] * n[..., 1]) / np.mean(n**2)
    assert abs(cross) < 5 * np.sqrt((1 + corr**2) / (1 - corr**2) / (B * T))


BAD_CONFIGS = [
    {"epochs": 0}, {"epochs": 2.0}, {"epochs": True}, {"batch_size": 0}, {"decay_every": -1},
    {"warmup_epochs": -1}, {"warmup_epochs": 1.5}, {"stability": "projection"}, {"learning_rate": 0.0},
    {"learning_rate": float("nan")}, {"clip_norm": -1.0}, {"decay_rate": 0.0}, {"decay_rate": 1.5},
    {"baseline_decay": 0.0}, {"baseline_decay": 1.1}, {"iss_eps": 0.0}, {"iss_eps": 1.0}, {"iss_eps": float("nan")},
    {"input_noise_std": -0.1}, {"input_noise_std": float("nan")}, {"input_noise_corr": 1.0},
    {"input_noise_corr": -0.1}, {"gradient_parts": 0}, {"gradient_parts": 2.0},
]


@pytest.mark.parametrize("bad", BAD_CONFIGS, ids=[str(b) for b in BAD_CONFIGS])
def test_train_config_rejects_bad_values(bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        TrainConfig(**bad)


def test_a_minibatch_gradient_in_parts_takes_the_same_step(data):
    """One optimiser step (16 sequences, one minibatch) with the gradient in 1 and 4 parts (run in turn on this
    process's one device): the same loss and the same parameters after the step, up to float rounding; a part count
    that does not divide the minibatch is refused."""
    ty, tm, vy, vm = data
    model = make_model("gru", 3)
    results = []
    for parts in (1, 4):  # (2 parts: tests/test_devices.py, on one device and on two)
        config = TrainConfig(epochs=1, batch_size=16, stability="iss", warmup_epochs=0, gradient_parts=parts)
        results.append(eqx.filter_jit(make_train(config))(jax.random.key(3), model, ty[:16], tm[:16], vy, vm))
    for result in results[1:]:
        np.testing.assert_allclose(result.train_loss, results[0].train_loss, rtol=1e-6)
        for a, b in zip(leaves(result.model), leaves(results[0].model), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="gradient_parts = 3 does not divide the minibatch of 16"):
        make_train(TrainConfig(epochs=1, batch_size=16, gradient_parts=3))(jax.random.key(0), model, *data)


def test_train_config_defaults_are_app_f1():
    cfg = TrainConfig()
    assert (cfg.learning_rate, cfg.decay_every, cfg.baseline_decay) == (0.011, 10, 0.95)
    assert dataclasses.replace(cfg, epochs=3).epochs == 3


# --------------------------------------------------------------------------------------- against the optimum


def test_learned_gain_recovers_the_optimal_filter_from_a_wrong_start():
    """On linear-Gaussian data with the true A, C, Q, R and prior held fixed (frozen for the whole run), a GRU gain
    started at L~ = 0.35 (a third of the Kalman gain's factor) is trained by the surrogate likelihood alone; its test
    log-likelihood reaches the Kalman filter's (the optimal filter, true parameters) and its filtered means track
    the Kalman means. The wrong start is ~0.8 nats/step worse, so the test can fail."""
    A = jnp.array([[1.0, 1.0], [0.0, 0.9]])  # position-velocity, N = 1 observes the position
    C, Q, R, prior_var, T = jnp.array([[1.0, 0.0]]), jnp.diag(jnp.array([0.01, 0.05])), jnp.eye(1), 4.0, 40
    A_t = jnp.broadcast_to(A, (T, 2, 2)).at[0].set(jnp.eye(2))  # y_0 observes x_0 itself, as the model assumes
    Q_t = jnp.broadcast_to(Q, (T, 2, 2)).at[0].set(0.0)

    def sample(seed, n):
        keys = jax.random.split(jax.random.key(seed), n)
        return jax.vmap(lambda k: sample_lgssm(k, A_t, C, Q_t, R, jnp.zeros(2), prior_var * jnp.eye(2), T)[1])(keys)

    train_y, val_y, test_y = sample(0, 256), sample(1, 64), sample(2, 256)

    def ones(y):
        return jnp.ones(y.shape[:2], bool)

    kalman = jax.vmap(lambda y: kalman_filter(y, A, C, Q, R, jnp.zeros(2), prior_var * jnp.eye(2),
                                              observe_initial=True))(test_y)
    optimum = float(jnp.mean(kalman.log_likelihoods))

    model = PiSSM(PiSSMConfig(2, 1, 1, gain="gru", hidden_size=8, initial_var=prior_var), R=R, C=C,
                  key=jax.random.key(3))
    start = np.log(0.35 / GAIN_BOUND / (1 - 0.35 / GAIN_BOUND)) - np.log(1 / (GAIN_BOUND - 1))  # sigmoid^-1 - offset
    model = eqx.tree_at(lambda m: (m.A, m.log_q, m.gain.readout.bias), model,
                        (A[None], jnp.log(jnp.diag(Q)), jnp.array([start])))
    dynamics = ("A", "b", "C", "log_q", "R_sqrt", "initial_mean", "initial_log_var", "mode_net")
    config = TrainConfig(epochs=8, batch_size=16, warmup_epochs=0, fixed_params=dynamics, stability="iss")
    trained = eqx.filter_jit(make_train(config))(jax.random.key(4), model, train_y, ones(train_y), val_y, ones(val_y))
    assert not bool(trained.failed)
    assert same(eqx.filter(trained.model.A, eqx.is_array), A[None])  # the dynamics really were held

    def test_ll(m):
        p = predict_batch(m, test_y, ones(test_y), jax.random.key(5))
        return float(mean_log_likelihood(p.log_likelihoods, ones(test_y))), p.means[0]

    before, _ = test_ll(model)
    after, means = test_ll(trained.model)
    assert optimum - before > 0.5
    assert abs(optimum - after) < 0.005
    position_sd = float(jnp.sqrt(jnp.mean(kalman.covariances[:, 10:, 0, 0])))
    assert float(jnp.sqrt(jnp.mean((means[:, 10:, 0] - kalman.means[:, 10:, 0]) ** 2))) < 0.1 * position_sd


@pytest.mark.first
def test_a_failed_run_stops_at_its_first_non_finite_epoch_with_the_result_of_training_on(data):
    """Eq. (7)'s gain at the paper's learning rate fails within a few epochs on Pong; stopping there must record
    exactly what training every epoch records: failure, best model, best epoch and value, and the histories up to
    the failed epoch (NaN after it)."""
    from memlab.pissm.runs import LAYOUTS, fit, load_dataset

    pong = load_dataset("pong", LAYOUTS["tiny"]["pong"], key=jax.random.key(3))
    config = TrainConfig(epochs=12, batch_size=8, stability="clip", clip_norm=20.0, warmup_epochs=0,
                         learning_rate=0.05)
    key = jax.random.key(0)
    stopped_model, stopped = fit("pissm-gru", "pong", pong, config, key)
    full_model, full = fit("pissm-gru", "pong", pong, dataclasses.replace(config, stop_on_failure=False), key)
    assert stopped.failed and 0 <= stopped.failed_epoch < config.epochs - 1, "the run must fail early to test"
    assert full.failed_epoch == stopped.failed_epoch
    assert (stopped.failed, stopped.best_epoch, stopped.best_val) == (full.failed, full.best_epoch, full.best_val)
    assert same(stopped_model, full_model)
    e = stopped.failed_epoch
    for before, after in ((stopped.train_loss, full.train_loss), (stopped.val_ll, full.val_ll)):
        np.testing.assert_array_equal(before[: e + 1], after[: e + 1])
        assert np.all(np.isnan(before[e + 1:]))


def test_the_optimizer_is_an_argument_whose_default_is_app_f1s_adam(exact_run, data, optimizer_is_used):
    """App. F.1's Adam with the staircase decay (per step: decay_every epochs of NUM_TRAIN / BATCH steps), clipped
    first under stability 'clip', passed explicitly, trains the same model bit for bit; SGD another."""
    config = exact_run.config
    schedule = optax.exponential_decay(config.learning_rate, config.decay_every * (NUM_TRAIN // BATCH),
                                       config.decay_rate, staircase=True)
    default = optax.chain(optax.clip_by_global_norm(config.clip_norm), optax.adam(schedule))

    def train(optimizer):
        if optimizer is None:
            return exact_run.result.model
        trainer = eqx.filter_jit(make_train(config, optimizer=optimizer))
        return trainer(jax.random.key(2), exact_run.initial, *data).model

    optimizer_is_used(train, default, optax.sgd(1e-3))

"""Every study's training function takes ``callback(step, metrics)``: called on the host after each epoch or chunk,
with the steps done and the metrics the run records, and it trains the same model as the run without it (to float32
rounding: XLA may fuse the loop differently around a host callback; memlab.progress says why the cells use none)."""

import equinox as eqx
import jax
import numpy as np

from memlab import arena
from memlab.ictd.pretrain import PretrainConfig
from memlab.ictd.train import make_train as ictd_train
from memlab.pissm.data.pong import NOISE_STD, OBSERVATION_MATRIX, simulate_pong
from memlab.pissm.model import PiSSM, PiSSMConfig
from memlab.pissm.train import TrainConfig as PissmConfig
from memlab.pissm.train import make_train as pissm_train
from memlab.recall.encoding import token_dim
from memlab.recall.task import RecallTask, sample
from memlab.recall.train import TrainConfig as RecallConfig
from memlab.recall.train import make_train as recall_train


class Calls:
    """A callback that keeps what it was called with."""

    def __init__(self):
        self.steps, self.metrics = [], []

    def __call__(self, step, metrics):
        self.steps.append(int(step))
        self.metrics.append({name: float(value) for name, value in metrics.items()})

    def check(self, steps, names):
        assert self.steps == steps
        assert all(set(m) == set(names) and all(np.isfinite(v) for v in m.values()) for m in self.metrics)


def same_numbers(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7),
                 eqx.filter(a, eqx.is_array), eqx.filter(b, eqx.is_array))


def recorded(calls, name, history):
    """The callback's ``name`` values are the run's own record (the reported run's)."""
    np.testing.assert_allclose([m[name] for m in calls.metrics], np.asarray(history), rtol=1e-6)


def test_pissm_make_train():
    y = simulate_pong(jax.random.key(0), 24, 12).y
    mask = np.ones(y.shape[:2], bool)
    model = PiSSM(PiSSMConfig(4, 2, 3, gain="gru", hidden_size=8), R=NOISE_STD**2 * np.eye(2), C=OBSERVATION_MATRIX,
                  key=jax.random.key(1))
    config, calls = PissmConfig(epochs=3, batch_size=8, stability="iss", warmup_epochs=1), Calls()
    args = (jax.random.key(3), model, y[:16], mask[:16], y[16:], mask[16:])
    silent = eqx.filter_jit(pissm_train(config))(*args)
    reported = jax.block_until_ready(eqx.filter_jit(pissm_train(config, calls))(*args))
    same_numbers(silent, reported)
    calls.check([1, 2, 3], ["train loss", "val log-lik"])
    recorded(calls, "val log-lik", reported.val_ll)


class LastTokenReadout(eqx.Module):
    """The smallest student: a linear readout of the last token (the query)."""

    readout: eqx.nn.Linear

    def __init__(self, key):
        self.readout = eqx.nn.Linear(token_dim(1), "scalar", key=key)

    def __call__(self, u, reset=None):
        return self.readout(u[-1])


def test_recall_make_train():
    task = RecallTask(context_length=6)
    pool, val = sample(jax.random.key(0), 24, task), sample(jax.random.key(1), 8, task)
    calls = Calls()
    silent = eqx.filter_jit(recall_train(RecallConfig(epochs=3), LastTokenReadout))(jax.random.key(3), pool, val, 20)
    reported = jax.block_until_ready(
        eqx.filter_jit(recall_train(RecallConfig(epochs=3), LastTokenReadout, calls))(jax.random.key(3), pool, val, 20))
    same_numbers(silent, reported)
    calls.check([1, 2, 3], ["val mse", "train mse"])
    recorded(calls, "val mse", reported.val_mse)


def test_ictd_make_train():
    config = PretrainConfig(m=16, n=5, batch_size=16, minibatches_per_epoch=2, num_epochs=3, num_seeds=1)
    calls = Calls()
    silent = jax.jit(ictd_train(config))(jax.random.key(0))
    reported = jax.block_until_ready(jax.jit(ictd_train(config, calls))(jax.random.key(0)))
    same_numbers(silent, reported)
    calls.check([1, 2, 3], ["loss", "V_em", "A_em"])
    recorded(calls, "loss", np.asarray(reported.trace.loss)[1::2])


def test_arena_make_train():
    task = arena.make_task("hmm-two-state")
    held_out = task.sample(jax.random.key(1), 4, 8)
    config, calls = arena.TrainConfig(steps=4, batch=4, length=8, eval_every=2), Calls()
    silent = jax.jit(arena.make_train(task, "gru", 8, 1, config, held_out))(jax.random.key(0))
    reported = jax.block_until_ready(jax.jit(arena.make_train(task, "gru", 8, 1, config, held_out,
                                                              callback=calls))(jax.random.key(0)))
    same_numbers(silent, reported)
    calls.check([2, 4], ["loss", "held-out loss"])
    recorded(calls, "held-out loss", reported.val_loss)

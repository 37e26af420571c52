"""The arena's training loop (memlab.arena.train): its optimizer is an argument, the default being the warm-up /
cosine Adam it runs without one."""

import equinox as eqx
import jax
import numpy as np
import optax
import pytest

from memlab.arena import make_task
from memlab.arena.train import TrainConfig, chunk_batches, learning_rate_schedule, make_train, make_training


def test_the_optimizer_is_an_argument_whose_default_is_the_clipped_warmup_cosine_adam(optimizer_is_used):
    task = make_task("lgssm")
    config = TrainConfig(steps=6, batch=4, length=8, eval_every=3)
    held_out = task.sample(jax.random.key(1), 8, 8)
    schedule = optax.warmup_cosine_decay_schedule(0.0, config.learning_rate, max(1, config.steps // 10), config.steps)
    default = optax.chain(optax.clip_by_global_norm(config.clip), optax.adam(schedule))
    optimizer_is_used(lambda optimizer: jax.jit(make_train(task, "gru", 8, 1, config, held_out,
                                                           optimizer=optimizer))(jax.random.key(0)).params,
                      default, optax.sgd(1e-2))


def test_the_warm_up_is_a_tenth_of_the_steps_unless_set_and_then_the_rate_peaks_at_its_end():
    default, set_ = TrainConfig(steps=5000, eval_every=250), TrainConfig(steps=5000, eval_every=250, warmup=2000)
    assert default.warmup_steps() == 500 and set_.warmup_steps() == 2000
    schedule = learning_rate_schedule(set_)
    assert np.isclose(schedule(1000), set_.learning_rate / 2) and np.isclose(schedule(2000), set_.learning_rate)
    assert schedule(3500) < set_.learning_rate and np.isclose(learning_rate_schedule(default)(500), 3e-3)
    with pytest.raises(ValueError, match="warmup must be fewer steps than steps"):
        TrainConfig(steps=100, eval_every=50, warmup=100).validate()
    with pytest.raises(ValueError, match="warmup must be an int"):
        TrainConfig(steps=100, eval_every=50, warmup=0).validate()


def test_a_longer_run_starts_from_the_same_model_and_draws_the_shorter_runs_batches_first():
    """What makes mqar-budget's first 5,000 steps paper-core's but for the learning rate (docs/studies/arena.md):
    the same key gives the same initial model, and the chunk keys of 20,000 steps begin with those of 5,000."""
    task = make_task("mqar")
    held_out = task.sample(jax.random.key(1), 4, 16)
    short, long = (make_training(task, "attention", 8, 1, TrainConfig(steps=steps, eval_every=250), held_out).init(
        jax.random.key(7)) for steps in (5000, 20000))
    assert long[1].shape == (80,) and short[1].shape == (20,)
    np.testing.assert_array_equal(jax.random.key_data(long[1][:20]), jax.random.key_data(short[1]))
    for a, b in zip(jax.tree.leaves(short[0].params), jax.tree.leaves(long[0].params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_training_on_batches_drawn_beforehand_equals_training_that_draws_them():
    """Training.run_on on chunk_batches of every chunk key (how the leaderboard trains all layers on one task's
    batches) is Training.run, which draws the same batches inside each chunk, to float rounding."""
    task = make_task("lgssm")
    config = TrainConfig(steps=6, batch=4, length=8, eval_every=3)
    training = make_training(task, "gru", 8, 1, config, task.sample(jax.random.key(1), 8, 8))
    state, chunk_keys = training.init(jax.random.key(0))
    drawn, (losses, val_loss) = jax.jit(training.run)(state, chunk_keys)
    def drawn_for(keys):
        return jax.vmap(lambda key: chunk_batches(task, config, key))(keys)

    given, (losses_on, val_loss_on) = jax.jit(training.run_on)(state, drawn_for(chunk_keys))
    assert losses.shape == losses_on.shape == (2, 3) and val_loss.shape == val_loss_on.shape == (2,)
    np.testing.assert_allclose(losses_on, losses, rtol=1e-5)
    np.testing.assert_allclose(val_loss_on, val_loss, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(eqx.filter(given.params, eqx.is_array)),
                    jax.tree.leaves(eqx.filter(drawn.params, eqx.is_array)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    other = drawn_for(jax.random.split(jax.random.key(5), 2))
    assert not np.allclose(jax.jit(training.run_on)(state, other)[1][0], losses)  # the batches are what it trains on

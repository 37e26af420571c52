"""The arena's training loop (memlab.arena.train): its optimizer is an argument, the default being the warm-up /
cosine Adam it runs without one."""

import equinox as eqx
import jax
import numpy as np
import optax

from memlab.arena import make_task
from memlab.arena.train import TrainConfig, chunk_batches, make_train, make_training


def test_the_optimizer_is_an_argument_whose_default_is_the_clipped_warmup_cosine_adam(optimizer_is_used):
    task = make_task("lgssm")
    config = TrainConfig(steps=6, batch=4, length=8, eval_every=3)
    held_out = task.sample(jax.random.key(1), 8, 8)
    schedule = optax.warmup_cosine_decay_schedule(0.0, config.learning_rate, max(1, config.steps // 10), config.steps)
    default = optax.chain(optax.clip_by_global_norm(config.clip), optax.adam(schedule))
    optimizer_is_used(lambda optimizer: jax.jit(make_train(task, "gru", 8, 1, config, held_out,
                                                           optimizer=optimizer))(jax.random.key(0)).params,
                      default, optax.sgd(1e-2))


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

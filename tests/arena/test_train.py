"""The arena's training loop (memlab.arena.train): its optimizer is an argument, the default being the warm-up /
cosine Adam it runs without one."""

import jax
import optax

from memlab.arena import make_task
from memlab.arena.train import TrainConfig, make_train


def test_the_optimizer_is_an_argument_whose_default_is_the_clipped_warmup_cosine_adam(optimizer_is_used):
    task = make_task("lgssm")
    config = TrainConfig(steps=6, batch=4, length=8, eval_every=3)
    held_out = task.sample(jax.random.key(1), 8, 8)
    schedule = optax.warmup_cosine_decay_schedule(0.0, config.learning_rate, max(1, config.steps // 10), config.steps)
    default = optax.chain(optax.clip_by_global_norm(config.clip), optax.adam(schedule))
    optimizer_is_used(lambda optimizer: jax.jit(make_train(task, "gru", 8, 1, config, held_out,
                                                           optimizer=optimizer))(jax.random.key(0)).params,
                      default, optax.sgd(1e-2))

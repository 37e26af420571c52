"""Query insertion, the students and their training (App. A.1 / A.4)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from memlab.keys import key_for
from memlab.recall.encoding import encode, token_dim
from memlab.recall.runs import compiled_train, deserialise, first_seed, make_student, serialise, train_students
from memlab.recall.students import AttentionStudent, MambaStudent, num_params
from memlab.recall.task import RecallTask, baseline_mse, sample
from memlab.recall.train import TrainConfig, make_train, mse, predictions


def test_query_insertion_layout():
    tags = jnp.array([[1.0], [-1.0], [1.0]])
    content = jnp.array([0.25, 0.5, 1.0])
    u = np.asarray(encode(jnp.array([-1.0]), tags, content))
    assert u.shape == (5, token_dim(1)) == (5, 5)
    np.testing.assert_array_equal(u[0], [1, 0, 0, -1, 0])  # iota_in(q) = (m_in, q, 0)
    np.testing.assert_array_equal(u[1:4, :3], np.tile([0, 1, 0], (3, 1)))  # m_ctx
    np.testing.assert_array_equal(u[1:4, 3:], np.c_[np.asarray(tags), np.asarray(content)])
    np.testing.assert_array_equal(u[-1], [0, 0, 1, -1, 0])  # iota_out(q)
    with pytest.raises(ValueError, match="d_1"):
        encode(jnp.array([1.0, 0.0]), tags, content)
    with pytest.raises(ValueError, match="expected query"):
        encode(jnp.array([1.0]), tags, content[:2])


@pytest.mark.parametrize("kind", ["mamba-1", "mamba-2", "mamba-1-residual", "mamba-2-residual", "attention"])
def test_students_read_out_one_scalar(kind):
    model = make_student(kind, 1, jax.random.key(0))
    u = encode(jnp.array([1.0]), jnp.ones((7, 1)), jnp.linspace(0, 1, 7))
    assert model(u).shape == ()
    assert num_params(model) > 0


@pytest.mark.parametrize("residual", [False, True])
def test_mamba_student_composes_as_written_or_in_the_residual_wrapper(residual):
    """App. A.1: head(Mamba(Phi_1(u)))[-1] (no norm, no residual); residual: head((x + Mamba(RMSNorm(x)))[-1])."""
    model = make_student("mamba-1-residual" if residual else "mamba-1", 1, jax.random.key(3))
    assert model.residual == residual and len(model.norms) == int(residual)
    u = encode(jnp.array([1.0]), jnp.ones((9, 1)).at[::2].set(-1.0), jnp.linspace(0, 1, 9))
    x = jax.vmap(model.phis[0])(u)
    mixed = x + model.blocks[0](jax.vmap(model.norms[0])(x)) if residual else model.blocks[0](x)
    np.testing.assert_allclose(float(model(u)), float(model.head(mixed[-1])[0]), rtol=1e-6, atol=1e-7)


def test_two_block_student_has_two_s6_layers_and_is_causal():
    model = MambaStudent(token_dim(1), num_blocks=2, key=jax.random.key(1))
    assert len(model.blocks) == 2 and len(model.phis) == 2
    u = encode(jnp.array([1.0]), jnp.ones((9, 1)), jnp.linspace(0, 1, 9))
    features = model.features(u)
    changed = model.features(u.at[6, 4].set(0.123))
    np.testing.assert_array_equal(np.asarray(features[:6]), np.asarray(changed[:6]))  # the past is untouched
    assert not np.allclose(np.asarray(features[6:]), np.asarray(changed[6:]))
    _, mixer_inputs = model.trace(u)
    assert [x.shape for x in mixer_inputs] == [(11, 16), (11, 16)]


def test_packed_sequences_with_reset_match_separate_runs():
    model = MambaStudent(token_dim(1), num_blocks=2, key=jax.random.key(2))
    u1 = encode(jnp.array([1.0]), jnp.ones((5, 1)), jnp.linspace(0, 1, 5))
    u2 = encode(jnp.array([-1.0]), -jnp.ones((4, 1)), jnp.linspace(1, 0, 4))
    packed = jnp.concatenate([u1, u2])
    reset = jnp.zeros(len(packed), bool).at[len(u1)].set(True)
    out = np.asarray(model.features(packed, reset))
    np.testing.assert_allclose(out[: len(u1)], np.asarray(model.features(u1)), atol=1e-5)
    np.testing.assert_allclose(out[len(u1):], np.asarray(model.features(u2)), atol=1e-5)


@pytest.mark.parametrize("num_blocks, residual", [(1, False), (2, False), (2, True)])
def test_readout_at_the_last_token_equals_the_full_sequence_path(num_blocks, residual):
    """__call__ runs the last S6 block at the readout token only; it must equal the head on the full features."""
    model = MambaStudent(token_dim(1), num_blocks=num_blocks, residual=residual, key=jax.random.key(4))
    u = encode(jnp.array([-1.0]), jnp.ones((40, 1)).at[::3].set(-1.0), jnp.linspace(0, 1, 40))
    x = jax.random.normal(jax.random.key(5), (len(u), 16))

    @eqx.filter_jit
    def fast_and_full(model, r):  # (readout, the head on the full features), (block.last, the block's last token)
        block = model.blocks[-1]
        return (model(u, r), model.head(model.features(u, r)[-1])[0]), (block.last(x, r), block(x, r)[-1])

    reset = jnp.zeros(len(u), bool).at[17].set(True)
    for r in (None, reset):
        (readout, full), (last, block_full) = fast_and_full(model, r)
        np.testing.assert_allclose(float(readout), float(full), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(np.asarray(last), np.asarray(block_full), rtol=1e-5, atol=1e-6)
    assert float(fast_and_full(model, None)[0][0]) != float(fast_and_full(model, reset)[0][0])  # reset reaches h_L


@pytest.mark.parametrize("kind", ["mamba-1", "attention"])
def test_chunked_time_major_predictions_equal_one_example_at_a_time(kind):
    """predictions (time-major chunks, any chunk size, a smaller last chunk) against the model on each example."""
    model = make_student(kind, 1, jax.random.key(6))
    data = sample(jax.random.key(7), 7, RecallTask(context_length=12))
    examples = (data.query, data.context_tags, data.context_content)
    one_by_one = np.asarray(eqx.filter_jit(lambda m: jax.lax.map(lambda ex: m(encode(*ex)), examples))(model))
    batched = eqx.filter_jit(predictions)  # the chunk (an int or None) is static
    for chunk in (None, 1, 3):  # one chunk of 7; seven of 1; two of 3 and one of 1
        np.testing.assert_allclose(np.asarray(batched(model, data, chunk)), one_by_one, rtol=1e-5, atol=1e-6)
    assert float(mse(model, data)) == pytest.approx(np.mean((one_by_one - np.asarray(data.y)) ** 2), rel=1e-5)


def test_seeds_one_after_another_equal_vmapped_seeds():
    """compiled_train runs the seeds with lax.map (fast on a CPU); the vmapped seeds it replaced are the reference."""
    task, config, num_seeds = RecallTask(context_length=10), TrainConfig(epochs=3), 2
    pools = jax.tree.map(lambda *x: jnp.stack(x), *[sample(jax.random.key(8 + s), 12, task) for s in range(num_seeds)])
    val, keys, n = sample(jax.random.key(20), 9, task), jax.random.split(jax.random.key(21), num_seeds), jnp.asarray(6)
    fast = compiled_train("mamba-1", 1, config)(keys, pools, val, n)
    train = make_train(config, lambda key: make_student("mamba-1", 1, key))
    vmapped = eqx.filter_jit(eqx.filter_vmap(train, in_axes=(0, 0, None, None)))(keys, pools, val, n)
    for field in ("best_val_mse", "val_mse", "train_loss"):
        np.testing.assert_allclose(np.asarray(getattr(fast, field)), np.asarray(getattr(vmapped, field)), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(fast.best_epoch), np.asarray(vmapped.best_epoch))
    for a, b in zip(jax.tree.leaves(eqx.filter(fast.model, eqx.is_array)),
                    jax.tree.leaves(eqx.filter(vmapped.model, eqx.is_array))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_attention_student_attends_over_all_tokens():
    model = AttentionStudent(token_dim(1), key=jax.random.key(3))
    u = encode(jnp.array([1.0]), jnp.ones((9, 1)), jnp.linspace(0, 1, 9))
    assert float(model(u)) != float(model(u.at[1, 4].set(0.9)))  # an early context token matters at the readout
    with pytest.raises(ValueError, match="reset"):
        model(u, jnp.zeros(len(u), bool))


@pytest.mark.parametrize("build, match", [
    (lambda: MambaStudent(5, num_blocks=0, key=jax.random.key(0)), "num_blocks"),
    (lambda: AttentionStudent(5, d_model=16, num_heads=3, key=jax.random.key(0)), "divisible"),
    (lambda: make_student("lstm", 1, jax.random.key(0)), "unknown student"),
])
def test_bad_students_rejected(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_bad_train_config_rejected():
    with pytest.raises(ValueError, match="epochs"):
        TrainConfig(epochs=0)
    with pytest.raises(ValueError, match="decay"):
        TrainConfig(decay=1.5)
    with pytest.raises(ValueError, match="multiple of epochs"):
        TrainConfig(epochs=30, steps=100)
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)


@pytest.fixture(scope="module")
def trained():
    """A tiny one-block student trained on 64 contexts of length 16 (A.1 recipe, fewer epochs)."""
    task = RecallTask(alpha=1.0, context_length=16)
    config = TrainConfig(epochs=12)
    val = sample(key_for(0, "validation"), 256, task)
    record, models = train_students(task, 64, "mamba-1", config, val, num_seeds=2, pool_key=key_for(0, "training-pool"),
                                init_key=key_for(0, "init", 64))
    return task, val, record, models


def test_trained_student_beats_the_mean_predictor(trained):
    task, _, record, _ = trained
    # the mean predictor's exact risk is ~0.65; learning the sign of the query alone gets ~0.31 (tag-only)
    assert all(m < 0.8 * baseline_mse(task)["mean"] for m in record.best_val_mse), record.best_val_mse
    assert record.baseline_mean == pytest.approx(baseline_mse(task)["mean"])


def test_best_model_is_the_one_with_the_best_validation_mse(trained):
    task, val, record, models = trained
    for s in range(2):
        model = jax.tree.map(lambda x, s=s: x[s] if eqx.is_array(x) else x, models)
        assert float(mse(model, val)) == pytest.approx(record.best_val_mse[s], rel=1e-4)
    assert record.mse == pytest.approx(min(record.val_curve), rel=0.5)  # val_curve is the seed mean
    assert len(record.val_curve) == 12 and len(record.train_curve) == 12


def test_a_trained_model_survives_serialisation_bit_for_bit(trained):
    task, val, _, models = trained
    model = first_seed(models)
    restored = deserialise(serialise(model), "mamba-1", task.tag_array.shape[1])
    leaves = [jax.tree.leaves(eqx.filter(m, eqx.is_array)) for m in (model, restored)]
    assert len(leaves[0]) == len(leaves[1]) > 0
    for a, b in zip(*leaves):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert float(mse(restored, val)) == float(mse(model, val))


def test_train_students_rejects_bad_sizes():
    task = RecallTask(context_length=4)
    val = sample(jax.random.key(0), 4, task)
    with pytest.raises(ValueError, match="num_seeds"):
        train_students(task, 4, "mamba-1", TrainConfig(epochs=1), val, 0, jax.random.key(1), jax.random.key(2))
    with pytest.raises(ValueError, match="capacity"):
        train_students(task, 8, "mamba-1", TrainConfig(epochs=1), val, 1, jax.random.key(1), jax.random.key(2),
                       capacity=4)


class MeanReadout(eqx.Module):
    """A cheap stand-in student (linear in the token mean): the training loop's logic does not depend on the model."""

    w: jax.Array

    def __init__(self, key):
        self.w = 0.1 * jax.random.normal(key, (token_dim(1),))

    def __call__(self, u, reset=None):
        return u.mean(0) @ self.w


def test_train_is_pure_and_jittable():
    task = RecallTask(context_length=8)
    train = eqx.filter_jit(make_train(TrainConfig(epochs=2), MeanReadout))
    data, val = sample(jax.random.key(0), 8, task), sample(jax.random.key(1), 8, task)
    a, b = train(jax.random.key(0), data, val), train(jax.random.key(0), data, val)
    assert float(a.best_val_mse) == float(b.best_val_mse)
    assert int(a.best_epoch) == int(np.argmin(np.asarray(a.val_mse)))


def test_one_compiled_train_serves_every_n_exactly():
    """Training on the first n examples of a larger pool (masked slots) equals training on those n alone."""
    task = RecallTask(context_length=6)
    pool, val = sample(jax.random.key(0), 24, task), sample(jax.random.key(1), 8, task)
    train = eqx.filter_jit(make_train(TrainConfig(epochs=3), MeanReadout))
    for n in (5, 20):  # one batch of n < 16; one batch of 16 with 4 examples dropped
        padded = train(jax.random.key(3), pool, val, n)
        alone = train(jax.random.key(3), jax.tree.map(lambda x, n=n: x[:n], pool), val)
        np.testing.assert_allclose(np.asarray(padded.val_mse), np.asarray(alone.val_mse), rtol=1e-5)
        np.testing.assert_allclose(np.asarray(padded.train_loss), np.asarray(alone.train_loss), rtol=1e-5)
    assert not np.allclose(np.asarray(train(jax.random.key(3), pool, val, 5).val_mse),
                           np.asarray(train(jax.random.key(3), pool, val, 24).val_mse))


@pytest.mark.parametrize("n", [3, 20, 40])
def test_a_step_budget_gives_exactly_that_many_adam_steps_at_every_n(n):
    """Without a budget the step count grows with n (epochs x max(n // batch, 1)); with one it is the budget."""
    task = RecallTask(context_length=6)
    pool, val = sample(jax.random.key(0), 40, task), sample(jax.random.key(1), 8, task)
    epochs = eqx.filter_jit(make_train(TrainConfig(epochs=3), MeanReadout))(jax.random.key(3), pool, val, n)
    assert int(epochs.num_steps) == 3 * max(n // min(16, n), 1)
    budget = eqx.filter_jit(make_train(TrainConfig(epochs=3, steps=12), MeanReadout))(jax.random.key(3), pool, val, n)
    assert int(budget.num_steps) == 12 and budget.val_mse.shape == (3,)


def _reference_budget_run(key, pool, val, n, config):
    """The step-budget schedule written as a plain loop of single Adam steps (no scan, no masks, no padding)."""
    batch, capacity = min(config.batch_size, n), pool.y.shape[0]
    steps_per_pass, per_round = max(n // batch, 1), config.steps // config.epochs
    k_model, k_epochs = jax.random.split(key)
    pass_keys = jax.random.split(k_epochs, config.steps)
    model = MeanReadout(k_model)
    optimiser = optax.chain(optax.clip_by_global_norm(config.clip_norm), optax.scale_by_adam())
    state = optimiser.init(model)

    @eqx.filter_jit
    def adam_step(model, state, idx, lr):
        def loss(m):
            return jnp.mean((jax.vmap(lambda *ex: m(encode(*ex)))(pool.query[idx], pool.context_tags[idx],
                                                                pool.context_content[idx]) - pool.y[idx]) ** 2)
        updates, state = optimiser.update(eqx.filter_grad(loss)(model), state, model)
        return eqx.apply_updates(model, jax.tree.map(lambda u: -lr * u, updates)), state

    val_curve = []
    for g in range(config.steps):
        p, within = divmod(g, steps_per_pass)
        u = np.asarray(jax.random.uniform(pass_keys[p], (capacity,)))
        order = np.argsort(np.where(np.arange(capacity) < n, u, 2.0), kind="stable")
        lr = config.learning_rate * np.float32(config.decay) ** np.float32(g // per_round)
        model, state = adam_step(model, state, jnp.asarray(order[within * batch:(within + 1) * batch]), lr)
        if (g + 1) % per_round == 0:
            val_curve.append(float(mse(model, val)))
    return np.array(val_curve)


@pytest.mark.parametrize("n", [5, 24, 48])
def test_step_budget_schedule_matches_a_plain_loop(n):
    """n = 5: one 5-example batch per pass, a pass per step; n = 24: one 16-batch per pass (8 dropped); n = 48: three
    batches per pass, so passes straddle the rounds of 4 steps."""
    task = RecallTask(context_length=6)
    pool, val = sample(jax.random.key(0), 48, task), sample(jax.random.key(1), 8, task)
    config = TrainConfig(epochs=3, steps=12)
    result = eqx.filter_jit(make_train(config, MeanReadout))(jax.random.key(4), pool, val, n)
    np.testing.assert_allclose(np.asarray(result.val_mse), _reference_budget_run(jax.random.key(4), pool, val, n,
                                                                                  config), rtol=1e-5)


def test_step_budget_is_the_a1_run_where_an_epoch_has_steps_over_epochs_steps():
    task = RecallTask(context_length=6)
    pool, val = sample(jax.random.key(0), 48, task), sample(jax.random.key(1), 8, task)
    a1 = eqx.filter_jit(make_train(TrainConfig(epochs=3), MeanReadout))(jax.random.key(5), pool, val)  # 3 steps/epoch
    budget = eqx.filter_jit(make_train(TrainConfig(epochs=3, steps=9), MeanReadout))(jax.random.key(5), pool, val)
    for field in ("val_mse", "train_loss", "best_val_mse"):
        np.testing.assert_array_equal(np.asarray(getattr(a1, field)), np.asarray(getattr(budget, field)))
    other = eqx.filter_jit(make_train(TrainConfig(epochs=3, steps=12), MeanReadout))(jax.random.key(5), pool, val)
    assert not np.allclose(np.asarray(other.val_mse), np.asarray(a1.val_mse))


def test_the_optimizer_is_an_argument_whose_default_is_a1s_clipped_adam(optimizer_is_used):
    """A.1's direction (global-norm clipping, then Adam's scaling; the epoch's decayed learning rate applied by the
    loop) passed explicitly trains the same model bit for bit; plain SGD's direction another."""
    task = RecallTask(context_length=6)
    pool, val = sample(jax.random.key(0), 24, task), sample(jax.random.key(1), 8, task)
    config = TrainConfig(epochs=2)

    def train(optimizer):
        trainer = eqx.filter_jit(make_train(config, MeanReadout, optimizer=optimizer))
        return trainer(jax.random.key(3), pool, val).model

    optimizer_is_used(train, optax.chain(optax.clip_by_global_norm(config.clip_norm), optax.scale_by_adam()),
                      optax.identity())

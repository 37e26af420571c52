"""The recall family's tasks: MQAR's exact lookup and recall-predict's band predictor against brute-force Python
loops on sampled sequences, the trivial predictors' optimality (exact or Monte Carlo with fixed seeds), the compiled
lookup attention, and a few training steps of each task through the arena's harness."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.arena.compiled import compiled_model, lookup_attention, lookup_loss_bound
from memlab.arena.mqar import MQARTask
from memlab.arena.recall_predict import RecallPredictTask, context_predictor
from memlab.arena.task import Batch, reference_is_exact
from memlab.arena.tasks import make_task
from memlab.arena.train import TrainConfig, baselines, compare, make_train, score
from memlab.recall import RecallTask, baseline_mse, value_moments

# -- MQAR ----------------------------------------------------------------------------------------------------------


def _stored_pairs(tokens, K):
    return {int(tokens[2 * m]): int(tokens[2 * m + 1]) for m in range(K)}


def test_mqar_sequences_have_zoologys_layout():
    task = MQARTask()
    K, V = task.num_pairs, task.vocab_size
    batch = task.sample(jax.random.key(0), 200, 64)
    assert batch.inputs.shape == (200, 64, V) and batch.targets.shape == (200, 64) and batch.mask.shape == (200, 64)
    tokens, targets, mask = (np.asarray(x) for x in (batch.aux, batch.targets, batch.mask))
    np.testing.assert_array_equal(np.argmax(batch.inputs, -1), tokens)
    for seq, target, scored in zip(tokens, targets, mask, strict=True):
        pairs = _stored_pairs(seq, K)
        assert len(pairs) == K and all(1 <= k < V // 2 for k in pairs)  # distinct keys
        assert len(set(pairs.values())) == K and all(V // 2 <= v < V for v in pairs.values())  # distinct values
        where = np.flatnonzero(scored)
        assert len(where) == K and np.all(where >= 2 * K) and np.all((where - 2 * K) % 2 == 0)
        assert sorted(seq[where].tolist()) == sorted(pairs)  # every stored key queried once
        np.testing.assert_array_equal(target[where], [pairs[int(k)] - V // 2 for k in seq[where]])
        rest = np.ones(64, bool)
        rest[: 2 * K] = False
        rest[where] = False
        assert np.all(seq[rest] == 0)  # filler


def test_mqar_reference_is_exact_lookup_with_zero_loss_and_finite_distances():
    task = MQARTask()
    batch = task.sample(jax.random.key(1), 50, 48)
    reference = task.reference(batch)
    probs, loss = np.asarray(jax.nn.softmax(reference)), np.asarray(task.loss(reference, batch))
    tokens, mask = np.asarray(batch.aux), np.asarray(batch.mask)
    for b, seq in enumerate(tokens):
        pairs = _stored_pairs(seq, task.num_pairs)
        for t in np.flatnonzero(mask[b]):
            assert probs[b, t, pairs[int(seq[t])] - task.vocab_size // 2] == 1.0  # a Python dict lookup
            assert loss[b, t] == 0.0
    trivial = task.trivial(batch)
    for other in (reference, trivial, jnp.zeros_like(trivial).at[..., 0].set(50.0)):
        d = task.distance(other, reference)
        g = jax.grad(lambda o: jnp.sum(task.distance(o, reference)))(other)
        assert np.all(np.isfinite(d)) and np.all(np.isfinite(g))
    np.testing.assert_allclose(np.asarray(task.distance(trivial, reference))[mask], math.log(64), rtol=1e-6)


def test_mqar_trivial_is_uniform_and_exactly_optimal_without_memory():
    """Its loss is log(V/2) at every query; the values it cannot predict are uniform whatever the key and the
    position (chi-square over the 32 values, and no correlation of the value with the key or the position)."""
    task = MQARTask(vocab_size=64)
    batch = task.sample(jax.random.key(2), 4000, 32)
    mask = np.asarray(batch.mask)
    np.testing.assert_allclose(np.asarray(task.loss(task.trivial(batch), batch))[mask], math.log(32), rtol=1e-6)
    values, keys = np.asarray(batch.targets)[mask], np.asarray(batch.aux)[mask]
    positions = np.nonzero(mask)[1]
    counts = np.bincount(values, minlength=32)
    expected = len(values) / 32
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert chi2 < 61.1, chi2  # the 99.9 % quantile of chi-square with 31 degrees of freedom
    for covariate in (keys, positions):
        r = np.corrcoef(values, covariate)[0, 1]
        assert abs(r) < 4 / np.sqrt(len(values)), r


def test_mqar_bad_sizes_are_named():
    with pytest.raises(ValueError, match="length must be at least 4 x num_pairs = 16"):
        MQARTask().sample(jax.random.key(0), 2, 15)
    with pytest.raises(ValueError, match="vocab_size must be even"):
        MQARTask(vocab_size=65)
    with pytest.raises(ValueError, match="num_pairs"):
        MQARTask(vocab_size=8, num_pairs=4)


@pytest.mark.parametrize("length", [64, 256])
def test_the_compiled_lookup_attention_has_zero_gap(length):
    task = make_task("mqar")
    compiled = compiled_model(task)
    assert compiled.exact
    batch = task.sample(jax.random.key(3), 64, length)
    scores = jax.jit(lambda b: score(task, compiled.model, b))(batch)
    assert abs(float(scores.gap)) < 1e-6
    assert float(np.nanmax(np.asarray(scores.distance))) < 1e-6


def test_a_soft_lookup_stays_within_its_stated_bound():
    """At beta = gamma = 6 the lookup is visibly soft; its loss per query must stay below the stated bound and
    shrink as beta and gamma grow."""
    task = MQARTask()
    batch = task.sample(jax.random.key(4), 64, 64)
    mask = np.asarray(batch.mask)
    losses = []
    for beta, gamma in ((6.0, 6.0), (10.0, 10.0)):
        loss = np.asarray(task.loss(jax.vmap(lookup_attention(task, beta, gamma))(batch.inputs), batch))[mask]
        assert loss.max() <= lookup_loss_bound(task, 64, beta, gamma) * (1 + 1e-5)
        losses.append(loss.mean())
    assert 0.0 < losses[1] < losses[0]


# -- recall-predict ------------------------------------------------------------------------------------------------


def test_recall_predict_reference_is_the_band_predictor_on_the_queried_tokens():
    task = RecallPredictTask()
    batch = task.sample(jax.random.key(5), 40, 16)
    assert batch.inputs.shape == (40, 16, task.input_size) and batch.targets.shape == (40, 16, 1)
    assert np.all(np.asarray(batch.mask).sum(1) == 1) and np.all(np.asarray(batch.mask)[:, -1])
    reference = np.asarray(task.reference(batch))
    recall = task.at_length(14)
    m, grid = context_predictor(recall), recall.grid
    ex = batch.aux
    for b in range(40):  # a Python loop over the context: count the queried tag's tokens per grid point
        counts = np.zeros(len(grid))
        for tag, z in zip(np.asarray(ex.context_tags[b]), np.asarray(ex.context_content[b]), strict=True):
            if np.array_equal(tag, np.asarray(ex.query[b])):
                counts[np.argmin(np.abs(grid - z))] += 1
        pmf = counts / max(counts.sum(), 1)
        expected = float(ex.query[b, 0]) * m(pmf[None])[0]
        np.testing.assert_allclose(reference[b, -1, 0], expected, rtol=1e-5, atol=1e-7)
    assert np.all(reference[:, :-1] == 0.0)
    assert not reference_is_exact(task)


def test_recall_predict_reference_risk_is_the_bands_context_risk():
    """The arena's contexts carry what the band simulates: the reference's risk on sampled sequences matches the
    band's own Monte-Carlo risk of the same predictor at T = 14 (recall.band.predictor_risk: 0.002278 +- 0.000025)."""
    task = RecallPredictTask()
    batch = task.sample(jax.random.key(6), 6000, 16)
    loss = np.asarray(task.loss(task.reference(batch), batch))[:, -1]
    band_risk, band_se = 0.0022782, 2.55e-5  # predictor_risk(RecallTask(target="linear", context_length=14), 14)
    se = loss.std(ddof=1) / np.sqrt(len(loss))
    assert abs(loss.mean() - band_risk) < 4 * np.hypot(se, band_se), (loss.mean(), band_risk, se)


def test_recall_predict_trivial_is_tag_only_and_the_best_memoryless_predictor():
    """E[Y | q] = q_1 E[F]: Monte Carlo (fixed seed) of E[Y / q_1] against value_moments' E[F], and of the trivial
    loss against baseline_mse's tag-only risk E[q_1^2] Var F + sigma^2."""
    task = RecallPredictTask()
    batch = task.sample(jax.random.key(7), 8000, 16)
    y, q = np.asarray(batch.aux.y, np.float64), np.asarray(batch.aux.query[:, 0], np.float64)
    mean_f = value_moments(task.recall)[0]
    assert abs((y / q).mean() - mean_f) < 4 * (y / q).std() / np.sqrt(len(y))
    trivial = np.asarray(task.trivial(batch))
    np.testing.assert_allclose(trivial[:, -1, 0], q * mean_f, rtol=1e-6)
    loss = np.asarray(task.loss(task.trivial(batch), batch))[:, -1]
    risk = baseline_mse(task.recall)["tag_only"]
    assert abs(loss.mean() - risk) < 4 * loss.std() / np.sqrt(len(loss)), (loss.mean(), risk)
    reference = np.asarray(task.loss(task.reference(batch), batch))[:, -1]
    assert reference.mean() < 0.5 * loss.mean()  # 14 context tokens recall most of it: 0.0023 against 0.0116


def test_recall_predict_bad_arguments_are_named():
    with pytest.raises(ValueError, match="target must be 'linear'"):
        RecallPredictTask(RecallTask())
    with pytest.raises(ValueError, match="length"):
        RecallPredictTask().sample(jax.random.key(0), 2, 2)


# -- both, through the harness -------------------------------------------------------------------------------------


@pytest.mark.slow  # about 20 s each on one core, compile included
@pytest.mark.parametrize("name", ["mqar", "recall-predict"])
def test_a_few_training_steps_give_finite_losses(name):
    task = make_task(name)
    test = task.sample(jax.random.key(8), 16, 16)
    assert isinstance(test, Batch)
    base = jax.jit(baselines)(task, test)
    assert np.all(np.isfinite(np.asarray(base.reference))) and np.all(np.isfinite(np.asarray(base.trivial)))
    result = jax.jit(make_train(task, "lru", 8, 1, TrainConfig(steps=4, batch=8, length=16, eval_every=2), test))(
        jax.random.key(9))
    assert np.all(np.isfinite(np.asarray(result.train_loss))) and np.all(np.isfinite(np.asarray(result.val_loss)))


def test_compare_reads_the_last_scored_step_where_the_final_step_is_not_scored():
    """MQAR's queries sit at even positions, so the final step of an even length is never scored: the input-gradient
    cosine reads each sequence's last query instead (1 for a model against itself, below 1 against a softer one)."""
    task = MQARTask()
    batch = task.sample(jax.random.key(10), 16, 32)
    assert not np.any(np.asarray(batch.mask)[:, -1])
    sharp, soft = lookup_attention(task), lookup_attention(task, 2.0, 2.0)
    itself = compare(task, soft, soft, batch)
    assert float(itself.distance) == 0.0 and float(itself.gradient_cosine) == pytest.approx(1.0, abs=1e-5)
    other = compare(task, soft, sharp, batch)
    assert float(other.distance) > 0.0 and -1.0 <= float(other.gradient_cosine) < 0.999

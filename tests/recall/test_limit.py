"""Prop. 4.2 measurements on a (small, untrained) S6 student, against direct recomputations (memlab.recall.limit)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.recall.encoding import encode
from memlab.recall.limit import coupling_distance, finite_context_values, per_step_bound
from memlab.recall.runs import make_student
from memlab.recall.task import RecallTask, sample, sample_context


@pytest.fixture(scope="module")
def setup():
    task = RecallTask(context_length=8)
    return task, make_student("mamba-2", 1, jax.random.key(0)), sample(jax.random.key(1), 3, task)


def test_finite_context_values_average_the_student_over_fresh_contexts(setup):
    task, model, pairs = setup
    key = jax.random.key(2)
    mean, stderr = finite_context_values(model, pairs, task, 12, 5, key)
    assert mean.shape == stderr.shape == (3,)
    tags = jnp.asarray(task.tag_array, jnp.float32)
    for p in range(3):
        outs = [float(model(encode(pairs.query[p], *sample_context(k, pairs.pmf[p], tags, 12, task))))
                for k in jax.random.split(jax.random.fold_in(key, p), 5)]
        assert mean[p] == pytest.approx(np.mean(outs), rel=1e-5, abs=1e-6)
        assert stderr[p] == pytest.approx(np.std(outs, ddof=1) / np.sqrt(5), rel=1e-4, abs=1e-7)


def test_coupling_distance_is_the_feature_gap_after_different_prefixes(setup):
    task, model, pairs = setup
    distance = coupling_distance(model, pairs, task, 30, 1, jax.random.key(3))
    assert distance.shape == (30,) and np.all(distance > 0)
    k1, k2, k3 = jax.random.split(jax.random.split(jax.random.key(3), 1)[0], 3)
    tags = jnp.asarray(task.tag_array, jnp.float32)
    shared = sample_context(k3, pairs.pmf[0], tags, 30, task)
    features = []
    for k, p in ((k1, 0), (k2, 1)):
        prefix = sample_context(k, pairs.pmf[p], tags, 30, task)
        u = encode(pairs.query[0], jnp.concatenate([prefix[0], shared[0]]), jnp.concatenate([prefix[1], shared[1]]))
        features.append(np.asarray(model.features(u))[31:61])
    # float32 features of size ~1: jitted and eager differences agree to ~1e-7 absolute
    np.testing.assert_allclose(distance, np.linalg.norm(features[0] - features[1], axis=-1), rtol=1e-4, atol=1e-6)


def test_per_step_bound_is_one_decay_factor_per_s6_layer_below_one(setup):
    task, model, pairs = setup
    bounds = per_step_bound(model, pairs, task, jax.random.key(4), length=20)
    assert len(bounds) == 2 and all(0 < b < 1 for b in bounds)  # A = -exp(A_log) < 0 and Delta > 0
    tags = jnp.asarray(task.tag_array, jnp.float32)
    u = encode(pairs.query[0], *sample_context(jax.random.fold_in(jax.random.key(4), 0), pairs.pmf[0], tags, 20, task))
    _, mixer_inputs = model.trace(u)
    for block, x, bound in zip(model.blocks, mixer_inputs, bounds):
        delta = np.asarray(block.ssm_inputs(x)["delta"])[1:-1]  # context tokens only
        assert np.max(np.exp(delta[:, :, None] * np.asarray(block.A)[None])) <= bound + 1e-6  # pair 0 <= max over pairs

"""runs.py: a trained model travels as bytes and comes back the same; the particle-filter row of Table 1 is the
reference filter run per test sequence and scored like every model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.pissm import runs
from memlab.pissm.data.pong import NOISE_STD
from memlab.pissm.reference import pong_particle_filter


@pytest.fixture(scope="module")
def pong():
    return runs.load_dataset("pong", runs.LAYOUTS["tiny"]["pong"])


@pytest.mark.parametrize("name", ["pissm-gru", "lg", "observation", "pissm-gru-normalised", "lg-one-mode"])
def test_a_model_survives_bytes(name, pong):
    model = runs.make_model(name, "pong", pong, jax.random.key(3))
    model = jax.tree.map(lambda x: x + 0.01 if isinstance(x, jax.Array) and x.dtype == jnp.float32 else x, model)
    blob = runs.model_bytes(model)
    assert isinstance(blob, bytes)
    back = runs.model_from_bytes(blob, name, "pong", pong)
    for a, b in zip(jax.tree.leaves(model), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    fresh = runs.make_model(name, "pong", pong, jax.random.key(0))  # the template: other values
    assert any(not np.array_equal(np.asarray(a), np.asarray(b))
               for a, b in zip(jax.tree.leaves(fresh), jax.tree.leaves(back)))


def test_one_mode_ablation_has_one_mode_and_the_rest_as_the_data_sets(pong):
    one, full = runs.make_model("pissm-lg-one-mode", "pong", pong, jax.random.key(0)), \
        runs.make_model("pissm-lg", "pong", pong, jax.random.key(0))
    assert one.A.shape[0] == 1 and full.A.shape[0] == runs.NUM_MODES["pong"]
    assert one.A.shape[1:] == full.A.shape[1:] and type(one.gain) is type(full.gain)
    lg = runs.make_model("lg-one-mode", "pong", pong, jax.random.key(0))
    assert lg.lg.A.shape[0] == 1


def test_particle_reference_filters_each_test_sequence_with_its_own_key(pong):
    key, particles = jax.random.key(5), 64
    p = runs.particle_reference("pong", pong, key, particles)
    B, T = pong.test.y.shape[:2]
    assert p.log_likelihoods.shape == (B, T)
    for b in (0, B - 1):
        one = pong_particle_filter(jax.random.split(key, B)[b], pong.test.y[b], None, NOISE_STD, particles)
        np.testing.assert_allclose(np.asarray(p.log_likelihoods[b]), np.asarray(one.log_likelihoods), rtol=1e-5,
                                   atol=1e-5)
    scores = runs.particle_scores("pong", pong, key, particles)
    truth = jnp.einsum("nm,btm->btn", pong.C, pong.test.x)
    expected = runs.score(p.log_likelihoods[None], p.filtered_obs[None], p.obs_means[None], truth,
                          runs.full_mask(pong.test))
    assert scores == expected and len(scores["ll"]) == B
    with pytest.raises(ValueError, match="particle reference"):
        runs.particle_reference("navier-stokes", pong, key, particles)

"""The start's survival of random steps (sensitivity.py): memlab's bounded gain keeps every filter finite whatever
the step (its filter contracts for any gain, gain.py), the unstepped start is the model itself, and eq. (7)'s gain
in absolute units does not survive large steps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.pissm.runs import TINY_LAYOUT, load_dataset, make_model
from memlab.pissm.sensitivity import gain_step_survival
from memlab.pissm.train import predict_batch


@pytest.fixture(scope="module")
def pong():
    return load_dataset("pong", TINY_LAYOUT["pong"])


def test_bounded_gain_survives_any_step_and_size_zero_is_the_model_itself(pong):
    model = make_model("pissm-gru-bounded", "pong", pong, jax.random.key(0))
    y, mask = pong.test.y, jnp.ones(pong.test.y.shape[:2], bool)
    key = jax.random.key(3)
    survival = gain_step_survival(model, y, mask, key, (0.0, 0.1, 1.0), 2)
    np.testing.assert_array_equal(survival.finite, 1.0)
    own = np.asarray(predict_batch(model, y, mask, jax.random.split(key)[1]).log_likelihoods)[0]
    np.testing.assert_allclose(survival.log_likelihood[0], own.mean(), rtol=1e-5)  # both directions: no step


def test_paper_gain_in_absolute_units_does_not_survive_a_large_step(pong):
    model = make_model("pissm-gru-tracking", "pong", pong, jax.random.key(0), iss_eps=0.1)
    survival = gain_step_survival(model, pong.test.y, jnp.ones(pong.test.y.shape[:2], bool), jax.random.key(3),
                                  (0.0, 0.1), 2)
    assert survival.finite[0].min() >= 0.9 and survival.finite[1].max() < 0.5, survival.finite


def test_survival_refuses_the_exact_gain_and_bad_steps(pong):
    y, mask, key = pong.test.y, jnp.ones(pong.test.y.shape[:2], bool), jax.random.key(0)
    with pytest.raises(ValueError, match="learned gain"):
        gain_step_survival(make_model("pissm-lg", "pong", pong, key), y, mask, key, (0.0,), 1)
    model = make_model("pissm-gru-bounded", "pong", pong, key)
    for sizes in ((), (-1.0,), (np.nan,)):
        with pytest.raises(ValueError, match="sizes"):
            gain_step_survival(model, y, mask, key, sizes, 1)
    with pytest.raises(ValueError, match="directions"):
        gain_step_survival(model, y, mask, key, (0.0,), 0)

"""The random task family of random_tasks.py: valid ergodic MRPs, scaled orthonormal features, the margin of
eq. (28), batches."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from memlab.ictd.mrp import MRP, stationary_distribution
from memlab.ictd.random_tasks import random_task, task_margin


@pytest.mark.parametrize("m, d, actions", [(3, 3, 1), (5, 8, 2), (8, 8, 4)])
def test_task_is_a_valid_ergodic_mrp_with_bellman_consistent_values(x64, m, d, actions):
    task = random_task(jax.random.key(m), m, d, 0.9, actions, 2.0)
    P, r = np.asarray(task.mrp.P), np.asarray(task.mrp.r)
    MRP(P, r, 0.9, np.asarray(task.mrp.p0))  # validation passes on concrete arrays
    assert np.all(P > 0), "dense Dirichlet rows: every transition possible, so the chain is ergodic"
    assert np.all(np.abs(r) <= 1.0)
    v = np.asarray(task.v_star)
    np.testing.assert_allclose(v, r + 0.9 * P @ v, atol=1e-12)  # v_pi is the Bellman fixed point, eq. (7)
    np.testing.assert_allclose(np.asarray(task.features) @ np.asarray(task.w_star), v, atol=1e-10)


def test_features_are_scaled_orthonormal(x64):
    X = np.asarray(random_task(jax.random.key(1), 5, 7, 0.5, feature_scale=2.5).features)
    np.testing.assert_allclose(X @ X.T, 2.5**2 * np.eye(5), atol=1e-12)


def test_margin_matches_closed_form(x64):
    c, gamma = 1.7, 0.6
    task = random_task(jax.random.key(2), 6, 6, gamma, feature_scale=c)
    mu = np.asarray(stationary_distribution(task.mrp))
    diag = mu * np.exp(c**2) / (mu * np.exp(c**2) + 1.0 - mu)  # eq. (27) with orthonormal features
    assert float(task_margin(task)) == pytest.approx(diag.min() - (1 + gamma) / 2, abs=1e-12)  # eq. (28)
    assert float(task_margin(task, tau=2.0)) < float(task_margin(task))  # a warmer softmax is less diagonal


def test_vmap_over_keys_gives_distinct_tasks():
    tasks = jax.vmap(lambda k: random_task(k, 4, 4, 0.9))(jax.random.split(jax.random.key(0), 3))
    assert tasks.mrp.P.shape == (3, 4, 4) and tasks.features.shape == (3, 4, 4)
    assert not np.allclose(tasks.mrp.P[0], tasks.mrp.P[1])


@pytest.mark.parametrize("kwargs, match", [
    ({"m": 1}, "m must be"), ({"d": 3}, "d must be"), ({"num_actions": 0}, "num_actions"),
    ({"gamma": 1.0}, "gamma"), ({"feature_scale": 0.0}, "feature_scale"),
    ({"feature_scale": float("nan")}, "feature_scale"),
])
def test_bad_arguments(kwargs, match):
    args = {"m": 4, "d": 4, "gamma": 0.9, **kwargs}
    with pytest.raises(ValueError, match=match):
        random_task(jax.random.key(0), **args)


def test_flat_dirichlet_has_the_dirichlet_moments():
    """Dirichlet(1_k): mean 1/k, variance (k - 1) / (k^2 (k + 1)) per component (200,000 draws, 5 sigma)."""
    from memlab.ictd.random_tasks import flat_dirichlet

    k, n = 4, 200_000
    x = np.asarray(flat_dirichlet(jax.random.key(0), (n, k), np.float32))
    np.testing.assert_allclose(x.sum(axis=1), 1.0, atol=1e-5)
    var = (k - 1) / (k**2 * (k + 1))
    assert np.all(np.abs(x.mean(axis=0) - 1 / k) < 5 * np.sqrt(var / n))
    np.testing.assert_allclose(x.var(axis=0), var, rtol=0.02)

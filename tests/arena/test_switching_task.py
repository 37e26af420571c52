"""The switching task: the enumeration against brute-force Gaussian conditioning over every mode sequence (float64
NumPy, no Kalman recursion), the particle reference against the enumeration, the prior moments against Monte Carlo,
the reduction to the lgssm task when the modes are equal, the fused Kalman step against pissm's."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.arena.lgssm import random_lgssm
from memlab.arena.small_kalman import kalman_step_small
from memlab.arena.switching import (
    SwitchingLGSSMTask,
    exact_predictive_mean,
    optimal_resample,
    particle_predictive_mean,
    prior_moments,
    random_switching_lgssm,
)
from memlab.arena.task import reference_is_exact
from memlab.arena.tasks import make_task
from memlab.arena.train import TrainConfig, baselines, make_train
from memlab.kalman import predict, update


def _general_task(num_particles=32):
    """K = 2, M = 3 (odd), D = 1, mode-specific Q, m0 != 0, an asymmetric T and pi0 not stationary."""
    rng = np.random.default_rng(5)
    A = np.stack([0.9 * np.linalg.qr(rng.standard_normal((3, 3)))[0], np.diag([0.5, -0.8, 0.3])])
    Q = np.stack([np.eye(3), np.diag([0.2, 0.5, 1.5])])
    T = np.array([[0.85, 0.3], [0.15, 0.7]])
    arrays = (A, rng.standard_normal((1, 3)), Q, [[0.3]], [1.0, -0.5, 2.0], 0.5 * np.eye(3), T, [0.8, 0.2])
    return SwitchingLGSSMTask(*(jnp.asarray(a, jnp.float32) for a in arrays), num_particles=num_particles)


def _joint(task, modes):
    """Mean (n, D) and covariance (n D, n D) of y_1..y_n given the modes z_1..z_n, from x_t = Phi(t, s) x_s + ...
    written out (no recursion over filters)."""
    A, C, Q, R, m0, P0 = (np.asarray(a, np.float64) for a in (task.A, task.C, task.Q, task.R, task.m0, task.P0))
    n, D, M = len(modes), C.shape[0], A.shape[1]

    def phi(t, s):  # A_{z_t} ... A_{z_{s+1}}
        out = np.eye(M)
        for u in range(s + 1, t + 1):
            out = A[modes[u - 1]] @ out
        return out

    mean = np.array([C @ phi(t, 0) @ m0 for t in range(1, n + 1)])
    cov = np.zeros((n, D, n, D))
    for t, u in itertools.product(range(1, n + 1), repeat=2):
        x_cov = phi(t, 0) @ P0 @ phi(u, 0).T + sum(phi(t, s) @ Q[modes[s - 1]] @ phi(u, s).T
                                                   for s in range(1, min(t, u) + 1))
        cov[t - 1, :, u - 1, :] = C @ x_cov @ C.T + (R if t == u else 0.0)
    return mean, cov.reshape(n * D, n * D)


def _brute_force(task, ys):
    """E[y_{t+1} | y_{1:t}] for t = 1..L: a sum over all mode sequences z_0..z_{t+1} of prior x likelihood x the
    Gaussian conditional mean (float64)."""
    T, pi0 = np.asarray(task.T, np.float64), np.asarray(task.pi0, np.float64)
    L, D = ys.shape
    out = []
    for t in range(1, L + 1):
        total, norm = np.zeros(D), 0.0
        for z in itertools.product(range(len(pi0)), repeat=t + 2):
            prior = pi0[z[0]] * np.prod([T[z[s], z[s - 1]] for s in range(1, t + 2)])
            mean, cov = _joint(task, z[1:])
            seen = slice(0, t * D)
            S, r = cov[seen, seen], ys[:t].ravel() - mean[:t].ravel()
            likelihood = np.exp(-0.5 * r @ np.linalg.solve(S, r)) / np.sqrt(np.linalg.det(2 * np.pi * S))
            total += prior * likelihood * (mean[t] + cov[t * D:(t + 1) * D, seen] @ np.linalg.solve(S, r))
            norm += prior * likelihood
        out.append(total / norm)
    return np.array(out)


@pytest.mark.parametrize("task", [random_switching_lgssm(1, num_modes=2, stay=0.8),
                                  pytest.param(_general_task(), marks=pytest.mark.slow)], ids=["random", "general"])
def test_enumeration_is_brute_force_conditioning(task):
    batch = task.sample(jax.random.key(3), 2, 4)
    particle = jax.jit(lambda ys, key: particle_predictive_mean(task, ys, key, 32))
    for b in range(2):
        expected = _brute_force(task, np.asarray(batch.inputs[b], np.float64))
        np.testing.assert_allclose(exact_predictive_mean(task, batch.inputs[b]), expected, rtol=1e-4, atol=1e-4)
        # 32 particles hold all 2^4 histories: the particle filter is the enumeration, whatever its key
        np.testing.assert_allclose(particle(batch.inputs[b], jax.random.key(b)), expected, rtol=1e-4, atol=1e-4)


def test_particle_reference_is_close_to_the_enumeration():
    """Canonical task (K = 3, 32 particles), 7 steps: exact while the 3^(t-1) histories fit (t <= 4), then within a
    mean squared difference of 3e-5 (measured at 8 steps: 2.4e-6 and 3.8e-6 on 128 sequences with two keys; the
    canonical L_trivial - L_ref is 3.2)."""
    task = make_task("switching")
    assert isinstance(task, SwitchingLGSSMTask) and not reference_is_exact(task)
    batch = task.sample(jax.random.key(7), 16, 7)
    assert batch.inputs.shape == batch.targets.shape == (16, 7, 2) and batch.aux.shape == (16, 8)
    np.testing.assert_array_equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    assert set(np.unique(batch.aux).tolist()) == {0, 1, 2}
    exact = jax.vmap(exact_predictive_mean, in_axes=(None, 0))(task, batch.inputs)
    base = jax.jit(baselines)(task, batch)
    particle = base.reference_outputs
    assert particle.shape == (16, 7, 2) and base.trivial.shape == (16, 7)
    np.testing.assert_allclose(particle[:, :4], exact[:, :4], rtol=1e-4, atol=1e-4)
    assert float(jnp.mean(jnp.sum((particle - exact) ** 2, -1))) < 3e-5
    assert float(task.loss(exact, batch).mean()) < 0.8 * float(base.trivial.mean())


def test_prior_moments_match_monte_carlo():
    """E[y_t], Cov(y_t) and Cov(y_{t+1}, y_t) at t = 1..5 against 40,000 sampled sequences: every entry within 5
    Monte-Carlo standard errors (estimated from the sample)."""
    task, n, L = _general_task(), 40_000, 5
    batch = task.sample(jax.random.key(0), n, L)
    ys = np.concatenate([np.asarray(batch.inputs, np.float64), np.asarray(batch.targets[:, -1:], np.float64)], 1)
    moments = prior_moments(task, L + 1)
    centred = ys - ys.mean(0)
    checks = [(ys, moments.y_mean), (np.einsum("nti,ntj->ntij", centred, centred), moments.y_cov),
              (np.einsum("nti,ntj->ntij", centred[:, 1:], centred[:, :-1]), moments.y_cross)]
    for samples, exact in checks:
        se = samples.std(0) / np.sqrt(n)
        assert np.max(np.abs(samples.mean(0) - np.asarray(exact)) / se) < 5.0


@pytest.mark.slow
def test_equal_modes_reduce_to_the_lgssm_task():
    lg = random_lgssm(0, 4, 2)
    stack = lambda X: jnp.stack([X] * 3)  # noqa: E731
    T = jnp.asarray([[0.9, 0.05, 0.1], [0.05, 0.9, 0.1], [0.05, 0.05, 0.8]], jnp.float32)
    task = SwitchingLGSSMTask(stack(lg.A), lg.C, stack(lg.Q), lg.R, lg.m0, lg.P0, T, jnp.full(3, 1 / 3))
    batch = task.sample(jax.random.key(1), 8, 20)
    np.testing.assert_allclose(task.reference(batch), lg.reference(batch), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(task.trivial(batch), lg.trivial(batch), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(exact_predictive_mean(task, batch.inputs[0, :5]), lg.reference(batch)[0, :5],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("D", [1, 3])
def test_fused_kalman_step_is_pissms(D):
    key = jax.random.key(D)
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    M = 4
    A, C = jax.random.normal(k1, (M, M)) / 2, jax.random.normal(k2, (D, M))
    X = jax.random.normal(k3, (M, M))
    cov, Q, R = X @ X.T + 0.1 * jnp.eye(M), 0.5 * jnp.eye(M), 0.2 * jnp.eye(D)
    mean, y = jax.random.normal(k4, (M,)), jax.random.normal(k5, (D,))
    fused = jax.jit(kalman_step_small)(mean, cov, y, A, Q, C, R)
    plain = jax.jit(lambda *a: update(*predict(*a[:4]), *a[4:]))(mean, cov, A, Q, y, C, R)
    for ours, pissms in zip(fused, plain, strict=True):
        np.testing.assert_allclose(ours, pissms, rtol=1e-4, atol=1e-4)


def test_optimal_resampling_keeps_large_weights_and_is_unbiased():
    w = jnp.asarray([0.5, 0.2, 0.1, 0.08, 0.06, 0.04, 0.02, 0.0])
    keys = jax.random.split(jax.random.key(0), 4000)
    index, new = jax.jit(jax.vmap(lambda k: optimal_resample(k, w, 4)))(keys)
    np.testing.assert_allclose(new.sum(1), 1.0, rtol=1e-5)
    # c = 2 / 0.3 solves sum min(c w, 1) = 4: 0.5 and 0.2 kept with their weights, two of the rest at 0.15 each
    assert np.all(np.any(np.asarray(index) == 0, 1) & np.any(np.asarray(index) == 1, 1))
    np.testing.assert_allclose(np.sort(np.asarray(new), 1), np.broadcast_to([0.15, 0.15, 0.2, 0.5], new.shape),
                               rtol=1e-5)
    mass = np.zeros((len(keys), len(w)))
    np.add.at(mass, (np.arange(len(keys))[:, None], np.asarray(index)), np.asarray(new))
    np.testing.assert_allclose(mass.mean(0), w, atol=4e-3)  # E[new weight of entry i] = w_i
    index, new = optimal_resample(keys[0], jnp.asarray([0.0, 0.6, 0.0, 0.4, 0.0, 0.0]), 3)  # 2 <= 3 positive
    assert np.asarray(index)[:2].tolist() == [1, 3]
    np.testing.assert_allclose(new, [0.6, 0.4, 0.0], rtol=1e-6)


@pytest.mark.slow
def test_a_tiny_training_run_has_finite_losses():
    task = make_task("switching")
    batch = task.sample(jax.random.key(0), 5, 12)
    train = make_train(task, "gru", 8, 1, TrainConfig(steps=4, batch=4, length=8, eval_every=2), batch)
    result = jax.jit(train)(jax.random.key(1))
    assert np.all(np.isfinite(result.train_loss)) and np.all(np.isfinite(result.val_loss))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_modes must be an int >= 2"):
        random_switching_lgssm(0, num_modes=1)
    with pytest.raises(ValueError, match="T must be column-stochastic"):
        SwitchingLGSSMTask(*(jnp.zeros(s) for s in ((2, 1, 1), (1, 1), (2, 1, 1), (1, 1), (1,), (1, 1), (2, 2))),
                           jnp.asarray([0.5, 0.5]))
    with pytest.raises(ValueError, match="enumerating 3\\^20 mode histories"):
        exact_predictive_mean(random_switching_lgssm(0), jnp.zeros((20, 2)))

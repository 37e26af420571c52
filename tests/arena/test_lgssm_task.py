"""The lgssm task's reference and trivial predictors against Gaussian conditioning on the joint law of y_{1:n}
(float64 NumPy, no Kalman recursion)."""

import jax
import numpy as np
import pytest

from memlab.arena.lgssm import LGSSMTask, random_lgssm
from memlab.arena.task import normalised_gap


def _joint(task, n):
    """Mean (n, D) and covariance (n, D, n, D) of y_1..y_n."""
    A, C, Q, R, m0, P0 = (np.asarray(a, np.float64) for a in (task.A, task.C, task.Q, task.R, task.m0, task.P0))
    D = C.shape[0]
    means, covs, mean, cov = [], [], m0, P0
    for _ in range(n):
        mean, cov = A @ mean, A @ cov @ A.T + Q
        means.append(mean)
        covs.append(cov)
    y_mean = np.array([C @ m for m in means])
    joint = np.zeros((n, D, n, D))
    for t in range(n):
        for u in range(t + 1):
            x_cov = np.linalg.matrix_power(A, t - u) @ covs[u]  # Cov(x_t, x_u), u <= t
            joint[t, :, u, :] = C @ x_cov @ C.T + (R if t == u else 0.0)
            joint[u, :, t, :] = joint[t, :, u, :].T
    return y_mean, joint


def _condition(y_mean, joint, ys, target, given):
    """E[y_target | y_given] by Gaussian conditioning."""
    D = y_mean.shape[1]
    flat = joint.reshape(len(y_mean) * D, -1)
    idx = [t * D + d for t in given for d in range(D)]
    tgt = [target * D + d for d in range(D)]
    gain = flat[np.ix_(tgt, idx)] @ np.linalg.inv(flat[np.ix_(idx, idx)])
    return y_mean[target] + gain @ (ys[given].ravel() - y_mean[given].ravel())


@pytest.mark.parametrize("task", [random_lgssm(0, 3, 2), random_lgssm(1, 2, 1, radius=0.5, noise=1.0)])
def test_reference_and_trivial_are_the_gaussian_conditional_means(task):
    L = 5
    batch = task.sample(jax.random.key(0), 2, L)
    reference, trivial = np.asarray(task.reference(batch)), np.asarray(task.trivial(batch))
    y_mean, joint = _joint(task, L + 1)
    for b in range(2):
        ys = np.concatenate([np.asarray(batch.inputs[b], np.float64), np.asarray(batch.targets[b, -1:])])
        for t in range(L):  # step t + 1 has read y_1..y_{t+1} and predicts y_{t+2} (index t + 1)
            np.testing.assert_allclose(reference[b, t], _condition(y_mean, joint, ys, t + 1, list(range(t + 1))),
                                       rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(trivial[b, t], _condition(y_mean, joint, ys, t + 1, [t]), rtol=1e-4,
                                       atol=1e-4)


def test_reference_beats_trivial_and_the_targets_are_the_next_inputs():
    task = random_lgssm(2, 4, 2)
    batch = task.sample(jax.random.key(1), 400, 32)
    np.testing.assert_array_equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    ref, triv = task.loss(task.reference(batch), batch), task.loss(task.trivial(batch), batch)
    assert float(ref.mean()) < 0.9 * float(triv.mean())
    assert float(normalised_gap(triv, ref, triv, batch.mask)) == pytest.approx(1.0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="radius must be a finite number in"):
        random_lgssm(0, 2, 2, radius=1.0)
    with pytest.raises(ValueError, match="batch must be an int >= 1"):
        random_lgssm(0, 2, 2).sample(jax.random.key(0), 0, 3)
    assert isinstance(random_lgssm(0, 2, 2), LGSSMTask)

"""The hmm task's reference and trivial predictors against brute-force enumeration (float64 NumPy), and the
reference's loss against an entropy rate computed in closed form."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.arena.hmm import HMMTask, mess3, random_hmm, two_state
from memlab.arena.task import Batch, normalised_gap
from memlab.belief import HMM


def _path_probabilities(hmm, ys):
    """p(y_1..y_n) for every prefix, by summing over all state paths x_0..x_n (float64)."""
    T, E, pi0 = (np.asarray(a, np.float64) for a in (hmm.T, hmm.E, hmm.pi0))
    N, n = len(pi0), len(ys)
    probs = np.zeros(n + 1)
    probs[0] = 1.0
    for k in range(1, n + 1):
        total = 0.0
        for path in itertools.product(range(N), repeat=k + 1):
            p = pi0[path[0]]
            for j in range(1, k + 1):
                p *= T[path[j], path[j - 1]] * E[ys[j - 1], path[j]]
            total += p
        probs[k] = total
    return probs


@pytest.mark.parametrize("hmm", [random_hmm(0, 3, 2), mess3(), two_state()], ids=["random", "mess3", "two-state"])
def test_reference_is_the_exact_predictive_distribution(hmm):
    task = HMMTask(hmm)
    batch = task.sample(jax.random.key(0), 3, 4)
    reference = np.asarray(task.reference(batch))
    S = hmm.num_obs
    for b in range(3):
        ys = list(np.asarray(batch.aux[b]))
        for t in range(1, 5):
            for s in range(S):
                p = _path_probabilities(hmm, ys[:t] + [s])
                np.testing.assert_allclose(np.exp(reference[b, t - 1, s]), p[t + 1] / p[t], rtol=2e-5)


def test_trivial_is_the_exact_one_step_conditional():
    hmm = random_hmm(1, 3, 3)
    task = HMMTask(hmm)
    batch = task.sample(jax.random.key(1), 2, 4)
    trivial = np.asarray(task.trivial(batch))
    T, E, pi0 = (np.asarray(a, np.float64) for a in (hmm.T, hmm.E, hmm.pi0))
    p = pi0
    for t in range(1, 5):
        p = T @ p  # p(x_t)
        joint = np.einsum("an,n,bn->ab", E, p, E @ T)
        for b in range(2):
            a = int(batch.aux[b, t - 1])
            np.testing.assert_allclose(np.exp(trivial[b, t - 1]), joint[a] / joint[a].sum(), rtol=1e-5)


def test_reference_loss_tends_to_the_entropy_rate_of_a_markov_chain():
    """Identity emissions make y a Markov chain started in its stationary law: its entropy rate is
    sum_x mu(x) H(T[:, x]) at every step, and the reference's expected cross-entropy must equal it."""
    T = np.array([[0.8, 0.3, 0.1], [0.15, 0.6, 0.3], [0.05, 0.1, 0.6]])
    values, vectors = np.linalg.eig(T)
    mu = np.real(vectors[:, np.argmin(np.abs(values - 1))])
    mu /= mu.sum()
    rate = -np.sum(mu * np.sum(T * np.log(T), axis=0))
    task = HMMTask(HMM(jnp.asarray(T, jnp.float32), jnp.eye(3), jnp.asarray(mu, jnp.float32)))
    batch = task.sample(jax.random.key(2), 2000, 32)
    loss = np.asarray(task.loss(task.reference(batch), batch))
    se = loss.mean(axis=1).std() / np.sqrt(loss.shape[0])
    assert abs(loss.mean() - rate) < 4 * se, (loss.mean(), rate, se)


def test_the_reference_beats_the_trivial_predictor_and_the_gap_is_normalised():
    task = HMMTask(mess3())
    batch = task.sample(jax.random.key(3), 500, 64)
    ref, triv = task.loss(task.reference(batch), batch), task.loss(task.trivial(batch), batch)
    assert float(ref.mean()) < float(triv.mean()) - 0.01
    assert float(normalised_gap(ref, ref, triv, batch.mask)) == 0.0
    assert float(normalised_gap(triv, ref, triv, batch.mask)) == pytest.approx(1.0)
    assert np.all(np.asarray(task.distance(task.reference(batch), task.reference(batch))) < 1e-6)


def test_sample_shapes_and_bad_sizes():
    task = HMMTask(random_hmm(0, 4, 5))
    batch = task.sample(jax.random.key(0), 3, 7)
    assert isinstance(batch, Batch)
    assert batch.inputs.shape == (3, 7, 5) and batch.targets.shape == (3, 7) and batch.mask.all()
    np.testing.assert_array_equal(np.argmax(batch.inputs[:, 1:], -1), batch.targets[:, :-1])
    with pytest.raises(ValueError, match="length must be an int >= 1"):
        task.sample(jax.random.key(0), 3, 0)
    with pytest.raises(ValueError, match="x must be a finite number in"):
        mess3(x=0.7)

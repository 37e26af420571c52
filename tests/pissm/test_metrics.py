"""pi-SSM metrics against independent NumPy / SciPy computations: the Gaussian log density (SciPy, broadcast
batches), the Monte-Carlo predictive log-likelihood (log-mean-exp per step, masked average), position MSE, dB,
the imputation mask (exact count, first step kept, uniform positions), and the mode-recovery metrics (counts,
persistence of relabelled / shuffled modes, Hungarian agreement against brute force); bad inputs raise ValueError."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import multivariate_normal

from memlab.pissm.metrics import (
    gaussian_log_density,
    imputation_mask,
    mode_agreement,
    mode_persistence,
    modes_in_use,
    position_mse,
    predictive_log_likelihood,
    to_db,
)


def spd(rng, n):
    B = rng.normal(size=(n, n))
    return B @ B.T / n + 0.3 * np.eye(n)


def test_gaussian_log_density_matches_scipy_with_broadcast_batches(x64):
    rng = np.random.default_rng(0)
    y = rng.normal(size=(5, 4, 3))
    mean = rng.normal(size=(4, 3))
    cov = np.stack([spd(rng, 3) for _ in range(5)])[:, None]  # (5, 1, 3, 3)
    out = np.asarray(gaussian_log_density(y, mean, cov))
    assert out.shape == (5, 4)
    expected = np.array([[multivariate_normal(mean[j], cov[i, 0]).logpdf(y[i, j]) for j in range(4)]
                         for i in range(5)])
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_predictive_log_likelihood_is_the_masked_mean_of_log_mean_exp(x64):
    rng = np.random.default_rng(1)
    S, B, T = 7, 3, 11
    ll = rng.normal(size=(S, B, T)) * 50 - 1000  # far below exp's range: needs log-sum-exp
    ll[2, 1, 4] = -np.inf  # one sample with zero predictive density must not give NaN
    mask = rng.random((B, T)) < 0.7
    mask[:, 0] = True
    out = np.asarray(predictive_log_likelihood(ll, mask))
    for b in range(B):
        values = []
        for t in np.flatnonzero(mask[b]):
            top = ll[:, b, t].max()
            values.append(top + np.log(np.mean(np.exp(ll[:, b, t] - top))))
        assert out[b] == pytest.approx(np.mean(values), rel=1e-12)
    # Jensen: never below the masked mean of the per-sample logs, which S = 1 gives exactly
    finite = rng.normal(size=(S, B, T))
    mean_of_logs = np.array([finite[:, b][:, mask[b]].mean() for b in range(B)])
    assert np.all(np.asarray(predictive_log_likelihood(finite, mask)) > mean_of_logs)
    one = np.asarray(predictive_log_likelihood(ll[:1], None))
    np.testing.assert_allclose(one, ll[0].mean(-1), rtol=1e-12)


def test_position_mse_averages_samples_first_then_steps_and_coordinates(x64):
    rng = np.random.default_rng(2)
    est = rng.normal(size=(4, 3, 6, 2))
    truth = rng.normal(size=(3, 6, 2))
    steps = rng.random((3, 6)) < 0.5
    steps[:, 0] = True
    out = np.asarray(position_mse(est, truth, steps))
    for b in range(3):
        err = est[:, b].mean(0)[steps[b]] - truth[b][steps[b]]
        assert out[b] == pytest.approx(np.mean(err**2), rel=1e-12)
    all_steps = np.asarray(position_mse(est, truth))
    np.testing.assert_allclose(all_steps, ((est.mean(0) - truth) ** 2).mean((1, 2)), rtol=1e-12)


def test_to_db():
    np.testing.assert_allclose(np.asarray(to_db(np.array([100.0, 0.01, 89.14]))),
                               [20.0, -20.0, 10 * np.log10(89.14)], rtol=1e-6)
    with pytest.raises(ValueError, match="mse must be >= 0"):
        to_db(-1.0)


@pytest.mark.parametrize("T, fraction, keep_first", [(80, 0.5, 1), (9, 0.5, 3), (10, 0.0, 1), (10, 1.0, 0)])
def test_imputation_mask_removes_exactly_the_fraction_and_keeps_the_first_steps(T, fraction, keep_first):
    mask = np.asarray(imputation_mask(jax.random.key(0), 500, T, fraction, keep_first))
    assert mask.shape == (500, T) and mask.dtype == bool
    removed = int(np.floor(fraction * T + 0.5))
    assert np.all((~mask).sum(1) == removed)
    assert np.all(mask[:, :keep_first])
    if 0 < removed < T - keep_first:
        patterns = math.comb(T - keep_first, removed)
        assert len({row.tobytes() for row in mask}) >= min(100, patterns)  # independent per sequence
        # uniform over the eligible steps: each is removed with probability removed / (T - keep_first)
        freq = (~mask[:, keep_first:]).mean(0)
        p = removed / (T - keep_first)
        assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / 500))


def test_imputation_mask_rejects_impossible_requests():
    with pytest.raises(ValueError, match="cannot remove"):
        imputation_mask(jax.random.key(0), 2, 10, 1.0, keep_first=1)
    with pytest.raises(ValueError, match="fraction"):
        imputation_mask(jax.random.key(0), 2, 10, 1.5)
    with pytest.raises(ValueError, match="num_steps"):
        imputation_mask(jax.random.key(0), 2, 0)


def test_modes_in_use_counts_modes_above_the_share_threshold():
    modes = np.repeat(np.arange(5), [500, 450, 45, 5, 0]).reshape(10, 100)  # shares .5, .45, .045, .005, 0
    assert modes_in_use(modes, 5) == 3
    assert modes_in_use(modes, 5, threshold=0.05) == 2
    assert modes_in_use(modes, 18, threshold=0.005) == 4
    assert modes_in_use(modes[None], 5) == 3  # any leading axes
    with pytest.raises(ValueError, match=r"modes must lie in \[0, 3\)"):
        modes_in_use(modes, 3)


def pong_like_truth(rng, B=20, T=80):
    """Piecewise-constant quadrant modes with random switch times, as between bounces."""
    truth = np.zeros((B, T), np.int64)
    for b in range(B):
        switches = np.sort(rng.choice(np.arange(1, T), 4, replace=False))
        truth[b] = np.cumsum(np.isin(np.arange(T), switches)) % 4
    return truth


def test_persistence_is_one_for_a_relabelling_and_below_one_for_shuffled_modes():
    rng = np.random.default_rng(3)
    truth = pong_like_truth(rng)
    relabel = np.array([7, 2, 11, 5])
    assert mode_persistence(relabel[truth], truth) == 1.0
    assert mode_agreement(relabel[truth], truth) == 1.0
    assert mode_persistence(np.stack([relabel[truth], relabel[::-1][truth]]), truth) == 1.0  # (S, B, T)
    shuffled = np.stack([rng.permutation(row) for row in relabel[truth]])
    assert mode_persistence(shuffled, truth) < 0.8
    assert mode_agreement(shuffled, truth) < 0.6


def test_persistence_by_hand_and_runs_of_a_recurring_true_mode_count_separately():
    truth = np.array([[0, 0, 0, 1, 1, 2, 2, 2, 2]])
    sampled = np.array([[5, 5, 3, 7, 7, 1, 1, 2, 1]])
    assert mode_persistence(sampled, truth) == pytest.approx((2 / 3 + 1 + 3 / 4) / 3)
    # true mode 0 in two separate intervals, sampled with different labels: each interval is consistent
    truth = np.array([[0, 0, 1, 1, 0, 0]])
    sampled = np.array([[3, 3, 2, 2, 4, 4]])
    assert mode_persistence(sampled, truth) == 1.0
    assert mode_agreement(sampled, truth) == pytest.approx(4 / 6)  # one label per true mode: 3 or 4, not both


@pytest.mark.parametrize("num_sampled, num_true", [(5, 3), (3, 4)])
def test_mode_agreement_equals_brute_force_over_one_to_one_relabellings(num_sampled, num_true):
    rng = np.random.default_rng(4)
    truth = rng.integers(0, num_true, (6, 30))
    sampled = np.where(rng.random(truth.shape) < 0.6, (truth + 1) % num_sampled, rng.integers(0, num_sampled,
                                                                                            truth.shape))
    confusion = np.zeros((num_sampled, num_true))
    np.add.at(confusion, (sampled.ravel(), truth.ravel()), 1)
    if num_sampled >= num_true:
        best = max(sum(confusion[p[k], k] for k in range(num_true))
                   for p in itertools.permutations(range(num_sampled), num_true))
    else:
        best = max(sum(confusion[k, p[k]] for k in range(num_sampled))
                   for p in itertools.permutations(range(num_true), num_sampled))
    assert mode_agreement(sampled, truth) == pytest.approx(best / truth.size)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: gaussian_log_density(np.zeros(3), np.zeros(2), np.eye(2)), "expected y"),
        (lambda: predictive_log_likelihood(np.zeros((3, 4))), r"\(S, B, T\)"),
        (lambda: predictive_log_likelihood(np.zeros((1, 2, 4)), np.ones((2, 4))), "mask must be a bool"),
        (lambda: predictive_log_likelihood(np.zeros((1, 2, 4)), np.eye(2, 4, 5, bool)), "selects no step"),
        (lambda: position_mse(np.zeros((2, 3, 4)), np.zeros((3, 4))), "expected estimates"),
        (lambda: mode_persistence(np.zeros((2, 4), int), np.zeros((3, 4), int)), "expected modes"),
        (lambda: mode_agreement(np.zeros((2, 4)), np.zeros((2, 4), int)), "integer"),
        (lambda: mode_persistence(-np.ones((2, 4), int), np.zeros((2, 4), int)), ">= 0"),
    ],
)
def test_bad_inputs_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_metrics_jit_where_they_are_jax():
    ll = jnp.zeros((2, 3, 4))
    assert jax.jit(predictive_log_likelihood)(ll, jnp.ones((3, 4), bool)).shape == (3,)
    assert jax.jit(position_mse)(jnp.zeros((2, 3, 4, 2)), jnp.ones((3, 4, 2))).shape == (3,)

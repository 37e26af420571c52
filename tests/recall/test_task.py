"""The recall-predict task generator (Def. 3.1, App. A.1) against independent NumPy recomputations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.recall.task import (
    A1_TAGS,
    RecallTask,
    baseline_mse,
    baseline_predictions,
    check_tags,
    content_pmf,
    degenerate_fraction,
    orthogonal_tags,
    sample,
    sample_context,
    scale_floor_mse,
)


@pytest.fixture(scope="module")
def batch():
    task = RecallTask(alpha=0.75, context_length=4000)
    return task, sample(jax.random.key(0), 64, task)


def test_shapes_and_a1_constants(batch):
    task, b = batch
    assert b.context_tags.shape == (64, 4000, 1) and b.context_content.shape == (64, 4000)
    assert b.pmf.shape == (64, 2, 32) and b.coeffs.shape == (64, 2, 16) and b.y.shape == (64,)
    np.testing.assert_allclose(task.eigenvalues, np.exp(-np.arange(16) ** 0.75))
    x = np.linspace(0, 1, 32)
    np.testing.assert_allclose(task.basis[0], 1.0)
    np.testing.assert_allclose(task.basis[3], np.sqrt(2) * np.sin(3 * np.pi * x), atol=1e-12)


def test_mass_functions_are_clamped_and_normalised(batch):
    task, b = batch
    pmf, coeffs = np.asarray(b.pmf, float), np.asarray(b.coeffs, float)
    assert np.all(coeffs[..., 0] == 0)  # constant coordinate set to zero
    assert np.all(pmf >= 0)
    np.testing.assert_allclose(pmf.sum(-1), 1.0, atol=1e-5)
    density = np.maximum((coeffs * task.eigenvalues) @ task.basis, 0.0)  # independent recomputation
    expected = np.where(density.sum(-1, keepdims=True) > 0, density / np.maximum(density.sum(-1, keepdims=True), 1e-30),
                        1 / 32)
    np.testing.assert_allclose(pmf, expected, atol=1e-5)


def test_degenerate_density_is_uniform():
    task = RecallTask(alpha=2.0)
    coeffs = np.zeros((1, 16), np.float32)
    coeffs[0, 1] = -1.0  # -lambda_1 sqrt(2) sin(pi x) <= 0 on the whole grid
    np.testing.assert_allclose(np.asarray(content_pmf(coeffs, task)), 1 / 32)
    assert 0.3 < degenerate_fraction(jax.random.key(0), task, 20_000) < 0.6  # alpha = 2: Z_1 < 0 is usually fatal
    assert degenerate_fraction(jax.random.key(0), RecallTask(alpha=0.5), 20_000) < 0.1


def test_density_is_exactly_zero_at_the_basis_nodes():
    """At x = 1, sin(pi j) is ~1e-16 in floating point; a density <= 0 on the rest of the grid must still give the
    uniform mass function, not a point mass at x = 1 from that residue."""
    task = RecallTask(alpha=2.0)
    assert np.all(task.basis[1:, 0] == 0) and np.all(task.basis[1:, -1] == 0)
    # f = -sin(pi x) - 0.502 sin(2 pi x) = sin(pi x) (-1 - 1.004 cos(pi x)) is > 0 only on (0.985, 1), between the
    # last two grid points, so it is <= 0 on the whole grid; its naive value at x = 1 is ~ +5e-19
    coeffs = np.zeros(16)
    coeffs[1:3] = np.array([-1.0, -0.502]) / (np.sqrt(2.0) * task.eigenvalues[1:3])
    j, x = np.arange(16)[:, None], task.grid[None, :]
    naive = coeffs * task.eigenvalues @ np.where(j == 0, 1.0, np.sqrt(2.0) * np.sin(np.pi * j * x))
    assert np.all(naive[:-1] <= 0) and naive[-1] > 0
    pmf = np.asarray(content_pmf(jnp.asarray(coeffs[None], jnp.float32), task))
    np.testing.assert_allclose(pmf, 1 / 32, rtol=1e-6)


def test_target_formula_and_noise(batch):
    task, b = batch
    coeffs = np.asarray(b.coeffs, float)[np.arange(64), np.asarray(b.queried)]
    expected = np.asarray(b.query[:, 0], float) * (task.eigenvalues * coeffs**2).sum(-1)
    np.testing.assert_allclose(np.asarray(b.y_clean), expected, rtol=1e-5)
    noise = np.asarray(b.y - b.y_clean, float)
    assert 0.006 < noise.std() < 0.014 and abs(noise.mean()) < 0.004
    # the query is the queried tag, the only tags in the context are +-1, both components appear half the time
    np.testing.assert_array_equal(np.asarray(b.query), A1_TAGS[np.asarray(b.queried)])
    assert set(np.unique(np.asarray(b.context_tags))) == {-1.0, 1.0}
    assert abs(float(np.mean(np.asarray(b.context_tags) == 1.0)) - 0.5) < 0.01


def test_context_tokens_follow_the_tagged_measures(batch):
    task, b = batch
    grid = task.grid
    for e in range(4):
        for i, tag in enumerate(A1_TAGS[:, 0]):
            content = np.asarray(b.context_content[e])[np.asarray(b.context_tags[e, :, 0]) == tag]
            counts = np.array([(np.abs(content - g) < 1e-6).sum() for g in grid], float)
            assert counts.sum() == len(content)  # every content value is a grid point
            expected = np.asarray(b.pmf[e, i], float) * len(content)
            # chi-square statistic over the cells with expected mass; 31 dof, 99.9% quantile ~ 61.1
            keep = expected > 0
            assert np.all(counts[~keep] == 0)
            chi2 = ((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum()
            assert chi2 < 61.1, chi2


def test_sample_context_uses_the_given_measure():
    task = RecallTask(grid_size=4)
    pmf = np.array([[1.0, 0, 0, 0], [0, 0, 0, 1.0]], np.float32)
    tags, content = sample_context(jax.random.key(3), pmf, np.asarray(A1_TAGS, np.float32), 500, task)
    tags, content = np.asarray(tags[:, 0]), np.asarray(content)
    assert np.all(content[tags == 1.0] == 0.0) and np.all(content[tags == -1.0] == 1.0)


def test_keys_make_independent_sets_and_same_key_repeats():
    task = RecallTask(context_length=10)
    a, b, c = sample(jax.random.key(1), 8, task), sample(jax.random.key(1), 8, task), sample(jax.random.key(2), 8, task)
    np.testing.assert_array_equal(np.asarray(a.y), np.asarray(b.y))
    assert not np.allclose(np.asarray(a.y), np.asarray(c.y))


def test_exact_baselines_match_monte_carlo():
    for alpha in (0.5, 1.0, 2.0):
        task = RecallTask(alpha=alpha, context_length=1)
        b = sample(jax.random.key(4), 40_000, task)
        y, q = np.asarray(b.y, float), np.asarray(b.query[:, 0], float)
        exact = baseline_mse(task)
        s_mean = task.eigenvalues[1:].sum()
        assert abs(np.mean(y**2) - exact["mean"]) < 0.03 * exact["mean"]
        assert abs(np.mean((y - q * s_mean) ** 2) - exact["tag_only"]) < 0.04 * exact["tag_only"]
        assert exact["tag_only"] < exact["mean"]
        predicted = baseline_predictions(b, task)  # the predictors the experiments score on their validation sets
        np.testing.assert_allclose(np.asarray(predicted["tag_only"]), q * s_mean, rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(predicted["mean"]), 0.0)  # A.1 tags: E[Y] = 0
    independent = RecallTask(context_length=1, query_dependent=False)
    b = sample(jax.random.key(5), 8, independent)
    np.testing.assert_allclose(np.asarray(baseline_predictions(b, independent)["tag_only"]),
                               independent.eigenvalues[1:].sum(), rtol=1e-6)


def test_scale_floor_is_attained_by_the_direction_predictor_and_equals_tag_only_for_flat_spectra():
    """The floor is E Var(Y | u, q): the predictor E[Y | u, q] = q E|Z|^2 s(u) must attain it (fresh draws), and with
    equal eigenvalues the direction carries nothing (s(u) = lambda), so the floor is the tag-only risk."""
    task = RecallTask(alpha=1.0, context_length=1)
    floor = scale_floor_mse(task, num_draws=400_000)
    rng = np.random.default_rng(1)
    Z = rng.standard_normal((400_000, 15))
    S = (Z**2) @ task.eigenvalues[1:]
    q = rng.choice([-1.0, 1.0], size=len(Z))
    y = q * S + task.noise_std * rng.standard_normal(len(Z))
    direction_predictor = q * 15 * ((Z**2 / (Z**2).sum(1, keepdims=True)) @ task.eigenvalues[1:])
    assert np.mean((y - direction_predictor) ** 2) == pytest.approx(floor, rel=0.02)
    assert floor < 0.3 * baseline_mse(task)["tag_only"]
    flat = RecallTask(alpha=1e-9, context_length=1)  # lambda_j = exp(-1) for every j >= 1
    assert scale_floor_mse(flat, num_draws=10_000) == pytest.approx(baseline_mse(flat)["tag_only"], rel=1e-6)


def test_tag_checks():
    check_tags(A1_TAGS)
    check_tags(orthogonal_tags(3, 4), strict=True)
    with pytest.raises(ValueError, match="I <= d_1"):
        check_tags(A1_TAGS, strict=True)  # A.1 has I = 2 > d_1 = 1 (see module docstring)
    with pytest.raises(ValueError, match="inner product"):
        check_tags([[1.0, 0.0], [np.sqrt(0.5), np.sqrt(0.5)]])
    with pytest.raises(ValueError, match="unit sphere"):
        check_tags([[2.0], [-1.0]])
    with pytest.raises(ValueError, match="orthogonal tags"):
        orthogonal_tags(3, 2)


def test_general_tags_and_query_independent_target():
    task = RecallTask(tags=tuple(map(tuple, orthogonal_tags(3, 3))), query_dependent=False, context_length=50)
    b = sample(jax.random.key(5), 16, task)
    assert b.context_tags.shape == (16, 50, 3) and b.pmf.shape == (16, 3, 32)
    coeffs = np.asarray(b.coeffs, float)[np.arange(16), np.asarray(b.queried)]
    np.testing.assert_allclose(np.asarray(b.y_clean), (task.eigenvalues * coeffs**2).sum(-1), rtol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(alpha=0.0), "alpha"), (dict(alpha=float("nan")), "alpha"), (dict(context_length=0), "context_length"),
    (dict(num_coeffs=1), "num_coeffs"), (dict(grid_size=2.5), "grid_size"), (dict(noise_std=-1.0), "noise_std"),
    (dict(tags=((1.0,), (1.0,))), "inner product"),
])
def test_bad_task_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RecallTask(**kwargs)


def test_bad_sample_size_rejected():
    with pytest.raises(ValueError, match="number of examples"):
        sample(jax.random.key(0), 0, RecallTask())


def test_alphas_share_the_gaussian_draws_and_each_uses_its_own_eigenvalues():
    """sample() passes alpha's eigenvalues as an argument (one compiled sampler for every alpha): same key, same Z."""
    tasks = [RecallTask(alpha=a, context_length=6) for a in (0.5, 2.0)]
    a, b = (sample(jax.random.key(7), 5, task) for task in tasks)
    np.testing.assert_array_equal(np.asarray(a.coeffs), np.asarray(b.coeffs))
    for task, batch in zip(tasks, (a, b)):
        np.testing.assert_array_equal(np.asarray(batch.pmf), np.asarray(content_pmf(batch.coeffs, task)))
    assert not np.allclose(np.asarray(a.y_clean), np.asarray(b.y_clean))

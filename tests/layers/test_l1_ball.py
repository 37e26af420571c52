"""l1-ball projection against an independent float64 solver (bisection on the soft threshold tau) and the
variational characterisation of a Euclidean projection onto a convex set."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.layers.l1_ball import project_l1_ball, project_rows_l1


def bisection_projection(v: np.ndarray, radius: float) -> np.ndarray:
    """Soft threshold at the tau in [0, max|v|] where sum max(|v| - tau, 0) = radius (found by bisection)."""
    a = np.abs(v)
    if a.sum() <= radius:
        return v.copy()
    lo, hi = 0.0, a.max()
    for _ in range(200):
        tau = 0.5 * (lo + hi)
        lo, hi = (tau, hi) if np.maximum(a - tau, 0).sum() > radius else (lo, tau)
    return np.sign(v) * np.maximum(a - 0.5 * (lo + hi), 0)


def random_vector(rng, d):
    v = rng.standard_normal(d) * rng.choice([0.1, 1.0, 10.0])
    if d > 3:  # ties and exact zeros, where sort-based thresholds go wrong first
        v[1] = v[0]
        v[2] = -v[0]
        v[3] = 0.0
    return v


@pytest.mark.parametrize("d", [1, 2, 3, 7, 50, 257])
def test_projection_equals_bisection_solver_and_is_the_euclidean_projection(x64, d):
    rng = np.random.default_rng(d)
    for _ in range(5):
        v = random_vector(rng, d)
        for radius in [1e-3, 0.3, 1.0, 0.5 * np.abs(v).sum(), 0.999 * np.abs(v).sum()]:
            p = np.asarray(project_l1_ball(jnp.asarray(v), radius))
            np.testing.assert_allclose(p, bisection_projection(v, radius), atol=1e-10, rtol=0)
            assert np.abs(p).sum() <= radius + 1e-13 * np.abs(v).sum()  # up to rounding in tau
            # p is the projection iff <v - p, w - p> <= 0 for every w in the ball; the max over w of <v - p, w>
            # is radius ||v - p||_inf
            r = v - p
            assert radius * np.abs(r).max() <= r @ p + 1e-10


def test_points_inside_or_on_the_ball_are_returned_exactly(x64):
    rng = np.random.default_rng(0)
    for d in [1, 5, 40]:
        v = rng.standard_normal(d)
        norm = np.abs(v).sum()
        for radius in [norm, 1.5 * norm, 100.0 * norm]:
            assert np.array_equal(np.asarray(project_l1_ball(jnp.asarray(v), radius)), v)


def test_float32_projection_lands_on_the_sphere():
    v = jax.random.normal(jax.random.key(0), (64,)) * 3
    p = project_l1_ball(v, 2.0)
    assert p.dtype == jnp.float32
    np.testing.assert_allclose(float(jnp.abs(p).sum()), 2.0, rtol=1e-5)


def test_rows_are_projected_independently_and_rows_inside_are_untouched(x64):
    rng = np.random.default_rng(1)
    U = rng.standard_normal((9, 6)) * 2
    U[[0, 4]] *= 0.05  # these rows are inside the ball
    radius = 1.5
    P = np.asarray(project_rows_l1(jnp.asarray(U), radius))
    for i in range(U.shape[0]):
        np.testing.assert_allclose(P[i], bisection_projection(U[i], radius), atol=1e-10, rtol=0)
    assert np.array_equal(P[[0, 4]], U[[0, 4]])
    assert np.abs(P).sum(axis=1).max() <= radius * (1 + 1e-12)  # ||P||_inf <= radius
    np.testing.assert_allclose(np.abs(P).sum(axis=1)[[1, 2, 3]], radius, rtol=1e-12)


def test_jit_with_traced_radius_and_gradient():
    v = jnp.array([3.0, -1.0, 0.5, 0.0])
    p = jax.jit(project_l1_ball)(v, 2.0)
    np.testing.assert_allclose(p, [2.0, 0.0, 0.0, 0.0], atol=1e-6)
    # on the sphere with one active entry, the projection is v_0 - tau and tau = |v_0| - radius: d p_0 / d v_0 = 0
    g = jax.grad(lambda x: project_l1_ball(x, 2.0)[0])(v)
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, [0.0, 0.0, 0.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("radius", [0.0, -1.0, float("nan"), float("inf"), np.ones(2)])
def test_bad_radius_raises(radius):
    with pytest.raises(ValueError, match="radius"):
        project_l1_ball(jnp.ones(3), radius)
    with pytest.raises(ValueError, match="radius"):
        project_rows_l1(jnp.ones((2, 3)), radius)


def test_bad_shapes_and_dtypes_raise():
    with pytest.raises(ValueError, match="1-D"):
        project_l1_ball(jnp.ones((2, 3)), 1.0)
    with pytest.raises(ValueError, match="1-D"):
        project_l1_ball(jnp.ones(0), 1.0)
    with pytest.raises(ValueError, match="float"):
        project_l1_ball(jnp.arange(3), 1.0)
    with pytest.raises(ValueError, match="2-D"):
        project_rows_l1(jnp.ones(3), 1.0)

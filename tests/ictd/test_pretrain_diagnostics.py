"""Diagnostics of the pretraining experiments (experiments/diagnostics.py) and the block heatmap
(experiments/setting_figures.py) against plain references."""

from __future__ import annotations

import numpy as np

from memlab.ictd.emergence import a_emergence
from memlab.ictd.experiments.diagnostics import (
    binned_by_dt,
    diagonal_share,
    emergence_along_dt,
    majority_pattern,
    sign_pattern,
    trailing_mean,
    truncated_mean_sem,
)
from memlab.ictd.experiments.setting import View
from memlab.ictd.experiments.setting_figures import plot_blocks, plot_trajectories
from memlab.ictd.transformer import theta_star

# --------------------------------------------------------------------------- numbers behind the figures


def test_trailing_mean_matches_a_loop():
    x = np.random.default_rng(0).normal(size=(3, 23))
    for window in (1, 4, 50):
        ref = np.array([[x[s, max(0, t - window + 1) : t + 1].mean() for t in range(23)] for s in range(3)])
        np.testing.assert_allclose(trailing_mean(x, window), ref, atol=1e-12)


def test_truncated_mean_sem_counts_only_seeds_that_reach_the_step():
    x = np.array([[1.0, 2.0, 3.0, 4.0], [3.0, 4.0, 5.0, 6.0], [5.0, 9.0, 9.0, 9.0]])
    mean, sem, count = truncated_mean_sem(x, np.array([3, 1, 0]))
    np.testing.assert_array_equal(count, [3, 2, 1, 1])
    np.testing.assert_allclose(mean, [3.0, 3.0, 3.0, 4.0])
    np.testing.assert_allclose(sem, [np.std([1, 3, 5], ddof=1) / np.sqrt(3), np.std([2, 4], ddof=1) / np.sqrt(2), 0, 0])


def test_binned_by_dt_matches_a_loop_over_bins():
    rng = np.random.default_rng(1)
    d_t = rng.uniform(0.03, 0.11, size=(4, 200))
    V = rng.uniform(size=(4, 200))
    b = binned_by_dt(d_t, V, 5)
    edges = np.linspace(d_t.min(), d_t.max(), 6)
    np.testing.assert_allclose(b.edges, edges)
    for i in range(5):
        inside = (d_t >= edges[i]) & ((d_t < edges[i + 1]) if i < 4 else (d_t <= edges[i + 1]))
        assert b.count[i] == inside.sum()
        np.testing.assert_allclose(b.mean[i], V[inside].mean())
        per_seed = [V[s][inside[s]].mean() for s in range(4)]
        np.testing.assert_allclose([b.q25[i], b.q75[i]], np.percentile(per_seed, [25, 75]))
    assert b.count.sum() == d_t.size


def test_diagonal_share_is_the_a_emergence_diagonality_and_sign_agnostic():
    rng = np.random.default_rng(2)
    A = np.zeros((7, 7))
    A[:4, :4] = 0.1 * rng.normal(size=(4, 4))
    np.fill_diagonal(A[:4, :4], 0.9)  # equal positive diagonal: C_A = 1, so A_em = A_diag (eq. 111)
    np.testing.assert_allclose(diagonal_share(A), float(a_emergence(A)), rtol=1e-5)
    np.testing.assert_allclose(diagonal_share(-A), diagonal_share(A))
    B = A.copy()
    B[0, 0] = 1.0  # unequal diagonal: C_A of -B divides by eps (m_A < 0) and vanishes, A_diag does not care
    assert float(a_emergence(-B)) == 0.0 and diagonal_share(-B) == diagonal_share(B) > 0.5
    assert diagonal_share(np.asarray(theta_star(4)[1])) == 1.0
    assert diagonal_share(np.zeros((7, 7))) == 0.0
    np.testing.assert_allclose(diagonal_share(np.stack([A, -A, np.asarray(theta_star(4)[1])])),
                               [diagonal_share(A)] * 2 + [1.0])


def test_sign_pattern():
    assert sign_pattern(np.array([1.0, 2.0, -0.5])) == "(+, +, −)"
    assert sign_pattern(np.array([-1.0, 0.0, 3.0])) == "(−, 0, +)"
    assert majority_pattern(np.array([[1.0, 1, -1], [-1, -1, 1], [2, 3, -4]])) == ("(+, +, −)", 2)


def _view(d_t, V, A, n=10):
    return View("synthetic", V, A, d_t, np.full(d_t.shape[0], d_t.shape[1] - 1), n)


def test_dt_claim_rule_follows_the_direction_of_training():
    """V rising late along the d_t path passes the 'V rises after intermediate d_t' rule; V high at once fails."""
    T = 300
    d_t = np.tile(np.linspace(0.1, 0.04, T), (3, 1))  # d_t falls during training (the mirrored solution)
    late = np.tile((np.arange(T) > 200).astype(float), (3, 1))
    ones = np.ones((3, T))
    a = emergence_along_dt(_view(d_t, late, ones), 20, 0.1, 0.04)
    assert a.direction == -1 and a.A_high_fraction == 1.0
    assert a.V_first_third == 0.0 and a.V_last_third_max == 1.0
    b = emergence_along_dt(_view(d_t, ones, 0 * ones), 20, 0.1, 0.04)
    assert b.V_first_third == 1.0 and b.A_high_fraction == 0.0
    early = late[:, ::-1]  # d_t rising 0.04 -> 0.1 and V high at the start (low d_t): V did not wait for d_t
    rising = emergence_along_dt(_view(d_t[:, ::-1], early, ones), 20, 0.04, 0.1)
    assert rising.direction == 1 and rising.V_first_third == 1.0


def test_block_heatmap_is_the_seed_mean_scaled_by_its_max():
    V, A = (np.asarray(x) for x in theta_star(4))
    Vs = np.stack([2 * V, 4 * V])  # seed mean 3 V*, scaled back to V*
    fig = plot_blocks([("θ*", Vs, np.stack([A, A]))])
    images = [ax.images[0].get_array() for ax in fig.axes if ax.images]
    np.testing.assert_allclose(images[0], V)
    np.testing.assert_allclose(images[1], A)


def test_trajectories_average_the_seeds_that_reach_each_step_and_draw_d_t_once_per_setting():
    rng = np.random.default_rng(0)
    S, T, stop = 3, 12, np.array([11, 5, 8])
    V, A, d = rng.uniform(size=(3, S, T))
    views = [View(f"m{c}: scores", V, A, d, stop, 10) for c in range(2)]
    fig = plot_trajectories([[views[0], views[1]], [views[0], views[1]]], window=1)  # 2 forms x 2 settings
    axes = np.array(fig.axes).reshape(3, 2)
    assert [ax.get_ylabel() for ax in axes[:, 0]] == ["score", "score", "$d_t$"]  # d_t once per column
    solid, pale = axes[0, 0].lines[:2]  # V_em: while at least half the seeds are in the mean, then the pale rest
    reference = [V[stop >= t, t].mean() for t in range(T)]  # the seeds that reach step t
    x, y = solid.get_xydata().T
    np.testing.assert_array_equal(np.flatnonzero(np.isfinite(x)), np.arange(9))  # 2 or 3 of 3 seeds: steps 0..8
    np.testing.assert_allclose(y[:9], reference[:9])
    x, y = pale.get_xydata().T
    np.testing.assert_array_equal(np.flatnonzero(np.isfinite(x)), np.arange(8, 12))  # joined at step 8
    np.testing.assert_allclose(y[8:], reference[8:])
    share = axes[0, 0].lines[-1].get_ydata()
    np.testing.assert_allclose(share, [(stop >= t).mean() for t in range(T)])
    np.testing.assert_allclose(axes[2, 0].lines[0].get_ydata(), d.mean(0))  # d_t untruncated, every seed

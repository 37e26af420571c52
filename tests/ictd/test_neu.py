"""NEU of the looped block (neu.py) and the ictd.neu experiment (experiments/neu.py).

The reference for v_L is written independently of transformer.py: the layer recursion of eq. (84) on trajectory
positions, v_{l+1}(S_j) = v_l(S_j) + sum_k [u1 R_k + u2 gamma v_l(S_k) + u3 v_l(S_{k-1})] K~(S_{k-1}, S_j) with
K~ the column softmax of x_i^T B x_j over the n context sources, in NumPy float64; its gradient is taken by
central finite differences.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.catalog import EXPERIMENTS
from memlab.ictd import transformer
from memlab.ictd.experiments.neu import NEUConfig, analyse, neu_cell
from memlab.ictd.mrp import sample_trajectory
from memlab.ictd.neu import (
    POINT_LABELS,
    comparison_points,
    estimator_statistics,
    flatten_theta,
    looped_params,
    neu,
    num_params,
    sample_tasks,
    summarize,
    td_update_direction,
    theta_star_looped,
    unflatten_theta,
    update_samples,
)
from memlab.ictd.random_tasks import random_task
from memlab.store import typed_result


def reference_value(theta: np.ndarray, feats: np.ndarray, rewards: np.ndarray, gamma: float, L: int) -> float:
    """v_L at the query (last position) by eq. (84), NumPy float64; theta = (u, B.ravel())."""
    d = feats.shape[1]
    u, B = theta[:3], theta[3:].reshape(d, d)
    n = len(rewards)
    scores = feats @ B @ feats.T  # [i, j] = x_i^T B x_j: source i, target j
    ctx = scores[:n] - scores[:n].max(axis=0)
    K = np.exp(ctx) / np.exp(ctx).sum(axis=0)  # (n, n+1), softmax over the context sources, eq. (12)
    v = np.zeros(n + 1)
    for _ in range(L):
        coef = u[0] * rewards + u[1] * gamma * v[1:] + u[2] * v[:-1]  # per transition k = 1..n
        v = v + coef @ K
    return float(v[-1])


def reference_direction(theta, task, key, L: int, n: int, tower: bool, h: float = 1e-6) -> np.ndarray:
    """delta_L * grad v_L(S_n) (eq. 30) from the reference, with a finite-difference gradient."""
    states, rewards = (np.asarray(a) for a in sample_trajectory(task.mrp, key, n + 1, stationary=True))
    X, P, gamma = np.asarray(task.features), np.asarray(task.mrp.P), float(task.mrp.gamma)
    feats = X[states]
    theta = np.asarray(theta, np.float64)
    v_now = reference_value(theta, feats[: n + 1], rewards[:n], gamma, L)

    def v_next(s):
        shifted = np.concatenate([feats[1: n + 1], X[s][None]])
        return reference_value(theta, shifted, rewards[1:], gamma, L)

    if tower:
        next_value = sum(P[states[n], s] * v_next(s) for s in range(X.shape[0]))
    else:
        next_value = v_next(states[n + 1])
    delta = rewards[n] + gamma * next_value - v_now
    grad = np.zeros_like(theta)
    for i in range(len(theta)):
        e = np.zeros_like(theta)
        e[i] = h
        grad[i] = (reference_value(theta + e, feats[: n + 1], rewards[:n], gamma, L)
                   - reference_value(theta - e, feats[: n + 1], rewards[:n], gamma, L)) / (2 * h)
    return delta * grad


def _tiny_tasks(seed: int):
    """8 tasks + trajectory keys exactly as the tiny profile draws them (m = d = 3, gamma = 0.5, c = 3, float32),
    so that the tests and the end-to-end run share compiled functions (compiling dominates these tests)."""
    tiny = EXPERIMENTS["ictd.neu"].profiles["tiny"]
    return sample_tasks(jax.random.key(seed), tiny.num_samples, tiny.m, tiny.d, tiny.gamma, tiny.feature_scale,
                         tiny.num_actions)


def _stack(tasks):
    return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *tasks)


def _off_star_point(d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    u = np.array([1.0, 1.0, -1.0]) + 0.3 * rng.standard_normal(3)
    B = np.eye(d) + 0.3 * rng.standard_normal((d, d))
    return u, B


# ---------------------------------------------------------------- the parameter space


@pytest.mark.parametrize("d", [1, 3, 6])
def test_theta_star_lies_in_the_looped_space(d):
    V, A = looped_params(*theta_star_looped(d))
    V_star, A_star = transformer.theta_star(d)
    np.testing.assert_array_equal(np.asarray(V), np.asarray(V_star))
    np.testing.assert_array_equal(np.asarray(A), np.asarray(A_star))


def test_looped_params_structure_and_flat_order():
    d = 4
    u, B = _off_star_point(d, seed=1)
    V, A = (np.asarray(a) for a in looped_params(jnp.asarray(u, jnp.float32), jnp.asarray(B, jnp.float32)))
    expected_V = np.zeros((d + 3, d + 3), np.float32)
    expected_V[-1, d:] = u
    expected_A = np.zeros((d + 3, d + 3), np.float32)
    expected_A[:d, :d] = B
    np.testing.assert_allclose(V, expected_V, rtol=1e-6)
    np.testing.assert_allclose(A, expected_A, rtol=1e-6)
    theta = np.asarray(flatten_theta(u, B))
    assert theta.shape == (num_params(d),) == (d * d + 3,)
    np.testing.assert_allclose(theta[:3], u, rtol=1e-6)
    np.testing.assert_allclose(theta[3 + d * 1 + 2], B[1, 2], rtol=1e-6)  # entry 3 + d i + j is B[i, j]
    u2, B2 = unflatten_theta(theta, d)
    np.testing.assert_allclose(np.asarray(u2), u, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(B2), B, rtol=1e-6)


# ---------------------------------------------------------------- the update direction against the reference


@pytest.mark.parametrize("tower", [False, True])
def test_update_direction_matches_reference_with_finite_differences(x64, tower):
    m, d, n, L = 3, 3, 7, 3
    task = random_task(jax.random.key(4), m, d, 0.6, feature_scale=1.5)
    u, B = _off_star_point(d, seed=2)
    key = jax.random.key(11)
    ours = np.asarray(td_update_direction(u, B, task, key, L, n, tower=tower))
    ref = reference_direction(flatten_theta(u, B), task, key, L, n, tower)
    assert np.abs(ref).max() > 1e-3, "a non-trivial direction"
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-8)


def test_batched_samples_match_the_one_depth_definition(x64):
    """update_samples reads every depth out of one pass: depth l equals td_update_direction with L = l (same sizes
    as the finite-difference test, so its compiled functions are reused)."""
    m, d, n, L = 3, 3, 7, 3
    keys = jax.random.split(jax.random.key(5), 8)
    tasks = _stack([random_task(k, m, d, 0.6, feature_scale=1.5) for k in keys[:4]])
    u, B = _off_star_point(d, seed=3)
    tower, plain = (np.asarray(a) for a in update_samples(u, B, tasks, keys[4:], L, n, batch_size=2))
    assert tower.shape == plain.shape == (4, L, d * d + 3)
    task1 = jax.tree_util.tree_map(lambda a: a[1], tasks)
    np.testing.assert_allclose(tower[1, -1], np.asarray(td_update_direction(u, B, task1, keys[5], L, n)),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(plain[1, -1], np.asarray(td_update_direction(u, B, task1, keys[5], L, n, tower=False)),
                               rtol=1e-9, atol=1e-12)
    theta = flatten_theta(u, B)
    for depth in (1, 2):  # the shallower read-outs, against the reference
        np.testing.assert_allclose(tower[1, depth - 1], reference_direction(theta, task1, keys[5], depth, n, True),
                                   rtol=1e-6, atol=1e-8)

    # NEU of these samples: J >= 0 and J <= E||X||_1 (Jensen), at theta* and off it; ``neu`` = summarize(samples)
    for point in (theta_star_looped(d), (u, B)):
        est = neu(*point, tasks, keys[4:], L, n, batch_size=2)
        assert est.J.shape == (L,) and est.mean.shape == (L, d * d + 3) and est.num_samples == 4
        assert np.all(est.J >= 0) and np.all(est.noise_floor >= 0)
        assert np.all(est.J <= est.abs_mean + 1e-12)
    np.testing.assert_allclose(est.J, summarize(tower).J, rtol=1e-12)


def test_tower_estimator_agrees_with_the_plain_estimator_and_has_less_variance():
    """Same mean within Monte-Carlo error (fixed seed): the tower property of App. E.4, on the tiny task family
    (2000 fresh (task, trajectory) pairs in batches of the tiny profile's size, n = 8, L = 3)."""
    tiny = EXPERIMENTS["ictd.neu"].profiles["tiny"]
    L, n = tiny.num_layers, tiny.contexts[0]
    batches = [update_samples(*theta_star_looped(tiny.d), *_tiny_tasks(seed), L, n, tiny.batch_size)
               for seed in range(250)]
    tower = np.concatenate([np.asarray(t, np.float64) for t, _ in batches])
    plain = np.concatenate([np.asarray(p, np.float64) for _, p in batches])
    N = tower.shape[0]
    diff = plain - tower
    se = diff.std(axis=0, ddof=1) / np.sqrt(N)
    mean = diff.mean(axis=0)
    assert np.all(mean[se == 0] == 0)  # e.g. grad_u2 v_1 = grad_u3 v_1 = 0 (v_0 = 0): no difference there
    z = np.abs(mean[se > 0]) / se[se > 0]
    assert z.size >= 30 and z.max() < 4.0, z.max()  # ~34 tests: Bonferroni 1% family-wise is 3.6
    var_tower, var_plain = tower.var(axis=0).sum(), plain.var(axis=0).sum()
    assert var_tower < 0.95 * var_plain, (var_tower, var_plain)  # Rao-Blackwell: conditioning cannot add variance
    est_t, est_p = summarize(tower), summarize(plain)
    assert np.all(est_t.J >= 0) and np.all(est_t.J <= est_t.abs_mean)
    gap = np.abs(est_t.J - est_p.J)
    assert np.all(gap <= 4 * (est_t.J_se + est_p.J_se) + est_p.noise_floor), (est_t.J, est_p.J)


# ---------------------------------------------------------------- the Monte-Carlo statistics


def test_noise_floor_and_split_half_are_calibrated_when_the_mean_is_zero():
    """With E[X] = 0, E[J-hat] is the noise floor sqrt(2/pi) ||se||_1 and the split-half estimate averages 0."""
    rng = np.random.default_rng(0)
    scales = rng.uniform(0.5, 2.0, size=20)
    reps = [summarize(rng.standard_normal((200, 1, 20)) * scales) for _ in range(400)]
    J = np.array([r.J[0] for r in reps])
    floor = np.array([r.noise_floor[0] for r in reps])
    split = np.array([r.J_split[0] for r in reps])
    assert J.mean() == pytest.approx(floor.mean(), rel=0.03)
    assert abs(split.mean()) < 3 * split.std() / np.sqrt(len(split))


def test_standard_error_of_J_matches_replicates_when_the_mean_is_large():
    rng = np.random.default_rng(1)
    mu = np.array([1.0, -2.0, 0.5])
    reps = [summarize(mu + rng.standard_normal((400, 1, 3))) for _ in range(300)]
    J = np.array([r.J[0] for r in reps])
    assert J.mean() == pytest.approx(np.abs(mu).sum(), abs=3 * J.std() / np.sqrt(len(J)))
    assert np.mean([r.J_se[0] for r in reps]) == pytest.approx(J.std(), rel=0.15)
    assert np.mean([r.J_split[0] for r in reps]) == pytest.approx(np.abs(mu).sum(), rel=0.02)


# ---------------------------------------------------------------- bad inputs


def test_bad_inputs_raise_value_errors():
    d = 3
    u, B = theta_star_looped(d)
    tasks, keys = _tiny_tasks(0)
    task = jax.tree_util.tree_map(lambda a: a[0], tasks)
    with pytest.raises(ValueError, match="u must have shape"):
        looped_params(jnp.ones(2), B)
    with pytest.raises(ValueError, match="square"):
        looped_params(u, jnp.ones((3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        looped_params(u, B.at[0, 0].set(jnp.nan))
    with pytest.raises(ValueError, match="theta must have shape"):
        unflatten_theta(jnp.ones(10), d)
    with pytest.raises(ValueError, match="feature dimension"):
        theta_star_looped(0)
    with pytest.raises(ValueError, match="num_layers"):
        td_update_direction(u, B, task, keys[0], 0, 5)
    with pytest.raises(ValueError, match="n must be"):
        td_update_direction(u, B, task, keys[0], 2, 0)
    with pytest.raises(ValueError, match="task features"):
        td_update_direction(*theta_star_looped(4), task, keys[0], 2, 5)
    with pytest.raises(ValueError, match="one key per task"):
        update_samples(u, B, tasks, keys[:1], 2, 5)
    with pytest.raises(ValueError, match="depths"):
        update_samples(u, B, tasks, keys, 2, 5, depths=(2, 1))
    with pytest.raises(ValueError, match="N >= 4"):
        summarize(np.zeros((3, 1, 2)))
    with pytest.raises(ValueError, match="NaN or inf"):
        summarize(np.full((5, 1, 2), np.nan))


@pytest.mark.parametrize("change, match", [
    ({"contexts": (50, 20)}, "contexts"), ({"contexts": (20,)}, "contexts"), ({"gamma": 1.0}, "gamma"),
    ({"d": 2}, "d must be an int >= 5"), ({"num_samples": 2}, ">= 4"), ({"num_layers": 1}, "num_layers"),
    ({"slow_layers": -1}, "slow_layers"), ({"perturbation": 0.0}, "perturbation"), ({"feature_scale": -1.0}, "feature"),
])
def test_config_validation_names_the_problem(change, match):
    import dataclasses

    with pytest.raises(ValueError, match=match):
        dataclasses.replace(NEUConfig(), **change).validate()


# ---------------------------------------------------------------- the experiment end to end


def test_tiny_profile_end_to_end_and_resume(tmp_path, check_tiny_run):
    exp = EXPERIMENTS["ictd.neu"]
    assert exp.name == "ictd.neu" and {"tiny", "quick", "paper"} <= set(exp.profiles)
    for profile in exp.profiles.values():
        profile.validate()
    run = check_tiny_run(exp.name, tmp_path)  # through the CLI and resumed (conftest.check_tiny_run)
    out, first, again = run.out, run.first, run.again
    assert first["blank_panels"] == []  # no figure panel without data and a word of why
    claims = first["claims"]
    assert len(claims) >= 6
    for claim in claims:
        assert {"id", "claim", "paper", "ours", "holds", "status"} <= set(claim) and isinstance(claim["holds"], bool)
    summary = (out / "summary.md").read_text()
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["neu_slow_discount.png", "neu_vs_context.png", "neu_vs_depth.png"]
    assert all(f"]({p})" in summary for p in pngs), "every figure is embedded in the summary"
    rows = (out / "neu.csv").read_text().strip().splitlines()
    config = exp.profiles["tiny"]
    assert len(rows) == 1 + config.num_layers * (len(config.contexts) + 6) + len(config.slow_depths)
    results = first["results"]
    num_cells = len(config.contexts) + 6 + 1  # theta* per n, the 6 other points at n_max, the slow discount
    assert first["cells"]["computed"] == num_cells and first["cells"]["resumed"] == 0
    assert all(np.all(np.asarray(results["theta_star"][str(n)]["J"]) >= 0) for n in config.contexts)

    assert again["cells"]["computed"] == 0 and again["cells"]["resumed"] == num_cells
    assert again["results"]["theta_star"] == results["theta_star"]
    assert [c["holds"] for c in again["claims"]] == [c["holds"] for c in claims]


# ---------------------------------------------------------------- the comparison points and the cell statistics


def test_comparison_points_are_the_named_points():
    d = 3
    points = comparison_points(d, jax.random.key(0), 0.1)
    assert list(points) == list(POINT_LABELS)
    u_star, B_star = (np.asarray(a) for a in theta_star_looped(d))
    np.testing.assert_array_equal(points["theta-star"][0], u_star)
    np.testing.assert_array_equal(points["half-step"][0], 0.5 * u_star)
    np.testing.assert_array_equal(points["mirror"][1], -B_star)
    assert not points["u-zero"][0].any() and not points["B-zero"][1].any()
    du, dB = points["perturbed"][0] - u_star, points["perturbed"][1] - B_star
    assert 0 < np.abs(du).max() < 0.5 and 0 < np.abs(dB).max() < 0.5  # eps = 0.1 times a standard normal
    again = comparison_points(d, jax.random.key(0), 0.1)
    assert all(np.array_equal(again[p][i], points[p][i]) for p in points for i in (0, 1))


def test_estimator_statistics_summarise_the_samples():
    tiny = EXPERIMENTS["ictd.neu"].profiles["tiny"]
    tasks, keys = _tiny_tasks(3)
    u, B = theta_star_looped(tiny.d)
    L, n = tiny.num_layers, tiny.contexts[0]
    stats = estimator_statistics(u, B, tasks, keys, L, n, tiny.batch_size)
    tower, plain = (np.asarray(a, np.float64) for a in update_samples(u, B, tasks, keys, L, n, tiny.batch_size))
    np.testing.assert_allclose(stats.tower.J, summarize(tower).J)
    np.testing.assert_allclose(stats.plain.noise_floor, summarize(plain).noise_floor)
    assert stats.depths == [1, 2, 3] and stats.num_samples == 8
    assert stats.tower_vs_plain_max_z.shape == stats.variance_ratio.shape == (L,)
    assert 0 < stats.margin_min <= stats.margin_median < 0.25  # c = 3: Assumption 5.1, at most (1 - 0.5)/2


def _cell(J, floor=None, margin=0.2, depths=(1, 2, 3)):
    """A stored ``ictd.neu`` result as the sweep gives it back (``store.typed_result``)."""
    J = list(J)
    floor = [0.01] * len(J) if floor is None else list(floor)
    tower = {"J": J, "J_se": [0.001] * len(J), "noise_floor": floor, "J_split": J, "abs_mean": [2 * j for j in J],
             "abs_se": [0.0] * len(J)}
    return typed_result(neu_cell, {
        "tower": tower, "plain": tower, "tower_vs_plain_max_z": [1.0] * len(J), "variance_ratio": [2.0] * len(J),
        "num_samples": 8, "depths": list(depths), "margin_min": margin, "margin_median": margin + 0.01})


def test_analyse_on_synthetic_cells():
    cfg = NEUConfig(m=3, d=3, num_layers=3, contexts=(8, 16), num_samples=8, num_samples_compare=8, slow_context=8,
                    slow_layers=3, slow_samples=8)
    cells = {"theta-star_n=8": _cell([0.3, 0.3, 0.3], margin=0.1), "theta-star_n=16": _cell([0.1, 0.4, 0.02])}
    cells |= {f"{p}_n=16": _cell([1.0 + i] * 3) for i, p in enumerate(POINT_LABELS) if p != "theta-star"}
    cells["theta-star_slow_gamma=0.9_n=8"] = _cell([0.1, 0.5, 0.05], floor=[0.01, 0.01, 0.2], margin=0.04)
    s = analyse(cfg, cells)
    assert list(s.points) == list(POINT_LABELS)  # theta* first: the figure and table order
    assert s.points["theta-star"] is s.theta_star[16] and list(s.theta_star) == [8, 16]
    np.testing.assert_allclose(s.theta_star[16].tower.J, [0.1, 0.4, 0.02])
    assert s.theta_star[8].tower.J.dtype == np.float64 and s.points["mirror"].num_samples == 8
    assert s.peak_l == 1 and s.depth_ratio == pytest.approx(20.0)
    assert s.margin_min == 0.1 and s.margin_median == pytest.approx(0.16)  # not the slow run's tasks (0.04)
    assert s.argmin_non_td == "mirror" and s.min_non_td == pytest.approx(3.0)  # half-step (2.0) is TD
    assert s.slow.peak_L == 2 and s.slow.ratio == pytest.approx(2.5)  # the floor 0.2 > J = 0.05 at L = 3
    assert s.slow.margin_min == 0.04 and s.slow_cell.depths.tolist() == [1, 2, 3]
    assert s.variance_ratio_at_L_max == {8: 2.0, 16: 2.0} and s.tower_vs_plain_max_z == 1.0
    assert s.figures == ["neu_vs_depth.png", "neu_vs_context.png", "neu_slow_discount.png"]
    assert analyse(cfg, {name: c for name, c in cells.items() if "slow" not in name}).slow is None

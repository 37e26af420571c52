"""Theorem 2 (depth.py) against independent references, and ictd.depth-convergence (experiments/depth.py): its config,
its analysis on synthetic cells, and the tiny profile end to end (contract, claims, figures, resume)."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.catalog import EXPERIMENTS
from memlab.ictd import depth as dp
from memlab.ictd import softmax_td as st
from memlab.ictd import transformer as tf
from memlab.ictd.experiments.depth_analysis import Margins, analyse
from memlab.ictd.experiments.depth_cells import DepthConfig, context_cell, crosscheck_cell, tasks_cell
from memlab.ictd.random_tasks import random_task_batch
from memlab.store import typed_result

# the helpers run on the tiny profile's shapes, so the tiny end-to-end run below reuses their compilations
EXP = EXPERIMENTS["ictd.depth-convergence"]
TINY_DEPTH = EXP.profiles["tiny"]
M, D, GAMMA = TINY_DEPTH.state_counts[0], TINY_DEPTH.d, TINY_DEPTH.gamma
N_MAX = max(TINY_DEPTH.context_lengths)


@pytest.fixture(scope="module")
def batch():
    """Tiny-profile tasks with feature scale 1.3 (a kernel far from diagonal) and contexts covering all states
    in their first 30 transitions (draws of N_MAX transitions)."""
    with jax.enable_x64(True):
        tasks = random_task_batch(jax.random.fold_in(jax.random.key(0), M), TINY_DEPTH.tasks_per_m, M, D, GAMMA,
                                  TINY_DEPTH.num_actions, feature_scale=1.3)
        states, covered, _ = dp.covering_trajectories(tasks, jax.random.key(1), 30, 30, length=N_MAX)
    assert tasks.features.dtype == jnp.float64 and bool(covered.all())
    return tasks, states


def one(batch, i=0, n=30):
    tasks, states = batch
    return jax.tree.map(lambda a: a[i], tasks), states[i, :n + 1]


def numpy_eq24(states, X, m, tau=1.0):
    """Eq. (24) by loops: M[s, s'] = sum_k K(S_{k-1}, s) 1{S_{k-1} = s'}, P with 1{S_k = s'}, K of eq. (12)."""
    states, X = np.asarray(states), np.asarray(X, np.float64)
    n = len(states) - 1
    Mh, Ph = np.zeros((m, m)), np.zeros((m, m))
    for s in range(m):
        w = np.exp(np.array([X[s] @ X[states[k]] / tau for k in range(n)]))
        w /= w.sum()  # K(S_{k-1}, s) over the n context sources
        for k in range(1, n + 1):
            Mh[s, states[k - 1]] += w[k - 1]
            Ph[s, states[k]] += w[k - 1]
    return Mh, Ph


@pytest.mark.parametrize("tau", [1.0, 0.7])
def test_operator_from_counts_is_eq24(x64, batch, tau):
    task, states = one(batch)
    Mc, Pc = st.operator_from_counts(states, task.features, M, tau)
    Mr, Pr = numpy_eq24(states, task.features, M, tau)
    np.testing.assert_allclose(Mc, Mr, rtol=0, atol=1e-13)
    np.testing.assert_allclose(Pc, Pr, rtol=0, atol=1e-13)
    Xtraj = task.features[states]
    Mo, Po = st.operator_form(states, st.kernel_weights(st.feature_scores(Xtraj), "softmax", tau), M)
    np.testing.assert_allclose(Mc, Mo, rtol=0, atol=1e-13)
    np.testing.assert_allclose(Pc, Po, rtol=0, atol=1e-13)
    assert np.abs(np.asarray(Mc) - np.eye(M)).max() > 0.05  # a kernel far from the identity: the test can fail


def test_operator_iteration_is_the_transformer(x64, batch):
    """Theorem 1 + eq. (26): Z_l[d+2, j] of the theta* transformer = v_l(S_j) of the operator iteration."""
    task, states = one(batch, 1)
    L = TINY_DEPTH.num_layers
    X, R = task.features[states], task.mrp.r[states[:-1]]
    V, A = tf.theta_star(D)
    Zs = np.asarray(tf.forward(tf.make_prompt(X, R), V, A, GAMMA, L, "dual", "softmax"))
    Mh, Ph = st.operator_from_counts(states, task.features, M)
    vs = np.asarray(st.iterate_operator(Mh, Ph, task.mrp.r, GAMMA, L))
    assert vs.shape == (L + 1, M) and np.all(vs[0] == 0)
    np.testing.assert_allclose(Zs[:, -1, :], vs[:, np.asarray(states)], rtol=0, atol=1e-12)
    assert np.abs(vs[-1]).max() > 0.1
    check = dp.transformer_crosscheck(task, states, D, L)
    assert check.transformer_vs_operator <= 1e-12 and check.eq49_vs_eq24 <= 1e-13


def test_task_depth_curves_quantities(x64, batch):
    """floor = distance of the long-run iterate to v_pi; T2, rho_hat, C_hat as eq. (54), (57), (67)."""
    L, n = TINY_DEPTH.num_layers, 60
    curves = dp.depth_curves(*batch, n, L)
    out = {k: np.asarray(v)[2] for k, v in curves.items()}
    task, states = one(batch, 2, n)
    Mh, Ph = (np.asarray(a) for a in st.operator_from_counts(states, task.features, M))
    r, v_pi = np.asarray(task.mrp.r), np.asarray(task.v_star)
    v = np.zeros(M)
    errs = [np.abs(v - v_pi).max()]
    for _ in range(2000):
        v = v + (GAMMA * Ph - Mh) @ v + Mh @ r
        errs.append(np.abs(v - v_pi).max())
    np.testing.assert_allclose(out["err"], errs[:L + 1], rtol=1e-12)
    assert out["floor"] == pytest.approx(errs[-1], rel=1e-9)
    T = np.eye(M) - Mh + GAMMA * Ph
    assert out["rho_hat"] == pytest.approx(np.abs(T).sum(1).max(), rel=1e-12)
    assert out["T2"] == pytest.approx(np.abs(T @ v_pi + Mh @ r - v_pi).max(), rel=1e-12)
    assert out["rho_hat"] <= 1 - 2 * out["C_hat"] + 1e-12  # eq. (54)
    assert out["spectral_radius"] <= out["rho_hat"] + 1e-12
    assert np.isclose(np.abs(np.linalg.eigvals(T)), GAMMA).any()  # (I - M + gamma P) 1 = gamma 1
    assert out["spectral_radius"] == pytest.approx(np.abs(np.linalg.eigvals(T)).max(), rel=1e-10)


def test_covering_trajectories(x64, batch):
    tasks, _ = batch
    states, covered, draws = dp.covering_trajectories(tasks, jax.random.key(4), 6, 40, length=N_MAX)
    states, covered, draws = np.asarray(states), np.asarray(covered), np.asarray(draws)
    assert states.shape == (len(draws), N_MAX + 1) and draws.min() >= 1
    for s, c in zip(states, covered):
        assert c == (set(s[:6].tolist()) == set(range(M)))  # S_0..S_{n-1} with n = 6, not the whole draw
    assert covered.sum() >= len(draws) // 2 and draws.max() > 1  # n = 6 for 5 states: first draws often miss
    _, covered, draws = dp.covering_trajectories(tasks, jax.random.key(5), M - 1, 3, length=N_MAX)  # impossible
    assert not np.asarray(covered).any() and np.all(np.asarray(draws) == 3)
    with pytest.raises(ValueError, match="length"):
        dp.covering_trajectories(tasks, jax.random.key(5), 10, 3, length=5)


def test_prefix_n_equals_a_cut_trajectory(x64, batch):
    """task_depth_curves with the first n of a longer draw = on the trajectory cut after n steps."""
    tasks, states = batch
    task = jax.tree.map(lambda a: a[3], tasks)
    full = {k: np.asarray(v)[3] for k, v in dp.depth_curves(tasks, states, 25, TINY_DEPTH.num_layers).items()}
    cut = {k: np.asarray(v) for k, v in dp.task_depth_curves(task, states[3, :26], None, TINY_DEPTH.num_layers).items()}
    for k, value in full.items():
        np.testing.assert_allclose(value, cut[k], rtol=1e-11, atol=1e-13)
    assert bool(dp.visits_every_state(states[3, :26], M)) == bool(dp.visits_every_state(states[3], M, 25))
    assert not bool(dp.visits_every_state(states[3], M, 1))


def test_fitted_rate_and_slope():
    L = np.arange(41)
    dist = np.stack([2.0 * 0.8 ** L, 0.5 * 0.93 ** L, np.maximum(0.1 ** L, 1e-300)])
    rate = dp.fitted_rate(dist)
    assert rate[0] == pytest.approx(0.8, rel=1e-12) and rate[1] == pytest.approx(0.93, rel=1e-12)
    assert np.isnan(rate[2])  # below the rounding floor from L = 12 on: nothing left to fit
    n = np.array([10, 100, 1000])
    assert dp.loglog_slope(n, 3.0 / np.sqrt(n)) == pytest.approx(-0.5)


@pytest.mark.parametrize("config, message", [
    (DepthConfig(context_lengths=(200, 50)), "context_lengths"),
    (DepthConfig(context_lengths=(200,)), "context_lengths"),
    (DepthConfig(state_counts=(5, 12)), "state_counts"),
    (DepthConfig(context_lengths=(6, 50)), "cannot visit"),
    (DepthConfig(slope_band=(-0.4, -0.1)), "slope_band"),
    (DepthConfig(feature_scale=0.0), "feature_scale"),
])
def test_config_validation_names_the_problem(config, message):
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_profiles_validate():
    assert EXP.paper == "softmax-transformers-in-context-td" and {"tiny", "quick", "paper"} <= set(EXP.profiles)
    for config in EXP.profiles.values():
        config.validate()
    assert EXP.profiles["paper"] == DepthConfig()


def test_tiny_profile_end_to_end_and_resume(tmp_path, check_tiny_run):
    run = check_tiny_run(EXP.name, tmp_path)  # through the CLI and resumed (conftest.check_tiny_run)
    out, results, again = run.out, run.first, run.again
    assert results["experiment"] == EXP.name and results["profile"] == "tiny"
    assert results["blank_panels"] == []  # no figure panel without data and a word of why
    claims = results["claims"]
    assert claims and all({"id", "claim", "paper", "ours", "holds", "status"} <= set(c) and isinstance(c["holds"], bool)
                          for c in claims)
    summary = (out / "summary.md").read_text()
    pngs = list(out.glob("*.png"))
    assert pngs and all(f"]({p.name})" in summary for p in pngs), "summary embeds every figure"
    assert list(out.glob("*.csv"))
    holds = {c["id"]: c["holds"] for c in claims}
    for cid in ("assumption-5.1", "geometric-rate", "bound-70", "operator-form"):
        assert holds[cid], [c for c in claims if c["id"] == cid]
    assert {"floor-slope", "lemma-4", "lemma-5"} <= set(holds)
    assert len(list((out / "cells").glob("*.json"))) == 4  # tasks + crosscheck + 2 n
    assert again["cells"]["computed"] == 0 and again["cells"]["resumed"] == 4, "the rerun recomputed no cell"
    assert results["results"] == again["results"] and results["claims"] == again["claims"]


def _synthetic_cell(floor, covered, rate, excess, rho_bounded):
    """A context cell as it comes back from a sweep (lists): two tasks, L = 2."""
    return typed_result(context_cell, {
        "covered": covered, "draws": [1, 3], "rate": rate, "rho_bounded": rho_bounded, "bound70_excess": excess,
        "floor": floor, "T2": [0.5 * f for f in floor], "M_dev": [0.1 * f for f in floor], "rho_hat": [0.9, 0.95],
        "spectral_radius": [0.9, 0.9], "C_hat": [0.01, 0.02],
        "err_q": [[1.0, 0.5, floor[0]], [1.0, 0.6, floor[0]], [1.0, 0.7, floor[0]]]})


def test_analyse_uses_only_covered_tasks():
    """The second task is uncovered at n = 30: its (huge) floor, NaN rate and positive excess must not count."""
    cfg = DepthConfig(context_lengths=(30, 120), num_layers=2, state_counts=(5,), tasks_per_m=2, d=5)
    crosscheck = {"transformer_vs_operator": 1e-15, "readout_vs_operator": 1e-15, "eq49_vs_eq24": 1e-16,
                  "max_abs_value": 1.5, "n": 30, "m": 5}
    cells = {"tasks": typed_result(tasks_cell, {"margin": [0.05, 0.04], "err0": [1.0, 2.0]}),
             "crosscheck": typed_result(crosscheck_cell, crosscheck),
             "n=30": _synthetic_cell([0.4, 9.0], [True, False], [0.9, float("nan")], [-0.1, 5.0], [True, True]),
             "n=120": _synthetic_cell([0.2, 0.1], [True, True], [0.9, 0.91], [-0.2, -0.3], [True, False])}
    s = analyse(cfg, cells)
    np.testing.assert_allclose(s.floor_median, [0.4, 0.15])
    assert s.floor_slope == pytest.approx(np.log(0.15 / 0.4) / np.log(4))
    assert s.dropped == {30: 1, 120: 0} and s.draws_max == {30: 3, 120: 3}
    assert s.rate_nan == 0  # the NaN rate belongs to the uncovered task
    np.testing.assert_allclose(s.rate_minus_bound_max, [0.9 - 0.95, 0.91 - 0.96])
    np.testing.assert_allclose(s.bound70_max_excess, [-0.1, -0.2])  # on the Lemma 5 event, covered tasks only
    np.testing.assert_allclose(s.frac_lemma5, [1.0, 0.5])
    np.testing.assert_allclose(s.bound_curve, [[1.0, 0.95, 0.95 ** 2], [2.0, 2 * 0.96, 2 * 0.96 ** 2]])
    assert s.num_tasks == 2 and s.margin == Margins(min=0.04, median=0.045)
    assert list(s.per_n) == [30, 120] and s.per_n[30].covered.dtype == bool and s.crosscheck.m == 5

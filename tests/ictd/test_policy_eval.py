"""In-context policy evaluation (policy_eval.py: the query reading, the references, task padding) and
ictd.msve-vs-context (experiments/msve.py: config, analysis, the tiny profile end to end)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.catalog import EXPERIMENTS
from memlab.ictd.experiments.msve_analysis import MarginRange, TaskNumbers, analyse
from memlab.ictd.experiments.msve_cells import MsveConfig, msve_cell
from memlab.ictd.policy_eval import (
    METHODS,
    depth_floor_values,
    make_task_set,
    operator_values,
    query_trajectory,
    transformer_value,
)
from memlab.ictd.random_tasks import random_task, task_margin
from memlab.ictd.softmax_td import weighted_softmax_td
from memlab.ictd.transformer import theta_star
from memlab.store import typed_result

EXP = EXPERIMENTS["ictd.msve-vs-context"]


def _numpy_task(m=4, gamma=0.7, t=12, c=1.5, seed=3):
    """A random MRP, features c * orthonormal rows, and a trajectory of t transitions, all drawn with NumPy."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(m), size=m)
    r = rng.uniform(-1, 1, m)
    features = c * np.linalg.qr(rng.normal(size=(m, m)))[0]
    states = [rng.integers(m)]
    for _ in range(t):
        states.append(rng.choice(m, p=P[states[-1]]))
    states = np.array(states)
    return features, P, r, states, r[states[:-1]]


def test_transformer_at_any_query_is_weighted_softmax_td_on_the_query_trajectory(x64):
    """Reading (b): TF(tau_t, s) = WSTD on (S_0..S_{t-1}, s) = operator form (24)-(26) with S_t := s, every s."""
    gamma, t, L = 0.7, 12, 15
    features, P, r, states, rewards = _numpy_task(gamma=gamma, t=t)
    V, A = theta_star(features.shape[1], dtype=jnp.float64)
    op = operator_values(jnp.asarray(features), jnp.asarray(states), r, t, gamma, L)
    for s in range(features.shape[0]):
        tf = transformer_value(features, states, rewards, s, t, gamma, V, A, L)
        wstd = weighted_softmax_td(query_trajectory(features, states, s, t), rewards, gamma, L)[-1, -1]
        assert float(tf) == pytest.approx(float(wstd), abs=1e-10)
        assert float(op[s]) == pytest.approx(float(wstd), abs=1e-10)
    # with the true next state as the query the prompt is the paper's own (section 3): no fictitious transition
    true = operator_values(jnp.asarray(features), jnp.asarray(states), r, t, gamma, L, true_successor=True)
    wstd_true = weighted_softmax_td(features[states], rewards, gamma, L)[-1]  # (t+1,) on S_0..S_t
    assert float(op[states[t]]) == pytest.approx(float(wstd_true[-1]), abs=1e-10)
    for j, s in enumerate(states):  # the state-space form gives the same value at every trajectory position
        assert float(true[s]) == pytest.approx(float(wstd_true[j]), abs=1e-10)


def test_the_fictitious_transition_matters_less_as_t_grows(x64):
    """A query s != S_t changes the answer (the last bootstrap reads v(s)) by a weight that shrinks with t."""
    gamma, L, m = 0.9, 15, 4
    features, P, r, states, rewards = _numpy_task(m=m, gamma=gamma, t=400, c=3.0, seed=7)
    gaps = []
    for t in (5, 400):
        op = operator_values(jnp.asarray(features), jnp.asarray(states), r, t, gamma, L)
        true = operator_values(jnp.asarray(features), jnp.asarray(states), r, t, gamma, L, true_successor=True)
        others = [s for s in range(m) if s != states[t]]
        gaps.append(float(np.max(np.abs(np.asarray(op)[others] - np.asarray(true)[others]))))
    assert gaps[0] > 1e-3, "the fictitious transition matters at short contexts"
    assert gaps[1] < 0.1 * gaps[0], gaps


def test_depth_floor_with_a_one_hot_kernel_is_truncated_value_iteration(x64):
    """c large: M_pi = I, so L population iterations give sum_{l<L} (gamma P)^l r = v_pi - (gamma P)^L v_pi."""
    gamma, L = 0.9, 15
    features, P, r, _, _ = _numpy_task(c=10.0)
    v = depth_floor_values(features, P, r, np.full(4, 0.25), gamma, L)
    expected = sum(np.linalg.matrix_power(gamma * P, k) @ r for k in range(L))
    np.testing.assert_allclose(np.asarray(v), expected, atol=1e-10)


def test_padded_tasks_match_the_unpadded_family():
    cfg = dataclasses.replace(EXP.profiles["tiny"], m_values=(3, 4), d=4, tasks_per_m=2)
    key = jax.random.key(5)
    tasks = make_task_set(key, jax.random.key(6), cfg.m_values, cfg.tasks_per_m, cfg.d, cfg.gammas,
                          cfg.feature_scale, cfg.num_actions, cfg.t_max, cfg.num_layers)
    assert tasks.features.shape == (4, 4, 4) and tasks.v.shape == (len(cfg.gammas), 4, 4)
    small = np.flatnonzero(tasks.m == 3)
    assert np.all(np.asarray(tasks.mu)[small, 3] == 0) and np.all(np.asarray(tasks.states)[small] < 3)
    np.testing.assert_allclose(np.asarray(tasks.mu).sum(axis=1), 1.0, atol=1e-5)
    first = random_task(jax.random.split(jax.random.fold_in(key, 3), 2)[0], 3, 4, 0.9, feature_scale=cfg.feature_scale)
    np.testing.assert_allclose(np.asarray(tasks.v[0, small[0], :3]), np.asarray(first.v_star), rtol=1e-5, atol=1e-5)
    assert float(tasks.margin[0, small[0]]) == pytest.approx(float(task_margin(first)), abs=1e-5)
    assert np.all(tasks.margin > 0), "c = 3 orthonormal features satisfy Assumption 5.1"


@pytest.mark.parametrize("change, match", [
    ({"m_values": ()}, "m_values"), ({"m_values": (4, 4)}, "distinct"),
    ({"d": 3, "m_values": (4,)}, "d must be an int >= 4"),
    ({"tasks_per_m": 1}, "tasks_per_m"), ({"gammas": (1.0,)}, "gammas"), ({"feature_scale": 0.0}, "feature_scale"),
    ({"num_layers": 0}, "num_layers"), ({"t_max": 1}, "t_max"), ({"depth_limit_layers": 3}, "depth_limit_layers"),
    ({"num_contexts": 2}, "context lengths"),
])
def test_bad_config_is_rejected(change, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(MsveConfig(), **change).validate()


def test_profiles_are_valid_and_the_paper_profile_has_the_paper_sizes():
    for config in EXP.profiles.values():
        config.validate()
    paper = EXP.profiles["paper"]
    assert paper.num_layers == 15 and len(paper.m_values) * paper.tasks_per_m == 300
    assert paper.contexts()[0] == 1 and paper.contexts()[-1] == paper.t_max


def test_tiny_profile_end_to_end_and_resume(tmp_path, check_tiny_run):
    run = check_tiny_run(EXP.name, tmp_path)  # through the CLI and resumed (conftest.check_tiny_run)
    out, results, again = run.out, run.first, run.again
    assert results["blank_panels"] == []  # no figure panel without data and a word of why
    claims = {c["id"]: c for c in results["claims"]}
    assert {"transformer-equals-weighted-softmax-td", "msve-decreases[gamma=0.9]",
            "one-theta-all-tasks[gamma=0.5]"} <= set(claims)
    assert all(isinstance(c["holds"], bool) for c in claims.values())
    assert claims["transformer-equals-weighted-softmax-td"]["holds"], claims["transformer-equals-weighted-softmax-td"]
    assert results["results"]["max_abs_diff_tf_wstd"] < 1e-4
    summary = (out / "summary.md").read_text()
    pngs = list(out.glob("*.png"))
    assert pngs and all(f"]({p.name})" in summary for p in pngs)
    rows = (out / "msve_vs_context.csv").read_text().splitlines()
    cfg = EXP.profiles["tiny"]
    per_curve = 1 + len(cfg.m_values)
    assert len(rows) == 1 + len(cfg.gammas) * len(cfg.contexts()) * len(METHODS) * per_curve
    mean = results["results"]["mean_msve"]
    np.testing.assert_allclose(mean["transformer"], mean["weighted_softmax_td"], rtol=1e-4)

    assert again["cells"]["computed"] == 0 and again["cells"]["resumed"] == len(cfg.gammas) * len(cfg.contexts())
    assert again["results"] == results["results"] and again["claims"] == results["claims"]


def test_analyse_on_synthetic_cells():
    """MSVE halving (task 1) and quartering (task 2) as t doubles: log-log slopes -1 and -2, all tasks improved; the
    constant predictor of two tasks with values +-1 everywhere is 0 with MSVE 1."""
    cfg = MsveConfig(m_values=(2,), tasks_per_m=2, d=2, gammas=(0.9,), t_max=4, num_contexts=3)
    contexts = cfg.contexts()
    assert contexts == (1, 2, 4)
    cells = {}
    for j, t in enumerate(contexts):
        msve = {name: [0.5 ** j, 2 * 0.25 ** j] for name in METHODS}
        cells[f"gamma=0.9,t={t}"] = typed_result(msve_cell, {"msve": msve, "max_abs_diff": 1e-7 * (j + 1),
                                                             "max_abs_value": 2.0, "depth_limit_change": 0.1 * j})
    tasks = TaskNumbers(m=np.array([2, 2]), v=np.array([[[1.0, 1.0], [-1.0, -1.0]]]), mu=np.full((2, 2), 0.5),
                        margin=np.array([[0.01, 0.03]]), floor=np.array([[0.2, 0.4]]), dtype="float32")
    s = analyse(cfg, tasks, cells)
    np.testing.assert_allclose(s.mean_msve["transformer"], [[1.5, 0.5, 0.1875]])
    np.testing.assert_allclose(s.stderr_msve["transformer"][0, 0], np.std([1, 2], ddof=1) / np.sqrt(2))
    assert s.loglog_slope["0.9"].mean == pytest.approx(-1.5)
    assert s.loglog_slope["0.9"].t == pytest.approx(-3.0)  # mean -1.5, sd 1/sqrt(2), two tasks
    assert s.improved == [1.0] and s.const_msve[0] == pytest.approx(1.0)
    assert s.max_abs_diff_tf_wstd == pytest.approx(3e-7) and s.max_rel_diff_tf_wstd == pytest.approx(1.5e-7)
    assert s.tol == 1e-5 and s.limit_t == 4 and s.depth_limit_change == pytest.approx(0.2)
    assert s.margin["0.9"] == MarginRange(min=0.01, median=0.02, max=0.03)
    np.testing.assert_allclose(s.depth_floor_msve, [0.3])

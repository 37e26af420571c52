"""The pure ``analyse`` step of every belief experiment, on hand-made cell results (no sampling, no files)."""

import numpy as np
import pytest

from memlab.belief import ringworld as rw
from memlab.belief.experiments.error import FilterErrors
from memlab.belief.experiments.error_epsilon import ErrorVsEpsilonConfig, analyse_epsilon
from memlab.belief.experiments.error_time import ErrorVsTimeConfig, analyse_time
from memlab.belief.experiments.exact_linear import FilterCheck
from memlab.belief.experiments.exact_linear import analyse as analyse_exact
from memlab.belief.experiments.logit_trace import LogitTraceConfig, LogitTraces
from memlab.belief.experiments.logit_trace import analyse as analyse_trace
from memlab.belief.experiments.ringworld_env import ReferenceRuns, RingWorldEnvConfig
from memlab.belief.experiments.ringworld_env import analyse as analyse_env
from memlab.belief.experiments.ringworld_ppo_stats import analyse as analyse_returns
from memlab.belief.experiments.ringworld_ppo_sweep import QMDPReturns, RingWorldPPOConfig
from memlab.belief.experiments.ringworld_trajectory import PlayedEpisodes, TrajectoryConfig
from memlab.belief.experiments.ringworld_trajectory import analyse as analyse_trajectory
from memlab.belief.metrics import trend
from memlab.belief.runs import TrainedAgent
from memlab.files import to_jsonable

NAMES = ["LOF", "ALF δ = √ε", "ALF δ = 0.7/log(1/ε)", "ALF δ = ε²", "ALF δ = 0", "ALF δ = 1"]


def test_error_vs_epsilon_analysis():
    cfg = ErrorVsEpsilonConfig(num_eps=4, num_runs=1000, inv_eps_min=50.0, inv_eps_max=200.0)
    p = np.array([[0.02, 0.08, 0.07, 0.45, 0.5, 0.10],
                  [0.015, 0.06, 0.05, 0.43, 0.5, 0.10],
                  [0.012, 0.05, 0.055, 0.42, 0.5, 0.09],
                  [0.010, 0.04, 0.03, 0.40, 0.5, 0.10]])
    cells = [FilterErrors(names=NAMES, p=list(row)) for row in p]  # lists, as cells come back from JSON
    stats = analyse_epsilon(cfg, cells)
    np.testing.assert_allclose(stats.inv_eps, [50, 100, 150, 200])
    np.testing.assert_array_equal(stats.p, p)
    np.testing.assert_allclose(stats.stderr, np.sqrt(p * (1 - p) / 1000))
    assert stats.filters == NAMES
    assert stats.column == {"sqrt": 1, "log": 2, "eps2": 3, "zero": 4, "one": 5}
    assert stats.log_wins == 0.75  # log below sqrt at 3 of the 4 grid points
    for f in range(len(NAMES)):
        assert stats.trend[f] == trend(stats.inv_eps, p[:, f])
    assert stats.xi == pytest.approx(0.7206, abs=1e-4)  # eq. (150)


def test_error_vs_epsilon_analysis_without_both_valid_schedules():
    cfg = ErrorVsEpsilonConfig(num_eps=2, schedules=("sqrt", "one"))
    stats = analyse_epsilon(cfg, [FilterErrors(names=NAMES[:2] + NAMES[-1:], p=[0.1, 0.2, 0.3])] * 2)
    assert stats.log_wins is None and stats.column == {"sqrt": 1, "one": 2}


def test_error_vs_time_analysis():
    K = 100
    cfg = ErrorVsTimeConfig(num_steps=K, num_runs=5000)
    k = np.arange(1, K + 1)
    p = np.column_stack([np.full(K, 0.014), np.full(K, 0.04), np.full(K, 0.021),
                         0.1 + 0.003 * k,  # still rising: not flat
                         np.full(K, 0.5), np.full(K, 0.1)])
    p[0] = [0.1, 0.1, 0.1, 0.1, 0.5, 0.1]
    stats = analyse_time(cfg, FilterErrors(names=NAMES, p=p.tolist()))
    np.testing.assert_array_equal(stats.k, k)
    assert stats.tail == 10
    np.testing.assert_array_equal(stats.start, [0.1] * 5)  # every filter but δ = 0
    assert stats.valid == [0, 1, 2]  # LOF, √ε, 0.7/log(1/ε)
    assert [f.flat for f in stats.flatness] == [True, True, True, False, True, True]
    rising = stats.flatness[3]
    assert rising.earlier == pytest.approx(p[-20:-10, 3].mean()) and rising.later == pytest.approx(p[-10:, 3].mean())


def test_logit_trace_analysis():
    cfg = LogitTraceConfig(num_steps=8)
    states = [0, 0, 1, 1, 1, 0, 0, 1]
    cell = LogitTraces(states=states, diffs=[[0.0] * 8, [1.0] * 8, [2.0] * 8], error=[0.03, 0.04, 0.035],
                       roughness=[0.1, 0.05, 0.2], mean_lag=[1.0, 7.0, 2.0], num_switches=3)
    stats = analyse_trace(cfg, cell)
    assert stats.filters == ["LOF", "ALF δ = 0.07", "ALF δ = 0.19"]
    np.testing.assert_array_equal(stats.k, np.arange(1, 9))
    np.testing.assert_array_equal(stats.switches, [3, 6, 8])  # k of x_k != x_{k-1}
    assert [d.tolist() for d in stats.diffs] == cell.diffs
    assert stats.mean_lag == [1.0, 7.0, 2.0] and stats.num_switches == 3


def _row(family, N, r, ell, error, mismatches=0, flagged=0):
    return FilterCheck(family=family, N=N, r=r, ell=ell, max_abs_error=error, pattern_mismatches=mismatches,
                       neg_inf_entries=5, flagged_rows=flagged, rows=100)


def test_exact_linear_analysis():
    positive, zeros = "Thm 4.4, π0 > 0, E > 0", "Thm 4.4, π0 and E with zeros"  # the families the cells name
    rows = [_row(positive, 4, 0, "1–1", 1e-15), _row(positive, 12, 8, "8–9", 3e-14),
            _row(zeros, 4, 0, "1–1", 1e-15, flagged=3), _row(zeros, 6, 3, "3–3", 1e-9),
            _row("Cor 4.5, 2 actions", 4, 0, "1", 2e-15, mismatches=1)]
    stats = analyse_exact(rows)
    pos, zer, cor = stats.positive, stats.zeros, stats.controlled
    assert len(pos.rows) == 2 and pos.exact and pos.max_error == 3e-14 and pos.max_ell == 9
    assert not zer.exact and zer.flagged == 3  # 1e-9 exceeds the tolerance
    assert not cor.exact and cor.mismatches == 1
    assert stats.example1.holds and not stats.bad.holds and stats.x1_x3_alike


def test_ringworld_returns_analysis():
    cfg = RingWorldPPOConfig(memories=("alf", "s5-12"), seeds=2, seed_counts=(("s5-12", 1),), tail=2,
                             episode_length=20)
    env = rw.RingWorld(cfg.epsilon, cfg.episode_length)
    f, c = rw.random_return(env, env.default_params), rw.optimal_return(env, env.default_params)
    cells = {"alf-0": TrainedAgent(metrics={"episode_return": [f, f, c, c - 0.2], "memory_delta": [0.5, 0.1]},
                                   agent=b""),
             "alf-1": TrainedAgent(metrics={"episode_return": [f, c + 0.1 * (c - f), c, c], "memory_delta": [0.5, 0.3]},
                                   agent=b""),
             "s5-12-0": TrainedAgent(metrics={"episode_return": [f, f, f, f]}, agent=b""),
             "qmdp": QMDPReturns(returns=[0.4, 0.6])}
    analysis = analyse_returns(cfg, cells)
    assert (analysis.ceiling, analysis.floor, analysis.qmdp) == (c, f, 0.5)
    assert analysis.curves["alf"].shape == (2, 4) and analysis.curves["s5-12"].shape == (1, 4)
    alf, s5 = analysis.stats["alf"], analysis.stats["s5-12"]
    np.testing.assert_allclose(alf.tail_per_seed, [c - 0.1, c])  # the last 2 updates of each seed
    assert alf.tail_mean == pytest.approx(c - 0.05) and alf.tail_std == pytest.approx(0.05)
    assert alf.half_ceiling_update == 2 and s5.half_ceiling_update is None  # 1-based; never reached: None
    assert alf.diagnostics == {"delta": pytest.approx(0.2)} and s5.diagnostics == {}
    # results.json holds MemoryStats under these names (committed results are read by them)
    assert list(to_jsonable(alf)) == ["tail_mean", "tail_std", "tail_per_seed", "half_ceiling_update", "diagnostics",
                                      "learning_std"]


def test_ringworld_trajectory_analysis():
    state = np.array([[1, 2, 2, 3]])  # paper states 2, 3, 3, 4
    peak = rw.beacon_emissions().argmax(axis=0)
    obs = peak[state]
    obs[0, 0] = (obs[0, 0] + 1) % 4  # k = 0 is the null observation: never off-peak
    obs[0, 2] = (obs[0, 2] + 1) % 4  # off-peak at k = 2
    cw1, cw2, ccw1 = (rw.ACTION_NAMES.index(a) for a in ("CW1", "CW2", "CCW1"))
    played = PlayedEpisodes(state=state, action=[[cw1, ccw1, cw1, cw2]], next_state=[[2, 2, 3, 5]],  # slip at k = 1
                            obs=obs, reward=[[0.0, 0.05, 0.05, 0.0]], alf_decoded=[[0, 2, 1, 3]], lof_decoded=state)
    stats = analyse_trajectory(TrajectoryConfig(), {"episode_return": list(range(12))}, played)
    np.testing.assert_array_equal(stats.irregular_mask, [[False, True, False, False]])
    np.testing.assert_array_equal(stats.off_peak_mask, [[False, False, True, False]])
    np.testing.assert_array_equal(stats.error_masks["alf"], [[False, False, True, False]])  # k = 0 not counted
    assert stats.irregular == 0.25 and stats.off_peak == pytest.approx(1 / 3)
    assert stats.error == {"alf": pytest.approx(1 / 3), "lof": 0.0}
    assert stats.error_after_off_peak == {"alf": 1.0, "lof": 0.0}
    assert stats.train_return == 6.5 and stats.return_mean == pytest.approx(0.1)  # the last 10 of 0..11
    assert stats.policy["state 2"] == {"CW1": 1.0, "CW2": 0.0, "CCW1": 0.0, "CCW2": 0.0}
    assert stats.policy["state 3"] == {"CW1": 0.5, "CW2": 0.0, "CCW1": 0.5, "CCW2": 0.0}


def test_ringworld_env_analysis():
    cfg = RingWorldEnvConfig(episode_length=4)
    cell = ReferenceRuns(returns={"optimal": [0.1, 0.3], "random": [-0.2, 0.0, 0.2], "qmdp": [0.1, 0.1]},
                         accuracy={"LOF": [0.5, 0.7, 0.9, 1.0], "ALF": [0.5, 0.6, 0.7, 0.8]})
    stats = analyse_env(cfg, cell)
    env = rw.RingWorld(cfg.epsilon, cfg.episode_length)
    assert stats.optimal_return == rw.optimal_return(env, env.default_params)
    optimal = stats.mc["optimal"]
    assert optimal.mean == pytest.approx(0.2) and optimal.stderr == pytest.approx(0.1)  # std 0.1414 / sqrt(2)
    assert (optimal.low, optimal.high) == (0.1, 0.3) and stats.mc["random"].low == -0.2
    assert stats.final_accuracy == {"LOF": pytest.approx(0.95), "ALF": pytest.approx(0.75)}  # the second half
    assert stats.E.shape == (4, 12) and stats.assumption_5_8
    assert to_jsonable(stats.mc)["qmdp"] == [0.1, 0.0, 0.1, 0.1]  # results.json: a list per policy, as before

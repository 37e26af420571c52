"""RingWorld, section 6.2 / Appendix E.2: eqs. (193)-(199) against literal 1-based constructions, the sampler
against T and E (chi-square), auto-reset, the filters' inputs from a rollout, and the DP optimum against hand values,
brute force and Monte Carlo."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from memlab.belief.alf import ALF, alf_filter
from memlab.belief.filters import lof_reference
from memlab.belief.hmm import ControlledHMM
from memlab.belief.ringworld import (
    RingWorld,
    RingWorldState,
    beacon_emissions,
    episode_inputs,
    optimal_policy,
    optimal_return,
    qmdp_returns,
    random_policy,
    random_return,
    ring_diagonalisation,
    ring_permutations,
    ring_rewards,
    ring_transitions,
    rollout,
)
from memlab.belief.structure import check_observability_controlled, is_permutation, split_nearly_deterministic

N = 12
SHIFTS = {0: 1, 1: 2, 2: -1, 3: -2}  # CW1, CW2, CCW1, CCW2


def eq194(eps):
    """T(CW1) = P + eps Q, eq. (193)-(194), entry by entry in the paper's 1-based labels."""
    P, Q = np.zeros((N, N)), np.zeros((N, N))
    for i, j in itertools.product(range(1, N + 1), repeat=2):
        if i == (j % N) + 1:
            P[i - 1, j - 1], Q[i - 1, j - 1] = 1.0, -2.0
        elif i in ((j - 1) % N + 1, (j + 1) % N + 1):
            Q[i - 1, j - 1] = 1.0
    return P + eps * Q


def slip_overshoot(eps, shift):
    """Our T(a) for the actions the paper does not print: target w.p. 1 - 2 eps, one short or one beyond w.p. eps."""
    T = np.zeros((N, N))
    for j in range(N):
        direction = 1 if shift > 0 else -1
        T[(j + shift) % N, j] += 1 - 2 * eps
        T[(j + shift - direction) % N, j] += eps  # slip: one step short
        T[(j + shift + direction) % N, j] += eps  # overshoot: one step too far
    return T


@pytest.mark.parametrize("eps", [0.0, 0.05, 0.2, 0.5])
def test_transitions_are_eq_194_and_the_slip_overshoot_pattern(eps):
    T = ring_transitions(eps)
    assert T.shape == (4, N, N) and T.dtype == np.float64
    np.testing.assert_allclose(T[0], eq194(eps), rtol=0, atol=1e-12)
    for a, shift in SHIFTS.items():
        np.testing.assert_allclose(T[a], slip_overshoot(eps, shift), rtol=0, atol=1e-12)
    np.testing.assert_allclose(T.sum(axis=1), 1.0, atol=1e-12)
    ControlledHMM(jnp.asarray(T), jnp.asarray(beacon_emissions()), jnp.full(N, 1.0 / N))  # validates


def test_backbones_are_eq_198_and_the_deterministic_part_of_T():
    P = ring_permutations()
    np.testing.assert_array_equal(P[0], eq194(0.0))
    np.testing.assert_array_equal(P[1], P[0] @ P[0])
    np.testing.assert_array_equal(P[2], P[0].T)
    np.testing.assert_array_equal(P[3], P[0].T @ P[0].T)
    assert all(is_permutation(p) for p in P)
    T = ring_transitions(0.05)
    for a in range(4):  # Def. 5.1: T(a) = P(a) + eps Q(a) with the permutation as the backbone
        split = split_nearly_deterministic(T[a], 0.05)
        np.testing.assert_array_equal(split.D, P[a])


def test_dft_diagonalisation_eq_197_199(x64):
    V, lam = ring_diagonalisation()
    P = ring_permutations()
    np.testing.assert_allclose(V, np.sqrt(N) * np.fft.ifft(np.eye(N), axis=0), atol=1e-12)  # inverse DFT matrix
    np.testing.assert_allclose(V @ V.conj().T, np.eye(N), atol=1e-12)
    V_inv = np.linalg.inv(V)
    for a in range(4):
        np.testing.assert_allclose(V @ np.diag(lam[a]) @ V_inv, P[a], atol=1e-12)  # eq. (197)
    np.testing.assert_allclose(lam[1], lam[0] ** 2, atol=1e-12)  # eq. (199)
    np.testing.assert_allclose(lam[2], lam[0] ** -1, atol=1e-12)
    np.testing.assert_allclose(lam[3], lam[0] ** -2, atol=1e-12)
    np.testing.assert_allclose(np.abs(lam), 1.0, atol=1e-12)
    angles = np.sort(np.mod(np.angle(lam[0]), 2 * np.pi))
    np.testing.assert_allclose(np.diff(angles), 2 * np.pi / N, atol=1e-12)  # uniformly spaced


def test_emissions_are_eq_195():
    E = beacon_emissions()
    expected = np.zeros((4, N))
    for i, beacon in enumerate((1, 4, 7, 10)):  # paper states of the beacons
        for j in range(1, N + 1):
            expected[i, j - 1] = np.exp(np.cos(np.deg2rad(30.0 * (j - 1) - 30.0 * (beacon - 1))))
    expected /= expected.sum(axis=0)
    np.testing.assert_allclose(E, expected, rtol=0, atol=1e-12)


def test_beacons_3_and_4_are_unlikely_at_state_3():
    column = beacon_emissions()[:, 2]  # paper state 3 (Appendix B.2, Fig. 6)
    assert set(np.argsort(column)[:2]) == {2, 3}
    w = np.exp([0.5, np.sqrt(3) / 2, -0.5, -np.sqrt(3) / 2])  # cos of 60, -30, -120, -210 degrees
    np.testing.assert_allclose(column, w / w.sum(), atol=1e-12)
    np.testing.assert_allclose(column, [0.326, 0.470, 0.120, 0.083], atol=5e-4)


def test_assumption_5_8_holds():
    E = beacon_emissions()
    report = check_observability_controlled(E, np.zeros(N))
    assert report.holds, report.reasons
    gaps = [np.abs(E[:, i] - E[:, j]).max() for i, j in itertools.combinations(range(N), 2)]
    assert min(gaps) > 0.1  # not merely unequal in floating point
    assert E.min() > 0.07


def test_rewards_are_eq_196():
    K = 7
    expected = np.zeros(N)
    expected[[2 - 1, 3 - 1]] = 1 / K  # goals: paper states 2, 3
    expected[[6 - 1, 11 - 1, 12 - 1]] = -1 / K  # traps: paper states 6, 11, 12
    np.testing.assert_array_equal(ring_rewards(K), expected)
    params = RingWorld(episode_length=K).default_params
    np.testing.assert_allclose(params.reward, expected, rtol=1e-6)


def test_params_are_the_hmm_the_filters_use():
    env = RingWorld()
    params = env.default_params
    hmm = params.hmm
    assert isinstance(hmm, ControlledHMM) and (hmm.num_states, hmm.num_obs, hmm.num_actions) == (N, 4, 4)
    np.testing.assert_allclose(hmm.T, ring_transitions(0.05), atol=1e-7)
    np.testing.assert_allclose(hmm.E, beacon_emissions(), atol=1e-7)
    np.testing.assert_allclose(hmm.pi0, np.full(N, 1 / N), atol=1e-7)
    np.testing.assert_array_equal(params.P, ring_permutations())
    assert (env.num_actions, env.obs_size, RingWorld(fully_observed=True).obs_size) == (4, 4, N)


def _pooled_chi_square(counts, probs):
    """p-value of the pooled chi-square statistic over columns; counts must be 0 where probs are 0."""
    assert np.all(counts[probs == 0] == 0)
    expected = probs * counts.sum(axis=0, keepdims=True)
    support = probs > 0
    statistic = np.sum((counts[support] - expected[support]) ** 2 / expected[support])
    dof = int(support.sum() - counts.shape[1])
    return stats.chi2.sf(statistic, dof)


def test_sampled_transitions_and_observations_match_T_and_E():
    env = RingWorld(episode_length=2)  # one step from k = 0 never resets
    params = env.default_params
    per_pair = 3000
    actions, starts = (np.repeat(v, per_pair) for v in np.divmod(np.arange(4 * N), N))
    zeros = jnp.zeros(len(starts), jnp.int32)
    state = RingWorldState(jnp.asarray(starts, jnp.int32), zeros, zeros.astype(params.reward.dtype))
    keys = jax.random.split(jax.random.key(1), len(actions))
    obs, new_state, _, terminated, _, info = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(
        keys, state, jnp.asarray(actions), params)
    assert not np.any(terminated)
    x_next = np.asarray(info["next_state"])
    np.testing.assert_array_equal(new_state.x, x_next)
    T = ring_transitions(0.05)
    for a in range(4):  # counts[i, j]: x' = i from x = j under a
        counts = np.zeros((N, N))
        np.add.at(counts, (x_next[actions == a], starts[actions == a]), 1)
        assert _pooled_chi_square(counts, T[a]) > 1e-3
    y = np.asarray(obs).argmax(axis=-1)
    counts = np.zeros((4, N))
    np.add.at(counts, (y, x_next), 1)
    assert _pooled_chi_square(counts, beacon_emissions()) > 1e-3


def test_auto_reset_and_null_observations():
    env = RingWorld(episode_length=3)
    out = jax.jit(lambda key: rollout(env, env.default_params, key, 10))(jax.random.key(2))
    out = {name: np.asarray(value) for name, value in out.items()}
    np.testing.assert_array_equal(out["k"], [0, 1, 2] * 3 + [0])
    np.testing.assert_array_equal(out["terminated"], out["k"] == 2)  # exactly at step K
    assert not out["truncated"].any()
    starts = out["k"] == 0
    assert np.all(out["obs"][starts] == 0) and np.all(out["obs"][~starts].sum(axis=-1) == 1)
    assert out["obs"].dtype == np.float32
    np.testing.assert_array_equal(out["x"][1:], out["info_state"][:-1])  # info["state"]: state of returned obs
    entered = out["info_next_state"]
    np.testing.assert_array_equal(out["x"][1:][~out["terminated"][:-1]], entered[:-1][~out["terminated"][:-1]])
    np.testing.assert_allclose(out["reward"], ring_rewards(3)[entered], rtol=1e-6)
    np.testing.assert_array_equal(out["obs"][1:][~out["terminated"][:-1]],
                                  out["info_next_obs"][:-1][~out["terminated"][:-1]])
    returns = out["reward"][:9].reshape(3, 3).sum(axis=1)
    np.testing.assert_allclose(out["info_episode_return"][out["terminated"]], returns, rtol=1e-6)


def test_rewards_and_returns_are_bounded_under_jit_and_vmap():
    K = 20
    env = RingWorld(episode_length=K)
    params = env.default_params
    batched = jax.jit(jax.vmap(lambda key: rollout(env, params, key, 3 * K)))
    out = batched(jax.random.split(jax.random.key(3), 256))
    reward = np.asarray(out["reward"])
    assert set(np.round(np.unique(reward) * K, 6)) <= {-1.0, 0.0, 1.0}
    returns = np.asarray(out["info_episode_return"])[np.asarray(out["terminated"])]
    assert returns.shape == (256 * 3,) and np.all(np.abs(returns) <= 1 + 1e-6)
    np.testing.assert_allclose(returns, reward.reshape(256, 3, K).sum(axis=-1).ravel(), atol=1e-6)
    assert np.std(returns) > 0  # not a constant
    # the batched, jitted step is the unbatched step environment by environment
    keys = jax.random.split(jax.random.key(4), 3)
    _, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    actions = jnp.asarray([0, 2, 3])
    batched_step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(keys, states, actions, params)
    for b in range(3):
        single = env.step(keys[b], jax.tree.map(lambda v, b=b: v[b], states), int(actions[b]), params)
        for got, want in zip(jax.tree.leaves(batched_step), jax.tree.leaves(single)):
            np.testing.assert_array_equal(np.asarray(got)[b], want)


@pytest.mark.parametrize("fully_observed", [False, True])
def test_rollouts_feed_lof_and_alf_as_a_memory_would(x64, fully_observed):
    K, delta = 30, 0.1
    env = RingWorld(episode_length=K, fully_observed=fully_observed)
    params = env.default_params
    out = {n: np.asarray(v) for n, v in jax.jit(lambda key: rollout(env, params, key, 2 * K + 5))(
        jax.random.key(5)).items()}
    starts = out["k"] == 0
    ys, acts = episode_inputs(out["obs"], out["action"], starts, episode=1)
    assert ys.shape == acts.shape == (K - 1,)
    truth = out["x"][K + 1:2 * K]  # x_1..x_{K-1} of the second episode (y_k is emitted by x_k: see the chi-square)
    np.testing.assert_array_equal(acts, out["action"][K:2 * K - 1])
    if fully_observed:
        np.testing.assert_array_equal(ys, truth)
        return
    # a memory: initial logits at an episode start, then eq. (7) / (46) on (y_k, a_{k-1})
    T, log_E, P = np.asarray(params.T), np.log(np.asarray(params.E)), np.asarray(params.P)
    w_lof, w_alf, lof_stream, alf_stream = None, None, [], []
    for t in range(len(starts)):
        if starts[t]:
            w_lof, w_alf = np.log(np.asarray(params.pi0)), np.zeros(N)
        else:
            y, a = out["obs"][t].argmax(), out["action"][t - 1]
            w_lof = np.log(T[a] @ np.exp(w_lof)) + log_E[y]  # eq. (7)
            w_alf = (1 - delta) * P[a] @ w_alf + delta * log_E[y]  # eq. (46)
        lof_stream.append(w_lof)
        alf_stream.append(w_alf)
    w = lof_reference(params.hmm, ys, actions=acts).logits
    np.testing.assert_allclose(w, np.asarray(lof_stream)[K + 1:2 * K], rtol=1e-10, atol=1e-10)
    alf = ALF.time_varying(params.P, params.E, delta)
    np.testing.assert_allclose(alf_filter(alf, ys, acts).logits, np.asarray(alf_stream)[K + 1:2 * K], atol=1e-10)


def test_episode_inputs_rejects_bad_rollouts():
    obs = np.zeros((4, 4))
    obs[[1, 2, 3], [0, 1, 2]] = 1
    actions, starts = np.zeros(4, int), np.array([True, False, False, False])
    ys, acts = episode_inputs(obs, actions, starts)
    np.testing.assert_array_equal(ys, [0, 1, 2])
    assert acts.shape == (3,)
    with pytest.raises(ValueError, match="need obs"):
        episode_inputs(obs[:, 0], actions, starts)
    with pytest.raises(ValueError, match="does not start"):
        episode_inputs(obs, actions, starts, episode=1)
    with pytest.raises(ValueError, match="episode must be an int"):
        episode_inputs(obs, actions, starts, episode=-1)
    with pytest.raises(ValueError, match="null"):
        episode_inputs(obs, actions, np.array([False, True, False, False]))
    obs[2, 3] = 1  # two hot entries
    with pytest.raises(ValueError, match="one-hot"):
        episode_inputs(obs, actions, starts)


def brute_force_deterministic(K):
    """eps = 0: the best action sequence from each start (open loop is optimal without noise), averaged."""
    successor = np.array([[(x + s) % N for x in range(N)] for s in SHIFTS.values()])
    r = ring_rewards(K)
    best = np.full(N, -np.inf)
    for seq in itertools.product(range(4), repeat=K):
        x, total = np.arange(N), np.zeros(N)
        for a in seq:
            x = successor[a, x]
            total += r[x]
        best = np.maximum(best, total)
    return best.mean()


def test_optimal_return_hand_cases_and_brute_force(x64):
    def ceiling(eps, K):
        env = RingWorld(eps, K)
        return optimal_return(env, env.default_params)

    assert ceiling(0.0, 1) == pytest.approx(6 / 12, abs=1e-12)  # 6 states reach a goal in one move
    assert ceiling(0.0, 2) == pytest.approx(15 / 24, abs=1e-12)  # worked out state by state
    for K in range(1, 6):
        assert ceiling(0.0, K) == pytest.approx(brute_force_deterministic(K), abs=1e-12)
    for eps, K in [(0.0, 3), (0.05, 10), (0.3, 7), (0.5, 4)]:  # uniform actions keep pi0 uniform: -1/12
        env = RingWorld(eps, K)
        assert random_return(env, env.default_params) == pytest.approx(-1 / 12, abs=1e-12)
    assert ceiling(0.05, 100) == pytest.approx(0.9425, abs=1e-4)


def test_optimal_return_matches_monte_carlo_of_the_greedy_policy():
    env = RingWorld()
    params = env.default_params
    V, table = optimal_policy(env, params)
    assert V.shape == (101, N) and table.shape == (100, N)
    table = jnp.asarray(table)
    policies = {"optimal": (lambda key, state: table[state.k, state.x], optimal_return(env, params)),
                "random": (random_policy, random_return(env, params))}
    for name, (policy, expected) in policies.items():
        out = jax.jit(jax.vmap(lambda key, policy=policy: rollout(env, params, key, 100, policy)))(
            jax.random.split(jax.random.key(6), 2000))
        returns = np.asarray(out["info_episode_return"])[:, -1]
        assert np.asarray(out["terminated"])[:, -1].all()
        se = returns.std(ddof=1) / np.sqrt(len(returns))
        assert abs(returns.mean() - expected) < 4 * se + 1e-6, (name, returns.mean(), expected, se)


@pytest.mark.parametrize("kwargs, match", [
    (dict(epsilon=-0.01), "epsilon"), (dict(epsilon=0.51), "epsilon"), (dict(epsilon=float("nan")), "epsilon"),
    (dict(epsilon=True), "epsilon"), (dict(episode_length=0), "episode_length"),
    (dict(episode_length=2.5), "episode_length"), (dict(episode_length=True), "episode_length"),
    (dict(fully_observed=1), "fully_observed"),
])
def test_bad_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RingWorld(**kwargs)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="epsilon"):
        ring_transitions(0.6)
    with pytest.raises(ValueError, match="episode_length"):
        ring_rewards(-3)
    env = RingWorld()
    params = env.default_params
    _, state = env.reset(jax.random.key(0), params)
    for action in (4, -1):
        with pytest.raises(ValueError, match="action must lie in"):
            env.step(jax.random.key(1), state, action, params)
    with pytest.raises(ValueError, match="scalar"):
        env.step(jax.random.key(1), state, jnp.array([0, 1]), params)


def test_qmdp_return_lies_between_random_and_the_fully_informed_optimum():
    env = RingWorld()
    params = env.default_params
    returns = np.asarray(qmdp_returns(env, params, jax.random.key(3), 1000))
    se = returns.std(ddof=1) / np.sqrt(len(returns))
    assert random_return(env, params) + 10 * se < returns.mean() < optimal_return(env, params) - 10 * se
    assert np.all(np.abs(returns) <= 1 + 1e-6)
    with pytest.raises(ValueError, match="fully_observed"):
        qmdp_returns(RingWorld(fully_observed=True), params, jax.random.key(0), 2)

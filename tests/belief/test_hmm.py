"""HMM / ControlledHMM containers, validation and sampling (paper 1, eqs. 3-5, column convention).

Sampling is checked against T, E and pi0 with chi-square goodness-of-fit tests at fixed seeds:
a test fails when p < P_MIN = 1e-4 (cells of probability zero must have exactly zero counts).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from memlab.belief.filters import lof_reference
from memlab.belief.hmm import HMM, ControlledHMM, sample
from memlab.logspace import safe_log

P_MIN = 1e-4  # chi-square p-value below which a sampled frequency table is rejected


def _columns(rng, rows, cols, zeros=()):
    """Random column-stochastic (rows, cols) with the given (i, j) entries exactly 0."""
    M = rng.uniform(0.2, 1.0, size=(rows, cols))
    for i, j in zeros:
        M[i, j] = 0.0
    return M / M.sum(axis=0)


def _assert_fits(counts, probs):
    """Counts (n,) drawn from probs (n,): zero-probability cells empty, chi-square p >= P_MIN on the rest."""
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    assert np.all(counts[probs == 0] == 0), (counts, probs)
    pos = probs > 0
    if counts.sum() == 0 or pos.sum() < 2:
        return
    expected = counts.sum() * probs[pos] / probs[pos].sum()
    assert stats.chisquare(counts[pos], expected).pvalue >= P_MIN, (counts, expected)


def _transition_counts(states, actions, A, N):
    """counts[a, i, j] = #{k : a_k = a, x_k = j, x_{k+1} = i} over all runs."""
    x, x_next, a = states[..., :-1].ravel(), states[..., 1:].ravel(), actions.ravel()
    counts = np.zeros((A, N, N))
    np.add.at(counts, (a, x_next, x), 1)
    return counts


# ------------------------------------------------------------------ safe_log


def test_safe_log_zero_is_minus_inf_and_never_nan():
    p = jnp.array([0.0, 1e-30, 0.5, 1.0])
    out = np.asarray(safe_log(p))
    assert out[0] == -np.inf
    np.testing.assert_allclose(out[1:], np.log([1e-30, 0.5, 1.0]), rtol=1e-6)
    grad = jax.grad(lambda q: jnp.sum(jnp.where(q > 0, safe_log(q), 0.0)))(p)
    assert not np.isnan(np.asarray(grad)).any()  # the double-where keeps gradients NaN-free


# ------------------------------------------------------------------ containers and validation


def test_properties_and_transition():
    rng = np.random.default_rng(0)
    T, E, pi0 = _columns(rng, 3, 3), _columns(rng, 4, 3), np.array([0.2, 0.3, 0.5])
    m = HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    assert (m.num_states, m.num_obs) == (3, 4)
    np.testing.assert_array_equal(m.transition(1), m.T)
    Ta = np.stack([_columns(rng, 3, 3) for _ in range(2)])
    c = ControlledHMM(jnp.asarray(Ta), jnp.asarray(E), jnp.asarray(pi0))
    assert (c.num_states, c.num_obs, c.num_actions) == (3, 4, 2)
    np.testing.assert_array_equal(c.transition(1), c.T[1])


def test_validation_is_skipped_for_tracers_so_models_pass_through_vmap():
    rng = np.random.default_rng(1)
    Ts = jnp.asarray(np.stack([_columns(rng, 3, 3) for _ in range(4)]))
    E, pi0 = jnp.asarray(_columns(rng, 2, 3)), jnp.ones(3) / 3
    ys = jnp.array([0, 1, 1, 0])
    out = jax.vmap(lambda T: lof_reference(HMM(T, E, pi0), ys).logits)(Ts)
    one = jax.jit(lof_reference)  # compiled once for the four models
    ref = np.stack([np.asarray(one(HMM(T, E, pi0), ys).logits) for T in Ts])
    np.testing.assert_allclose(out, ref, rtol=1e-6)


GOOD_T = np.array([[0.9, 0.2], [0.1, 0.8]])
GOOD_E = np.array([[0.7, 0.4], [0.3, 0.6]])
GOOD_PI = np.array([0.5, 0.5])


@pytest.mark.parametrize("T, E, pi0, match", [
    (GOOD_T.T, GOOD_E, GOOD_PI, "column-stochastic"),  # row-stochastic: the wrong convention
    (np.array([[1.2, 0.0], [-0.2, 1.0]]), GOOD_E, GOOD_PI, "negative"),  # columns sum to 1, one entry < 0
    (np.array([[np.nan, 0.2], [0.1, 0.8]]), GOOD_E, GOOD_PI, "NaN"),
    (np.eye(3) / 1.0, GOOD_E, GOOD_PI, "shape"),
    (np.ones((2, 3)) / 2, GOOD_E, GOOD_PI, "shape"),
    (GOOD_T, np.array([[0.7, 0.4], [0.4, 0.6]]), GOOD_PI, "column-stochastic"),
    (GOOD_T, np.array([[0.7, 0.4, 0.5], [0.3, 0.6, 0.5]]), GOOD_PI, "shape"),
    (GOOD_T, np.array([[1.1, 0.4], [-0.1, 0.6]]), GOOD_PI, "negative"),
    (GOOD_T, np.array([[np.nan, 0.4], [0.3, 0.6]]), GOOD_PI, "NaN"),
    (GOOD_T, GOOD_E, np.array([0.5, 0.6]), "sum to 1"),
    (GOOD_T, GOOD_E, np.array([1.5, -0.5]), "negative"),
    (GOOD_T, GOOD_E, np.array([np.nan, 1.0]), "NaN"),
    (GOOD_T, GOOD_E, np.array([[0.5, 0.5]]), "vector"),
])
def test_hmm_rejects_bad_input(T, E, pi0, match):
    with pytest.raises(ValueError, match=match):
        HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))


def test_stochastic_tolerance_is_tight():
    HMM(jnp.asarray(GOOD_T * (1 + 1e-8)), jnp.asarray(GOOD_E), jnp.asarray(GOOD_PI))  # rounding is fine
    with pytest.raises(ValueError, match="column-stochastic"):
        HMM(jnp.asarray(GOOD_T * (1 + 1e-3)), jnp.asarray(GOOD_E), jnp.asarray(GOOD_PI))


@pytest.mark.parametrize("T, match", [
    (GOOD_T, "shape"),  # 2-D: needs (A, N, N)
    (np.stack([GOOD_T, GOOD_T.T]), "column-stochastic"),  # the second action is row-stochastic
    (np.stack([GOOD_T, np.array([[1.5, 0.0], [-0.5, 1.0]])]), "negative"),
    (np.ones((2, 3, 3)) / 3, "shape"),
])
def test_controlled_hmm_rejects_bad_input(T, match):
    with pytest.raises(ValueError, match=match):
        ControlledHMM(jnp.asarray(T), jnp.asarray(GOOD_E), jnp.asarray(GOOD_PI))
    with pytest.raises(ValueError, match="E must have shape"):
        ControlledHMM(jnp.stack([jnp.asarray(GOOD_T)] * 2), jnp.ones((2, 3)) / 2, jnp.asarray(GOOD_PI))


# ------------------------------------------------------------------ sampling: plain HMM
# Every `sample` call compiles anew (~1-3 s), so the sampled data are shared between tests.

N_PLAIN, S_PLAIN = 4, 3
T_PLAIN = _columns(np.random.default_rng(6), N_PLAIN, N_PLAIN, zeros=[(0, 1), (2, 1), (3, 3)])
E_PLAIN = _columns(np.random.default_rng(7), S_PLAIN, N_PLAIN, zeros=[(1, 0), (2, 2)])
PI_PLAIN = np.array([0.5, 0.0, 0.2, 0.3])


def _plain_model():
    return HMM(jnp.asarray(T_PLAIN), jnp.asarray(E_PLAIN), jnp.asarray(PI_PLAIN))


@pytest.fixture(scope="module")
def plain():
    """2,000 runs of 20 steps: 40,000 transitions and emissions, 2,000 draws of x_0."""
    return sample(_plain_model(), jax.random.key(0), 20, batch=2000)


def test_sample_shapes_dtypes_and_determinism(plain):
    x, y = np.asarray(plain.states), np.asarray(plain.observations)
    assert x.shape == (2000, 21) and y.shape == (2000, 20) and plain.actions.shape == (2000, 20)
    assert plain.states.dtype == jnp.int32 and plain.observations.dtype == jnp.int32
    assert np.all(np.asarray(plain.actions) == 0)
    assert x.min() >= 0 and x.max() < N_PLAIN and y.min() >= 0 and y.max() < S_PLAIN
    assert len({tuple(row) for row in y}) > 1900  # runs get different keys
    again = sample(_plain_model(), jax.random.key(0), 20, batch=2000)
    np.testing.assert_array_equal(x, again.states)
    np.testing.assert_array_equal(y, again.observations)


def test_initial_distribution_is_respected(plain):
    x0 = np.asarray(plain.states[:, 0])
    _assert_fits(np.bincount(x0, minlength=N_PLAIN), PI_PLAIN)


def test_transition_and_emission_frequencies_match_T_and_E(plain):
    x, y = np.asarray(plain.states), np.asarray(plain.observations)
    counts = _transition_counts(x, np.zeros_like(y), 1, N_PLAIN)[0]
    for j in range(N_PLAIN):
        _assert_fits(counts[:, j], T_PLAIN[:, j])
    emit = np.zeros((S_PLAIN, N_PLAIN))
    np.add.at(emit, (y.ravel(), x[:, 1:].ravel()), 1)  # y_k is emitted by x_k, k >= 1
    for j in range(N_PLAIN):
        _assert_fits(emit[:, j], E_PLAIN[:, j])


def test_the_sampling_tests_can_fail(plain):
    """Guard against a vacuous check: the row convention T^T and the shifted emission pairing are rejected."""
    x, y = np.asarray(plain.states), np.asarray(plain.observations)
    counts = _transition_counts(x, np.zeros_like(y), 1, N_PLAIN)[0]
    T_rows = T_PLAIN.T / T_PLAIN.T.sum(axis=0)
    with pytest.raises(AssertionError):
        for j in range(N_PLAIN):
            _assert_fits(counts[:, j], T_rows[:, j])
    emit = np.zeros((S_PLAIN, N_PLAIN))
    np.add.at(emit, (y.ravel(), x[:, :-1].ravel()), 1)  # wrong: pairs y_k with x_{k-1}
    with pytest.raises(AssertionError):
        for j in range(N_PLAIN):
            _assert_fits(emit[:, j], E_PLAIN[:, j])


def test_observation_k_is_emitted_by_state_k():
    """y_k comes from x_k (k >= 1), not from x_{k-1}: exact check with E = I and a cyclic T (unbatched path)."""
    N = 5
    sigma = np.roll(np.arange(N), 1)  # j -> j + 1 mod N
    T = np.zeros((N, N))
    T[sigma, np.arange(N)] = 1.0
    m = HMM(jnp.asarray(T), jnp.eye(N), jnp.ones(N) / N)
    tr = sample(m, jax.random.key(3), 12)
    x, y = np.asarray(tr.states), np.asarray(tr.observations)
    assert x.shape == (13,) and y.shape == (12,)
    np.testing.assert_array_equal(x[1:], sigma[x[:-1]])
    np.testing.assert_array_equal(y, x[1:])


# ------------------------------------------------------------------ sampling: controlled HMM


def _controlled(rng, A=3, N=4, S=3):
    T = np.stack([_columns(rng, N, N, zeros=[(a % N, (a + 1) % N)]) for a in range(A)])
    return T, ControlledHMM(jnp.asarray(T), jnp.asarray(_columns(rng, S, N)), jnp.ones(N) / N)


def test_controlled_sampling_with_given_actions():
    rng = np.random.default_rng(10)
    T, m = _controlled(rng)
    actions = rng.integers(0, 3, size=(400, 100))
    tr = sample(m, jax.random.key(11), 100, batch=400, actions=jnp.asarray(actions))
    np.testing.assert_array_equal(tr.actions, actions)
    counts = _transition_counts(np.asarray(tr.states), actions, 3, 4)
    for a in range(3):
        for j in range(4):
            _assert_fits(counts[a, :, j], T[a, :, j])


def test_controlled_sampling_broadcasts_one_action_sequence():
    rng = np.random.default_rng(12)
    _, m = _controlled(rng)
    acts = jnp.asarray(rng.integers(0, 3, size=100))
    tr = sample(m, jax.random.key(13), 100, batch=400, actions=acts)  # the shapes above: compiled once
    np.testing.assert_array_equal(tr.actions, np.broadcast_to(acts, (400, 100)))


def test_controlled_sampling_with_a_closed_loop_policy():
    """policy(key, y, k) sees the last observation (y = -1 before y_1) and its own key:
    a_0 = coin, a_k = (y_k + coin) mod 3 with a fair coin from the key."""
    rng = np.random.default_rng(14)
    T, m = _controlled(rng)

    def policy(key, y, k):
        return (jnp.maximum(y, 0) + jax.random.bernoulli(key).astype(jnp.int32)) % 3

    tr = sample(m, jax.random.key(15), 100, batch=400, policy=policy)
    a, y = np.asarray(tr.actions), np.asarray(tr.observations)
    assert set(np.unique(a[:, 0])) == {0, 1}
    coin = (a[:, 1:] - y[:, :-1]) % 3
    assert set(np.unique(coin)) == {0, 1}
    assert stats.binomtest(int(coin.sum()), coin.size).pvalue >= P_MIN  # the coin is fair
    counts = _transition_counts(np.asarray(tr.states), a, 3, 4)
    for act in range(3):
        for j in range(4):
            _assert_fits(counts[act, :, j], T[act, :, j])


# ------------------------------------------------------------------ sampling: bad input


def test_sample_rejects_bad_input():
    rng = np.random.default_rng(18)
    _, cm = _controlled(rng)
    m = HMM(jnp.asarray(GOOD_T), jnp.asarray(GOOD_E), jnp.asarray(GOOD_PI))
    key = jax.random.key(0)
    policy = lambda key, y, k: 0  # noqa: E731
    with pytest.raises(ValueError, match="num_steps"):
        sample(m, key, 0)
    with pytest.raises(ValueError, match="batch"):
        sample(m, key, 3, batch=0)
    with pytest.raises(ValueError, match="ControlledHMM"):
        sample(m, key, 3, actions=jnp.zeros(3, int))
    with pytest.raises(ValueError, match="ControlledHMM"):
        sample(m, key, 3, policy=policy)
    with pytest.raises(ValueError, match="exactly one"):
        sample(cm, key, 3)
    with pytest.raises(ValueError, match="exactly one"):
        sample(cm, key, 3, actions=jnp.zeros(3, int), policy=policy)
    with pytest.raises(ValueError, match="num_steps"):
        sample(cm, key, 3, actions=jnp.zeros(4, int))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        sample(cm, key, 3, actions=jnp.array([0, 3, 1]))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        sample(cm, key, 3, batch=2, actions=jnp.array([[0, 1, 1], [0, -1, 2]]))
    with pytest.raises(ValueError):  # two action sequences for a batch of three
        sample(cm, key, 3, batch=3, actions=jnp.array([[0, 1, 1], [0, 1, 2]]))

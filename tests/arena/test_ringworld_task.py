"""The hmm-ringworld task (RingWorld's observation stream under random actions): its reference against brute-force
enumeration of state paths (float64 NumPy), its trivial predictor against the closed-form conditional law and Monte
Carlo, and its samples against the RingWorld environment's own dynamics."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.arena.hmm import ActionHistory, HMMTask, ringworld
from memlab.arena.tasks import make_task
from memlab.belief import ControlledHMM, RingWorld, random_policy


def _float64(hmm):
    return (np.asarray(a, np.float64) for a in (hmm.T, hmm.E, hmm.pi0))


def _brute_force_predictive(hmm, ys, actions):
    """p(y_{t+1} = s | y_{1:t}, a_{0:t}) (n, S) for t = 1..n, by summing over every state path x_0..x_{n+1}."""
    T, E, pi0 = _float64(hmm)
    n, N = len(ys), len(pi0)
    paths = np.array(list(itertools.product(range(N), repeat=n + 2)))  # (N^(n+2), n + 2)
    weight = pi0[paths[:, 0]]
    for k in range(1, n + 2):
        weight = weight * T[actions[k - 1], paths[:, k], paths[:, k - 1]]  # p(x_k | x_{k-1}, a_{k-1})
    out = []
    for t in range(1, n + 1):
        seen = weight * np.prod([E[ys[k - 1], paths[:, k]] for k in range(1, t + 1)], axis=0)
        joint = np.array([np.sum(seen * E[s, paths[:, t + 1]]) for s in range(E.shape[0])])
        out.append(joint / joint.sum())
    return np.array(out)


def _conditional_law(hmm):
    """p(y_{t+1} | y_t, a_t) (S, A, S) with x_t uniform (the stationary law of every doubly stochastic T(a))."""
    T, E, _ = _float64(hmm)
    joint = np.einsum("sx,x,abx->sab", E, np.full(T.shape[-1], 1.0 / T.shape[-1]), np.einsum("by,ayx->abx", E, T))
    return joint / joint.sum(-1, keepdims=True), joint / T.shape[0]


def test_reference_is_the_exact_predictive_distribution_given_the_actions():
    task = make_task("hmm-ringworld")
    batch = task.sample(jax.random.PRNGKey(0), 3, 3)
    reference = np.exp(np.asarray(task.reference(batch), np.float64))
    for b in range(3):
        ys, actions = np.asarray(batch.aux.observations[b]), np.asarray(batch.aux.actions[b])
        np.testing.assert_allclose(reference[b], _brute_force_predictive(task.hmm, ys, actions), rtol=2e-5)
    # the predictive law depends on the action taken: the same history under another a_t predicts differently
    other = batch._replace(aux=ActionHistory(batch.aux.observations, batch.aux.actions.at[:, -1].add(1) % 4))
    assert np.max(np.abs(np.exp(np.asarray(task.reference(other))[:, -1]) - reference[:, -1])) > 0.01


def test_trivial_is_the_memoryless_conditional_at_every_step():
    task = make_task("hmm-ringworld")
    batch = task.sample(jax.random.PRNGKey(1), 4, 50)
    conditional, _ = _conditional_law(task.hmm)
    ys, actions = np.asarray(batch.aux.observations), np.asarray(batch.aux.actions[:, 1:])
    np.testing.assert_allclose(np.exp(np.asarray(task.trivial(batch))), conditional[ys, actions], rtol=1e-5)


def test_trivial_loss_is_the_conditional_entropy_and_matches_the_sample_frequencies():
    """Monte Carlo: the trivial's mean loss is H(y_{t+1} | y_t, a_t), and its probabilities are the conditional
    frequencies of the task's own samples (sequences are independent: standard errors over sequences)."""
    task = make_task("hmm-ringworld")
    batch = task.sample(jax.random.PRNGKey(2), 4000, 64)
    conditional, joint = _conditional_law(task.hmm)
    entropy = -np.sum(joint * np.log(conditional))
    loss = np.asarray(task.loss(task.trivial(batch), batch), np.float64).mean(axis=1)
    assert abs(loss.mean() - entropy) < 4 * loss.std() / np.sqrt(len(loss)), (loss.mean(), entropy)
    ys, actions = np.asarray(batch.aux.observations), np.asarray(batch.aux.actions[:, 1:])
    counts = np.zeros(conditional.shape)
    np.add.at(counts, (ys, actions, np.asarray(batch.targets)), 1.0)
    frequencies = counts / counts.sum(-1, keepdims=True)
    se = np.sqrt(conditional * (1 - conditional) / counts.sum(-1, keepdims=True))
    assert np.max(np.abs(frequencies - conditional) / se) < 5  # the rows hold ~16,000 (y_t, a_t) pairs each


def _triple_frequencies(ys, actions, next_ys):
    """Per sequence, the frequencies of (y_t, a_t, y_{t+1}) (B, 64): ys, actions, next_ys (B, L) int."""
    index = (ys * 4 + actions) * 4 + next_ys
    return np.stack([np.bincount(row, minlength=64) / len(row) for row in index])


def _environment_triples(num_envs, num_steps, key):
    """(y_k, a_k, y_{k+1}) for k = 1..num_steps (each (num_envs, num_steps) int) from the RingWorld environment's own
    reset and step under uniformly random actions (one episode long enough for no reset)."""
    env = RingWorld(episode_length=num_steps + 10)
    params = env.default_params
    keys = jax.random.split(key, num_envs)

    @jax.jit
    def step(keys, state):
        k_action, k_step = jax.vmap(jax.random.split, out_axes=1)(keys)
        actions = jax.vmap(random_policy)(k_action, state)
        _, state, *_, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(k_step, state, actions, params)
        return state, actions, jnp.argmax(info["next_obs"], -1)

    state = jax.vmap(lambda k: env.reset(k, params)[1])(keys)
    columns = []
    for k in range(num_steps + 1):  # a_k and y_{k+1}
        keys = jax.vmap(lambda key, k=k: jax.random.fold_in(key, k))(keys)
        state, actions, y_next = step(keys, state)
        columns.append((np.asarray(actions), np.asarray(y_next)))
    actions, ys = (np.stack(c, axis=1) for c in zip(*columns, strict=True))  # a_0..a_K, y_1..y_{K+1}
    return ys[:, :-1], actions[:, 1:], ys[:, 1:]


def test_samples_follow_the_ringworld_environment():
    """The task's (y_t, a_t, y_{t+1}) against the RingWorld environment's own step under random actions; the same
    samples with the action before y_t in place of a_t are told apart (the comparison can fail)."""
    from_env = _triple_frequencies(*_environment_triples(1000, 200, jax.random.PRNGKey(3)))
    task = make_task("hmm-ringworld")
    batch = task.sample(jax.random.PRNGKey(4), 1000, 200)
    ys, actions = np.asarray(batch.aux.observations), np.asarray(batch.aux.actions)

    def largest_z(from_task):
        return np.max(np.abs(from_env.mean(0) - from_task.mean(0)) /
                      np.sqrt((from_env.var(0) + from_task.var(0)) / len(ys)))

    assert largest_z(_triple_frequencies(ys, actions[:, 1:], np.asarray(batch.targets))) < 5  # measured 2.6
    assert largest_z(_triple_frequencies(ys, actions[:, :-1], np.asarray(batch.targets))) > 10  # measured 16


def test_inputs_are_the_action_then_the_observation():
    task = make_task("hmm-ringworld")
    batch = task.sample(jax.random.PRNGKey(5), 2, 9)
    assert task.input_size == 8 and task.output_size == 4 and batch.inputs.shape == (2, 9, 8)
    np.testing.assert_array_equal(np.argmax(batch.inputs[..., :4], -1), batch.aux.actions[:, 1:])
    np.testing.assert_array_equal(np.argmax(batch.inputs[..., 4:], -1), batch.aux.observations)
    np.testing.assert_array_equal(batch.aux.observations[:, 1:], batch.targets[:, :-1])


def test_memory_matters_and_the_unseen_first_action_is_refused():
    task = make_task("hmm-ringworld")
    batch = task.sample(jax.random.PRNGKey(6), 512, 64)
    reference, trivial = (float(task.loss(p, batch).mean()) for p in (task.reference(batch), task.trivial(batch)))
    assert reference < trivial - 0.08  # 1.24 against 1.347 nats
    hmm = ringworld()
    skewed = ControlledHMM(hmm.T, hmm.E, jnp.zeros(12).at[0].set(1.0))  # T(a) pi0 then depends on a_0
    with pytest.raises(ValueError, match="the model never sees the first action"):
        HMMTask(skewed)

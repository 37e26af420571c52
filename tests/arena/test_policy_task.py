"""The policy-eval task: its target against (I - gamma P)^{-1} r, its reference against a float64 NumPy TD fixed-point
solve (and, with one-hot features, against ictd's tabular TD fixed point), its trivial predictor against a
least-squares fit, the interface, a tiny training run, and the compiled theta* against the literal transformer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.arena.compiled import compiled_model, softmax_ictd
from memlab.arena.policy import PolicyEvalTask, td_fixed_point, value_losses
from memlab.arena.task import reference_is_exact
from memlab.arena.tasks import make_task
from memlab.arena.train import TrainConfig, make_train, score
from memlab.ictd.softmax_td import tabular_td_fixed_point
from memlab.ictd.transformer import forward, make_prompt, readout, theta_star

TASK = PolicyEvalTask()


@pytest.fixture(scope="module")
def batch():
    return jax.jit(TASK.sample, static_argnums=(1, 2))(jax.random.key(0), 512, 64)


def _trajectory(batch, b):
    """float64 x(S_0..S_n) (n + 1, d), rewards (n,), P (m, m), r (m,), states (n + 1,) of sequence b."""
    aux = batch.aux
    states = np.asarray(aux.states[b])
    X = np.asarray(aux.tasks.features[b], np.float64)
    return (X[states], np.asarray(aux.rewards[b], np.float64), np.asarray(aux.tasks.mrp.P[b], np.float64),
            np.asarray(aux.tasks.mrp.r[b], np.float64), states)


def test_the_inputs_are_the_trajectory_and_the_targets_its_true_values(batch):
    for b in range(4):
        x, rewards, P, r, states = _trajectory(batch, b)
        v = np.linalg.solve(np.eye(len(r)) - TASK.gamma * P, r)  # (I - gamma P)^{-1} r, float64
        inputs, targets = np.asarray(batch.inputs[b]), np.asarray(batch.targets[b, :, 0])
        np.testing.assert_allclose(targets[1::2], v[states[1:]], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(rewards, r[states[:-1]], rtol=1e-6)  # R_k = r(S_{k-1})
        d = TASK.feature_dim
        np.testing.assert_allclose(inputs[0::2], np.concatenate([x[:-1], rewards[:, None], x[1:], 0 * x[1:, :1]], 1),
                                   rtol=1e-6)
        np.testing.assert_array_equal(inputs[1::2, :d], x[1:])
        np.testing.assert_array_equal(inputs[1::2, d:], np.tile([0.0] * (d + 1) + [1.0], (len(x) - 1, 1)))


def test_the_reference_is_the_ridge_td_fixed_point(batch):
    reference = np.asarray(TASK.reference(batch)[..., 0])
    for b in range(8):
        x, rewards, *_ = _trajectory(batch, b)
        for k in range(1, len(rewards) + 1):
            A = sum(np.outer(x[j - 1], x[j - 1] - TASK.gamma * x[j]) for j in range(1, k + 1))
            b_k = sum(x[j - 1] * rewards[j - 1] for j in range(1, k + 1))
            w = np.linalg.solve(A.T @ A + TASK.ridge * np.eye(len(b_k)), A.T @ b_k)  # argmin |Aw - b|^2 + l |w|^2
            np.testing.assert_allclose(reference[b, 2 * k - 2:2 * k], w @ x[k], rtol=1e-5, atol=1e-5)


def test_with_one_hot_features_the_td_fixed_point_is_tabular_td(x64):
    m, gamma = 5, 0.8
    states = jnp.array([0, 1, 2, 3, 4, 2, 0, 3, 1, 4, 4, 0, 2])  # every state is a source
    r = jnp.array([0.3, -1.0, 0.5, 2.0, -0.2])
    x = jax.nn.one_hot(states, m, dtype=jnp.float64)
    w = td_fixed_point(x[:-1], r[states[:-1]], x[1:], gamma, 1e-12)[-1]
    np.testing.assert_allclose(w, tabular_td_fixed_point(states, r, len(states) - 1, gamma, m), rtol=1e-8)


def test_the_trivial_predictor_is_the_best_without_memory():
    """A least-squares fit of v(S_k) on functions of what a memoryless model sees at the query step (1, x, the
    products x_i x_j, the context length k) explains no more than chance: R^2 < 4 p / N (about p / N when the
    conditional mean is 0). The same fit at the transition step, whose reward carries information about w*, does."""
    data = TASK.sample(jax.random.key(1), 3000, 16)
    d, v = TASK.feature_dim, np.asarray(data.targets[:, 1::2, 0], np.float64).ravel()

    def r_squared(inputs):
        x = np.asarray(inputs, np.float64).reshape(-1, inputs.shape[-1])
        k = np.tile(np.eye(inputs.shape[1]), (inputs.shape[0], 1))
        features = np.concatenate([x, np.einsum("ni,nj->nij", x, x)[:, *np.triu_indices(x.shape[1])], k], 1)
        fit = np.linalg.lstsq(features, v, rcond=None)[0]
        return 1.0 - np.mean((v - features @ fit) ** 2) / np.mean(v**2), features.shape[1]

    query, p = r_squared(data.inputs[:, 1::2, :d])
    assert query < 4 * p / len(v), (query, p, len(v))
    np.testing.assert_allclose(np.mean(v**2), d / 9, rtol=0.03)  # E[(w*^T x)^2] = d / 9: the trivial loss
    transition, _ = r_squared(data.inputs[:, 0::2, :2 * d + 1])
    assert transition > 0.05


def test_the_interface_and_the_registry(batch):
    task = make_task("policy-eval")
    assert task == TASK and not reference_is_exact(task)
    assert (task.input_size, task.output_size) == (10, 1)
    assert batch.inputs.shape == (512, 64, 10) and batch.targets.shape == (512, 64, 1)
    steps = np.arange(64)
    np.testing.assert_array_equal(batch.mask[0], (steps % 2 == 1) & (steps // 2 + 1 >= task.feature_dim))
    for predictor in (task.reference, task.trivial):
        assert predictor(batch).shape == (512, 64, 1)
    assert task.loss(task.trivial(batch), batch).shape == (512, 64)
    odd = task.sample(jax.random.key(2), 3, 7)
    assert odd.inputs.shape == (3, 7, 10) and task.reference(odd).shape == (3, 7, 1)
    with pytest.raises(ValueError, match="ridge"):
        PolicyEvalTask(ridge=0.0)
    with pytest.raises(ValueError, match="gamma"):
        PolicyEvalTask(gamma=1.0)


def test_the_reference_is_well_above_the_trivial_predictor(batch):
    losses = value_losses(TASK, batch)
    assert losses.oracle == 0.0
    np.testing.assert_allclose(losses.trivial, TASK.feature_dim / 9, rtol=0.05)
    assert losses.td_fixed_point < 0.25 * losses.trivial  # measured: 0.063 against 0.446
    assert losses.td_by_context[-1] < 0.5 * losses.td_by_context[TASK.feature_dim - 1]  # it learns in context


def test_a_tiny_training_run_gives_a_finite_loss():
    held_out = TASK.sample(jax.random.key(3), 16, 16)
    train = make_train(TASK, "gru", 8, 1, TrainConfig(steps=4, batch=4, length=16, eval_every=2), held_out)
    result = jax.jit(train)(jax.random.key(4))
    assert result.train_loss.shape == (4,) and result.val_loss.shape == (2,)
    assert np.all(np.isfinite(result.train_loss)) and np.all(np.isfinite(result.val_loss))


def test_the_compiled_theta_star_is_the_transformer_on_every_prefix():
    d, gamma = TASK.feature_dim, TASK.gamma
    predict = softmax_ictd(TASK, num_layers=3)
    V, A = theta_star(d)
    short = TASK.sample(jax.random.key(5), 3, 12)  # every prefix length compiles its own forward: keep them few
    for b in range(3):
        outputs = np.asarray(predict(short.inputs[b])[:, 0])
        x, rewards = (jnp.asarray(a, jnp.float32) for a in _trajectory(short, b)[:2])
        for k in range(1, len(rewards) + 1):  # the prompt (13) of transitions 1..k, the query S_k
            value = readout(forward(make_prompt(x[:k + 1], rewards[:k]), V, A, gamma, 3, form="dual")[-1])
            np.testing.assert_allclose(outputs[2 * k - 2:2 * k], value, rtol=1e-5, atol=1e-5)


def test_the_compiled_theta_star_is_a_stated_approximation(batch):
    """Weighted softmax TD is not linear TD and does not contract on these features (arena.compiled): 3 layers use
    the context (gap below 1) but stay far from the TD fixed point (measured 0.56)."""
    compiled = compiled_model(TASK)
    assert not compiled.exact
    scores = jax.jit(lambda b: score(TASK, compiled.model, b))(batch)
    assert 0.3 < float(scores.gap) < 0.8
    gradient = jax.grad(lambda inputs: compiled.model(inputs)[-1, 0])(batch.inputs[0])
    assert np.all(np.isfinite(gradient)) and np.any(gradient != 0)

"""Algorithm 1 (multi-task semi-gradient TD pretraining) under the masks of App. F.2 / F.5.

One tiny training run per mask is shared by several tests (module fixtures) to keep compile time down.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import optax
import pytest

from memlab.ictd.boyan import boyan_chain
from memlab.ictd.emergence import a_emergence, v_emergence
from memlab.ictd.mrp import sample_trajectory
from memlab.ictd.pretrain import (
    PretrainConfig,
    evaluate,
    init_params,
    mask_relaxation_config,
    masks,
    rho_schedule,
    sample_windows,
    td_errors,
    td_loss,
    value,
)
from memlab.ictd.train import make_train, train_seeds

TINY = PretrainConfig(m=8, d=3, n=4, batch_size=8, minibatches_per_epoch=3, num_epochs=6, num_seeds=2)


def mask_ref(d: int, a_mask: str) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (106), (108), (112) written out entry by entry (0-based rows d+1, d+2 = the paper's d+2, d+3)."""
    D = d + 3
    V = np.array([[1.0 if i >= D - 2 else 0.0 for _ in range(D)] for i in range(D)])
    if a_mask == "full":
        A = np.array([[1.0 if (i < d and j < d) else 0.0 for j in range(D)] for i in range(D)])
    else:
        A = np.array([[0.0 if (i >= d and j >= d) else 1.0 for j in range(D)] for i in range(D)])
    return V, A


def tf_ref(V: np.ndarray, A: np.ndarray, Z0: np.ndarray, gamma: float, L: int, tau: float, rho: float) -> float:
    """TF_L(Z0) of the looped single-head + TSM block in NumPy float64, eq. (21)-(23), (104), (5)."""
    D, n1 = Z0.shape
    n, d = n1 - 1, D - 3
    U = np.eye(D)
    U[d + 1, d + 1] = 0.0  # eq. (22), 0-based
    W = np.zeros((D, D))
    W[d + 1, d + 2] = gamma
    Pi = np.eye(n1, k=-1)  # eq. (16)
    Z = Z0.astype(np.float64)
    for _ in range(L):
        S = (Z.T @ A @ Z)[:n] / tau  # query row masked as a source, eq. (2)
        K = np.exp(S - S.max(axis=0))
        K = (1 - rho) * K / K.sum(axis=0) + rho * np.eye(n, n1)  # eq. (104)
        K = np.vstack([K, np.zeros((1, n1))])
        Z_half = Z + V @ Z @ K  # eq. (21)
        Z = U @ Z_half + W @ Z_half @ Pi  # eq. (23)
    return float(Z[-1, -1])


@pytest.mark.parametrize("a_mask", ["full", "relaxed"])
def test_value_matches_numpy_looped_block(a_mask):
    config = PretrainConfig(m=12, d=3, n=5, batch_size=4, minibatches_per_epoch=1, a_mask=a_mask, init_gain=4.0)
    params = init_params(jax.random.key(11), config)
    w = sample_windows(jax.random.key(12), config)
    V, A = np.asarray(params.V, np.float64), np.asarray(params.A, np.float64)
    for rho in (0.0, 0.4):
        got = np.asarray(jax.vmap(value, in_axes=(None, 0, None, None))(params, w.prompts, config, rho))
        ref = [tf_ref(V, A, np.asarray(Z), config.gamma, config.num_layers, config.tau, rho) for Z in w.prompts]
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module", params=["full", "relaxed"])
def tiny_run(request):
    config = dataclasses.replace(TINY, a_mask=request.param, rho_start=0.2, rho_end=0.5, rho_anneal_steps=10)
    return config, train_seeds(config, jax.random.key(0))


@pytest.mark.parametrize("a_mask", ["full", "relaxed"])
@pytest.mark.parametrize("d", [1, 4])
def test_masks_match_equations(d, a_mask):
    got = masks(d, a_mask)
    V_ref, A_ref = mask_ref(d, a_mask)
    np.testing.assert_array_equal(got.V, V_ref)
    np.testing.assert_array_equal(got.A, A_ref)


def test_init_is_masked_xavier_normal_with_gain():
    config = PretrainConfig(d=4)
    p = jax.vmap(lambda k: init_params(k, config))(jax.random.split(jax.random.key(1), 400))
    V_mask, A_mask = mask_ref(4, "full")
    assert np.all(np.asarray(p.V)[:, V_mask == 0] == 0) and np.all(np.asarray(p.A)[:, A_mask == 0] == 0)
    trainable = np.concatenate([np.asarray(p.V)[:, V_mask == 1].ravel(), np.asarray(p.A)[:, A_mask == 1].ravel()])
    std = 0.1 * np.sqrt(2.0 / (7 + 7))  # torch xavier_normal_ on a 7 x 7 matrix, gain 0.1
    np.testing.assert_allclose(trainable.std(), std, rtol=0.05)
    assert abs(trainable.mean()) < 5 * std / np.sqrt(trainable.size)


def test_sample_windows_structure():
    config = PretrainConfig(m=16, d=4, n=5, batch_size=20, minibatches_per_epoch=2)
    w = sample_windows(jax.random.key(3), config)
    d, n, N = 4, 5, 40
    P = np.asarray(w.prompts)
    assert P.shape == (N + 1, d + 3, n + 1) and w.reward.shape == (N,) and w.v_query.shape == (N,)
    np.testing.assert_array_equal(P[1:, : d + 1, : n - 1], P[:-1, : d + 1, 1:n])  # sliding window of eq. (13)
    np.testing.assert_array_equal(P[:-1, :d, n], P[1:, :d, n - 1])  # query x_{t+n} is window t+1's last context
    np.testing.assert_array_equal(P[:, d, n], 0.0)  # no reward under the query
    np.testing.assert_array_equal(P[:, d + 1 :, :], 0.0)  # empty memory rows
    np.testing.assert_array_equal(np.asarray(w.reward), P[1:, d, n - 1])  # R_{t+n+1}
    # v* is linear in the features (Algorithm 2): v_query must be X_q w_* for one w_*
    Xq = P[:-1, :d, n]
    w_fit, *_ = np.linalg.lstsq(Xq.astype(np.float64), np.asarray(w.v_query, np.float64), rcond=None)
    np.testing.assert_allclose(Xq @ w_fit, w.v_query, atol=1e-5)
    assert np.all(np.abs(w_fit) < 1)  # w_* ~ U(-1, 1)^d


@pytest.mark.parametrize("k", [0, 1])
def test_windows_against_the_trajectory_for_both_query_offsets(k):
    """Window t: context x(S_t..S_{t+n-1}), R_{t+1..t+n}; query x(S_{t+n+k}); TD reward R_{t+n+k+1}; v*(S_{t+n+k})."""
    config = PretrainConfig(m=16, d=4, n=5, batch_size=10, minibatches_per_epoch=1, query_offset=k)
    key = jax.random.key(6)
    w = sample_windows(key, config)
    k_task, k_traj = jax.random.split(key)  # the same draws, made here from the trajectory itself
    task = boyan_chain(k_task, config.m, config.d, config.gamma)
    states, rewards = sample_trajectory(task.mrp, k_traj, config.rollout_length)
    X, R, v = (np.asarray(a) for a in (task.features[states], rewards, task.v_star[states]))
    n, N = config.n, config.num_windows
    assert len(R) == N + n + k
    P = np.asarray(w.prompts)
    for t in range(N + 1):
        np.testing.assert_array_equal(P[t, :4, :n], X[t:t + n].T)
        np.testing.assert_array_equal(P[t, 4, :n], R[t:t + n])
        np.testing.assert_array_equal(P[t, :4, n], X[t + n + k])
    np.testing.assert_array_equal(np.asarray(w.reward), R[n + k:N + n + k])
    np.testing.assert_array_equal(np.asarray(w.v_query), v[n + k:N + n + k])
    with pytest.raises(ValueError, match="query_offset"):
        PretrainConfig(query_offset=-1).validate()


@pytest.mark.parametrize("a_mask", ["full", "relaxed"])
def test_semi_gradient_equals_minus_delta_times_grad_value_and_is_zero_on_masked_entries(a_mask):
    config = PretrainConfig(m=12, d=3, n=4, batch_size=6, minibatches_per_epoch=1, a_mask=a_mask, init_gain=3.0)
    params = init_params(jax.random.key(4), config)
    w = sample_windows(jax.random.key(5), config)
    rho = 0.3
    grads = jax.grad(lambda p: td_loss(p, w, config, rho)[0])(params)
    # reference: per-window values and gradients, delta with a fixed bootstrap (Algorithm 1 lines 11-12)
    values = np.asarray(jax.vmap(lambda Z: value(params, Z, config, rho))(w.prompts))
    g = jax.vmap(lambda Z: jax.grad(value)(params, Z, config, rho))(w.prompts[:-1])
    delta = np.asarray(w.reward) + config.gamma * values[1:] - values[:-1]
    ref_V = -np.einsum("t,tij->ij", delta, np.asarray(g.V)) / 6
    ref_A = -np.einsum("t,tij->ij", delta, np.asarray(g.A)) / 6
    np.testing.assert_allclose(grads.V, ref_V, atol=1e-5)
    np.testing.assert_allclose(grads.A, ref_A, atol=1e-5)
    V_mask, A_mask = mask_ref(3, a_mask)
    assert np.all(np.asarray(grads.V)[V_mask == 0] == 0) and np.all(np.asarray(grads.A)[A_mask == 0] == 0)
    assert np.abs(np.asarray(grads.V)[-1]).max() > 0 and np.abs(np.asarray(grads.A)[A_mask == 1]).max() > 0


def test_value_ignores_masked_entries_and_td_errors_match_full_gradient_form():
    config = PretrainConfig(m=12, d=3, n=4, batch_size=5, minibatches_per_epoch=1)
    params = init_params(jax.random.key(6), config)
    w = sample_windows(jax.random.key(7), config)
    dirty = type(params)(params.V.at[0, 0].set(9.0), params.A.at[5, 5].set(-4.0))
    np.testing.assert_array_equal(td_errors(dirty, w, config), td_errors(params, w, config))
    np.testing.assert_array_equal(td_errors(params, w, config, semi_gradient=False), td_errors(params, w, config))


def test_masked_entries_stay_exactly_zero(tiny_run):
    config, result = tiny_run
    V_mask, A_mask = mask_ref(config.d, config.a_mask)
    for p in (result.params, result.best.params, result.best_mirrored.params):
        assert np.all(np.asarray(p.V)[:, V_mask == 0] == 0)
        assert np.all(np.asarray(p.A)[:, A_mask == 0] == 0)
        assert not np.any(np.signbit(np.asarray(p.V)[:, V_mask == 0]))  # +0.0, not -0.0
    init = jax.vmap(lambda k: init_params(jax.random.split(k)[0], config))(jax.random.split(jax.random.key(0), 2))
    assert np.any(np.asarray(result.params.A) != np.asarray(init.A))  # trainable entries did move


def test_trace_shapes_rho_and_best_checkpoint(tiny_run):
    config, result = tiny_run
    S, T = config.num_seeds, config.num_steps
    for name in ("V_em", "A_em", "V_em_neg", "A_em_neg", "d_t", "loss", "abs_delta", "rho"):
        trace = np.asarray(getattr(result.trace, name))
        assert trace.shape == (S, T) and np.all(np.isfinite(trace)), name
    rho = np.asarray(result.trace.rho[0])
    np.testing.assert_allclose(rho, [0.2 + 0.3 * min(t / 10, 1.0) for t in range(T)], atol=1e-6)
    d_t = np.asarray(result.trace.d_t)
    assert np.all((d_t >= 0) & (d_t <= 1))
    for ckpt, sign, (v_name, a_name) in ((result.best, 1.0, ("V_em", "A_em")),
                                         (result.best_mirrored, -1.0, ("V_em_neg", "A_em_neg"))):
        score = np.minimum(np.asarray(getattr(result.trace, v_name)), np.asarray(getattr(result.trace, a_name)))
        for s in range(S):
            step = int(ckpt.step[s])
            assert step == int(np.argmax(score[s]))  # first step of the maximum
            assert float(ckpt.score[s]) == score[s].max()
            best_v, best_a = v_emergence(sign * ckpt.params.V[s]), a_emergence(sign * ckpt.params.A[s])
            np.testing.assert_allclose(min(float(best_v), float(best_a)), score[s].max(), atol=1e-6)


def test_last_trace_entry_scores_final_params(tiny_run):
    _, result = tiny_run
    np.testing.assert_allclose(result.trace.V_em[:, -1], jax.vmap(v_emergence)(result.params.V), atol=1e-7)
    np.testing.assert_allclose(result.trace.A_em[:, -1], jax.vmap(a_emergence)(result.params.A), atol=1e-7)
    np.testing.assert_allclose(result.trace.V_em_neg[:, -1], jax.vmap(v_emergence)(-result.params.V), atol=1e-7)
    np.testing.assert_allclose(result.trace.A_em_neg[:, -1], jax.vmap(a_emergence)(-result.params.A), atol=1e-7)


def test_same_key_same_result_and_vmap_matches_single_seeds(tiny_run):
    config, result = tiny_run
    again = train_seeds(config, jax.random.key(0))
    jax.tree.map(np.testing.assert_array_equal, result, again)
    train = jax.jit(make_train(config))
    for s, key in enumerate(jax.random.split(jax.random.key(0), config.num_seeds)):
        alone = train(key)
        from_vmap = jax.tree.map(lambda b, s=s: b[s], result)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), alone, from_vmap)
    other = train_seeds(config, jax.random.key(1))
    assert not np.array_equal(np.asarray(other.params.A), np.asarray(result.params.A))


def test_training_reduces_held_out_td_error():
    config = PretrainConfig(m=16, d=4, n=10, batch_size=32, minibatches_per_epoch=5, num_epochs=80, num_seeds=1)
    key_init, _ = jax.random.split(jax.random.key(0))  # train(key) initialises from split(key)[0]
    result = jax.jit(make_train(config))(jax.random.key(0))
    before = evaluate(init_params(key_init, config), config, jax.random.key(123), num_tasks=20)
    after = evaluate(result.params, config, jax.random.key(123), num_tasks=20)
    assert float(after.abs_td_error) < 0.9 * float(before.abs_td_error)
    assert float(after.abs_value_error) < float(before.abs_value_error)


def test_rho_schedule():
    constant = PretrainConfig()
    assert float(rho_schedule(constant, 0)) == 0.0 and float(rho_schedule(constant, 10**6)) == 0.0
    f5 = mask_relaxation_config()
    np.testing.assert_allclose([float(rho_schedule(f5, t)) for t in (0, 4000, 8000, 8999)], [0.68, 0.74, 0.8, 0.8],
                               atol=1e-6)
    assert f5.num_steps == 9000 and f5.num_epochs == 900 and f5.a_mask == "relaxed"
    assert mask_relaxation_config("full").a_mask == "full"


@pytest.mark.parametrize(
    "field, bad",
    [("m", 2), ("d", 0), ("n", 0), ("num_layers", 0), ("gamma", 1.0), ("gamma", -0.1), ("tau", 0.0),
     ("learning_rate", -1e-3), ("batch_size", 0), ("minibatches_per_epoch", 0), ("num_epochs", 0), ("num_seeds", 0),
     ("init_gain", -0.1), ("a_mask", "half"), ("rho_start", 1.5), ("rho_end", -0.1), ("rho_anneal_steps", -1),
     ("batch_size", 2.5)],
)
def test_config_validation(field, bad):
    config = dataclasses.replace(PretrainConfig(), **{field: bad})
    with pytest.raises(ValueError, match=field):
        make_train(config)


def test_bad_arguments():
    with pytest.raises(ValueError, match="a_mask"):
        masks(4, "none")
    with pytest.raises(ValueError, match="num_tasks"):
        evaluate(init_params(jax.random.key(0), TINY), TINY, jax.random.key(1), num_tasks=0)


def test_the_optimizer_is_an_argument_whose_default_is_algorithm_1s_adam(optimizer_is_used):
    config = dataclasses.replace(TINY, num_seeds=1)
    optimizer_is_used(lambda optimizer: jax.jit(make_train(config, optimizer=optimizer))(jax.random.key(3)).params,
                      optax.adam(config.learning_rate), optax.sgd(0.1))

"""The filter memories (LOF, ALF, softmax variants) and Deep ALF against the filters they are built from.

The reference is ``lof_reference`` / ``alf_filter`` run per episode on the same (ys, actions): a memory fed a stream
of several episodes (null observation and start flag at each episode's first step) must reproduce them exactly.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.belief import random_models as cases
from memlab.belief.alf import ALF, alf_filter
from memlab.belief.deep_alf import INITIALISATIONS, DeepALF, circulant_eigensystem
from memlab.belief.filters import lof_reference
from memlab.belief.hmm import ControlledHMM
from memlab.belief.memories import LogitFilterMemory

N, S = 6, 3
SHIFT = np.roll(np.eye(N), 1, axis=0)  # (P w)[i] = w[i-1]: a clockwise step on a ring of N states
P_RING = np.stack([SHIFT, SHIFT @ SHIFT, SHIFT.T, SHIFT.T @ SHIFT.T])


def _model(seed=0):
    rng = np.random.default_rng(seed)
    T = 0.9 * P_RING + 0.1 * cases.random_columns(rng, N, N)[None]
    E = cases.random_columns(rng, S, N)
    return ControlledHMM(jnp.asarray(T), jnp.asarray(E), jnp.full(N, 1.0 / N))


def _stream(seed, lengths):
    """Episodes of the given lengths back to back: (obs one-hot (L, S), prev_actions (L,), starts (L,), episodes)
    with a null observation and action 0 at each start; ``episodes`` holds each episode's (ys, actions)."""
    rng = np.random.default_rng(seed)
    obs, acts, starts, episodes = [], [], [], []
    for K in lengths:
        ys, actions = rng.integers(0, S, K), rng.integers(0, 4, K)
        obs += [np.zeros(S)] + [np.eye(S)[y] for y in ys]
        acts += [0] + list(actions)
        starts += [True] + [False] * K
        episodes.append((ys, actions))
    return jnp.asarray(np.array(obs)), jnp.asarray(acts, jnp.int32), jnp.asarray(starts), episodes


def _per_episode(features, lengths):
    bounds = np.cumsum([0] + [K + 1 for K in lengths])
    return [features[b:e] for b, e in zip(bounds[:-1], bounds[1:])]


def _memories(model):
    return {
        "lof": LogitFilterMemory.lof(model), "lof-softmax": LogitFilterMemory.lof(model, softmax=True),
        "alf": LogitFilterMemory.alf(P_RING, model), "alf-softmax": LogitFilterMemory.alf(P_RING, model, softmax=True),
    }


@pytest.mark.parametrize("name", ["lof", "lof-softmax", "alf", "alf-softmax"])
def test_filter_memory_equals_the_filter_per_episode(x64, name):
    model = _model()
    memory = _memories(model)[name]
    lengths = [7, 1, 12]
    obs, acts, starts, episodes = _stream(1, lengths)
    h0 = memory.init_state() + 3.0  # whatever the state before a start, the start resets it
    _, features = memory.sequence(h0, obs, acts, starts)
    for (ys, actions), f in zip(episodes, _per_episode(features, lengths)):
        if name.startswith("lof"):
            w0, w = np.log(np.full(N, 1.0 / N)), lof_reference(model, ys, actions=actions).logits
        else:
            w0, w = np.zeros(N), alf_filter(ALF.time_varying(P_RING, model.E, 0.1), ys, actions).logits
        expected = np.vstack([w0, w])
        if name.endswith("softmax"):
            expected = jax.nn.softmax(expected, axis=-1)
        np.testing.assert_allclose(f, expected, rtol=1e-12, atol=1e-12)


def test_filter_memories_are_fixed():
    assert not any(m.trainable for m in _memories(_model()).values())
    assert _memories(_model())["alf"].num_features == N


def test_circulant_eigensystem_eq_197_199(x64):
    V, lam = circulant_eigensystem(P_RING)
    np.testing.assert_allclose(V @ V.conj().T, np.eye(N), atol=1e-12)  # unitary: V^{-1} = V^H
    for a in range(4):
        np.testing.assert_allclose(V @ np.diag(lam[a]) @ V.conj().T, P_RING[a], atol=1e-12)  # eq. (197)
    np.testing.assert_allclose(lam[1], lam[0] ** 2, atol=1e-12)  # eq. (199)
    np.testing.assert_allclose(lam[2], 1 / lam[0], atol=1e-12)
    np.testing.assert_allclose(lam[3], lam[0] ** -2, atol=1e-12)
    phases = np.sort(np.mod(np.angle(lam[0]) + 1e-9, 2 * np.pi)) - 1e-9
    np.testing.assert_allclose(phases, 2 * np.pi * np.arange(N) / N, atol=1e-8)  # N roots of unity
    with pytest.raises(ValueError, match="not circulant"):
        circulant_eigensystem(cases.random_columns(np.random.default_rng(0), N, N)[None])


def test_informed_deep_alf_equals_alf(x64):
    model = _model(2)
    deep = DeepALF.init(jax.random.key(0), P_RING, model.E, "informed", dtype=jnp.float64)
    alf = LogitFilterMemory.alf(P_RING, model)
    obs, acts, starts, _ = _stream(3, [9, 4, 15])
    _, expected = alf.sequence(alf.init_state(), obs, acts, starts)
    _, features = deep.sequence(deep.init_state(), obs, acts, starts)
    np.testing.assert_allclose(features, expected, atol=1e-10)
    np.testing.assert_allclose(deep.delta, 0.1, rtol=1e-12)


@pytest.mark.parametrize("initialisation", INITIALISATIONS)
def test_deep_alf_sequence_equals_scanned_step(x64, initialisation):
    deep = DeepALF.init(jax.random.key(4), P_RING, _model().E, initialisation, dtype=jnp.float64)
    obs, acts, starts, _ = _stream(5, [6, 10])
    h0 = deep.init_state() + 1.0 - 2.0j
    h_last, features = deep.sequence(h0, obs, acts, starts)
    h_scan, features_scan = jax.lax.scan(lambda h, x: deep.step(h, *x), h0, (obs, acts, starts))
    np.testing.assert_allclose(features, features_scan, atol=1e-10)
    np.testing.assert_allclose(h_last, h_scan, atol=1e-10)


def test_deep_alf_initialisations_follow_app_E22():
    E = _model().E
    V, lam = circulant_eigensystem(P_RING)
    keys = jax.random.split(jax.random.key(7), 20)
    deltas = [float(DeepALF.init(k, P_RING, E, "random-delta").delta) for k in keys]
    assert 0 < min(deltas) and max(deltas) < 0.5 and np.std(deltas) > 0.05  # delta ~ U(0, 0.5)
    random_lam = DeepALF.init(keys[0], P_RING, E, "random-lambda")
    np.testing.assert_allclose(np.hypot(random_lam.lam_re, random_lam.lam_im), 1.0, rtol=1e-6)  # unit circle
    assert not np.allclose(random_lam.lam_re, lam.real, atol=1e-2)
    np.testing.assert_allclose(random_lam.v_re + 1j * random_lam.v_im, V, atol=1e-6)  # V stays true
    random_e = DeepALF.init(keys[0], P_RING, E, "random-e")
    E_init = jax.nn.softmax(random_e.kappa, axis=0)
    np.testing.assert_allclose(E_init.sum(0), 1.0, rtol=1e-6)  # eq. (203): column softmax
    assert not np.allclose(E_init, E, atol=1e-2)
    everything = DeepALF.init(keys[0], P_RING, E, "all-random")
    assert not np.allclose(everything.v_re, V.real, atol=1e-1)


def test_deep_alf_gradients_are_finite_and_diagnostics_logged():
    deep = DeepALF.init(jax.random.key(1), P_RING, _model().E, "all-random")
    obs, acts, starts, _ = _stream(6, [20])

    def loss(m):
        return jnp.sum(m.sequence(m.init_state(), obs, acts, starts)[1] ** 2)

    grads = jax.grad(loss)(deep)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree_util.tree_leaves(grads))
    assert float(jnp.abs(grads.delta_logit)) > 0
    informed = DeepALF.init(jax.random.key(1), P_RING, _model().E, "informed")
    np.testing.assert_allclose(informed.diagnostics()["max_abs_lambda_times_1_minus_delta"], 0.9, rtol=1e-6)


def test_bad_arguments_raise():
    model = _model()
    with pytest.raises(ValueError, match="initialisation"):
        DeepALF.init(jax.random.key(0), P_RING, model.E, "clever")
    with pytest.raises(ValueError, match="delta"):
        DeepALF.init(jax.random.key(0), P_RING, model.E, delta=1.0)
    with pytest.raises(ValueError, match="E must have shape"):
        DeepALF.init(jax.random.key(0), P_RING, np.full((2, N + 1), 0.5))
    with pytest.raises(ValueError, match="delta"):
        LogitFilterMemory.alf(P_RING, model, delta=1.5)
    with pytest.raises(ValueError, match="permutation"):
        LogitFilterMemory.alf(0.5 * P_RING + 0.5 * P_RING[[1, 2, 3, 0]], model)

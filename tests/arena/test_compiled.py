"""Compiled solutions: weights set by theory, scored by the same harness as trained models."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.arena.compiled import THETA_STAR_MAX_LENGTH, compiled_model, kalman_predictor, kalman_transient
from memlab.arena.experiments.compiled import CompiledConfig, score_compiled, scored_lengths
from memlab.arena.lgssm import random_lgssm
from memlab.arena.task import normalised_gap
from memlab.arena.tasks import make_task
from memlab.arena.train import baselines, score


def _steady_state_loop(task, ys):
    """The steady-state Kalman predictor C x_{t+1|t} written as the plain loop, float64, from the Riccati fixed
    point found by iterating the Riccati recursion (not scipy's solver)."""
    A, C, Q, R = (np.asarray(x, np.float64) for x in (task.A, task.C, task.Q, task.R))
    P = np.eye(A.shape[0])
    for _ in range(5000):
        K = P @ C.T @ np.linalg.inv(C @ P @ C.T + R)
        P = A @ (P - K @ C @ P) @ A.T + Q
    K = P @ C.T @ np.linalg.inv(C @ P @ C.T + R)
    x, out = np.zeros(A.shape[0]), []
    for y in ys:
        x = A @ (x + K @ (y - C @ x))  # x_{t+1|t}
        out.append(C @ x)
    return np.array(out)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_kalman_lru_is_the_steady_state_predictor(seed):
    task = random_lgssm(seed, 4, 2)
    ys = np.asarray(task.sample(jax.random.PRNGKey(seed), 1, 50).inputs[0], np.float64)
    np.testing.assert_allclose(kalman_predictor(task)(jnp.asarray(ys, jnp.float32)), _steady_state_loop(task, ys),
                               atol=2e-4, rtol=1e-4)


def test_the_kalman_lru_matches_the_kalman_filter_after_its_transient():
    task = make_task("lgssm")
    compiled = compiled_model(task)
    assert compiled.exact and 0 < compiled.transient == kalman_transient(task) < 50
    s = score(task, compiled.model, task.sample(jax.random.PRNGKey(3), 256, 256))
    assert float(s.gap) < 1e-3
    assert float(jnp.max(s.distance[compiled.transient:])) < 1e-3 * float(jnp.mean(s.reference))
    assert float(s.distance[0]) > 1e-2  # before the transient the two differ: the test above can fail


@pytest.mark.parametrize("name", ["hmm-two-state", "hmm-mess3"])
def test_the_alf_is_a_stated_approximation_between_the_reference_and_no_memory(name):
    task = make_task(name)
    compiled = compiled_model(task)
    assert not compiled.exact
    s = score(task, compiled.model, task.sample(jax.random.PRNGKey(4), 512, 128))
    assert 0.0 < float(s.gap) < 0.5


def test_the_exact_linear_filter_is_the_exact_filter_on_a_permutation_hmm():
    task = make_task("hmm-cycle")
    compiled = compiled_model(task)
    assert compiled.exact and "Thm 4.4" in compiled.description
    s = score(task, compiled.model, task.sample(jax.random.PRNGKey(6), 128, 200))
    assert abs(float(s.gap)) < 1e-5 and float(jnp.max(s.distance)) < 1e-6
    assert float(jnp.mean(s.reference)) < float(jnp.mean(s.trivial)) - 0.1  # memory matters on this task


def test_no_compiled_model_for_a_hmm_far_from_deterministic_or_with_transient_states():
    from memlab.arena.hmm import HMMTask
    from memlab.belief import HMM

    assert compiled_model(make_task("hmm-random")) is None
    absorbing = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])  # 0 -> 1 -> 2 -> 2: deterministic
    E = np.full((2, 3), 0.5)
    hmm = HMM(jnp.asarray(absorbing, jnp.float32), jnp.asarray(E, jnp.float32), jnp.full(3, 1 / 3, jnp.float32))
    assert compiled_model(HMMTask(hmm)) is None  # Theorem 4.4's corrections are not compiled (it gave NaN)


def test_arena_compiled_tiny_profile(tmp_path, check_tiny_run):
    check_tiny_run("arena.compiled", tmp_path)
    doc = json.loads((tmp_path / "arena.compiled" / "results.json").read_text())
    claims = {c["id"]: c["holds"] for c in doc["claims"]}
    assert claims == {"exact-compiled-reach-the-optimum": True, "alf-uses-memory": True,
                      "theta-star-uses-memory": True}
    assert set(doc["results"]) == {"lgssm", "hmm-cycle", "hmm-two-state", "policy-eval", "mqar"}


def test_a_compiled_model_is_scored_only_up_to_its_longest_length():
    """theta* reads every prefix (L^3 time, L^2 memory a sequence): the lengths past its max_length are left out (the
    table shows nan there), and a profile that leaves none is one clear error."""
    theta_star = compiled_model(make_task("policy-eval"))
    assert theta_star.max_length == THETA_STAR_MAX_LENGTH
    assert scored_lengths(theta_star, (64, THETA_STAR_MAX_LENGTH, 4 * THETA_STAR_MAX_LENGTH)) == (
        64, THETA_STAR_MAX_LENGTH)
    assert scored_lengths(compiled_model(make_task("mqar")), (64, 4096)) == (64, 4096)
    with pytest.raises(ValueError, match=f"up to length {THETA_STAR_MAX_LENGTH}"):
        CompiledConfig(tasks=("policy-eval",), lengths=(2 * THETA_STAR_MAX_LENGTH,)).validate()


@pytest.mark.parametrize("name", ["hmm-two-state", "hmm-mess3"])
def test_the_compiled_alf_is_memlab_belief_alf(name):
    """The arena's linear form of eq. (24) against memlab.belief's ALF step (gather + extended arithmetic)."""
    from memlab.arena.hmm import predictive_logits
    from memlab.belief.alf import ALF, alf_step

    task = make_task(name)
    T = np.asarray(task.hmm.T)
    D = (T == T.max(axis=0, keepdims=True)).astype(float)
    delta = np.float32(np.sqrt(np.max(1.0 - (T * D).sum(axis=0))))
    alf = ALF.time_invariant(D, np.asarray(task.hmm.E), delta, w0=np.zeros(T.shape[0]))
    batch = task.sample(jax.random.PRNGKey(5), 1, 100)

    def step(w, y):
        w = alf_step(alf.src[0], alf.log_E, alf.delta, w, y)
        return w, w

    _, ws = jax.lax.scan(step, alf.w0, batch.aux[0])
    expected = predictive_logits(task.hmm, jax.nn.log_softmax(ws / alf.delta))
    np.testing.assert_allclose(compiled_model(task).model(batch.inputs[0]), expected, atol=1e-4)


def test_the_action_filter_is_the_exact_filter_on_ringworld():
    task = make_task("hmm-ringworld")
    compiled = compiled_model(task)
    assert compiled.exact and compiled.transient == 0
    s = score(task, compiled.model, task.sample(jax.random.PRNGKey(7), 128, 200))
    assert abs(float(s.gap)) < 1e-5 and float(jnp.max(s.distance)) < 1e-6


@pytest.mark.parametrize("name", ["lgssm", "hmm-two-state"])
def test_the_gap_at_a_shorter_length_is_the_gap_of_the_truncated_sequences(name):
    """score_compiled scores one batch of the longest length and reads a shorter length's gap off its prefix; here
    the sequences are cut to n steps first and scored on their own (model, reference and trivial predictor run
    on the cut batch), after the transient."""
    spec, key = make_task(name), jax.random.key(3)
    compiled = compiled_model(spec)
    cell = score_compiled(name, (12, 40), 16, key)
    test = spec.sample(key, 16, 40)
    for n, gap in zip((12, 40), cell.gaps, strict=True):
        cut = jax.tree.map(lambda x, n=n: x[:, :n], test)  # every field of these tasks' batches has the time axis 1
        base = baselines(spec, cut)
        scored = cut.mask & (jnp.arange(n) >= compiled.transient)
        direct = normalised_gap(spec.loss(jax.vmap(compiled.model)(cut.inputs), cut), base.reference, base.trivial,
                                scored)
        np.testing.assert_allclose(gap, direct, rtol=1e-4, atol=1e-6)

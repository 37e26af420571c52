"""Pong's mode analysis (pong_modes.py): eigenvalues of the step maps, App. H.1's statistics on hand-made modes,
the oracle's scoring and its model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.pissm import metrics, runs
from memlab.pissm.data import Split
from memlab.pissm.data.pong import simulate_pong, step_maps
from memlab.pissm.gain import ExactGain
from memlab.pissm.pong_modes import (
    SwitchingRule,
    mode_statistics,
    most_bounces,
    oracle_model,
    rule_scores,
    selection_accuracy,
    smallest_eigenvalues,
    true_eigenvalues,
)


def _events(B: int, T: int, hits: dict) -> np.ndarray:
    """(B, T, 4) bool with hits {(b, t): wall index 0..3}."""
    events = np.zeros((B, T, 4), bool)
    for (b, t), w in hits.items():
        events[b, t, w] = True
    return events


def test_true_eigenvalues_are_the_smallest_eigenvalue_of_each_step_map():
    A, _ = step_maps()
    for w in range(5):  # 0 free flight, 1..4 one wall
        events = _events(1, 1, {(0, 0): w - 1} if w else {})[0]
        truth = true_eigenvalues(events)[0]
        assert truth[0] == (-1.0 if w else 1.0) and truth[1] == 1.0  # one value per axis, sorted
        assert np.isclose(smallest_eigenvalues(A[w])[0].real, truth[0])


def test_smallest_eigenvalues_orders_by_real_part_and_keeps_batch_axes():
    A = np.stack([np.diag([3.0, -2.0, 0.5]), np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -4.0]])])
    eig = smallest_eigenvalues(A)
    assert eig.shape == (2, 2)
    np.testing.assert_allclose(eig[0], [-2.0, 0.5])
    assert eig[1, 0] == pytest.approx(-4.0) and eig[1, 1].real == pytest.approx(0.0)  # then the pair +-i


def _split(z: np.ndarray, events: np.ndarray) -> Split:
    B, T = z.shape
    return Split(np.zeros((B, T)), np.zeros((B, T, 2)), np.zeros((B, T, 4)), z.astype(np.int32), events)


def test_mode_statistics_on_hand_made_modes():
    z = np.array([[0, 0, 0, 1, 1, 1], [2, 2, 3, 3, 3, 3]])
    events = _events(2, 6, {(0, 3): 1, (1, 2): 3})  # the quadrant changes exactly at the wall hits
    A = np.stack([np.eye(4), np.diag([-1.0, 1.0, 1.0, 1.0])])  # mode 1 reflects, mode 0 flies
    modes = np.array([[0, 0, 0, 1, 0, 0], [0, 0, 1, 0, 0, 0]])  # mode 1 exactly at the hits
    stats = mode_statistics(A, modes, _split(z, events))
    assert stats["eigenvalue_at_bounces"] == -1.0 and stats["eigenvalue_elsewhere"] == 1.0
    assert stats["reflecting_at_bounces"] == stats["reflecting_next_to_bounces"] == 1.0
    assert stats["reflecting_elsewhere"] == 0.0
    late = np.array([[0, 0, 0, 0, 1, 0], [0, 0, 1, 0, 0, 0]])  # the first sequence reflects one step after its hit
    stats = mode_statistics(A, late, _split(z, events))
    assert stats["reflecting_at_bounces"] == 0.5 and stats["reflecting_next_to_bounces"] == 1.0
    assert stats["reflecting_elsewhere"] == pytest.approx(1 / 10)
    assert stats["shares"] == pytest.approx([10 / 12, 2 / 12]) and stats["dominant_share"] == pytest.approx(10 / 12)
    assert stats["modes_in_use"] == 2
    # runs of constant z: [0 0 0] -> 1, [1 0 0] -> 2/3, [0 0] -> 1, [1 0 0 0] -> 3/4
    assert stats["persistence"] == pytest.approx((1 + 2 / 3 + 1 + 3 / 4) / 4)
    assert stats["agreement"] == pytest.approx(4 / 12)  # best relabelling: 0 -> 0 (3 steps), 1 -> 3 (1 step)
    assert stats["persistence"] == metrics.mode_persistence(modes, z)


def test_most_bounces_picks_the_sequence_with_most_wall_hits():
    events = _events(3, 8, {(0, 2): 0, (2, 1): 1, (2, 5): 2, (2, 6): 3, (1, 4): 0})
    assert most_bounces(_split(np.zeros((3, 8), int), events)) == 2


def test_selection_accuracy_scores_the_oracle_modes_against_the_walls():
    events = _events(2, 5, {(0, 1): 0, (0, 3): 3, (1, 2): 1})  # walls left, top, right
    right = np.array([[0, 1, 0, 4, 0], [0, 0, 2, 0, 0]])  # mode w = wall index + 1 at a hit, 0 elsewhere
    assert selection_accuracy(right, events) == (1.0, 1.0)
    assert selection_accuracy(np.zeros((2, 5), int), events) == (0.0, 1.0)  # free flight everywhere
    half = right.copy()
    half[0, 3], half[1, 0] = 0, 3
    assert selection_accuracy(half, events) == (pytest.approx(2 / 3), pytest.approx(6 / 7))


def test_oracle_model_has_the_true_step_maps_and_the_exact_gain():
    data = runs.load_dataset("pong", runs.LAYOUTS["tiny"]["pong"])
    model = oracle_model(data, jax.random.key(0))
    A, b = step_maps()
    np.testing.assert_array_equal(np.asarray(model.A), A.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(model.b), b.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(model.C), np.broadcast_to(np.asarray(data.C), (5, 2, 4)))
    assert isinstance(model.gain, ExactGain) and model.num_modes == 5


def test_switching_rule_names_the_wall_of_every_single_hit_from_the_true_state():
    """On noise-free states the hand-coded rule's mode at step t (from x_{t-1}) is the wall hit between t-1 and t
    (free flight where none is), for every step with at most one hit; with ``free_flight_only`` it is always 0."""
    split = simulate_pong(jax.random.key(3), 64, 80)
    x, events = np.asarray(split.x), np.asarray(split.events)
    rule = jax.jit(jax.vmap(jax.vmap(SwitchingRule())))
    modes = np.argmax(np.asarray(rule(jnp.asarray(x[:, :-1]))), -1)  # (B, T-1) for steps 1..T-1
    single = events[:, 1:].sum(-1) <= 1
    wall = np.where(events[:, 1:].any(-1), 1 + np.argmax(events[:, 1:], -1), 0)
    assert single.mean() > 0.99 and (wall > 0).sum() > 200
    np.testing.assert_array_equal(modes[single], wall[single])
    free = np.asarray(jax.vmap(SwitchingRule(free_flight_only=True))(jnp.asarray(x[:, 0])))
    assert np.all(np.argmax(free, -1) == 0)


def test_the_objective_prefers_the_hand_coded_switching_to_free_flight():
    """Scored on the same test log-likelihood, each with its best process noise on validation, the true step maps
    with the hand-coded rule beat free flight everywhere by > 0.3 nats per step (Pong at noise 0.05: ~0.5, at 0.01:
    ~1.4): the switching is worth learning. The rule acts on a sample of x_{t-1}, so it misses some hits (more at
    the larger noise) and errs on a few flight steps."""
    for name, hits in (("pong", 0.35), ("pong-0.01", 0.6)):
        data = runs.load_dataset(name, runs.TINY_LAYOUT[name], key=jax.random.key(0))
        rule = rule_scores(data, jax.random.key(1))
        free = rule_scores(data, jax.random.key(1), free_flight_only=True)
        assert rule["test_ll"] > free["test_ll"] + 0.3, (name, rule, free)
        assert rule["at_hits"] > hits and rule["in_flight"] > 0.9, (name, rule)
        assert free["at_hits"] == 0.0 and free["in_flight"] == 1.0

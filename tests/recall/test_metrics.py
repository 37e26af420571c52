"""Learning curves, the monotonicity rule and the coupling rate (memlab.recall.metrics), from numbers alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from memlab.recall.metrics import coupling_rate, curve_label, is_monotone, learning_curves, tag_only_comparison
from memlab.recall.runs import curve_cell
from memlab.store import typed_result


def _from_before(record, field: str):
    """``record`` as the cell store gives back a record written before memlab kept ``field``."""
    stored = {k: v for k, v in dataclasses.asdict(record).items() if k != field}
    return typed_result(curve_cell, stored)


def test_learning_curves_group_in_first_seen_order_and_fit_eq_1(training_record):
    n = np.array([4, 16, 64])
    exact = {a: np.exp(0.2 - C * np.log(n) ** (a / (a + 1))) for a, C in ((0.5, 2.0), (2.0, 0.5))}
    records = [training_record("mamba-2", a, T, int(k), float(m), mean=3.0 - a, tag_only=1.0 - a / 4)
               for T in (25, 50) for a in (0.5, 2.0) for k, m in zip(n, exact[a])]
    curves = learning_curves(records)
    assert list(curves) == [("mamba-2", 0.5, 25), ("mamba-2", 2.0, 25), ("mamba-2", 0.5, 50), ("mamba-2", 2.0, 50)]
    for (_, a, _), c in curves.items():
        np.testing.assert_array_equal(c.n, n)
        np.testing.assert_allclose(c.mse, exact[a])
        assert c.fit.C == pytest.approx({0.5: 2.0, 2.0: 0.5}[a]) and c.fit.A == pytest.approx(0.2)
        assert (c.baseline_mean, c.baseline_tag_only) == (3.0 - a, 1.0 - a / 4)


def test_monotone_rule_allows_five_percent_per_step():
    assert is_monotone([1.0, 0.9, 0.94, 0.5])  # +4.4 % is allowed
    assert not is_monotone([1.0, 0.9, 0.95])  # +5.6 % is not
    assert is_monotone([0.3]) and is_monotone([1.0, 1.1], slack=0.1)


def test_coupling_rate_recovers_a_geometric_decay_above_the_noise_floor():
    t = np.arange(1, 401)
    distance = 0.3 * 0.97**t
    r, intercept = coupling_rate(distance)
    assert r == pytest.approx(0.97) and intercept == pytest.approx(np.log(0.3))
    floored = np.maximum(distance, 1e-9)  # float32 noise after ~ 400 steps: excluded by the floor
    assert coupling_rate(floored)[0] == pytest.approx(0.97)
    assert np.isnan(coupling_rate(distance[:9])[0])  # fewer than ten usable steps


def test_tag_only_comparison_needs_two_standard_errors_and_the_validation_baseline(training_record):
    rs = [training_record("mamba-1", 1.0, 100, 4, 0.50, stderr=0.01, val_tag_only=0.49),  # above
          training_record("mamba-1", 1.0, 100, 16, 0.47, stderr=0.02, val_tag_only=0.49),  # below, but by 1 s.e. only
          training_record("mamba-1", 1.0, 100, 64, 0.40, stderr=0.02, val_tag_only=0.49),  # below by 4.5 s.e.
          training_record("attention", 1.0, 100, 4, 0.48, val_tag_only=0.49)]  # one seed: any margin
    out = tag_only_comparison(rs)
    c = out[("mamba-1", 1.0, 100)]
    np.testing.assert_array_equal(c.below, [False, False, True])
    assert c.first_n == 64 and c.ratio[0] == pytest.approx(0.50 / 0.49)
    np.testing.assert_array_equal(c.mse, [0.50, 0.47, 0.40])
    np.testing.assert_array_equal(c.stderr, [0.01, 0.02, 0.02])
    np.testing.assert_array_equal(c.tag_only, [0.49] * 3)
    assert np.isnan(out[("attention", 1.0, 100)].stderr[0])  # one seed: no standard error
    assert out[("attention", 1.0, 100)].first_n == 4
    assert tag_only_comparison(rs[:2])[("mamba-1", 1.0, 100)].first_n is None
    old = _from_before(rs[0], "val_baseline_tag_only")
    with pytest.raises(ValueError, match="older memlab"):
        tag_only_comparison([old])


def test_step_budget_records_form_their_own_curves(training_record):
    """A student trained on a step budget is a curve of its own beside the same student on A.1's epochs; records
    from before the budget existed (no ``step_budget`` key) count as A.1's schedule."""
    rs = [_from_before(training_record("mamba-1", 1.0, 100, 4, 0.6), "step_budget"),
          training_record("mamba-1", 1.0, 100, 16, 0.5), training_record("mamba-1", 1.0, 100, 4, 0.6, budget=120),
          training_record("mamba-1", 1.0, 100, 16, 0.3, budget=120)]
    curves = learning_curves(rs)
    assert list(curves) == [("mamba-1", 1.0, 100), ("mamba-1/steps=120", 1.0, 100)]
    assert curves[("mamba-1/steps=120", 1.0, 100)].mse.tolist() == [0.6, 0.3]
    assert tag_only_comparison(rs)[("mamba-1/steps=120", 1.0, 100)].first_n == 16
    assert curve_label("attention") == "attention" and curve_label("attention", 8) == "attention/steps=8"

"""metrics.py: trend (least squares with t-statistic), switch lags, logit agreement; against independent references."""

import numpy as np
import pytest
from scipy import stats

from memlab.belief.metrics import LogitAgreement, logit_agreement, merge_agreement, switch_lags, trend

# ------------------------------------------------------------------ trend


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_trend_matches_scipy_linregress(seed):
    rng = np.random.default_rng(seed)
    x = np.linspace(30, 250, 12)
    y = 0.08 - 2e-4 * x + rng.normal(scale=5e-3, size=x.size)
    slope, t = trend(x, y)
    ref = stats.linregress(x, y)
    assert slope == pytest.approx(ref.slope, rel=1e-10)
    assert t == pytest.approx(ref.slope / ref.stderr, rel=1e-8)


def test_trend_of_a_perfect_fit_is_decided_by_the_sign():
    x = np.arange(5.0)
    slope, t = trend(x, 3 - 2 * x)  # rounding leaves a residual of ~1e-30: t is huge, not always inf
    assert slope == pytest.approx(-2.0) and t < -1e10
    assert trend(x, 1 + 0.5 * x)[1] > 1e10
    assert trend(x, np.full(5, 0.5))[0] == pytest.approx(0.0, abs=1e-15)


def test_trend_with_zero_residual_is_infinite_by_sign():
    slope, t = trend([1.0, 3.0], [2.0, 1.0])  # two points: no residual at all
    assert slope == pytest.approx(-0.5) and t == -np.inf
    assert trend([1.0, 3.0], [1.0, 2.0])[1] == np.inf


@pytest.mark.parametrize("x, y, match", [
    ([1.0], [1.0], "length >= 2"),
    ([1.0, 2.0], [1.0, 2.0, 3.0], "length >= 2"),
    ([2.0, 2.0, 2.0], [1.0, 2.0, 3.0], "constant"),
])
def test_trend_rejects_bad_input(x, y, match):
    with pytest.raises(ValueError, match=match):
        trend(x, y)


# ------------------------------------------------------------------ switch_lags


def test_switch_lags_count_steps_until_the_decoder_agrees():
    states = np.array([[0, 0, 1, 1, 1, 1, 0, 0, 0]])
    decoded = np.array([[0, 0, 0, 0, 1, 1, 1, 0, 0]])
    # switch at step 2: decoder agrees at step 4 (lag 2); switch at step 6: agrees at step 7 (lag 1)
    np.testing.assert_array_equal(switch_lags(decoded, states), [2.0, 1.0])


def test_switch_lags_are_censored_at_the_next_switch_and_run_over_trajectories():
    states = np.array([[0, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    decoded = np.array([[0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]])
    # row 0: switch at 1 never caught before the switch at 3 (lag 2), switch at 3 caught at once (lag 0);
    # row 1: no switch; row 2: switch at 4 caught at once
    np.testing.assert_array_equal(switch_lags(decoded, states), [2.0, 0.0, 0.0])


def test_switch_lags_without_switches_is_empty_and_shapes_are_checked():
    assert switch_lags(np.zeros((2, 5), int), np.ones((2, 5), int)).size == 0
    with pytest.raises(ValueError, match="shape"):
        switch_lags(np.zeros((2, 5), int), np.zeros((2, 4), int))


# ------------------------------------------------------------------ logit_agreement


def test_logit_agreement_over_the_extended_reals():
    inf = np.inf
    w_ref = np.array([[[0.0, -inf, 1.0], [2.0, 3.0, -inf]],
                      [[0.5, 0.5, -inf], [1.0, -inf, -inf]]])  # (B=2, K=2, N=3)
    w = w_ref.copy()
    w[0, 0, 0] += 1e-3  # an error on a finite entry
    w[0, 1, 2] = 7.0  # finite where the reference is -inf: a pattern mismatch
    w[1, 1, 0] = -inf  # -inf where the reference is finite ... on a flagged row
    w[1, 1, 1] = 99.0  # ... which is skipped entirely
    flagged = np.array([[False, False], [False, True]])
    out = logit_agreement(w, w_ref, flagged)
    assert out.max_abs_error == pytest.approx(1e-3)
    assert out.pattern_mismatches == 1
    assert out.neg_inf_entries == 3  # -inf entries of w_ref on the three unflagged rows
    assert (out.flagged_rows, out.rows) == (1, 4)
    exact = logit_agreement(w_ref, w_ref, np.zeros((2, 2), bool))
    assert exact.max_abs_error == 0.0 and exact.pattern_mismatches == 0


def test_merge_agreement_takes_the_worst_error_and_sums_counts():
    a = LogitAgreement(max_abs_error=1e-14, pattern_mismatches=0, neg_inf_entries=3, flagged_rows=1, rows=10)
    b = LogitAgreement(max_abs_error=3e-14, pattern_mismatches=2, neg_inf_entries=0, flagged_rows=0, rows=5)
    assert merge_agreement([a, b]) == LogitAgreement(max_abs_error=3e-14, pattern_mismatches=2, neg_inf_entries=3,
                                                     flagged_rows=1, rows=15)
    with pytest.raises(ValueError, match="at least one"):
        merge_agreement([])


def test_logit_agreement_checks_shapes():
    with pytest.raises(ValueError, match="shape"):
        logit_agreement(np.zeros((2, 3)), np.zeros((2, 4)), np.zeros(2, bool))
    with pytest.raises(ValueError, match="shape"):
        logit_agreement(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros(3, bool))

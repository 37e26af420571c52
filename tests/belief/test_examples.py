"""examples.py: the HMMs of eq. (47) and eq. (54), the filters compared on them, Example 1 of Appendix A.1."""

import numpy as np
import pytest

from memlab.belief.alf import ALF, delta_schedule
from memlab.belief.examples import (
    EXAMPLE1_BAD_E,
    EXAMPLE1_E,
    EXAMPLE1_P,
    SWAP,
    example_filters,
    two_state_example,
)
from memlab.belief.filters import LOF
from memlab.belief.structure import check_observability, is_permutation


def test_eq47_and_eq54_as_written_in_the_paper():
    eps = 0.01
    hmm, D = two_state_example(eps, 0.9, flip=True)
    np.testing.assert_allclose(hmm.T, [[eps, 1 - eps], [1 - eps, eps]], rtol=1e-6)  # eq. (47)
    np.testing.assert_allclose(hmm.E, [[0.9, 0.1], [0.1, 0.9]], rtol=1e-6)
    np.testing.assert_array_equal(D, SWAP)
    hmm, D = two_state_example(0.005, 0.8, flip=False)
    np.testing.assert_allclose(hmm.T, [[0.995, 0.005], [0.005, 0.995]], rtol=1e-6)  # eq. (54)
    np.testing.assert_allclose(hmm.E, [[0.8, 0.2], [0.2, 0.8]], rtol=1e-6)
    np.testing.assert_array_equal(D, np.eye(2))
    np.testing.assert_array_equal(hmm.pi0, [1.0, 0.0])  # Appendix E.1


def test_example_filters_are_the_lof_and_one_alf_per_schedule_from_zero():
    eps, lam = 1 / 50, 0.7
    hmm, D = two_state_example(eps, 0.9, flip=True)
    schedules = ("sqrt", "log", "eps2", "zero", "one")
    names, filters = example_filters(hmm, D, eps, schedules, lam)
    assert names == ["LOF", "ALF δ = √ε", "ALF δ = 0.7/log(1/ε)", "ALF δ = ε²", "ALF δ = 0", "ALF δ = 1"]
    assert isinstance(filters[0], LOF) and all(isinstance(f, ALF) for f in filters[1:])
    for f in filters:
        np.testing.assert_array_equal(f.w0, [0.0, 0.0])
    for s, f in zip(schedules, filters[1:]):
        assert float(f.delta) == pytest.approx(float(delta_schedule(s, eps, lam)), rel=1e-6)
        np.testing.assert_array_equal(f.src[0], [1, 0])  # the ALF follows the swap backbone of eq. (47)


def test_example_filters_rejects_an_unknown_schedule():
    hmm, D = two_state_example(0.02, 0.9, flip=True)
    with pytest.raises(ValueError, match="schedule"):
        example_filters(hmm, D, 0.02, ("cubic",), 0.7)


def test_example1_satisfies_assumption_5_6_although_x1_and_x3_emit_alike():
    assert is_permutation(EXAMPLE1_P)
    np.testing.assert_array_equal(EXAMPLE1_E[:, 0], EXAMPLE1_E[:, 2])
    report = check_observability(EXAMPLE1_E, EXAMPLE1_P)
    assert report.holds and report.M == 2
    bad = check_observability(EXAMPLE1_BAD_E, EXAMPLE1_P)
    assert not bad.holds and bad.identical_pairs and "5.6 b" in bad.reasons[0]

"""The rate fit of eq. (1)."""

from __future__ import annotations

import numpy as np
import pytest

from memlab.recall.rate import fit_rate, rate_axis


def test_fit_recovers_an_exact_rate():
    n = np.array([4, 8, 16, 32, 64])
    for alpha, A, C in ((0.75, 0.3, 1.81), (1.0, -0.5, 1.28), (2.0, 1.0, 0.5)):
        loss = np.exp(A - C * np.log(n) ** (alpha / (alpha + 1)))
        fit = fit_rate(n, loss, alpha)
        assert fit.A == pytest.approx(A, abs=1e-10) and fit.C == pytest.approx(C, abs=1e-10)
        assert fit.r_squared == pytest.approx(1.0)
        np.testing.assert_allclose(fit.predict(n, alpha), loss, rtol=1e-10)


def test_fit_sees_an_increasing_risk_as_negative_c():
    n = np.array([4, 8, 16])
    assert fit_rate(n, [0.1, 0.2, 0.4], 1.0).C < 0


def test_rate_axis_and_bad_input():
    np.testing.assert_allclose(rate_axis([np.e], 1.0), [1.0])
    with pytest.raises(ValueError, match="two distinct"):
        fit_rate([4, 4], [0.1, 0.2], 1.0)
    with pytest.raises(ValueError, match="positive"):
        fit_rate([4, 8], [0.1, 0.0], 1.0)
    with pytest.raises(ValueError, match="alpha > 0"):
        rate_axis([4], 0.0)

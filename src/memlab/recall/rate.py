"""The rate fit of App. A.2 / eq. (1): log L(n) = A - C (log n)^{alpha/(alpha+1)}, by ordinary least squares.

Theorem 6.1 bounds the risk by C' exp{-c (log n)^{alpha/(alpha+1)}} and Theorem 6.3 bounds it below at the same
exponent, so on the axis s = (log n)^{alpha/(alpha+1)} the log-risk of a rate-optimal learner is linear with
slope -C < 0. The fit reports A, C and R^2 on that axis.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class RateFit(NamedTuple):
    A: float
    C: float
    r_squared: float

    def predict(self, n, alpha: float) -> np.ndarray:
        """exp{A - C (log n)^{alpha/(alpha+1)}} at the sample sizes n."""
        return np.exp(self.A - self.C * rate_axis(n, alpha))


def rate_axis(n, alpha: float) -> np.ndarray:
    """s = (log n)^{alpha/(alpha+1)} for sample sizes n >= 2 (n = 1 has log n = 0; allowed)."""
    n = np.asarray(n, dtype=float)
    if np.any(n < 1) or not alpha > 0:
        raise ValueError(f"need sample sizes n >= 1 and alpha > 0; got n = {n.tolist()}, alpha = {alpha}")
    return np.log(n) ** (alpha / (alpha + 1.0))


def fit_rate(n, loss, alpha: float) -> RateFit:
    """OLS of log loss on s = (log n)^{alpha/(alpha+1)}: log L = A - C s. Needs >= 2 distinct n, positive losses."""
    loss = np.asarray(loss, dtype=float)
    s = rate_axis(n, alpha)
    if s.shape != loss.shape or len(np.unique(s)) < 2:
        raise ValueError(f"need matching n and loss with at least two distinct n; got {s.shape} and {loss.shape}")
    if not np.all(np.isfinite(loss) & (loss > 0)):
        raise ValueError(f"losses must be positive and finite to take logs; got {loss.tolist()}")
    y = np.log(loss)
    slope, intercept = np.polyfit(s, y, 1)
    residual = y - (intercept + slope * s)
    total = ((y - y.mean()) ** 2).sum()
    r_squared = 1.0 - (residual**2).sum() / total if total > 0 else 1.0
    return RateFit(float(intercept), float(-slope), float(r_squared))

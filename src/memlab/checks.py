"""Argument checks shared by the studies and layers, so one mistake gets one wording everywhere."""

from __future__ import annotations

import numpy as np


def check_int(name: str, value, low: int = 1) -> int:
    """``value`` as an int, or ValueError unless it is an integer (not a bool) >= ``low``."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)

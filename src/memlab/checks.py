"""Argument checks shared by the studies and layers, so one mistake gets one wording everywhere.

Every check raises ``ValueError`` naming the argument, what was expected and what it got. Checks of array
*values* run only on concrete arrays (:func:`is_concrete`): under ``jit`` or ``vmap`` only shapes are checked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import jax
import numpy as np

__all__ = [
    "STOCHASTIC_ATOL",
    "check_choice",
    "check_choices",
    "check_column_stochastic",
    "check_covariance",
    "check_distribution",
    "check_finite",
    "check_gamma",
    "check_increasing_ints",
    "check_indices",
    "check_int",
    "check_matrix",
    "check_real",
    "is_concrete",
]

STOCHASTIC_ATOL = 1e-6  # how far a probability vector's sum may be from 1


def is_concrete(*xs) -> bool:
    """False if any of ``xs`` is a tracer (inside ``jit`` / ``vmap``), whose values cannot be checked."""
    return not any(isinstance(x, jax.core.Tracer) for x in xs)


# ---------------------------------------------------------------- scalars and choices


def check_int(name: str, value, low: int = 1) -> int:
    """``value`` as an int, or ValueError unless it is an integer (not a bool) >= ``low``."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def check_increasing_ints(name: str, values, low: int = 1) -> tuple[int, ...]:
    """``values`` as a tuple of ints, or ValueError unless it is a non-empty, strictly increasing sequence of
    integers >= ``low``."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValueError(f"{name} must be a sequence of ints, got {values!r}")
    values = tuple(values)
    if not values or any(not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low for v in values) \
            or any(b <= a for a, b in zip(values, values[1:])):
        raise ValueError(f"{name} must be a non-empty, strictly increasing sequence of ints >= {low}, got {values!r}")
    return tuple(int(v) for v in values)


def check_real(name: str, value, low: float = -math.inf, high: float = math.inf, *,
               open_low: bool = False, open_high: bool = False) -> float:
    """``value`` as a float, or ValueError unless it is a finite real number (not a bool) in the interval
    from ``low`` to ``high`` (closed unless ``open_low`` / ``open_high``)."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    x = float(value) if ok else math.nan
    ok = ok and math.isfinite(x) and (x > low if open_low else x >= low) and (x < high if open_high else x <= high)
    if not ok:
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
        where = "" if (low, high) == (-math.inf, math.inf) else f" in {interval}"
        raise ValueError(f"{name} must be a finite number{where}, got {value!r}")
    return x


def check_choice(name: str, value, allowed: Iterable[str]) -> None:
    """ValueError unless ``value`` is one of ``allowed``."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; expected one of {', '.join(map(repr, allowed))}")


def check_choices(name: str, values, allowed: Iterable[str]) -> None:
    """ValueError unless ``values`` is a non-empty sequence of distinct members of ``allowed``."""
    allowed = tuple(allowed)
    if isinstance(values, str) or not isinstance(values, Iterable) or not tuple(values):
        raise ValueError(f"{name} must be a non-empty sequence drawn from {', '.join(map(repr, allowed))}; "
                         f"got {values!r}")
    values = tuple(values)
    for value in values:
        check_choice(name.rstrip("s") if name.endswith("s") else name, value, allowed)
    if len(set(values)) != len(values):
        raise ValueError(f"{name} must not repeat an entry, got {values!r}")


def check_gamma(gamma) -> None:
    """ValueError unless the discount gamma is a scalar in [0, 1) (checked when concrete)."""
    if is_concrete(gamma):
        g = np.asarray(gamma, dtype=np.float64)
        if g.ndim != 0 or not (0.0 <= g < 1.0):
            raise ValueError(f"discount gamma must be a scalar in [0, 1), got {gamma}")


# ---------------------------------------------------------------- arrays


def check_finite(name: str, x) -> None:
    """ValueError if a concrete array holds NaN or inf."""
    if is_concrete(x) and not np.all(np.isfinite(np.asarray(x))):
        raise ValueError(f"{name} contains NaN or inf")


def check_distribution(name: str, p, atol: float = STOCHASTIC_ATOL) -> None:
    """Raise ValueError unless ``p`` (shape (N,)) is a probability vector."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"{name} must be a non-empty vector, got shape {p.shape}")
    if not np.all(np.isfinite(p)):
        raise ValueError(f"{name} contains NaN or inf")
    if np.any(p < 0):
        raise ValueError(f"{name} has negative entries (min {p.min():.3g}); probabilities must be >= 0")
    if abs(p.sum() - 1.0) > atol:
        raise ValueError(f"{name} must sum to 1, sums to {p.sum():.6g}")


def check_column_stochastic(name: str, M, shape: tuple | None = None, atol: float = STOCHASTIC_ATOL) -> None:
    """Raise ValueError unless every column of ``M`` (shape (..., rows, cols)) is a distribution."""
    M = np.asarray(M, dtype=np.float64)
    if shape is not None and M.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {M.shape}")
    if M.ndim < 2 or 0 in M.shape:
        raise ValueError(f"{name} must be a non-empty matrix, got shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise ValueError(f"{name} contains NaN or inf")
    if np.any(M < 0):
        raise ValueError(f"{name} has negative entries (min {M.min():.3g}); probabilities must be >= 0")
    sums = M.sum(axis=-2)
    bad = np.abs(sums - 1.0) > atol
    if np.any(bad):
        where = np.argwhere(bad)[0]
        raise ValueError(
            f"{name} must be column-stochastic (column j = distribution given state j, "
            f"the paper's convention); column {tuple(where)} sums to {sums[tuple(where)]:.6g}"
        )


def check_matrix(name: str, X, shape: tuple[int, ...], T: int | None = None) -> bool:
    """ValueError unless X has shape ``shape`` (returns True: fixed) or, if T is given, (T, *shape) (returns
    False: time-varying); its values must be finite (checked when concrete)."""
    X_shape = np.shape(X)
    if X_shape != shape and (T is None or X_shape != (T, *shape)):
        expected = f"{shape} or {(T, *shape)} (time-varying)" if T is not None else f"{shape}"
        raise ValueError(f"{name} must have shape {expected}, got {X_shape}")
    if is_concrete(X) and not np.all(np.isfinite(np.asarray(X))):
        raise ValueError(f"{name} must be finite")
    return X_shape == shape


def check_covariance(name: str, P) -> None:
    """ValueError unless P (..., M, M) is finite, symmetric and positive semi-definite (checked when concrete)."""
    if not is_concrete(P):
        return
    P = np.asarray(P, dtype=np.float64)
    if not np.all(np.isfinite(P)):
        raise ValueError(f"{name} must be finite")
    scale = max(float(np.max(np.abs(P))), np.finfo(np.float32).tiny)
    if np.max(np.abs(P - np.swapaxes(P, -1, -2))) > 1e-6 * scale:
        raise ValueError(f"{name} must be symmetric")
    smallest = float(np.min(np.linalg.eigvalsh(P)))
    if smallest < -1e-6 * scale:
        raise ValueError(f"{name} must be positive semi-definite, smallest eigenvalue {smallest}")


def check_indices(name: str, v, upper: int) -> None:
    """ValueError unless the integers ``v`` (any shape) lie in [0, ``upper``): states, observations, actions
    (checked when concrete)."""
    if is_concrete(v):
        v = np.asarray(v)
        if v.size and (int(v.min()) < 0 or int(v.max()) >= upper):
            raise ValueError(f"{name} must lie in [0, {upper}), got values in [{int(v.min())}, {int(v.max())}]")

"""A value a process keeps between the cells it computes: the last one, by what it depends on.

The cells of a sweep often share an expensive input that their arguments determine (a task set drawn from keys and
sizes; a task's held-out batch and baselines). Each cell computes that input from its arguments, so it stays
self-contained wherever it lands; the next cell in the same process takes the kept value instead of computing it
again. One value is kept at a time (a sweep's cells come input by input), and the old one is dropped before the new
one is computed. JAX's x64 setting is part of what every value depends on: a float64 input is not a float32 one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import jax

__all__ = ["KeptLast"]

T = TypeVar("T")
_NOTHING = object()


class KeptLast(Generic[T]):
    """``get(depends_on, compute)``: ``compute()``'s value, computed again only when ``depends_on`` (hashable) or
    the x64 setting differs from the last call's."""

    def __init__(self) -> None:
        self._depends_on: object = _NOTHING
        self._value: T | None = None

    def get(self, depends_on: Hashable, compute: Callable[[], T]) -> T:
        depends_on = (depends_on, bool(jax.config.jax_enable_x64))
        if depends_on != self._depends_on:
            self._depends_on, self._value = _NOTHING, None  # never two held at once
            self._value = compute()
            self._depends_on = depends_on
        return self._value

"""KeptLast: the last value, computed again only when what it depends on, or the x64 setting, changes."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from memlab.kept import KeptLast


def test_the_value_is_computed_once_per_dependency_and_only_the_last_is_kept():
    kept, calls = KeptLast(), []

    def compute(x):
        calls.append(x)
        return [x]

    first = kept.get(("a", 1), lambda: compute("a"))
    assert kept.get(("a", 1), lambda: compute("never")) is first and calls == ["a"]
    assert kept.get(("b", 1), lambda: compute("b")) == ["b"]
    assert kept.get(("a", 1), lambda: compute("a")) is not first  # only the last one is kept
    assert calls == ["a", "b", "a"]


def test_the_x64_setting_is_part_of_what_a_value_depends_on():
    kept = KeptLast()
    single = kept.get("zeros", lambda: jnp.zeros(2))
    with jax.enable_x64(True):
        double = kept.get("zeros", lambda: jnp.zeros(2))
    assert (single.dtype, double.dtype) == (jnp.float32, jnp.float64)
    assert kept.get("zeros", lambda: jnp.zeros(2)) is not single  # back in float32: computed again

"""Named random-key streams: ``key_for(seed, "tasks", m)`` instead of ``fold_in(fold_in(key(seed), 2), m)``.

A stream is a path of names from the root key ``jax.random.key(seed)``: every name folds into the key in turn,
a string by the first 32 bits of its SHA-256, an integer by itself. So the same names always give the same key,
on any machine and in any process, and adding a new stream never moves the draws of the existing ones.
"""

from __future__ import annotations

import hashlib

import jax
import numpy as np

__all__ = ["SEEDS", "check_seed", "key_for"]

SEEDS = 2**32  # jax.random.key(seed) keeps a seed's low 32 bits: 2**32 would give seed 0's numbers


def check_seed(seed) -> int:
    """``seed`` as an int, or ValueError unless it is an integer (not a bool) in [0, 2**32)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < SEEDS:
        raise ValueError(f"seed must be an int in [0, 2**32) = [0, {SEEDS - 1}], got {seed!r}")
    return int(seed)


def _stream_id(name: str | int) -> int:
    if isinstance(name, str):
        return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "little")
    if isinstance(name, (int, np.integer)) and not isinstance(name, bool) and 0 <= name < 2**32:
        return int(name)
    raise ValueError(f"a key stream is named by strings and ints in [0, 2**32), got {name!r}")


def key_for(seed: int, *names: str | int) -> jax.Array:
    """The key of the stream ``names`` under ``seed``; ``key_for(seed)`` is ``jax.random.key(seed)``."""
    key = jax.random.key(check_seed(seed))
    for name in names:
        key = jax.random.fold_in(key, _stream_id(name))
    return key

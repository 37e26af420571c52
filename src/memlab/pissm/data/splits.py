"""The record every pi-SSM data set returns, and the cutting of one long recording into split sequences.

A data set is a ``Dataset`` of three ``Split`` records (train, validation, test) plus the observation map ``C``
and noise covariance ``R`` that link them (y_t = C x_t + r_t, r_t ~ N(0, R), as in eq. (1) and eq. (204)), so
a consumer computes the position error of a filtered state as ``C x_hat - C x`` without knowing the data set.
Everything is an array (NamedTuples are pytrees), ``float32`` by default or ``float64`` under
``jax.enable_x64``; modes are ``int32``. Fields a data set does not have are ``None``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import Array


class Split(NamedTuple):
    """B sequences of T steps.

    ``t`` (B, T) time of each step in seconds (or model time units) from the start of its recording;
    ``y`` (B, T, N) observations; ``x`` (B, T, M) ground-truth latent states, kept for evaluation only;
    ``z`` (B, T) int32 ground-truth mode per step, or None; ``events`` (B, T, E) bool ground-truth switching
    events (Pong: which wall was hit between t-1 and t), or None.
    """

    t: Array
    y: Array
    x: Array
    z: Array | None = None
    events: Array | None = None


class Dataset(NamedTuple):
    """``train``, ``validation``, ``test`` splits; ``C`` (N, M) with y = C x + noise; ``R`` (N, N) noise covariance."""

    train: Split
    validation: Split
    test: Split
    C: Array
    R: Array


class SplitLayout(NamedTuple):
    """(number of sequences, steps per sequence) of each split."""

    train: tuple[int, int]
    validation: tuple[int, int]
    test: tuple[int, int]

    def check(self) -> SplitLayout:
        """Return self, or raise ValueError unless every entry is a pair of positive ints."""
        for name, pair in zip(self._fields, self):
            ok = isinstance(pair, tuple) and len(pair) == 2
            ok = ok and all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1 for n in pair)
            if not ok:
                raise ValueError(f"layout.{name} must be a pair (num_sequences, num_steps) of ints >= 1, got {pair!r}")
        return self

    @property
    def total_steps(self) -> int:
        """Steps needed to fill all three splits from one recording."""
        return sum(n * length for n, length in self)


def cut_recording(layout: SplitLayout, **arrays) -> tuple[dict, dict, dict]:
    """Cut one recording into the three splits, in time order: train first, then validation, then test.

    Every keyword is an array with time on axis 0 and at least ``layout.total_steps`` entries (later steps are
    dropped). Returns three dicts (train, validation, test) of the same keywords, each array reshaped to
    (num_sequences, num_steps, ...). Contiguous, non-overlapping windows: the splits share no step.
    """
    layout.check()
    need = layout.total_steps
    for name, a in arrays.items():
        if a.shape[0] < need:
            raise ValueError(f"{name} has {a.shape[0]} steps, the layout {tuple(layout)} needs {need}")
    out, start = [], 0
    for n, length in layout:
        stop = start + n * length
        out.append({name: jnp.reshape(a[start:stop], (n, length) + a.shape[1:]) for name, a in arrays.items()})
        start = stop
    return out[0], out[1], out[2]

"""What every benchmark shares: wall time after a warm-up run, and side-by-side rows against peer libraries.

A side-by-side row (``side_by_side``) is one implementation of one workload::

    {"workload": ..., "implementation": ..., "seconds": ..., "reference": <the peer it is compared with>,
     "speedup": reference seconds / these seconds  (> 1: faster than the peer),
     "max_abs_diff": max |output - reference output|  (every benchmark is also a cross-check),
     "rounds": how many calls the time is the best of}

Peers come from the optional ``bench`` extra (``pip install -e ".[bench]"``, which ``make bench`` does); a workload
whose peer is not installed is timed for memlab alone and its row says which package would add the comparison.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import time
from collections.abc import Callable, Sequence

import jax
import numpy as np

PEER_PACKAGES = ("dynamax", "mambapy", "filterpy", "torch")
# side_by_side runs at least ``repeats`` rounds, and more (up to MAX_ROUNDS) while a round is short: the best of 3
# calls of 10-20 ms varied 1.3-2.3x between two runs of the same code on the same day
SHORT_ROUNDS_SECONDS, MAX_ROUNDS = 3.0, 20


def _block(out):
    """Wait for JAX outputs; NumPy / torch outputs are ready when returned (CPU)."""
    for leaf in jax.tree_util.tree_leaves(out):
        if hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()
    return out


def timed(fn, repeats: int = 1, warm_up: bool = True) -> float:
    """Best wall time in seconds of ``fn()`` (blocked until ready) over ``repeats`` runs, after one warm-up call
    (compilation) unless the caller has just made it (``warm_up=False``)."""
    if warm_up:
        _block(fn())
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        _block(fn())
        best = min(best, time.perf_counter() - t)
    return best


def peer(module: str):
    """The peer module if the ``bench`` extra provides it, else None."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def peer_versions() -> dict[str, str | None]:
    """Installed version of every peer package (None if absent), for the results JSON."""
    versions = {}
    for name in PEER_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _as_numpy(out) -> np.ndarray:
    out = out.detach().numpy() if hasattr(out, "detach") else out  # torch tensors
    return np.asarray(out, dtype=np.float64)


def side_by_side(workload: str, implementations: Sequence[tuple[str, Callable[[], object]]],
                 reference: str | None = None, repeats: int = 1, missing: str | None = None,
                 extra: dict | None = None) -> list[dict]:
    """Time every ``(name, fn)`` of one workload on identical inputs; compare outputs and times with ``reference``.

    Each implementation's time is its best of ``repeats`` calls (more while a round of calls is short:
    ``SHORT_ROUNDS_SECONDS``), the implementations called in turn each round.

    ``fn()`` returns the output to compare (a JAX / NumPy array or a torch tensor, same shape for all). ``reference``
    names one of the implementations (default: the last one, by convention the peer); if it is absent because its
    package is missing, pass ``missing`` (e.g. "pip install -e '.[bench]' adds dynamax") and the rows carry that
    note instead of a ratio. ``extra`` is merged into every row (sizes etc.).
    """
    names = [name for name, _ in implementations]
    if reference is not None and reference not in names:
        raise ValueError(f"reference {reference!r} is not one of the implementations {names}")
    reference = reference if reference is not None else (names[-1] if missing is None else None)
    outputs = {name: _as_numpy(_block(fn())) for name, fn in implementations}  # the first calls are the warm-ups
    seconds = dict.fromkeys(names, np.inf)
    rounds, done, start = repeats, 0, time.perf_counter()
    while done < rounds:  # in turn, so a machine that slows down or speeds up mid-run touches every row alike
        for name, fn in implementations:
            seconds[name] = min(seconds[name], timed(fn, warm_up=False))
        done += 1
        if done == 1:  # short calls are the noisiest: more rounds, about SHORT_ROUNDS_SECONDS of them in all
            rounds = max(repeats, min(MAX_ROUNDS, int(SHORT_ROUNDS_SECONDS / (time.perf_counter() - start))))
    rows = []
    for name in names:
        row = {"workload": workload, "implementation": name, **(extra or {}), "seconds": seconds[name], "rounds": done}
        if reference is None:
            row["reference"] = f"(none: {missing})" if missing else "(none)"
        else:
            row["reference"] = reference
            row["speedup"] = seconds[reference] / seconds[name]
            a, b = outputs[name], outputs[reference]
            diff = np.where(a == b, 0.0, np.abs(a - b))  # equal infinities (log 0 = -inf) count as agreement
            row["max_abs_diff"] = float(np.max(diff, initial=0.0))
        rows.append(row)
    return rows

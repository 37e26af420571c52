"""How far a pi-SSM's learned gain can move before its filter diverges: the filter's survival under random steps of
the gain's parameters, each of one size in every parameter.

Why: Adam's first steps move every parameter by about the learning rate, whatever the gradient's scale. A start from
which a random step of that size makes the filter diverge on most sequences is one that training cannot leave, and
a run that fails there tests the start, not the stability scheme (``pissm.stability``'s "What this verdict depends
on"). The step is random, not the gradient's: it measures the start, not one loss.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.pissm.gain import ExactGain
from memlab.pissm.model import PiSSM
from memlab.pissm.runs import predict_jit

__all__ = ["GainSurvival", "gain_step_survival"]


class GainSurvival(NamedTuple):
    """``gain_step_survival``'s result, per (step size, direction)."""

    finite: np.ndarray  # (S, D): the fraction of sequences whose filter stays finite at every step
    log_likelihood: np.ndarray  # (S, D): mean predictive log-likelihood per step over those sequences (NaN if none)


def gain_step_survival(model: PiSSM, y: Array, mask: Array, key: Array, sizes, directions: int) -> GainSurvival:
    """The filter of ``model`` on y (B, T, N) (mask (B, T)) after a step of each size in ``sizes`` along
    ``directions`` random sign vectors: every trainable parameter of the gain moves by +- the size (the gain's input
    normalisation, which training does not change, stays). One sampled path per sequence, from ``key``."""
    if not isinstance(model, PiSSM) or isinstance(model.gain, ExactGain):
        raise ValueError("gain_step_survival needs a PiSSM with a learned gain (an RNN)")
    sizes = np.asarray(sizes, np.float64)
    if sizes.ndim != 1 or not len(sizes) or not np.all(np.isfinite(sizes) & (sizes >= 0)):
        raise ValueError(f"sizes must be a non-empty 1-D sequence of finite sizes >= 0, got {sizes!r}")
    if int(directions) != directions or directions < 1:
        raise ValueError(f"directions must be a positive int, got {directions!r}")
    fixed_norm = getattr(model.gain, "input_norm", None)  # PaperGain's normalisation: fixed, training never moves it
    params, static = eqx.partition(model.gain, eqx.is_inexact_array)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    k_directions, k_paths = jax.random.split(key)
    finite = np.zeros((len(sizes), directions))
    log_likelihood = np.full((len(sizes), directions), np.nan)
    for d, k in enumerate(jax.random.split(k_directions, directions)):
        signs = [jnp.sign(jax.random.normal(k_leaf, leaf.shape, leaf.dtype))
                 for leaf, k_leaf in zip(leaves, jax.random.split(k, len(leaves)))]
        for s, size in enumerate(sizes):
            stepped = jax.tree_util.tree_unflatten(treedef, [leaf + size * sign for leaf, sign in zip(leaves, signs)])
            gain = eqx.combine(stepped, static)
            if fixed_norm is not None:
                gain = eqx.tree_at(lambda g: g.input_norm, gain, fixed_norm)
            ll = _log_likelihoods(eqx.tree_at(lambda m: m.gain, model, gain), y, mask, k_paths)
            alive = np.all(np.isfinite(ll) | ~np.asarray(mask), axis=1)
            finite[s, d] = alive.mean()
            if alive.any():
                observed = np.asarray(mask)[alive]
                log_likelihood[s, d] = np.sum(np.where(observed, ll[alive], 0.0)) / observed.sum()
    return GainSurvival(finite, log_likelihood)


def _log_likelihoods(model: PiSSM, y: Array, mask: Array, key: Array) -> np.ndarray:
    """Per sequence and step (B, T): log q(y_t | y_{1:t-1}) along one sampled path."""
    return np.asarray(predict_jit(model, y, mask, key).log_likelihoods)[0]

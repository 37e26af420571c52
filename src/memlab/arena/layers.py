"""The arena's sequence layers by name: one interface, ``layer(x)`` with x (L, width) -> (L, width), causal.

Every entry makes a layer of a given width. How many numbers a layer carries from one step to the next after L
steps (its recurrent state; attention's is its key-value cache, which grows with L), so that results can be compared
at equal state, is :func:`state_size`, and it has one meaning: what the layer itself says. A layer tells it by its
own ``state_size(length)`` method (LRU, the attention layers, gated DeltaNet), else by its recurrent form:
``layer.init_state()`` and ``layer.step(state, x_t) -> (state, y_t)``, scanned over x from ``init_state()``, give
``layer(x)`` (tested; e.g. for running a trained model one observation at a time), and its state is what
``init_state()`` holds (counted on shapes, nothing computed). Only a layer that can tell neither way (a plugin's
layer without a recurrent form) is registered with a ``state_size=lambda width, length: ...`` of its own; one that
can tell and is given one anyway is held to it: a callable that disagrees with the layer is a ValueError when the
layer is made (and when a config naming it is validated). A researcher's own layer joins with
:func:`register_layer`::

    def make_mine(width, key):
        return MyLayer(width, key=key)           # any callable module: (L, width) -> (L, width)

    register_layer("mine", make_mine)            # MyLayer has init_state / step, or a state_size(length) method
    register_layer("other", make_other, state_size=lambda width, length: width)  # a layer that cannot tell

and then runs in every arena experiment by name:
``memlab run arena.leaderboard --plugin mine.py --set layers=mine,gru --out out/mine``.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.arena.logit_layers import AdaptiveLogitFilter, LogitFilter
from memlab.layers import (
    LRU,
    S5_STEP_RANGE,
    CausalLinearAttention,
    CausalSoftmaxAttention,
    GatedDeltaNet,
    GRUCell,
    LSTMCell,
    MambaBlock,
    S5Layer,
)
from memlab.plugins import load_plugins

__all__ = ["LAYERS", "AdaptiveLogitFilter", "LayerSpec", "LogitFilter", "check_state_sizes", "make_layer",
           "register_layer", "source_fingerprint", "state_numbers", "state_size"]

MAMBA_STATE = 16  # d_state of the Mamba block (expand 2, d_conv 4): its state is the SSM's 2 width x 16 numbers
# and the causal convolution's last 3 inputs, 2 width x 3


class LayerSpec(NamedTuple):
    """``make(width, key)`` -> a causal module (L, width) -> (L, width); ``state_size(width, length)`` -> numbers
    carried from step to step after ``length`` steps, only for a layer that cannot tell (module docstring; None:
    the layer's own ``state_size(length)`` or ``init_state()``)."""

    make: Callable[[int, Array], Callable[[Array], Array]]
    state_size: Callable[[int, int], int] | None = None
    description: str = ""
    source: str = ""  # a fingerprint of a registered layer's code ("" for memlab's own): see source_fingerprint


class GatedRNN(eqx.Module):
    """A GRU or LSTM cell (``memlab.layers.gated_rnn``) run over the sequence; its hidden state is the output."""

    cell: GRUCell | LSTMCell

    def init_state(self):
        return self.cell.init_state()

    def step(self, state, u: Array):
        state = self.cell(state, u)
        return state, state[0] if isinstance(state, tuple) else state

    def __call__(self, x: Array) -> Array:
        return jax.lax.scan(lambda state, u: self.step(state, u), self.init_state(), x)[1]


class S5(eqx.Module):
    """``memlab.layers.S5Layer`` (GLU mixing and residual inside), sequential scan: the fast form on a CPU."""

    layer: S5Layer

    def init_state(self) -> Array:
        return self.layer.init_state()

    def step(self, h: Array, u: Array) -> tuple[Array, Array]:
        return self.layer.step(h, u)

    def __call__(self, x: Array) -> Array:
        return self.layer(x, method="sequential")[1]


# S5's HiPPO-N modes have real part -1/2, so its initial |lambda| = exp(-step / 2) over its steps' range
S5_MODULI = (math.exp(-S5_STEP_RANGE[1] / 2), math.exp(-S5_STEP_RANGE[0] / 2))

LAYERS: dict[str, LayerSpec] = {
    "lru": LayerSpec(lambda d, key: LRU(d, d, key=key), description="LRU, width complex modes"),
    # the LRU started with S5's slow modes (ablation of its init): its own ring [0, 0.99] puts most modes far faster
    "lru-slow-modes": LayerSpec(lambda d, key: LRU(d, d, key=key, r_min=S5_MODULI[0], r_max=S5_MODULI[1]),
                                description="LRU, width complex modes, |lambda| started on S5's range "
                                            f"[{S5_MODULI[0]:.3f}, {S5_MODULI[1]:.4f}]"),
    "s5": LayerSpec(lambda d, key: S5(S5Layer(d, 2 * (d // 2 + d % 2), key=key)),
                    description="S5, state size = width (rounded up to even)"),
    "mamba": LayerSpec(lambda d, key: MambaBlock(d, MAMBA_STATE, key=key),
                       description="Mamba block (S6), d_state 16, expand 2"),
    "gru": LayerSpec(lambda d, key: GatedRNN(GRUCell(d, d, key=key)), description="GRU, hidden = width"),
    "lstm": LayerSpec(lambda d, key: GatedRNN(LSTMCell(d, d, key=key)), description="LSTM, hidden = width"),
    "attention": LayerSpec(lambda d, key: CausalSoftmaxAttention(d, 1, key=key),
                           description="causal softmax attention, one head, rotary position embeddings"),
    "linear-attention": LayerSpec(lambda d, key: CausalLinearAttention(d, 1, key=key),
                                  description="causal linear attention (elu + 1), one head"),
    "lof": LayerSpec(lambda d, key: LogitFilter(d, d, key=key),
                     description="trainable logit optimal filter (paper 1, eq. 7), hidden states = width"),
    "alf": LayerSpec(lambda d, key: AdaptiveLogitFilter(d, d, key=key),
                     description="trainable adaptive logit filter (paper 1, eq. 24): (1 - delta) T w + delta l, T and "
                                 "delta learned, hidden states = width"),
    "gated-deltanet": LayerSpec(lambda d, key: GatedDeltaNet(d, 1, key=key), description="gated DeltaNet, one head"),
    # as its authors' code and Zoology's MQAR runs have it: the ablation of the short convolution
    "gated-deltanet-conv": LayerSpec(lambda d, key: GatedDeltaNet(d, 1, key=key, short_conv=4),
                                     description="gated DeltaNet, one head, with a short convolution (width 4, silu) "
                                                 "on q, k, v"),
    # gated DeltaNet without one or both of its parts, and linear attention without its normaliser: the ablation
    # between linear attention and gated DeltaNet
    "unnormalised-linear-attention": LayerSpec(
        lambda d, key: CausalLinearAttention(d, 1, key=key, normalise=False),
        description="causal linear attention (elu + 1) without the normaliser z_t . phi(q_t), one head"),
    "deltanet": LayerSpec(lambda d, key: GatedDeltaNet(d, 1, key=key, decay=False),
                          description="DeltaNet: gated DeltaNet without the decay (alpha = 1), one head"),
    "gated-linear-attention": LayerSpec(
        lambda d, key: GatedDeltaNet(d, 1, key=key, delta=False),
        description="gated linear attention with a scalar decay per head (Mamba-2's gate, not GLA's per-dimension "
                    "one) and write strength beta: gated DeltaNet without the delta rule, one head"),
    "l2-linear-attention": LayerSpec(lambda d, key: GatedDeltaNet(d, 1, key=key, decay=False, delta=False),
                                     description="linear attention as gated DeltaNet writes it (L2-normalised q and "
                                                 "k, write strength beta, no normaliser), without decay or delta "
                                                 "rule, one head"),
    # between the two above: elu + 1 features as in linear attention, write strength beta as in gated DeltaNet
    "beta-linear-attention": LayerSpec(
        lambda d, key: GatedDeltaNet(d, 1, key=key, decay=False, delta=False, features="elu+1"),
        description="causal linear attention (elu + 1) without the normaliser, with gated DeltaNet's write strength "
                    "beta, one head"),
}
MEMLAB_LAYERS = frozenset(LAYERS)  # memlab's own; register_layer adds others


def register_layer(name: str, make: Callable[[int, Array], Callable[[Array], Array]],
                   state_size: Callable[[int, int], int] | None = None, description: str = "") -> None:
    """Add a layer to :data:`LAYERS` (ValueError if the name is taken or not a plain lower-case word).
    ``state_size(width, length)``: only for a layer that cannot tell its state itself (module docstring)."""
    if not name or not all(c.isalnum() or c in "-_" for c in name) or name != name.lower():
        raise ValueError(f"layer name must be lower-case letters, digits, '-' or '_', got {name!r}")
    if name in LAYERS:
        raise ValueError(f"layer {name!r} is already registered")
    LAYERS[name] = LayerSpec(make, state_size, description, source_fingerprint(make))


def source_fingerprint(function: Callable) -> str:
    """SHA-256 (16 hex digits) of the file that defines ``function`` ("" if it has none): part of a cell's key, so
    that a user who edits their layer's or task's file gets new numbers, not the stored cells of the old code."""
    module = sys.modules.get(getattr(function, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    if not path or not os.path.isfile(path):
        return ""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _spec(name: str) -> LayerSpec:
    if name not in LAYERS:
        load_plugins()  # a worker process meets a user's layer: import the plugins its driver was given
    if name not in LAYERS:
        raise ValueError(f"unknown layer {name!r}; known: {', '.join(sorted(LAYERS))}")
    return LAYERS[name]


def make_layer(name: str, width: int, key: Array) -> Callable[[Array], Array]:
    """The layer ``name`` of ``width`` channels, initialised from ``key``. ValueError if it was registered with a
    ``state_size`` callable that disagrees with what the layer tells itself (:func:`state_size`)."""
    spec = _spec(name)
    layer = spec.make(width, key)
    if spec.state_size is not None:
        told = _told_state_size(layer, 1)
        declared = int(spec.state_size(width, 1))
        if told is not None and told[0] != declared:
            raise ValueError(f"layer {name!r}: its state_size(width={width}, length=1) is {declared}, but its "
                             f"{told[1]} {told[0]} numbers; the state_size given to register_layer must count "
                             "the numbers its step carries (or leave it out: the layer tells it)")
    return layer


def _told_state_size(layer, length: int) -> tuple[int, str] | None:
    """What ``layer`` (a module, or its shapes) says it carries after ``length`` steps, and how it says it: its own
    ``state_size(length)`` method, else the numbers its ``init_state()`` holds (on shapes); None if it cannot tell."""
    if callable(getattr(layer, "state_size", None)):
        return int(layer.state_size(length)), "state_size(length) method says"
    if callable(getattr(layer, "init_state", None)) and callable(getattr(layer, "step", None)):
        return state_numbers(eqx.filter_eval_shape(lambda module: module.init_state(), layer)), "init_state() holds"
    return None


def check_state_sizes(names: Iterable[str], width: int) -> None:
    """ValueError if a registered layer of ``names`` at ``width`` has a recurrent form whose state disagrees with its
    declared ``state_size`` (:func:`make_layer`'s check, on the layer's shapes only: nothing is computed). memlab's
    own layers are skipped: tests/arena/test_layers.py holds them to their counts."""
    for name in names:
        if name not in MEMLAB_LAYERS:
            eqx.filter_eval_shape(make_layer, name, width, jax.random.PRNGKey(0))


def state_numbers(state) -> int:
    """Real numbers in a recurrent state (a pytree of arrays or shapes; a complex entry counts twice)."""
    return sum(math.prod(a.shape) * (2 if jnp.issubdtype(a.dtype, jnp.complexfloating) else 1)
               for a in jax.tree.leaves(state))


def state_size(name: str, width: int, length: int) -> int:
    """Numbers the layer ``name`` of ``width`` channels carries to the next step after ``length`` steps: what the
    layer tells (its ``state_size(length)`` method, else its ``init_state()``; on the layer's shapes, nothing is
    computed), else its registered ``state_size(width, length)``; ValueError if neither says."""
    spec = _spec(name)
    told = eqx.filter_eval_shape(lambda key: _told_state_size(spec.make(width, key), length), jax.random.PRNGKey(0))
    if told is not None:
        return told[0]
    if spec.state_size is None:
        raise ValueError(f"layer {name!r} cannot tell its state size (no state_size(length) method, no init_state "
                         "and step): register it with state_size=lambda width, length: ...")
    return int(spec.state_size(width, length))

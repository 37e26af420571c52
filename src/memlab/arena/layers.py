"""The arena's sequence layers by name: one interface, ``layer(x)`` with x (L, width) -> (L, width), causal.

Every entry makes a layer of a given width and says how many numbers it carries from one step to the next after
L steps (its recurrent state; attention's is its key-value cache, which grows with L), so results can be compared
at equal state. Every layer with a fixed-size state (all but softmax attention) also has its recurrent form,
``layer.init_state()`` and ``layer.step(state, x_t) -> (state, y_t)``: scanned over x from ``init_state()`` it gives
``layer(x)``, and its state holds exactly the numbers ``state_size`` counts (tested), e.g. for running a trained
model one observation at a time. A registered layer with ``init_state`` and ``step`` is held to the same count: a
``state_size`` that disagrees with its ``init_state()`` is a ValueError when the layer is made (and when a config
naming it is validated). A researcher's own layer joins with :func:`register_layer`::

    def make_mine(width, key):
        return MyLayer(width, key=key)           # any callable module: (L, width) -> (L, width)

    register_layer("mine", make_mine, state_size=lambda width, length: width)

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
    carried from step to step after ``length`` steps."""

    make: Callable[[int, Array], Callable[[Array], Array]]
    state_size: Callable[[int, int], int]
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


LAYERS: dict[str, LayerSpec] = {
    "lru": LayerSpec(lambda d, key: LRU(d, d, key=key), lambda d, L: 2 * d, "LRU, width complex modes"),
    "s5": LayerSpec(lambda d, key: S5(S5Layer(d, 2 * (d // 2 + d % 2), key=key)), lambda d, L: 2 * (d // 2 + d % 2),
                    "S5, state size = width (rounded up to even)"),
    "mamba": LayerSpec(lambda d, key: MambaBlock(d, MAMBA_STATE, key=key), lambda d, L: 2 * d * (MAMBA_STATE + 3),
                       "Mamba block (S6), d_state 16, expand 2"),
    "gru": LayerSpec(lambda d, key: GatedRNN(GRUCell(d, d, key=key)), lambda d, L: d, "GRU, hidden = width"),
    "lstm": LayerSpec(lambda d, key: GatedRNN(LSTMCell(d, d, key=key)), lambda d, L: 2 * d, "LSTM, hidden = width"),
    "attention": LayerSpec(lambda d, key: CausalSoftmaxAttention(d, 1, key=key), lambda d, L: 2 * d * L,
                           "causal softmax attention, one head, rotary position embeddings"),
    "linear-attention": LayerSpec(lambda d, key: CausalLinearAttention(d, 1, key=key), lambda d, L: d * d + d,
                                  "causal linear attention (elu + 1), one head"),
    "lof": LayerSpec(lambda d, key: LogitFilter(d, d, key=key), lambda d, L: d,
                     "trainable logit optimal filter (paper 1, eq. 7), hidden states = width"),
    "alf": LayerSpec(lambda d, key: AdaptiveLogitFilter(d, d, key=key), lambda d, L: d,
                     "trainable adaptive logit filter (paper 1, eq. 24): (1 - delta) T w + delta l, T and delta "
                     "learned, hidden states = width"),
    "gated-deltanet": LayerSpec(lambda d, key: GatedDeltaNet(d, 1, key=key), lambda d, L: d * d,
                                "gated DeltaNet, one head"),
    # gated DeltaNet without one or both of its parts, and linear attention without its normaliser: the ablation
    # between linear attention and gated DeltaNet
    "unnormalised-linear-attention": LayerSpec(
        lambda d, key: CausalLinearAttention(d, 1, key=key, normalise=False), lambda d, L: d * d,
        "causal linear attention (elu + 1) without the normaliser z_t . phi(q_t), one head"),
    "deltanet": LayerSpec(lambda d, key: GatedDeltaNet(d, 1, key=key, decay=False), lambda d, L: d * d,
                          "DeltaNet: gated DeltaNet without the decay (alpha = 1), one head"),
    "gated-linear-attention": LayerSpec(
        lambda d, key: GatedDeltaNet(d, 1, key=key, delta=False), lambda d, L: d * d,
        "gated linear attention with a scalar decay per head (Mamba-2's gate, not GLA's per-dimension one) and write "
        "strength beta: gated DeltaNet without the delta rule, one head"),
    "l2-linear-attention": LayerSpec(lambda d, key: GatedDeltaNet(d, 1, key=key, decay=False, delta=False),
                                     lambda d, L: d * d,
                                     "linear attention as gated DeltaNet writes it (L2-normalised q and k, write "
                                     "strength beta, no normaliser), without decay or delta rule, one head"),
    # between the two above: elu + 1 features as in linear attention, write strength beta as in gated DeltaNet
    "beta-linear-attention": LayerSpec(
        lambda d, key: GatedDeltaNet(d, 1, key=key, decay=False, delta=False, features="elu+1"), lambda d, L: d * d,
        "causal linear attention (elu + 1) without the normaliser, with gated DeltaNet's write strength beta, one "
        "head"),
}
MEMLAB_LAYERS = frozenset(LAYERS)  # memlab's own; register_layer adds others


def register_layer(name: str, make: Callable[[int, Array], Callable[[Array], Array]],
                   state_size: Callable[[int, int], int], description: str = "") -> None:
    """Add a layer to :data:`LAYERS` (ValueError if the name is taken or not a plain lower-case word)."""
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
    """The layer ``name`` of ``width`` channels, initialised from ``key``. ValueError if it has a recurrent form
    (``init_state`` and ``step``) whose state is not the ``state_size`` it was registered with."""
    spec = _spec(name)
    layer = spec.make(width, key)
    if callable(getattr(layer, "init_state", None)) and callable(getattr(layer, "step", None)):
        held = state_numbers(eqx.filter_eval_shape(lambda module: module.init_state(), layer))
        declared = int(spec.state_size(width, 1))
        if held != declared:
            raise ValueError(f"layer {name!r}: its state_size(width={width}, length=1) is {declared}, but its "
                             f"init_state() holds {held} numbers; the state_size given to register_layer must count "
                             "the numbers its step carries")
    return layer


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
    """Numbers the layer ``name`` of ``width`` channels carries to the next step after ``length`` steps."""
    return int(_spec(name).state_size(width, length))

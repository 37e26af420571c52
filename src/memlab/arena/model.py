"""The one model every arena layer runs in: embed -> blocks -> norm -> head, pre-norm residual blocks
(x + layer(norm(x)), then x + mlp(norm(x))), as in the Mamba / Transformer stacks. One sequence (L, input_size)
-> (L, output_size); vmap outside."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.arena.layers import make_layer
from memlab.checks import check_int
from memlab.layers import apply_linear, apply_mlp

__all__ = ["Block", "SequenceModel", "parameter_count"]


class Block(eqx.Module):
    norm1: eqx.nn.LayerNorm
    mixer: eqx.Module
    norm2: eqx.nn.LayerNorm
    mlp: eqx.nn.MLP

    def __init__(self, layer: str, width: int, *, key: Array):
        k_mix, k_mlp = jax.random.split(key)
        self.norm1, self.norm2 = eqx.nn.LayerNorm(width), eqx.nn.LayerNorm(width)
        self.mixer = make_layer(layer, width, k_mix)
        self.mlp = eqx.nn.MLP(width, width, 2 * width, 1, activation=jax.nn.gelu, key=k_mlp)

    def __call__(self, x: Array) -> Array:
        x = x + self.mixer(jax.vmap(self.norm1)(x))
        return x + apply_mlp(self.mlp, jax.vmap(self.norm2)(x))


class SequenceModel(eqx.Module):
    """``layer`` (a name in ``memlab.arena.layers.LAYERS``) in ``depth`` blocks of ``width`` channels."""

    embed: eqx.nn.Linear
    blocks: list[Block]
    norm: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(self, layer: str, input_size: int, output_size: int, width: int, depth: int, *, key: Array):
        check_int("width", width)
        check_int("depth", depth)
        k_embed, k_head, *k_blocks = jax.random.split(key, depth + 2)
        self.embed = eqx.nn.Linear(input_size, width, key=k_embed)
        self.blocks = [Block(layer, width, key=k) for k in k_blocks]
        self.norm = eqx.nn.LayerNorm(width)
        self.head = eqx.nn.Linear(width, output_size, key=k_head)

    def __call__(self, x: Array) -> Array:
        h = apply_linear(self.embed, x)
        for block in self.blocks:
            h = block(h)
        return apply_linear(self.head, jax.vmap(self.norm)(h))


def parameter_count(model: eqx.Module) -> int:
    """Trainable numbers (every inexact array leaf)."""
    return sum(int(jnp.size(a)) for a in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array)))

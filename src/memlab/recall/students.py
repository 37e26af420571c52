"""The students: Mamba (S6) students of App. A.1 and section 4.4, and the softmax-attention comparator.

Each student maps one encoded sequence (T+2, d_in) (see ``encoding.encode``) to a scalar, read out at the
last token (the second query token, section 4.4); the caller vmaps over examples.

Mamba student, ``num_blocks`` S6 blocks (section 4.4: M = Phi_3 o S6 o Phi_2 o S6 o Phi_1 for two blocks;
App. A.1's "MLP -> S6 -> MLP" is one block):

    x = Phi_1(u)                     tokenwise ReLU MLP (section 4.3), d_in -> d_model
    x = Mamba(x)                     S6 block: the Mamba mixer, composed as the paper writes it (the default)
      or x + Mamba(RMSNorm(x))       ``residual=True``: in the pre-norm residual wrapper of the public Mamba code
                                     (the residual is itself a tokenwise map, so the class is unchanged)
    x = Phi_2(x)                     between blocks, d_model -> d_model
    ...
    y = Phi_last(x_{T+1})            head MLP at the last position, d_model -> 1

Attention comparator (the Transformer of Kawata & Suzuki 2026 that the paper compares against, at the same
width): Phi_1, then one softmax-attention layer whose query is the last token and whose keys/values are all
tokens (pre-norm, residual), then the same head. Only the last position is read out, so only its query is
computed: O(T d) per example, like the scan.
"""

from __future__ import annotations

import equinox as eqx
import jax
from jax import Array

from memlab.checks import check_int
from memlab.layers import MambaBlock


def _mlp(in_size: int, out_size: int, width: int, key: Array) -> eqx.nn.MLP:
    """One-hidden-layer ReLU MLP (the tokenwise feedforward maps Phi of section 4.3)."""
    return eqx.nn.MLP(in_size, out_size, width, depth=1, activation=jax.nn.relu, key=key)


def _check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        check_int(name, value)


class MambaStudent(eqx.Module):
    """Phi_{k+1} o S6 o Phi_k o ... o S6 o Phi_1 with k = ``num_blocks`` S6 (Mamba) blocks; see module doc.

    ``__call__(u (L, d_in), reset=None) -> ()`` reads out at the last token; ``features`` gives all positions.
    """

    phis: tuple[eqx.nn.MLP, ...]  # Phi_1 (d_in -> d_model), Phi_2..Phi_k (d_model -> d_model)
    norms: tuple[eqx.nn.RMSNorm, ...]  # one per block if ``residual``, else empty
    blocks: tuple[MambaBlock, ...]
    head: eqx.nn.MLP  # d_model -> 1
    residual: bool = eqx.field(static=True)  # each mixer in the pre-norm residual wrapper (x + Mamba(RMSNorm(x)))

    def __init__(
        self,
        d_in: int,
        *,
        num_blocks: int = 1,
        d_model: int = 16,
        d_state: int = 32,
        d_conv: int = 4,
        expand: int = 2,
        mlp_width: int | None = None,
        discretization: str = "zoh",
        scan: str = "sequential",
        residual: bool = False,
        key: Array,
    ):
        _check_sizes(d_in=d_in, num_blocks=num_blocks, d_model=d_model, d_state=d_state, d_conv=d_conv, expand=expand)
        width = mlp_width or 2 * d_model
        keys = jax.random.split(key, 2 * num_blocks + 1)
        self.phis = tuple(_mlp(d_in if i == 0 else d_model, d_model, width, keys[i]) for i in range(num_blocks))
        self.residual = residual
        self.norms = tuple(eqx.nn.RMSNorm(d_model) for _ in range(num_blocks)) if residual else ()
        self.blocks = tuple(
            MambaBlock(d_model, d_state=d_state, d_conv=d_conv, expand=expand, discretization=discretization,
                       scan=scan, key=keys[num_blocks + i])
            for i in range(num_blocks)
        )
        self.head = _mlp(d_model, 1, width, keys[-1])

    def trace(self, u: Array, reset: Array | None = None) -> tuple[Array, list[Array]]:
        """(features (L, d_model) after the last block, [the (L, d_model) mixer input of each block])."""
        x, mixer_inputs = u, []
        for i in range(len(self.blocks)):
            mixer_input, x = self._layer(i, x, reset)
            mixer_inputs.append(mixer_input)
        return x, mixer_inputs

    def features(self, u: Array, reset: Array | None = None) -> Array:
        """(L, d_model): the sequence after the last S6 block (before the head)."""
        return self.trace(u, reset)[0]

    def __call__(self, u: Array, reset: Array | None = None) -> Array:
        """head(features(u, reset)[-1]), with the last S6 block evaluated at the readout token only."""
        x, last = u, len(self.blocks) - 1
        for i in range(last):
            x = self._layer(i, x, reset)[1]
        return self.head(self._layer(last, x, reset, readout_only=True)[1])[0]

    def _layer(self, i: int, x: Array, reset: Array | None, readout_only: bool = False) -> tuple[Array, Array]:
        """Phi_i, then S6 block i (in its residual wrapper if ``residual``): (mixer input (L, d_model), output
        (L, d_model), or only its last token (d_model,) if ``readout_only``)."""
        x = jax.vmap(self.phis[i])(x)
        mixer_input = jax.vmap(self.norms[i])(x) if self.residual else x
        out = (self.blocks[i].last if readout_only else self.blocks[i])(mixer_input, reset)
        if self.residual:
            out = out + (x[-1] if readout_only else x)
        return mixer_input, out


class AttentionStudent(eqx.Module):
    """Phi_1 -> softmax attention from the last token over all tokens (pre-norm, residual) -> head; see module doc.

    ``__call__(u (L, d_in)) -> ()``.
    """

    phi: eqx.nn.MLP
    norm: eqx.nn.LayerNorm
    attention: eqx.nn.MultiheadAttention
    head: eqx.nn.MLP

    def __init__(self, d_in: int, *, d_model: int = 16, num_heads: int = 1, mlp_width: int | None = None, key: Array):
        _check_sizes(d_in=d_in, d_model=d_model, num_heads=num_heads)
        if d_model % num_heads:
            raise ValueError(f"d_model = {d_model} must be divisible by num_heads = {num_heads}")
        width = mlp_width or 2 * d_model
        k_phi, k_att, k_head = jax.random.split(key, 3)
        self.phi = _mlp(d_in, d_model, width, k_phi)
        self.norm = eqx.nn.LayerNorm(d_model)
        self.attention = eqx.nn.MultiheadAttention(num_heads, d_model, use_query_bias=True, use_key_bias=True,
                                                   use_value_bias=True, use_output_bias=True, key=k_att)
        self.head = _mlp(d_model, 1, width, k_head)

    def __call__(self, u: Array, reset: Array | None = None) -> Array:
        if reset is not None:
            raise ValueError("AttentionStudent reads one sequence; packed sequences (reset flags) are not supported")
        x = jax.vmap(self.phi)(u)
        normed = jax.vmap(self.norm)(x)
        last = x[-1] + self.attention(normed[-1:], normed, normed)[0]
        return self.head(last)[0]


def num_params(model: eqx.Module) -> int:
    """Number of trainable scalars."""
    return sum(x.size for x in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array)))

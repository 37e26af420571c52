"""The S5 memory of the RingWorld PPO agents (section 6.2, App. E.2.1): an encoder, then one S5 layer.

Following Lu et al. (2023), which App. E.2.1 says the paper follows: a two-layer MLP encoder phi then ONE S5 layer
(``memlab.layers.s5.S5Layer``) of model width H and state size P = H:

    x_k = phi(o_k)         phi: Linear(O', 128) -> LeakyReLU -> Linear(128, H) -> LeakyReLU
    (h_k, out_k) = S5Layer.step(h_{k-1}, x_k, start_k)

Lu et al.'s encoder applies LeakyReLU after BOTH Dense layers (orthogonal(sqrt 2) weights, zero biases); we do the
same. The paper's counts 2,048 = 4*128 + 128*12 and 33,280 = 4*128 + 128*256 are the encoder's weights without
biases for a 4-dim observation (``encoder_weight_count``). The previous action can be appended as a one-hot vector
(``num_actions``; off by default, as the counts say); at an episode start it is all zeros. The start flag can be
appended as one more input (``start_input``; Lu et al.'s runner feeds both).
"""

from __future__ import annotations

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.checks import check_choice, check_int
from memlab.layers import S5Layer, apply_linear, dense_linear
from memlab.rl.memory import Memory
from memlab.scan import METHODS

ENCODER_WIDTH = 128  # App. E.2.1: encoder layer sizes [128, H]


def encoder_weight_count(input_size: int, hidden: int, width: int = ENCODER_WIDTH) -> int:
    """Weights (no biases) of the encoder Linear(input_size, width) -> Linear(width, hidden): the paper's 2,048 for
    (4, 12) and 33,280 for (4, 256) (App. E.2.2)."""
    return check_int("input_size", input_size) * check_int("width", width) + width * check_int("hidden", hidden)


@eqx.filter_jit
def init_encoder(key: Array, n_in: int, width: int, hidden: int) -> tuple[eqx.nn.Linear, eqx.nn.Linear]:
    """Linear(n_in, width), Linear(width, hidden): orthogonal(sqrt 2) weights, zero biases (Lu et al.'s encoder)."""
    k_in, k_out = jax.random.split(key)
    ortho = jax.nn.initializers.orthogonal(math.sqrt(2.0))
    return dense_linear(k_in, n_in, width, ortho), dense_linear(k_out, width, hidden, ortho)


class S5Memory(Memory):
    """The S5-based memory of section 6.2: encoder phi (Linear(O', 128), LeakyReLU, Linear(128, H), LeakyReLU)
    then one ``S5Layer`` of width H and state size P = H. Features (H,) = the layer's output.

    O' = obs_size, plus num_actions when the previous action is appended one-hot, plus 1 when the start flag is
    appended (``start_input``). State: (H/2,) complex.
    """

    encoder_in: eqx.nn.Linear
    encoder_out: eqx.nn.Linear
    layer: S5Layer
    obs_size: int = eqx.field(static=True)
    num_actions: int | None = eqx.field(static=True)
    start_input: bool = eqx.field(static=True)
    method: str = eqx.field(static=True)
    trainable: ClassVar[bool] = True

    def __init__(self, obs_size: int, hidden: int = 12, *, key: Array, num_actions: int | None = None,
                 start_input: bool = False, encoder_width: int = ENCODER_WIDTH, method: str = "parallel",
                 **layer_options):
        """hidden H = P (even); ``num_actions``: append the previous action one-hot; ``start_input``: append the
        start flag; ``layer_options`` go to ``S5Layer`` (dt_min, dt_max, activation, C_init); ``method`` is the
        scan of ``sequence`` ("parallel" or "sequential")."""
        self.obs_size = check_int("obs_size", obs_size)
        self.num_actions = None if num_actions is None else check_int("num_actions", num_actions)
        if not isinstance(start_input, bool):
            raise ValueError(f"start_input must be a bool, got {start_input!r}")
        self.start_input = start_input
        hidden, width = check_int("hidden", hidden, low=2), check_int("encoder_width", encoder_width)
        if hidden % 2:
            raise ValueError(f"hidden must be even (hidden/2 conjugate-symmetric complex modes), got {hidden}")
        check_choice("method", method, METHODS)
        self.method = method
        k_encoder, k_layer = jax.random.split(key)
        self.encoder_in, self.encoder_out = init_encoder(k_encoder, self.input_size, width, hidden)
        self.layer = S5Layer(hidden, hidden, key=k_layer, **layer_options)

    @property
    def input_size(self) -> int:
        """O' = obs_size (+ num_actions with the previous action one-hot, + 1 with the start flag)."""
        return self.obs_size + (self.num_actions or 0) + int(self.start_input)

    @property
    def num_features(self) -> int:
        return self.layer.width

    @property
    def num_encoder_weights(self) -> int:
        """The encoder's weights without biases (the paper's 2,048 / 33,280 for a 4-dim observation)."""
        return self.encoder_in.weight.size + self.encoder_out.weight.size

    def init_state(self) -> Array:
        return self.layer.init_state()

    def diagnostics(self) -> dict[str, Array]:
        """Logged by PPO: max |Lambda_bar| (the slowest mode's decay per step; < 1 iff every mode is stable) and the
        range of the steps Delta."""
        delta = self.layer.delta
        return {"max_abs_lambda_bar": jnp.max(jnp.abs(self.layer.discretize()[0])), "min_delta": jnp.min(delta),
                "max_delta": jnp.max(delta)}

    def encode(self, obs: Array, prev_action: Array, start: Array) -> Array:
        """phi of one step's input, or of a sequence's: obs (..., O), prev_action (...) int, start (...) bool ->
        (..., H). A sequence goes through as matrix products (``apply_linear``), not a vmap over its steps:
        several times faster forward and backward under PPO's vmap over environments on a CPU."""
        x = jnp.asarray(obs, self.layer.D.dtype)
        start = jnp.asarray(start)[..., None]
        if self.num_actions is not None:  # no previous action at an episode's start
            one_hot = jax.nn.one_hot(prev_action, self.num_actions, dtype=x.dtype)
            x = jnp.concatenate([x, jnp.where(start, 0.0, one_hot)], axis=-1)
        if self.start_input:
            x = jnp.concatenate([x, start.astype(x.dtype)], axis=-1)
        x = jax.nn.leaky_relu(apply_linear(self.encoder_in, x))
        return jax.nn.leaky_relu(apply_linear(self.encoder_out, x))

    def step(self, h: Array, obs: Array, prev_action: Array, start: Array) -> tuple[Array, Array]:
        """(h (H/2,), obs (O,), prev_action (), start ()) -> (h_new, features (H,)); start zeroes h first."""
        if jnp.shape(obs) != (self.obs_size,):
            raise ValueError(f"obs must have shape ({self.obs_size},), got {jnp.shape(obs)}")
        return self.layer.step(h, self.encode(obs, prev_action, start), start)

    def sequence(self, h: Array, obs: Array, prev_actions: Array, starts: Array) -> tuple[Array, Array]:
        """obs (L, O), prev_actions (L,), starts (L,) -> (h_last (H/2,), features (L, H)), by ``self.method``."""
        L = jnp.shape(obs)[0] if jnp.ndim(obs) == 2 else -1
        if jnp.shape(obs) != (L, self.obs_size) or jnp.shape(prev_actions) != (L,) or jnp.shape(starts) != (L,):
            raise ValueError(f"expected obs (L, {self.obs_size}), prev_actions (L,), starts (L,); got "
                             f"{jnp.shape(obs)}, {jnp.shape(prev_actions)}, {jnp.shape(starts)}")
        starts = jnp.asarray(starts, bool)
        x = self.encode(obs, jnp.asarray(prev_actions, jnp.int32), starts)
        return self.layer(x, h, starts, self.method)

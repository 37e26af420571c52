"""Gated DeltaNet (Yang, Kautz and Hatamizadeh 2024, "Gated Delta Networks: improving Mamba2 with delta rule"),
multi-head, one sequence x (L, d) -> (L, d).

Per head, with k_t and q_t L2-normalised, beta_t = sigmoid(w_beta . x_t) in (0, 1) the writing strength and
alpha_t = exp(-softplus(w_alpha . x_t + b_alpha)) in (0, 1) the decay:

    S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T          (the gated delta rule)
    o_t = S_t q_t

alpha = 1 is DeltaNet (Schlag et al. 2021); without the delta term (-beta_t S_{t-1} k_t k_t^T) it is gated linear
attention, S_t = alpha_t S_{t-1} + beta_t v_t k_t^T; with neither, plain linear attention with L2-normalised keys
and no normaliser. ``GatedDeltaNet(decay=False)`` and ``(delta=False)`` are these members of the family (the
arena's ablation of linear attention); ``features="elu+1"`` maps q and k by Katharopoulos et al.'s elu + 1 instead of
L2-normalising them (only without the delta rule, whose erasing step I - beta k k^T needs unit keys to stay a
contraction). ``short_conv=K`` puts the short convolution of the authors' code (and of Zoology's gated DeltaNet runs)
in front of the rule: q, k, v = silu(causal depthwise conv of width K, no bias, of the projections), then q and k
L2-normalised (flash-linear-attention's ``ShortConvolution`` with ``activation="silu"``); it lets a token's key
and value carry the tokens just before it, the shift associative recall needs. Without it memlab's layer has no
silu (upstream keeps one), and it differs from upstream's also in having no output norm and values as wide as
keys. State: a (d_h x d_h) matrix per head (and, with a short convolution, the last K - 1 projections).
:func:`gated_delta_rule` is the recurrence as written, one ``lax.scan`` step per time step (the reference); the layer
runs :func:`gated_delta_rule_chunked`, the paper's chunkwise form (tested equal), which takes a scan step per chunk
of time steps and does the rest as matrix products.
"""

from __future__ import annotations

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.layers.attention import HeadProjections, feature_map
from memlab.layers.causal_conv import causal_depthwise_conv, conv_step, init_conv_weight
from memlab.layers.dense import apply_linear

__all__ = ["GatedDeltaNet", "gated_delta_rule", "gated_delta_rule_chunked", "inverse_unit_lower", "solve_unit_lower"]


def _unit(x: Array) -> Array:
    return x / (jnp.linalg.norm(x, axis=-1, keepdims=True) + 1e-6)


FEATURES = {"l2": _unit, "elu+1": feature_map}  # what q and k go through before the rule


def gated_delta_rule(q: Array, k: Array, v: Array, alpha: Array, beta: Array, delta: bool = True) -> Array:
    """o_t = S_t q_t with S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, S_0 = 0.

    q, k (L, d_k); v (L, d_v); alpha, beta (L,) -> o (L, d_v). ``delta=False`` drops the term beta_t S_{t-1} k_t
    k_t^T (gated linear attention).
    """
    def step(S, inputs):
        q_t, k_t, v_t, a_t, b_t = inputs
        erased = S - b_t * jnp.outer(S @ k_t, k_t) if delta else S
        S = a_t * erased + b_t * jnp.outer(v_t, k_t)
        return S, S @ q_t

    S0 = jnp.zeros((v.shape[-1], k.shape[-1]), v.dtype)
    return jax.lax.scan(step, S0, (q, k, v, alpha, beta))[1]


def inverse_unit_lower(system: Array) -> Array:
    """The inverse of a unit lower-triangular matrix (n, n) (its diagonal read as ones, its upper part as zeros), by
    halves: inv([[A, 0], [C, B]]) = [[inv(A), 0], [-inv(B) C inv(A), inv(B)]], recursively; matrix products only,
    as accurate as a triangular solve (unlike the power series (I - N)(I + N^2)..., whose terms grow binomially and
    cancel: 5e-4 relative error in float32 on a chunk of identical keys)."""
    n = system.shape[0]
    if n == 1:
        return jnp.ones((1, 1), system.dtype)
    h = n // 2
    upper, lower = inverse_unit_lower(system[:h, :h]), inverse_unit_lower(system[h:, h:])
    return jnp.block([[upper, jnp.zeros((h, n - h), system.dtype)], [-lower @ (system[h:, :h] @ upper), lower]])


def solve_unit_lower(system: Array, rhs: Array) -> Array:
    """x with ``system @ x = rhs`` for a unit lower-triangular system (n, n), rhs (n, m): :func:`inverse_unit_lower`
    times rhs.

    Not ``jax.scipy.linalg.solve_triangular``: under ``vmap`` on the CPU that is jaxlib 0.10's batched LAPACK kernel,
    which hands parts of the batch to XLA's thread pool and waits for them; when as many of them run at once as the
    pool has threads, every thread waits and the program hangs (a depth-2 gated DeltaNet's first training step at
    the arena's paper sizes, on an idle 2-core machine, every time). Equal to it to float rounding
    (tests/layers/test_sequence_layers.py)."""
    return inverse_unit_lower(system) @ rhs


def gated_delta_rule_chunked(q: Array, k: Array, v: Array, log_alpha: Array, beta: Array, chunk: int = 64,
                             delta: bool = True) -> Array:
    """:func:`gated_delta_rule` (with ``alpha = exp(log_alpha)``) a chunk of ``chunk`` steps at a time.

    Within a chunk starting from state S_0, with g_t = log_alpha_1 + ... + log_alpha_t (so gamma_t = exp(g_t)) and
    Gamma_ti = gamma_t / gamma_i for i <= t: S_t = gamma_t S_0 + sum_{i<=t} Gamma_ti r_i k_i^T, where the r_i solve
    the unit lower-triangular system r_t + beta_t sum_{i<t} (k_t . k_i) Gamma_ti r_i = beta_t (v_t - gamma_t S_0 k_t)
    (substitute S_t into the rule: Yang et al.'s WY/UT form with the decay carried as ratios, never 1 / gamma_t).
    Then o_t = gamma_t S_0 q_t + sum_{i<=t} Gamma_ti (q_t . k_i) r_i, and the next chunk starts from S_C.
    Without the delta term (``delta=False``) the system is the identity: r_t = beta_t v_t.
    The time axis is padded to a multiple of ``chunk`` with steps that leave S unchanged (k = v = 0, beta = 0)."""
    L = q.shape[0]
    n = -(-L // chunk)

    def chunks(a):
        return jnp.pad(a, [(0, n * chunk - L)] + [(0, 0)] * (a.ndim - 1)).reshape(n, chunk, *a.shape[1:])

    causal = jnp.tril(jnp.ones((chunk, chunk), bool))
    earlier = jnp.tril(jnp.ones((chunk, chunk), bool), -1)

    def step(S, inputs):
        q_c, k_c, v_c, log_a, b = inputs
        g = jnp.cumsum(log_a)
        ratio = jnp.exp(jnp.where(causal, g[:, None] - g[None, :], 0.0)) * causal  # Gamma, 0 above the diagonal
        gamma = jnp.exp(g)[:, None]
        if delta:
            system = jnp.eye(chunk, dtype=k_c.dtype) + b[:, None] * (k_c @ k_c.T) * ratio * earlier
            r = solve_unit_lower(system, b[:, None] * (v_c - gamma * (k_c @ S.T)))
        else:
            r = b[:, None] * v_c
        out = gamma * (q_c @ S.T) + ((q_c @ k_c.T) * ratio) @ r
        to_end = jnp.exp(g[-1] - g)[:, None]  # gamma_C / gamma_i
        return jnp.exp(g[-1]) * S + (to_end * r).T @ k_c, out

    S0 = jnp.zeros((v.shape[-1], k.shape[-1]), v.dtype)
    out = jax.lax.scan(step, S0, tuple(chunks(a) for a in (q, k, v, log_alpha, beta)))[1]
    return out.reshape(n * chunk, -1)[:L]


class GatedDeltaNet(eqx.Module):
    """Gated DeltaNet; ``decay=False`` fixes alpha = 1 (DeltaNet), ``delta=False`` drops the delta term (gated
    linear attention), both: linear attention with L2-normalised keys and no normaliser; ``features="elu+1"`` (with
    ``delta=False``) feeds q and k through elu + 1 instead of normalising them; ``short_conv=K`` (> 1) convolves the
    projections first (module docstring)."""

    proj: HeadProjections
    gates: eqx.nn.Linear  # x_t -> (w_alpha . x_t + b_alpha, w_beta . x_t + b_beta) per head (no alpha row: decay off)
    conv_weight: Array | None  # (3 width, K): the short convolution over [q | k | v]; None without one
    decay: bool = eqx.field(static=True)
    delta: bool = eqx.field(static=True)
    features: str = eqx.field(static=True)

    def __init__(self, width: int, heads: int = 1, *, key: Array, decay: bool = True, delta: bool = True,
                 features: str = "l2", short_conv: int = 0):
        if features not in FEATURES:
            raise ValueError(f"features must be one of {sorted(FEATURES)}, got {features!r}")
        if delta and features != "l2":
            raise ValueError(f"features={features!r} needs delta=False: the delta rule needs unit keys")
        if not isinstance(short_conv, int) or isinstance(short_conv, bool) or short_conv == 1 or short_conv < 0:
            raise ValueError(f"short_conv must be 0 (none) or a kernel width >= 2, got {short_conv!r}")
        self.features = features
        k_proj, k_gates = jax.random.split(key)
        self.proj = HeadProjections(width, heads, k_proj)
        self.decay, self.delta = decay, delta
        gates = eqx.nn.Linear(width, (2 if decay else 1) * heads, key=k_gates)
        # decay near 1 at initialisation (softplus(-4) = 0.018: alpha ~ 0.98), as in the paper's code
        bias = jnp.concatenate([jnp.full(heads, -4.0), jnp.zeros(heads)]) if decay else jnp.zeros(heads)
        self.gates = eqx.tree_at(lambda g: g.bias, gates, bias)
        # a key of its own, so that the layers without one keep the numbers they had: folded in with 2, since
        # split(key) gives fold_in(key, 0) and fold_in(key, 1) (the gates') under JAX's partitionable threefry
        self.conv_weight = init_conv_weight(jax.random.fold_in(key, 2), 3 * width, short_conv) if short_conv else None

    def state_size(self, length: int | None = None) -> int:
        """heads d_h^2 numbers (and the convolution's last K - 1 projections), for any length."""
        window = 0 if self.conv_weight is None else self.conv_weight.size - self.conv_weight.shape[0]
        return self.proj.heads * self.proj.head_size ** 2 + window

    def _gates(self, x: Array) -> tuple[Array, Array]:
        """log alpha, beta (heads, L) for x (L, d)."""
        if not self.decay:
            b = apply_linear(self.gates, x)  # (L, heads)
            return jnp.zeros_like(b.T), jax.nn.sigmoid(b).T
        a, b = jnp.split(apply_linear(self.gates, x), 2, axis=-1)  # (L, heads) each
        return -jax.nn.softplus(a).T, jax.nn.sigmoid(b).T

    def init_state(self) -> Array | tuple[Array, Array]:
        """S = 0, (heads, d_h, d_h); with a short convolution (its last K - 1 projections (K - 1, 3 d), S), zero."""
        d_h = self.proj.head_size
        S = jnp.zeros((self.proj.heads, d_h, d_h), self.proj.out.weight.dtype)
        if self.conv_weight is None:
            return S
        channels, taps = self.conv_weight.shape
        return jnp.zeros((taps - 1, channels), S.dtype), S

    def step(self, state: Array | tuple[Array, Array], x: Array) -> tuple[Array | tuple[Array, Array], Array]:
        """One step of the gated delta rule: (state as ``init_state()``, x_t (d,)) -> (state_t, o_t (d,))."""
        qkv = apply_linear(self.proj.qkv, x[None])[0]
        if self.conv_weight is not None:
            earlier, S = state
            earlier, qkv = conv_step(earlier, qkv, self.conv_weight)
            qkv = jax.nn.silu(qkv)
        else:
            S = state
        q, k, v = self.proj.split_heads_token(qkv)  # (heads, d_h) each
        q, k = FEATURES[self.features](q), FEATURES[self.features](k)
        log_alpha, beta = (g[:, 0, None, None] for g in self._gates(x[None]))  # (heads, 1, 1)
        if self.delta:
            S = S - beta * jnp.einsum("hij,hj->hi", S, k)[:, :, None] * k[:, None, :]
        S = jnp.exp(log_alpha) * S + beta * v[:, :, None] * k[:, None, :]
        out = self.proj.merge_token(jnp.einsum("hij,hj->hi", S, q))
        return (S if self.conv_weight is None else (earlier, S)), out

    def __call__(self, x: Array) -> Array:
        qkv = apply_linear(self.proj.qkv, x)
        if self.conv_weight is not None:
            qkv = jax.nn.silu(causal_depthwise_conv(qkv, self.conv_weight))
        q, k, v = self.proj.split_heads(qkv)  # (heads, L, d_h) each
        log_alpha, beta = self._gates(x)  # (heads, L)
        rule = partial(gated_delta_rule_chunked, delta=self.delta)
        phi = FEATURES[self.features]
        return self.proj.merge(jax.vmap(rule)(phi(q), phi(k), v, log_alpha, beta))

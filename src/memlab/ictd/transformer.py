"""Softmax in-context TD transformers (paper 2, sections 2-4): prompt, constructed parameters, layers, forward.

Prompt Z (d+3, n+1) of eq. (13): rows 0..d-1 features x_0..x_n, row d rewards R_1..R_n (0 under the query),
row d+1 the target memory gamma v(S_{j+1}), row d+2 the current memory v(S_j). These are 0-based; the
paper's 1-based rows d+2, d+3 are rows d+1, d+2 here, and its query column n+1 is column n.

Attention (eq. 1) is ``attention(Z, W_v, W_k, W_q)``; everything else uses V = W_v, A = W_k^T W_q (section 2.1).

Layers (one prompt; vmap outside). With the attention matrix K~ = h(Z^T A Z) of eq. (4) from
``softmax_td.kernel_weights`` (query column masked as a source, eq. 2; ``kind`` = "softmax" is eq. 3,
the others are the kernel variants of App. F.6 and the linear attention of eq. 6; ``tau``/``rho`` as eq. 104):

    dual head      Z' = Z + Delta, Delta[d+2] = (V Z K~)[d+2], Delta[d+1] = gamma (V Z K~ Pi)[d+2]   eq. (14)-(18)
    single + TSM   Z_half = Z + V Z K~;  Z' = U Z_half + W Z_half Pi                                  eq. (21)-(23)

with Pi the predecessor shift of eq. (16) (X Pi moves column j+1 to column j, last column 0) and
U = I - e_{d+1} e_{d+1}^T, W = gamma e_{d+1} e_{d+2}^T (eq. 22, 0-based). Learning rates alpha_l enter by
V_l -> alpha_l V_l (section 3). Theorem 1: with theta* of eq. (15), Z_L[d+2, n] is weighted softmax TD
after L iterations (``softmax_td.weighted_softmax_td``), for every kernel, since the proof only uses the mask.

``forward`` runs the layers with ``jax.lax.scan``, differentiable in V and A (docs/studies/ictd.md, "Conventions").
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import Array

from memlab.checks import check_finite, check_gamma
from memlab.ictd.softmax_td import check_kernel_args, check_trajectory, kernel_weights

FORMS = ("tsm", "dual")


def make_prompt(features_traj, rewards) -> Array:
    """Z0 (d+3, n+1) of eq. (13) from features (n+1, d) (row j = x(S_j)) and rewards (n,) (R_1..R_n)."""
    X, R = check_trajectory(features_traj, rewards)
    dtype = jnp.result_type(X, R, float)
    n = R.shape[0]
    reward_row = jnp.concatenate([R.astype(dtype), jnp.zeros(1, dtype)])  # 0 under the query
    return jnp.concatenate([X.T.astype(dtype), reward_row[None], jnp.zeros((2, n + 1), dtype)], axis=0)


def shift_matrix(n: int, dtype=None) -> Array:
    """Pi (n+1, n+1) of eq. (16): ones on the subdiagonal, Pi[j+1, j] = 1; (X Pi)[:, j] = X[:, j+1], last column 0."""
    if n < 1:
        raise ValueError(f"context length n must be >= 1, got {n}")
    return jnp.eye(n + 1, k=-1, dtype=dtype)


def shift_columns(X) -> Array:
    """X Pi for X (..., n+1) without forming Pi (eq. 16): column j becomes column j+1, the last column 0.

    Equals ``X @ shift_matrix(n)``; the layers use it to avoid an (n+1)^2 product per layer.
    """
    X = jnp.asarray(X)
    return jnp.concatenate([X[..., 1:], jnp.zeros_like(X[..., :1])], axis=-1)


def tsm_matrices(d: int, gamma, dtype=None) -> tuple[Array, Array]:
    """U, W (d+3, d+3) of eq. (22), 0-based: U = I - e_{d+1} e_{d+1}^T, W = gamma e_{d+1} e_{d+2}^T."""
    check_gamma(gamma)
    D = d + 3
    U = jnp.eye(D, dtype=dtype).at[d + 1, d + 1].set(0.0)
    W = jnp.zeros((D, D), dtype).at[d + 1, d + 2].set(1.0) * gamma
    return U, W


def theta_star(d: int, alpha=1.0, dtype=None) -> tuple[Array, Array]:
    """The constructed (V, A), each (d+3, d+3), of eq. (15); V is scaled by the learning rate alpha.

    V's only non-zero row is the last (row d+2): [0_d, 1, 1, -1] on (R, gamma v', v); A = diag(I_d, 0_3).
    """
    if d < 1:
        raise ValueError(f"feature dimension d must be >= 1, got {d}")
    D = d + 3
    V = jnp.zeros((D, D), dtype).at[D - 1, d:].set(jnp.array([1.0, 1.0, -1.0], dtype)) * alpha
    A = jnp.zeros((D, D), dtype).at[:d, :d].set(jnp.eye(d, dtype=dtype))
    return V, A


def _check_layer_args(Z, V, A, gamma, kind, tau, rho) -> tuple[Array, Array, Array]:
    Z, V, A = jnp.asarray(Z), jnp.asarray(V), jnp.asarray(A)
    if Z.ndim != 2 or Z.shape[0] < 4 or Z.shape[1] < 2:
        raise ValueError(f"Z must have shape (d+3, n+1) with d >= 1, n >= 1, got {Z.shape}")
    D = Z.shape[0]
    if V.shape != (D, D) or A.shape != (D, D):
        raise ValueError(f"V and A must have shape (d+3, d+3) = ({D}, {D}), got {V.shape} and {A.shape}")
    check_gamma(gamma)
    check_kernel_args(kind, tau, rho)
    return Z, V, A


def attention_matrix(Z, A, kind: str = "softmax", tau=1.0, rho=0.0) -> Array:
    """K~ (n+1, n+1) of eq. (4): the masked kernel of the scores Z^T A Z; K~[n, :] = 0."""
    Z, A = jnp.asarray(Z), jnp.asarray(A)
    return kernel_weights(Z.T @ A @ Z, kind, tau, rho)


def attention(Z, W_v, W_k, W_q) -> Array:
    """Single-head masked softmax self-attention of eq. (1): W_v Z softmax(Z^T W_k^T W_q Z + M), (d+3, n+1).

    Z (D, n+1); W_v (D, D); W_k, W_q (m, D) for any key width m. The mask M of eq. (2) removes the query column
    as a source. The layers below use the reparameterisation V = W_v, A = W_k^T W_q of section 2.1 (Cheng et
    al., 2024), under which this equals ``V @ Z @ attention_matrix(Z, A)``.
    """
    Z, W_v, W_k, W_q = (jnp.asarray(a) for a in (Z, W_v, W_k, W_q))
    D = Z.shape[0] if Z.ndim == 2 else -1
    if Z.ndim != 2 or W_v.shape != (D, D) or W_k.ndim != 2 or W_k.shape[1] != D or W_q.shape != W_k.shape:
        raise ValueError(f"need Z (D, n+1), W_v (D, D), W_k and W_q (m, D) of one shape; got {Z.shape}, "
                         f"{W_v.shape}, {W_k.shape}, {W_q.shape}")
    scores = (W_k @ Z).T @ (W_q @ Z)  # Z^T W_k^T W_q Z, eq. (1)
    return W_v @ Z @ kernel_weights(scores, "softmax")  # column-wise softmax with the mask of eq. (2)


def _head(Z, V, A, kind, tau, rho) -> Array:
    """V Z K~ (d+3, n+1), the shared attention output of eq. (14), (17), (21)."""
    return V @ Z @ attention_matrix(Z, A, kind, tau, rho)


def dual_head_layer(Z, V, A, gamma, kind: str = "softmax", tau=1.0, rho=0.0) -> Array:
    """One dual-head layer, eq. (14)-(18): Z (d+3, n+1) -> Z (d+3, n+1).

    Only the last row of the head output is used: it is added to row d+2 (current value, eq. 14) and,
    shifted to the predecessor columns and times gamma, to row d+1 (target value, eq. 17).
    """
    Z, V, A = _check_layer_args(Z, V, A, gamma, kind, tau, rho)
    return _dual_head_layer(Z, V, A, gamma, kind, tau, rho)


@functools.partial(jax.jit, static_argnames=("kind",))
def _dual_head_layer(Z, V, A, gamma, kind, tau, rho):
    H = _head(Z, V, A, kind, tau, rho)
    current = H[-1]  # eq. (14)
    target = gamma * shift_columns(H[-1])  # eq. (17): (V Z K~ Pi)[d+2]
    return Z.at[-1].add(current).at[-2].add(target)  # eq. (18)


def single_head_tsm_layer(Z, V, A, gamma, kind: str = "softmax", tau=1.0, rho=0.0) -> Array:
    """One single-head + temporal-shift-module layer, eq. (21)-(23): Z (d+3, n+1) -> Z (d+3, n+1)."""
    Z, V, A = _check_layer_args(Z, V, A, gamma, kind, tau, rho)
    return _single_head_tsm_layer(Z, V, A, gamma, kind, tau, rho)


@functools.partial(jax.jit, static_argnames=("kind",))
def _single_head_tsm_layer(Z, V, A, gamma, kind, tau, rho):
    Z_half = Z + _head(Z, V, A, kind, tau, rho)  # eq. (21)
    U, W = tsm_matrices(Z.shape[0] - 3, gamma, Z_half.dtype)
    return U @ Z_half + W @ shift_columns(Z_half)  # eq. (23)


_LAYERS = {"tsm": _single_head_tsm_layer, "dual": _dual_head_layer}


def forward(Z0, V, A, gamma, num_layers: int | None = None, form: str = "tsm", kind: str = "softmax", tau=1.0,
            rho=0.0, alphas=None) -> Array:
    """Run L layers (eq. 3 / 18 / 23) from the prompt Z0 (d+3, n+1); returns Zs (L+1, d+3, n+1), Zs[0] = Z0.

    V, A: (L, d+3, d+3), one pair per layer (then num_layers is None or L), or (d+3, d+3) shared by all
    ``num_layers`` layers (looped transformer). alphas (L,): learning rates, layer l uses alpha_l V_l
    (default 1). form: "tsm" (single head + TSM, eq. 21-23) or "dual" (eq. 14-18). ``lax.scan`` over layers.
    """
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}; expected one of {FORMS}")
    check_kernel_args(kind, tau, rho)
    check_gamma(gamma)
    Z0, V, A = jnp.asarray(Z0), jnp.asarray(V), jnp.asarray(A)
    if Z0.ndim != 2 or Z0.shape[0] < 4 or Z0.shape[1] < 2:
        raise ValueError(f"Z0 must have shape (d+3, n+1) with d >= 1, n >= 1, got {Z0.shape}")
    D = Z0.shape[0]
    if V.shape != A.shape or V.shape[-2:] != (D, D) or V.ndim not in (2, 3):
        raise ValueError(f"V and A must both have shape (d+3, d+3) or (L, d+3, d+3) with d+3 = {D}; "
                         f"got {V.shape} and {A.shape}")
    if V.ndim == 2:
        if num_layers is None or num_layers < 1:
            raise ValueError(f"shared (d+3, d+3) parameters need num_layers >= 1, got {num_layers}")
        V = jnp.broadcast_to(V, (num_layers, D, D))
        A = jnp.broadcast_to(A, (num_layers, D, D))
    elif num_layers is not None and num_layers != V.shape[0]:
        raise ValueError(f"num_layers = {num_layers} but V, A hold {V.shape[0]} layers")
    L = V.shape[0]
    if L < 1:
        raise ValueError("need at least one layer")
    check_finite("Z0", Z0)
    dtype = jnp.result_type(Z0, V, A, float)
    alphas = jnp.ones(L, dtype) if alphas is None else jnp.asarray(alphas, dtype)
    if alphas.shape != (L,):
        raise ValueError(f"alphas must have shape (L,) = ({L},), got {alphas.shape}")
    return _forward(Z0.astype(dtype), V, A, alphas, gamma, tau, rho, form, kind)


@functools.partial(jax.jit, static_argnames=("form", "kind"))
def _forward(Z0, V, A, alphas, gamma, tau, rho, form, kind):
    layer = _LAYERS[form]

    def step(Z, params):
        V_l, A_l, alpha_l = params
        Z = layer(Z, alpha_l * V_l, A_l, gamma, kind, tau, rho)
        return Z, Z

    _, Zs = jax.lax.scan(step, Z0, (V, A, alphas))
    return jnp.concatenate([Z0[None], Zs], axis=0)


def readout(Z) -> Array:
    """The prediction Z[d+2, n] (the paper's Z[d+3, n+1], eq. 5/19); Z (..., d+3, n+1) -> (...)."""
    return jnp.asarray(Z)[..., -1, -1]

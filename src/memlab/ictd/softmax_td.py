"""Weighted softmax TD (paper 2, sections 3 and 5): the reference algorithm, written plainly.

- ``kernel_weights``: the kernel matrix K of eq. (4), the query masked as a source (eq. 2): softmax (eq. 12, 104),
  relu / elu1 / rbf (App. F.6), linear (eq. 6), with the identity mixing rho of eq. (104);
- ``weighted_softmax_td``: the update below eq. (12) with the TD error of eq. (11), scores L = X X^T;
- ``batch_linear_td``: what the linear kernel runs, batch linear TD(0); ``tabular_td_fixed_point``: LSTD;
- ``operator_from_counts``, ``iterate_operator``: the operator form eq. (24)-(26); M_pi eq. (27), margin eq. (28).

Choices the paper leaves open: the RBF kernel's formula (the squared distance under A's quadratic form); the
identity mixing only on context sources, so the mask of eq. (2) holds for every rho. One trajectory per call (vmap
outside), float64-capable. Conventions, kernels and the batch-linear-TD derivation: docs/studies/ictd.md.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_finite, check_gamma, is_concrete

KERNELS = ("softmax", "relu", "elu1", "rbf", "linear")


# ---------------------------------------------------------------- input checks (shared with transformer.py)

def check_kernel_args(kind: str, tau, rho) -> None:
    """ValueError unless ``kind`` is one of KERNELS, tau > 0 and 0 <= rho <= 1 (values checked when concrete)."""
    if kind not in KERNELS:
        raise ValueError(f"unknown kernel kind {kind!r}; expected one of {KERNELS}")
    if is_concrete(tau):
        t = np.asarray(tau, dtype=np.float64)
        if t.ndim != 0 or not np.isfinite(t) or t <= 0:
            raise ValueError(f"temperature tau must be a finite scalar > 0, got {tau}")
    if is_concrete(rho):
        p = np.asarray(rho, dtype=np.float64)
        if p.ndim != 0 or not (0.0 <= p <= 1.0):
            raise ValueError(f"diagonal mixing rho must be a scalar in [0, 1], got {rho}")


def check_trajectory(features_traj, rewards) -> tuple[Array, Array]:
    """Check features (n+1, d) and rewards (n,), n >= 1; return them as arrays."""
    X, R = jnp.asarray(features_traj), jnp.asarray(rewards)
    if X.ndim != 2 or X.shape[0] < 2 or X.shape[1] < 1:
        raise ValueError(f"features_traj must have shape (n+1, d) with n >= 1, d >= 1, got {X.shape}")
    n = X.shape[0] - 1
    if R.shape != (n,):
        raise ValueError(f"rewards must have shape (n,) = ({n},) for features of shape {X.shape}, got {R.shape}")
    check_finite("features_traj", X)
    check_finite("rewards", R)
    return X, R


def _per_iteration(name: str, a, num_iters: int, dtype) -> Array:
    """A scalar or (num_iters,) learning rate, as an array of shape (num_iters,)."""
    a = jnp.asarray(a, dtype=dtype)
    if a.ndim == 0:
        return jnp.broadcast_to(a, (num_iters,))
    if a.shape != (num_iters,):
        raise ValueError(f"{name} must be a scalar or have shape ({num_iters},), got {a.shape}")
    check_finite(name, a)
    return a


# ---------------------------------------------------------------- kernels

def kernel_weights(scores, kind: str = "softmax", tau=1.0, rho=0.0) -> Array:
    """The attention matrix K~ (n+1, n+1) of eq. (4) from a score matrix L (n+1, n+1) (docs/studies/ictd.md).

    Column j aggregates into target j; source rows 0..n-1 are the context, row n (the query column as a
    source; the paper's 1-based row n+1) is masked: K[n, :] = 0 (eq. 2). ``tau`` divides the scores,
    ``rho`` mixes the identity on the context sources (eq. 104); tau = 1, rho = 0 give eq. (3).
    """
    check_kernel_args(kind, tau, rho)
    L = jnp.asarray(scores)
    if L.ndim != 2 or L.shape[0] != L.shape[1] or L.shape[0] < 2:
        raise ValueError(f"scores must be a square (n+1, n+1) matrix with n >= 1, got shape {L.shape}")
    return _kernel_weights(L, kind, tau, rho)


@functools.partial(jax.jit, static_argnames=("kind",))
def _kernel_weights(L, kind, tau, rho):
    n = L.shape[0] - 1
    Ls = L / tau
    ctx = Ls[:n]  # (n, n+1): sources 0..n-1, the context
    if kind == "softmax":
        h = jax.nn.softmax(ctx, axis=0)  # eq. (12): normalised over the n context sources
    elif kind == "relu":
        h = jax.nn.relu(ctx)
    elif kind == "elu1":
        h = jax.nn.elu(ctx) + 1.0
    elif kind == "rbf":
        diag = jnp.diagonal(Ls)
        h = jnp.exp(-(diag[:n, None] + diag[None, :] - ctx - Ls.T[:n]) / 2.0)
    else:  # linear, eq. (6)
        h = ctx
    h = (1.0 - rho) * h + rho * jnp.eye(n, n + 1, dtype=h.dtype)  # eq. (104), identity on context only
    return jnp.concatenate([h, jnp.zeros((1, n + 1), h.dtype)], axis=0)  # mask eq. (2): K[n, :] = 0


def feature_scores(features_traj) -> Array:
    """Score matrix L = X X^T (n+1, n+1), L[i, j] = <x(S_i), x(S_j)> = g(S_j, S_i) (section 3)."""
    X = jnp.asarray(features_traj)
    return X @ X.T


# ---------------------------------------------------------------- the TD recursion

def td_with_weights(K, rewards, gamma, num_iters: int, alpha=1.0, v0=None) -> Array:
    """Iterate the update below eq. (12) for a given kernel K (n+1, n+1), K[k-1, j] = K(S_{k-1}, S_j).

    rewards (n,): R_1..R_n; alpha: scalar or (num_iters,) learning rates alpha_t; v0 (n+1,) (default 0).
    Returns values (num_iters+1, n+1), row t = (v_t(S_0), ..., v_t(S_n)).
    """
    check_gamma(gamma)
    if num_iters < 0:
        raise ValueError(f"num_iters must be >= 0, got {num_iters}")
    K, R = jnp.asarray(K), jnp.asarray(rewards)
    n = R.shape[0] if R.ndim == 1 else -1
    if R.ndim != 1 or K.shape != (n + 1, n + 1):
        raise ValueError(f"need rewards (n,) and K (n+1, n+1); got rewards {R.shape} and K {K.shape}")
    dtype = jnp.result_type(K, R, float)
    v0 = jnp.zeros(n + 1, dtype) if v0 is None else jnp.asarray(v0, dtype)
    if v0.shape != (n + 1,):
        raise ValueError(f"v0 must have shape (n+1,) = ({n + 1},), got {v0.shape}")
    alphas = _per_iteration("alpha", alpha, num_iters, dtype)
    return _td_with_weights(K, R, gamma, alphas, v0)


@jax.jit
def _td_with_weights(K, R, gamma, alphas, v0):
    W = K[:-1]  # (n, n+1): W[k-1, j] = K(S_{k-1}, S_j), transitions k = 1..n

    def step(v, a):
        delta = R + gamma * v[1:] - v[:-1]  # eq. (11): delta_k for k = 1..n
        v = v + a * (delta @ W)  # weighted softmax TD: sum_k delta_k K(S_{k-1}, S_j)
        return v, v

    _, vs = jax.lax.scan(step, v0, alphas)
    return jnp.concatenate([v0[None], vs], axis=0)


def weighted_softmax_td(features_traj, rewards, gamma, num_iters: int, kind: str = "softmax", tau=1.0,
                        alpha=1.0, v0=None, rho=0.0) -> Array:
    """Weighted softmax TD on one trajectory with score g = <x, x'> (eq. 11-12 and the update below).

    features_traj (n+1, d): row j = x(S_j); rewards (n,): R_k = r(S_{k-1}); alpha scalar or (num_iters,).
    ``kind``/``tau``/``rho`` choose the kernel (``kernel_weights``). Returns values (num_iters+1, n+1):
    v_t(S_j) for t = 0..num_iters, j = 0..n; the query prediction is values[:, n].
    """
    X, R = check_trajectory(features_traj, rewards)
    return td_with_weights(kernel_weights(feature_scores(X), kind, tau, rho), R, gamma, num_iters, alpha, v0)


def batch_linear_td(features_traj, rewards, gamma, num_iters: int, tau=1.0, alpha=1.0) -> Array:
    """Batch linear TD(0) weights w_t (num_iters+1, d), w_0 = 0 (derivation: docs/studies/ictd.md).

    <w_t, x(S_j)> equals ``weighted_softmax_td(..., kind="linear", tau, alpha)[t, j]`` (rho = 0, v0 = 0).
    """
    X, R = check_trajectory(features_traj, rewards)
    check_gamma(gamma)
    check_kernel_args("linear", tau, 0.0)
    if num_iters < 0:
        raise ValueError(f"num_iters must be >= 0, got {num_iters}")
    alphas = _per_iteration("alpha", alpha, num_iters, jnp.result_type(X, R, float))
    return _batch_linear_td(X, R, gamma, alphas, tau)


@jax.jit
def _batch_linear_td(X, R, gamma, alphas, tau):
    w0 = jnp.zeros(X.shape[1], alphas.dtype)

    def step(w, a):
        delta = R + gamma * (X[1:] @ w) - X[:-1] @ w  # eq. (11) with v = <w, x>
        w = w + (a / tau) * (delta @ X[:-1])
        return w, w

    _, ws = jax.lax.scan(step, w0, alphas)
    return jnp.concatenate([w0[None], ws], axis=0)


def tabular_td_fixed_point(states, r, t: int, gamma, M: int) -> Array:
    """Batch tabular TD(0) converged (LSTD, certainty equivalence) on S_0 -> ... -> S_t: (M,), 0 where unvisited.

    v(u) = r(u) + gamma sum_u' P_emp(u, u') v(u') for the states u that are the source of a transition, with
    P_emp the empirical transition frequencies; states never a source keep the initial value 0. Equals
    ``batch_linear_td`` with one-hot features run to convergence. states (>= t+1,) ints in [0, M), r (M,).
    """
    counts = jax.nn.one_hot(states[:t], M).T @ jax.nn.one_hot(states[1:t + 1], M)
    visits = counts.sum(axis=1)
    P_emp = counts / jnp.maximum(visits, 1.0)[:, None]
    return jnp.linalg.solve(jnp.eye(M, dtype=P_emp.dtype) - gamma * P_emp, jnp.where(visits > 0, r, 0.0))


# ---------------------------------------------------------------- operator form (section 5)

def operator_form(states, K, m: int) -> tuple[Array, Array]:
    """M_hat (m, m) and P_hat (m, m) of eq. (24) from a trajectory's states (n+1,) and its kernel K (n+1, n+1).

    M_hat[s, s'] = sum_k K(S_{k-1}, s) 1{S_{k-1} = s'},  P_hat[s, s'] = sum_k K(S_{k-1}, s) 1{S_k = s'}.
    K(., s) is read from the column of the first trajectory position j with S_j = s; this needs every state
    to occur in states and K's columns to depend on the state only (true for scores g(x(S_j), x(S_i)) with
    rho = 0; eq. 104's rho > 0 mixes in the position identity and breaks it). Both are checked when concrete.
    """
    S, K = jnp.asarray(states), jnp.asarray(K)
    if S.ndim != 1 or S.shape[0] < 2 or K.shape != (S.shape[0], S.shape[0]):
        raise ValueError(f"need states (n+1,) with n >= 1 and K (n+1, n+1); got {S.shape} and {K.shape}")
    if not jnp.issubdtype(S.dtype, jnp.integer):
        raise ValueError(f"states must be integers in [0, m), got dtype {S.dtype}")
    n = S.shape[0] - 1
    hits = S[None, :] == jnp.arange(m)[:, None]  # (m, n+1)
    col = jnp.argmax(hits, axis=1)  # first position of each state
    if is_concrete(S, K):
        s_np, K_np = np.asarray(S), np.asarray(K)
        if s_np.min() < 0 or s_np.max() >= m:
            raise ValueError(f"states must lie in [0, m) = [0, {m})")
        missing = sorted(set(range(m)) - set(s_np.tolist()))
        if missing:
            raise ValueError(f"operator form needs a trajectory that visits every state; missing {missing[:10]}")
        same = K_np[:, np.asarray(col)[s_np]]
        if not np.allclose(same, K_np, rtol=1e-6, atol=1e-9 * max(1.0, np.abs(K_np).max())):
            raise ValueError("K's columns differ between visits of the same state: K(., s) is not a function "
                             "of the state (e.g. rho > 0 in eq. 104); eq. (24) is undefined")
    Kc = K[:n][:, col]  # (n, m): Kc[k-1, s] = K(S_{k-1}, s)
    prev = jax.nn.one_hot(S[:-1], m, dtype=K.dtype)  # (n, m): 1{S_{k-1} = s'}
    nxt = jax.nn.one_hot(S[1:], m, dtype=K.dtype)  # (n, m): 1{S_k = s'}
    return Kc.T @ prev, Kc.T @ nxt  # eq. (24)


def apply_operator(v, M_hat, P_hat, r, gamma, alpha=1.0) -> Array:
    """T_hat(v) = v + alpha ((gamma P_hat - M_hat) v + M_hat r), eq. (25) (alpha = 1 as in the paper).

    v (m,), M_hat, P_hat (m, m), r (m,) the reward function r(s). Iterating gives eq. (26).
    """
    v, M_hat, P_hat, r = (jnp.asarray(a) for a in (v, M_hat, P_hat, r))
    m = v.shape[0] if v.ndim == 1 else -1
    if M_hat.shape != (m, m) or P_hat.shape != (m, m) or r.shape != (m,):
        raise ValueError(f"need v (m,), M_hat, P_hat (m, m), r (m,); got {v.shape}, {M_hat.shape}, "
                         f"{P_hat.shape}, {r.shape}")
    check_gamma(gamma)
    return v + alpha * ((gamma * P_hat - M_hat) @ v + M_hat @ r)  # eq. (25)


def operator_from_counts(states, features, m: int, tau=1.0, n=None):
    """M_hat, P_hat (m, m) of eq. (24) for the score <x(s), x(s')>/tau, through the state counts (eq. 49).

    With c(u) = #{k <= n: S_{k-1} = u} and N(u, s') = #{k <= n: S_{k-1} = u, S_k = s'}:
    M_hat(s, s') = c(s') e^{<x_s, x_s'>/tau} / sum_u c(u) e^{<x_s, x_u>/tau} (eq. 49) and
    P_hat(s, s') = sum_u M_hat(s, u) N(u, s') / c(u), i.e. P_hat = M_hat P_emp (the split used in Lemma 6).
    Equals ``softmax_td.operator_form(states, kernel_weights(X X^T, "softmax", tau), m)`` in O(n + m^2).
    ``n`` (may be traced): use the first n transitions of ``states`` only (default: all), so one compiled
    function serves every context length.
    """
    prev, nxt = states[:-1], states[1:]
    w = jnp.ones(prev.shape, features.dtype) if n is None else (jnp.arange(prev.shape[0]) < n).astype(features.dtype)
    counts = jnp.zeros(m, features.dtype).at[prev].add(w)
    N = jnp.zeros((m, m), features.dtype).at[prev, nxt].add(w)
    log_counts = jnp.where(counts > 0, jnp.log(jnp.where(counts > 0, counts, 1.0)), -jnp.inf)
    M_hat = jax.nn.softmax(features @ features.T / tau + log_counts, axis=1)  # eq. (49)
    P_emp = N / jnp.maximum(counts, 1.0)[:, None]
    return M_hat, M_hat @ P_emp


def iterate_operator(M_hat, P_hat, r, gamma, num_layers: int):
    """v_0 = 0, v_{l+1} = T_hat(v_l) (eq. 25-26) by lax.scan; returns (num_layers+1, m)."""
    v0 = jnp.zeros(r.shape, r.dtype)

    def layer(v, _):
        v = apply_operator(v, M_hat, P_hat, r, gamma)
        return v, v

    _, vs = jax.lax.scan(layer, v0, None, length=num_layers)
    return jnp.concatenate([v0[None], vs])


def population_kernel(features, mu, tau=1.0) -> Array:
    """M_pi (m, m) of eq. (27): M_pi[s, s'] = mu(s') exp(<x_s, x_s'>/tau) / sum_u mu(u) exp(<x_s, x_u>/tau).

    features (m, d) state-major (row s = x(s)), mu (m,) the stationary distribution; tau = 1 is eq. (27).
    """
    X, mu = jnp.asarray(features), jnp.asarray(mu)
    if X.ndim != 2 or mu.shape != (X.shape[0],):
        raise ValueError(f"need shapes features (m, d) and mu (m,); got {X.shape} and {mu.shape}")
    check_kernel_args("softmax", tau, 0.0)
    if is_concrete(mu):
        p = np.asarray(mu, np.float64)
        if np.any(p < 0) or abs(p.sum() - 1.0) > 1e-6:
            raise ValueError(f"mu must be a probability vector (>= 0, sums to 1), sums to {p.sum():.6g}")
    logits = (X @ X.T) / tau + jnp.log(jnp.where(mu > 0, mu, 1.0))[None, :]
    logits = jnp.where(mu[None, :] > 0, logits, -jnp.inf)
    return jax.nn.softmax(logits, axis=1)  # eq. (27): rows s normalised over s'


def diagonal_margin(M_pi, gamma) -> Array:
    """C = min_s M_pi(s, s) - (1 + gamma)/2 (eq. 28), a scalar.

    Assumption 5.1 asks for a constant in (0, (1-gamma)/2) below this margin; since M_pi(s, s) <= 1 gives
    C <= (1-gamma)/2, such a constant exists iff C > 0 (``assumption_5_1_holds``).
    """
    M = jnp.asarray(M_pi)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"M_pi must be a square (m, m) matrix, got shape {M.shape}")
    check_gamma(gamma)
    return jnp.min(jnp.diagonal(M)) - (1.0 + gamma) / 2.0  # eq. (28)


def assumption_5_1_holds(M_pi, gamma) -> Array:
    """Boolean scalar: Assumption 5.1 holds for M_pi, i.e. ``diagonal_margin(M_pi, gamma) > 0``."""
    return diagonal_margin(M_pi, gamma) > 0

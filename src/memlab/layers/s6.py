"""The S6 selective state-space layer: discretisation, linear scans, the diagonal (Mamba) selective scan, and the
general-A layer of section 4.2 of *Mamba as measure-valued associative memory* (paper 4).

Discretisation of dh/dt = A h + B u over a step Delta with the input held fixed (zero-order hold, ZOH):

    M = exp(Delta A),      N = (int_0^Delta exp(s A) ds) B                                   # section 4.2

Both come from phi1(Delta A) = sum_k (Delta A)^k / (k+1)! (exp(Delta A) = I + Delta A phi1, integral = Delta phi1),
i.e. the blocks of expm(Delta [[A, I], [0, 0]]): plainly ``expm_and_integral_reference`` (jax.scipy's expm of that
2d x 2d matrix), and fast by scaling and squaring with a Taylor polynomial (``memlab.layers.zoh``, the engine the
layer uses, tested equal to the reference), so they are accurate for any square A, including singular and
non-diagonalisable ones, where the textbook form (Delta A)^{-1} (exp(Delta A) - I) Delta B does not exist. For
diagonal A (entries a) the integral is expm1(Delta a) / a, whose a -> 0 limit is Delta.

The public Mamba code uses a different rule for B ("Euler-B"): exp(Delta A) for A but plain Delta B for B, i.e.
it drops the factor expm1(Delta a) / (Delta a) = 1 + Delta a / 2 + O((Delta a)^2). Both agree to first order in
Delta a; ``discretization="euler_b"`` selects it so results can be compared with that code.

Scans: ``memlab.scan.linear_scan`` (h_t = a_t h_{t-1} + b_t elementwise) and ``matrix_scan`` (h_t = M_t h_{t-1} +
b_t), sequential or parallel, with per-step resets. The diagonal selective scan's sequential form runs as a native
CPU kernel where it can (``memlab.layers.native``).
"""

from __future__ import annotations

import math
from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.checks import check_choice
from memlab.layers import native
from memlab.layers.zoh import expm_and_integral
from memlab.scan import METHODS, linear_scan, matrix_scan, scan_inputs

DISCRETIZATIONS = ("zoh", "euler_b")


# ---------------------------------------------------------------------------------------------- discretisation


def expm_and_integral_reference(A: Array, delta: Array) -> tuple[Array, Array]:
    """(exp(delta A), int_0^delta exp(sA) ds) plainly, the reference the engine (``zoh.expm_and_integral``) is tested
    against: jax.scipy.linalg.expm(delta [[A, I], [0, 0]]) = [[exp(delta A), integral], [0, I]] per step."""
    d = A.shape[0]
    augmented = jnp.zeros((2 * d, 2 * d), A.dtype).at[:d, :d].set(A).at[:d, d:].set(jnp.eye(d, dtype=A.dtype))
    E = jax.scipy.linalg.expm(jnp.asarray(delta, A.dtype)[..., None, None] * augmented)
    return E[..., :d, :d], E[..., :d, d:]


def _check_square(A: Array) -> None:
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be a square matrix (d, d), got shape {A.shape}")


def _check_scalar_delta(delta: Array) -> None:
    if jnp.ndim(delta) != 0:
        raise ValueError(f"delta must be a scalar step, got shape {jnp.shape(delta)}")


def zoh_integral(A: Array, delta: Array) -> Array:
    """int_0^delta exp(s A) ds for any square A (d, d) and a scalar step delta; returns (d, d)."""
    A = jnp.asarray(A)
    _check_square(A)
    _check_scalar_delta(delta)
    return expm_and_integral(A, delta)[1]


def discretize(A: Array, delta: Array, B: Array) -> tuple[Array, Array]:
    """ZOH discretisation of section 4.2: M = exp(delta A) (d, d), N = (int_0^delta exp(sA) ds) B (d, k).

    A (d, d) any square matrix (singular allowed), delta a scalar, B (d, k).
    """
    A, B = jnp.asarray(A), jnp.asarray(B)
    _check_square(A)
    _check_scalar_delta(delta)
    if B.ndim != 2 or B.shape[0] != A.shape[0]:
        raise ValueError(f"B must be (d, k) with d = {A.shape[0]} rows (A is {A.shape}), got shape {B.shape}")
    M, integral = expm_and_integral(A, delta)
    return M, integral @ B


def _phi1(z: Array) -> Array:
    """expm1(z) / z with its limit 1 at z = 0; value and gradient finite and accurate everywhere.

    For |z| < 0.1 the Taylor series sum_k z^k / (k+1)!, k <= 9, is used (truncation < 3e-18 relative): the
    quotient's autodiff gradient exp(z)/z - expm1(z)/z^2 cancels catastrophically there. The division
    elsewhere sees a where-safe denominator, so no NaN reaches the gradient through the unused branch.
    """
    small = jnp.abs(z) < 0.1
    zs = jnp.where(small, z, 0.0)
    series = jnp.ones_like(z)
    for k in range(10, 1, -1):  # Horner: 1 + z/2! (1 + z/3 (1 + ... ))
        series = 1.0 + zs / k * series
    zl = jnp.where(small, 1.0, z)
    return jnp.where(small, series, jnp.expm1(zl) / zl)


def discretize_diagonal(a: Array, delta: Array, method: str = "zoh", a_nonzero: bool = False) -> tuple[Array, Array]:
    """Elementwise discretisation of a diagonal system (a and delta broadcast); returns (abar, bscale).

    abar = exp(delta a). The input coefficient is B_bar = bscale * B with
      "zoh":     bscale = expm1(delta a) / a   (exact zero-order hold, = delta when a = 0; section 4.2)
      "euler_b": bscale = delta                (the public Mamba code: exp(delta A) but plain delta B)
    They differ by the factor expm1(delta a) / (delta a) = 1 + delta a / 2 + O((delta a)^2), so they coincide
    as delta -> 0 (and exactly when a = 0).

    ``a_nonzero=True`` promises a != 0 everywhere (Mamba's A = -exp(A_log)): "zoh" then evaluates
    expm1(delta a) / a directly, exact in value and gradient, without the series branch of the a -> 0 limit
    (faster scan steps on a CPU, benchmarks/bench_s6.py).
    """
    check_choice("discretization", method, DISCRETIZATIONS)
    a, delta = jnp.asarray(a), jnp.asarray(delta)
    z = delta * a
    abar = jnp.exp(z)
    if method == "zoh" and a_nonzero:
        return abar, jnp.expm1(z) / a
    if method == "zoh":
        return abar, delta * _phi1(z)
    return abar, jnp.broadcast_to(delta, z.shape)


# ------------------------------------------------------------------------------------ diagonal selective scan


def selective_step(h: Array, x_t: Array, delta_t: Array, A: Array, B_t: Array, C_t: Array,
                   discretization: str = "zoh", a_nonzero: bool = False) -> tuple[Array, Array]:
    """One step of :func:`selective_scan` without the skip D: h (Din, N), x_t and delta_t (Din,), B_t, C_t (N,) ->
    (h_t = exp(delta_t A) h + bscale B_t x_t, y_t = h_t C_t (Din,))."""
    abar, bscale = discretize_diagonal(A, delta_t[:, None], discretization, a_nonzero)
    h = abar * h + bscale * (x_t[:, None] * B_t[None, :])
    return h, h @ C_t


def selective_scan(x: Array, delta: Array, A: Array, B: Array, C: Array, D: Array | None = None,
                   h0: Array | None = None, reset: Array | None = None, discretization: str = "zoh",
                   method: str = "sequential", return_state: bool = False, a_nonzero: bool = False):
    """Mamba's diagonal selective scan of one sequence.

        h_t = exp(delta_t A) h_{t-1} + bscale(delta_t, A) B_t x_t,     y_t = h_t C_t + D x_t

    x, delta (L, Din); A (Din, N) (negative entries for a stable scan); B, C (L, N); D (Din,) or None (no skip);
    h0 (Din, N) (default zeros); reset (L,) bool restarts from h0. bscale: see ``discretize_diagonal``.
    Returns y (L, Din), and the final state h_{L-1} (Din, N) if ``return_state``. ``a_nonzero``: see
    ``discretize_diagonal`` (set it when every entry of A is nonzero, e.g. A = -exp(A_log)).

    "sequential" runs the native CPU kernel (``memlab.layers.native``: ZOH with ``a_nonzero`` or Euler-B, one
    float dtype; equal to the JAX form to float rounding, several times faster) where it can, and otherwise
    discretises inside a ``lax.scan`` body that keeps only the state each step starts from (L, Din, N) for its
    hand-written backward pass (``_sequential_scan``); "parallel" materialises a and b
    (L, Din, N), calls ``linear_scan(method="parallel")`` and is differentiated by JAX (the tests hold the two
    gradients equal). Being a ``custom_vjp``, the sequential form has no forward mode (``jax.jvp`` raises a
    TypeError), and run by the native kernel no second derivative; the parallel form has both."""
    check_choice("method", method, METHODS)
    check_choice("discretization", discretization, DISCRETIZATIONS)
    x, delta, A, B, C = map(jnp.asarray, (x, delta, A, B, C))
    if x.ndim != 2 or delta.shape != x.shape:
        raise ValueError(f"x and delta must both be (L, Din), got {x.shape} and {delta.shape}")
    L, Din = x.shape
    if A.ndim != 2 or A.shape[0] != Din:
        raise ValueError(f"A must be (Din, N) with Din = {Din}, got {A.shape}")
    N = A.shape[1]
    if B.shape != (L, N) or C.shape != (L, N):
        raise ValueError(f"B and C must be (L, N) = ({L}, {N}), got {B.shape} and {C.shape}")
    if D is not None and jnp.shape(D) != (Din,):
        raise ValueError(f"D must be (Din,) = ({Din},), got {jnp.shape(D)}")
    h0, reset = scan_inputs(x, h0, reset, (Din, N), method)

    if method == "sequential" and native.usable(discretization, a_nonzero, x, delta, A, B, C, h0):
        y, h_last = _native_scan(x, delta, A, B, C, h0, reset, discretization)
    elif method == "sequential":
        y, h_last = _sequential_scan(x, delta, A, B, C, h0, reset, discretization, a_nonzero)
    else:
        abar, bscale = discretize_diagonal(A[None], delta[:, :, None], discretization, a_nonzero)
        h = linear_scan(abar, bscale * x[:, :, None] * B[:, None, :], h0, reset, method="parallel")
        y, h_last = jnp.einsum("ldn,ln->ld", h, C), h[-1]
    if D is not None:
        y = y + D * x
    return (y, h_last) if return_state else y


@partial(jax.custom_vjp, nondiff_argnums=(7, 8))
def _sequential_scan(x, delta, A, B, C, h0, reset, discretization, a_nonzero):
    """(y (L, Din) without the skip D, h_{L-1}) of :func:`selective_scan`, one ``lax.scan`` over time."""
    return _sequential_scan_states(x, delta, A, B, C, h0, reset, discretization, a_nonzero)[0]


def _sequential_scan_states(x, delta, A, B, C, h0, reset, discretization, a_nonzero):
    """Also returns the state each step starts from, h_prev_t = h0 where step t restarts, else h_{t-1}."""
    def step(h, inputs):
        x_t, delta_t, B_t, C_t, r_t = inputs
        h_prev = jnp.where(r_t, h0, h)
        h, y_t = selective_step(h_prev, x_t, delta_t, A, B_t, C_t, discretization, a_nonzero)
        return h, (y_t, h_prev)

    h_last, (y, states) = jax.lax.scan(step, h0, (x, delta, B, C, reset))
    return (y, h_last), states


def _sequential_scan_forward(x, delta, A, B, C, h0, reset, discretization, a_nonzero):
    out, states = _sequential_scan_states(x, delta, A, B, C, h0, reset, discretization, a_nonzero)
    return out, (x, delta, A, B, C, h0, reset, states)


def _sequential_scan_backward(discretization, a_nonzero, residuals, cotangents):
    """The reverse-time recursion of the scan's gradient, one step at a time from the stored states h_prev_t.

    With G_t = dLoss/dh_t: G_t = gy_t C_t^T + abar_{t+1} G_{t+1} (the second term only if step t+1 continues
    from h_t), and from step t: dabar_t = G_t h_prev_t, dbscale_t = G_t (x_t B_t^T), dx_t = (G_t bscale_t) B_t,
    dB_t = (G_t bscale_t)^T x_t, dC_t = h_t^T gy_t; (dA, ddelta_t) by the chain rule through the discretisation.
    Written out rather than left to autodiff (of a ``jax.checkpoint``-ed step, before): under ``vmap`` JAX's
    transpose of the scan sums A's per-sequence gradient over the batch inside every step, a reduction that took
    most of the backward pass on a CPU; here each sequence carries its own dA, summed once after the scan. With ZOH
    (Mamba's layer here) that makes the scan's forward and backward pass, and the Mamba block's, several times
    faster at the arena's sizes and at paper 4's (benchmarks/bench_s6.py). With Euler-B, whose dA is a single
    product, the block was already that fast and is unchanged.
    """
    x, delta, A, B, C, h0, reset, states_before = residuals
    gy, g_last = cotangents
    from_h0 = reset.at[0].set(True)  # step 0 starts from h0 whatever reset[0] says

    def discretize(A, delta_t):
        return discretize_diagonal(A, delta_t[:, None], discretization, a_nonzero)

    def step(carry, inputs):
        g_later, gA, gh0 = carry
        x_t, delta_t, B_t, C_t, r_t, h_prev, gy_t = inputs
        G = (g_later + gy_t[:, None] * C_t[None, :]).astype(h_prev.dtype)  # a wider C widens y, not the state
        (abar, bscale), discretization_vjp = jax.vjp(discretize, A, delta_t)
        xB = x_t[:, None] * B_t[None, :]
        h_t = abar * h_prev + bscale * xB
        gA_t, gdelta_t = discretization_vjp((G * h_prev, G * xB))
        g_xB = G * bscale
        g_prev = abar * G  # to h_{t-1}, or to h0 where step t restarts
        carry = (jnp.where(r_t, 0.0, g_prev), gA + gA_t, gh0 + jnp.where(r_t, g_prev, 0.0))
        return carry, (g_xB @ B_t, gdelta_t, x_t @ g_xB, gy_t @ h_t)

    carry = (g_last, jnp.zeros_like(A), jnp.zeros_like(h0))
    (_, gA, gh0), (gx, gdelta, gB, gC) = jax.lax.scan(
        step, carry, (x, delta, B, C, from_h0, states_before, gy), reverse=True)
    return gx, gdelta, gA, gB, gC, gh0, None


_sequential_scan.defvjp(_sequential_scan_forward, _sequential_scan_backward)


@partial(jax.custom_vjp, nondiff_argnums=(7,))
def _native_scan(x, delta, A, B, C, h0, reset, discretization):
    """:func:`_sequential_scan` by the native kernel (``memlab.layers.native``): its forward keeps no states, its
    backward recomputes them one sequence at a time."""
    return native.forward(x, delta, A, B, C, h0, reset, discretization)


def _native_scan_forward(x, delta, A, B, C, h0, reset, discretization):
    return native.forward(x, delta, A, B, C, h0, reset, discretization), (x, delta, A, B, C, h0, reset)


def _native_scan_backward(discretization, residuals, cotangents):
    return (*native.backward(*residuals, *cotangents, discretization), None)


_native_scan.defvjp(_native_scan_forward, _native_scan_backward)


# ------------------------------------------------------------------------------------ the layer of section 4.2


class S6(eqx.Module):
    """The S6 layer of section 4.2 with a general (possibly singular, non-diagonal) A.

    For each token u_l (d_in,):
        B(u) = B^(0) + sum_m u_m B^(m),   C(u) = C^(0) + sum_m u_m C^(m),   Delta(u) = softplus(a_Delta^T u + b_Delta)
        M(u) = exp(Delta A),   N(u) = (int_0^Delta exp(sA) ds) B(u)
        h_l = M(u_l) h_{l-1} + N(u_l) u_l   (h_{-1} = h_init),     o_l = C(u_l)^T h_l
    Shapes: A (d_h, d_h); B (d_in+1, d_h, d_in) holds [B^(0), ..., B^(d_in)]; C (d_in+1, d_h, d_out);
    a_delta (d_in,); b_delta scalar; h_init (d_h,).
    """

    A: Array
    B: Array
    C: Array
    a_delta: Array
    b_delta: Array
    h_init: Array

    def __init__(self, d_in: int, d_h: int, d_out: int, *, key: Array):
        """Random init with A + A^T negative definite (A = skew - diag(1..d_h)), so ||exp(Delta A)||_2 < 1 for
        every Delta > 0 and the state map is a contraction (Assumption 4.1); Delta starts log-uniform in
        [1e-3, 1e-1] as in Mamba; the input-dependent parts B^(m), C^(m) (m >= 1) start smaller than B^(0), C^(0).
        """
        for name, value in (("d_in", d_in), ("d_h", d_h), ("d_out", d_out)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        k_skew, k_b0, k_b, k_c0, k_c, k_a, k_dt = jax.random.split(key, 7)
        W = jax.random.normal(k_skew, (d_h, d_h)) / math.sqrt(2 * d_h)
        self.A = (W - W.T) - jnp.diag(jnp.arange(1, d_h + 1, dtype=W.dtype))
        self.B = jnp.concatenate([jax.random.normal(k_b0, (1, d_h, d_in)) / math.sqrt(d_in),
                                  jax.random.normal(k_b, (d_in, d_h, d_in)) / d_in])
        self.C = jnp.concatenate([jax.random.normal(k_c0, (1, d_h, d_out)) / math.sqrt(d_h),
                                  jax.random.normal(k_c, (d_in, d_h, d_out)) / math.sqrt(d_h * d_in)])
        self.a_delta = jax.random.normal(k_a, (d_in,)) / (10 * math.sqrt(d_in))
        dt = jnp.exp(jax.random.uniform(k_dt, (), minval=math.log(1e-3), maxval=math.log(1e-1)))
        self.b_delta = dt + jnp.log(-jnp.expm1(-dt))  # softplus^{-1}(dt)
        self.h_init = jnp.zeros(d_h, W.dtype)

    def _check_input(self, u: Array) -> None:
        d_in = self.a_delta.shape[0]
        if u.ndim != 2 or u.shape[1] != d_in:
            raise ValueError(f"u must be (L, d_in) with d_in = {d_in}, got shape {u.shape}")

    def transitions(self, u: Array) -> tuple[Array, Array]:
        """M(u_l) (L, d_h, d_h) and the input term N(u_l) u_l (L, d_h) for every token of u (L, d_in)."""
        u = jnp.asarray(u)
        self._check_input(u)

        B_u = self.B[0] + jnp.tensordot(u, self.B[1:], axes=1)  # (L, d_h, d_in)
        delta = jax.nn.softplus(u @ self.a_delta + self.b_delta)  # (L,)
        M, integral = self.expm_and_integral(delta)  # (L, d_h, d_h) each
        return M, jnp.einsum("lij,lj->li", integral, jnp.einsum("lhi,li->lh", B_u, u))

    def expm_and_integral(self, delta: Array) -> tuple[Array, Array]:
        """exp(delta A) and int_0^delta exp(sA) ds for the steps delta (L,); benchmarks/bench_s6.py overrides it to
        time the layer with the previous algorithm."""
        return expm_and_integral(self.A, delta)

    def __call__(self, u: Array, reset: Array | None = None, method: str = "sequential") -> Array:
        """o (L, d_out) for u (L, d_in); reset (L,) bool restarts the state from h_init at those tokens."""
        check_choice("method", method, METHODS)
        M, Nu = self.transitions(u)
        h = matrix_scan(M, Nu, self.h_init, reset, method)
        C_u = self.C[0] + jnp.tensordot(u, self.C[1:], axes=1)  # (L, d_h, d_out)
        return jnp.einsum("lho,lh->lo", C_u, h)

    def contraction(self, u: Array) -> Array:
        """||M(u_l)||_2 per token, (L,): the Lipschitz constant of h -> M(u_l) h + N(u_l) u_l (Assumption 4.1)."""
        M, _ = self.transitions(u)
        return jnp.linalg.norm(M, ord=2, axis=(-2, -1))

"""S6 layer (paper 4, section 4.2): ZOH discretisation (the batched exp(delta A) and its integral against scipy, its
gradients against jax.scipy.linalg.expm's), the scans, the diagonal selective scan and the general-A layer, each
against an independent reference (scipy quadrature / scipy.linalg.expm / plain NumPy loops)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.linalg

from memlab.layers.s6 import (
    S6,
    discretize,
    discretize_diagonal,
    expm_and_integral_reference,
    selective_scan,
    zoh_integral,
)
from memlab.layers.zoh import MAX_SQUARINGS, expm_and_integral
from memlab.scan import linear_scan, matrix_scan

# Compiled once per shape: eager dispatch of the associative scans is slow.
linear_scan_jit = jax.jit(linear_scan, static_argnames="method")
matrix_scan_jit = jax.jit(matrix_scan, static_argnames="method")
selective_scan_jit = jax.jit(selective_scan, static_argnames=("discretization", "method", "return_state"))

# ------------------------------------------------------------------------------------------------ references


def quad_integral(A, delta):
    """int_0^delta expm(sA) ds by adaptive quadrature (float64)."""
    return scipy.integrate.quad_vec(lambda s: scipy.linalg.expm(s * A), 0.0, delta, epsabs=1e-14, epsrel=1e-13)[0]


def numpy_linear_scan(a, b, h0, reset):
    h, out = np.asarray(h0, float), []
    for a_t, b_t, r_t in zip(np.asarray(a, float), np.asarray(b, float), np.asarray(reset)):
        h = a_t * (h0 if r_t else h) + b_t
        out.append(h)
    return np.array(out)


def numpy_matrix_scan(M, b, h0, reset):
    h, out = np.asarray(h0, float), []
    for M_t, b_t, r_t in zip(np.asarray(M, float), np.asarray(b, float), np.asarray(reset)):
        h = M_t @ (h0 if r_t else h) + b_t
        out.append(h)
    return np.array(out)


def numpy_selective_scan(x, delta, A, B, C, D, h0, reset, discretization):
    """Plain loop, float64: h_t = exp(delta_t A) h + bscale B_t x_t, y_t = h_t C_t + D x_t."""
    x, delta, A, B, C, D, h0 = (np.asarray(v, float) for v in (x, delta, A, B, C, D, h0))
    h, ys = h0, []
    for t in range(x.shape[0]):
        z = delta[t][:, None] * A
        with np.errstate(invalid="ignore"):
            zoh = np.where(A == 0, delta[t][:, None], np.expm1(z) / A)
        bscale = zoh if discretization == "zoh" else np.broadcast_to(delta[t][:, None], z.shape)
        h = np.exp(z) * (h0 if reset[t] else h) + bscale * np.outer(x[t], B[t])
        ys.append(h @ C[t] + D * x[t])
    return np.array(ys), h


def numpy_s6(layer, u, reset):
    """Section 4.2 token by token with scipy.linalg.expm and the quadrature-free textbook pieces, float64."""
    A, Bs, Cs, a_d, b_d, h = (np.asarray(v, float) for v in
                              (layer.A, layer.B, layer.C, layer.a_delta, layer.b_delta, layer.h_init))
    h_init, out = h.copy(), []
    for u_l, r_l in zip(np.asarray(u, float), reset):
        B_u = Bs[0] + np.tensordot(u_l, Bs[1:], axes=1)
        C_u = Cs[0] + np.tensordot(u_l, Cs[1:], axes=1)
        delta = np.logaddexp(0.0, a_d @ u_l + b_d)
        d = A.shape[0]
        aug = np.zeros((2 * d, 2 * d))
        aug[:d, :d], aug[:d, d:] = A, np.eye(d)
        E = scipy.linalg.expm(delta * aug)
        h = E[:d, :d] @ (h_init if r_l else h) + E[:d, d:] @ B_u @ u_l
        out.append(C_u.T @ h)
    return np.array(out)


def close(out, ref, tol):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    scale = max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * scale)


def resets(L, starts):
    r = np.zeros(L, bool)
    r[list(starts)] = True
    return jnp.asarray(r)


# ---------------------------------------------------------------------------------------------- discretisation

JORDAN = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])  # nilpotent: a single Jordan block at 0
SINGULAR = np.array([[-1.0, 2.0, 0.5], [0.0, 0.0, 0.0], [0.3, -0.7, -2.0]])  # zero row: eigenvalue 0
ROTATION = np.array([[-0.1, 3.0], [-3.0, -0.1]])  # complex eigenvalues, non-normal-free but non-diagonal


@pytest.mark.parametrize("A", [JORDAN, SINGULAR, ROTATION, np.zeros((2, 2))], ids=["jordan", "singular", "rot", "zero"])
@pytest.mark.parametrize("delta", [1e-3, 0.7, 2.5])
def test_zoh_integral_matches_quadrature_for_singular_and_non_diagonal_A(x64, A, delta):
    close(zoh_integral(jnp.asarray(A), delta), quad_integral(A, delta), 1e-10)


def test_zoh_integral_of_a_nilpotent_block_is_its_finite_series(x64):
    delta = 1.3
    exact = delta * np.eye(3) + delta**2 / 2 * JORDAN + delta**3 / 6 * JORDAN @ JORDAN
    close(zoh_integral(jnp.asarray(JORDAN), delta), exact, 1e-13)


def test_discretize_matches_expm_and_the_textbook_form_for_invertible_A(x64):
    rng = np.random.default_rng(0)
    A = rng.normal(size=(4, 4)) - 3 * np.eye(4)
    B = rng.normal(size=(4, 2))
    delta = 0.37
    M, N = discretize(jnp.asarray(A), delta, jnp.asarray(B))
    close(M, scipy.linalg.expm(delta * A), 1e-12)
    close(N, np.linalg.solve(delta * A, scipy.linalg.expm(delta * A) - np.eye(4)) @ (delta * B), 1e-11)


def test_diagonal_form_equals_the_general_form(x64):
    a = np.array([-3.0, -0.5, 0.0, 1e-9, 0.8])
    delta = 0.6
    M, integral = discretize(jnp.diag(a), delta, jnp.eye(5))
    abar, bscale = discretize_diagonal(jnp.asarray(a), delta)
    close(np.diag(M), abar, 1e-13)
    close(np.diag(integral), bscale, 1e-13)
    close(integral - np.diag(np.diag(integral)), np.zeros((5, 5)), 1e-15)
    close(np.diag(integral), [quad_integral(np.array([[ai]]), delta)[0, 0] for ai in a], 1e-11)


def phi1_reference(z):
    """expm1(z)/z and its derivative in float64: the closed form away from 0, a 25-term series near 0."""
    z = np.asarray(z, float)
    k = np.arange(25)
    fact = np.cumprod(np.concatenate([[1.0], np.arange(2, 27, dtype=float)]))  # (k+1)! for k = 0..25
    series = (z[..., None] ** k / fact[:25]).sum(-1)
    dseries = (k[1:] * z[..., None] ** (k[1:] - 1) / fact[1:25]).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        closed = np.expm1(z) / z
        dclosed = (z * np.exp(z) - np.expm1(z)) / z**2
    small = np.abs(z) < 1e-2
    return np.where(small, series, closed), np.where(small, dseries, dclosed)


@pytest.mark.parametrize("use_x64", [False, True])
def test_zoh_bscale_and_its_gradient_are_finite_and_right_through_a_equal_zero(use_x64):
    """bscale = expm1(delta a)/a -> delta as a -> 0; d bscale/da = delta^2 phi1'(delta a), d/d delta = exp(delta a)."""
    delta = 0.8
    a = np.array([0.0, 1e-30, -1e-12, 1e-7, -1e-4, 0.05, -0.0999, 0.1001, -0.3, 2.0, -40.0])
    tol = 1e-13 if use_x64 else 2e-6
    with jax.enable_x64(use_x64):
        dtype = jnp.float64 if use_x64 else jnp.float32
        bscale = lambda a_, d_: discretize_diagonal(a_, d_, "zoh")[1]  # noqa: E731
        value = jax.vmap(bscale, (0, None))(jnp.asarray(a, dtype), jnp.asarray(delta, dtype))
        grad_a = jax.vmap(jax.grad(bscale, 0), (0, None))(jnp.asarray(a, dtype), jnp.asarray(delta, dtype))
        grad_d = jax.vmap(jax.grad(bscale, 1), (0, None))(jnp.asarray(a, dtype), jnp.asarray(delta, dtype))
    value, grad_a, grad_d = map(np.asarray, (value, grad_a, grad_d))
    phi, dphi = phi1_reference(delta * a)
    assert np.isfinite(value).all() and np.isfinite(grad_a).all() and np.isfinite(grad_d).all()
    close(value, delta * phi, tol)
    close(grad_a, delta**2 * dphi, tol)
    close(grad_d, np.exp(delta * a), tol)
    assert value[0] == np.asarray(delta, value.dtype)  # exactly delta at a = 0


def test_euler_b_differs_from_zoh_by_the_factor_expm1_z_over_z_and_agrees_as_delta_vanishes(x64):
    a = jnp.array([-4.0, -1.0, -0.25])
    for delta in (0.5, 0.05, 0.005):
        abar_z, b_zoh = discretize_diagonal(a, delta, "zoh")
        abar_e, b_euler = discretize_diagonal(a, delta, "euler_b")
        close(abar_z, abar_e, 0)
        close(b_euler, np.full(3, delta), 0)
        z = delta * np.asarray(a)
        close(np.asarray(b_zoh) / np.asarray(b_euler), np.expm1(z) / z, 1e-13)
        # relative gap = |phi1(z) - 1| ~ |z| / 2: first order in delta
        np.testing.assert_allclose(np.abs(np.asarray(b_zoh) / delta - 1), np.abs(z) / 2, rtol=0.5)


# ------------------------------------------------------------------------------------------------------ scans


def scan_inputs(rng, L, S, dtype):
    a = rng.uniform(-1.0, 1.0, size=(L, *S))
    b = rng.normal(size=(L, *S))
    h0 = rng.normal(size=S)
    reset = resets(L, [0, 5, 6, L - 1])
    return (jnp.asarray(a, dtype), jnp.asarray(b, dtype), jnp.asarray(h0, dtype), reset), (a, b, h0, reset)


@pytest.mark.parametrize("use_x64, tol", [(False, 1e-5), (True, 1e-12)])
def test_linear_scan_sequential_and_parallel_match_a_numpy_loop(use_x64, tol):
    rng = np.random.default_rng(1)
    with jax.enable_x64(use_x64):
        dtype = jnp.float64 if use_x64 else jnp.float32
        (a, b, h0, reset), raw = scan_inputs(rng, 53, (3, 2), dtype)
        ref = numpy_linear_scan(*raw)
        for method in ("sequential", "parallel"):
            out = linear_scan_jit(a, b, h0, reset, method=method)
            assert out.dtype == dtype and out.shape == (53, 3, 2)
            close(out, ref, tol)
        no_reset = linear_scan_jit(a, b, method="parallel")
        close(no_reset, numpy_linear_scan(*raw[:2], np.zeros((3, 2)), np.zeros(53, bool)), tol)


@pytest.mark.parametrize("use_x64, tol", [(False, 1e-5), (True, 1e-12)])
def test_matrix_scan_sequential_and_parallel_match_a_numpy_loop(use_x64, tol):
    rng = np.random.default_rng(2)
    L, d = 41, 4
    M = rng.normal(size=(L, d, d)) / (1.2 * np.sqrt(d))
    b, h0 = rng.normal(size=(L, d)), rng.normal(size=d)
    reset = resets(L, [3, 4, 20])
    ref = numpy_matrix_scan(M, b, h0, np.asarray(reset))
    with jax.enable_x64(use_x64):
        dtype = jnp.float64 if use_x64 else jnp.float32
        args = (jnp.asarray(M, dtype), jnp.asarray(b, dtype), jnp.asarray(h0, dtype), reset)
        for method in ("sequential", "parallel"):
            close(matrix_scan_jit(*args, method=method), ref, tol)


def test_a_packed_sequence_with_resets_equals_separate_runs():
    """Packed jax scans with resets against separate NumPy runs (no resets) of each piece."""
    rng = np.random.default_rng(3)
    lengths = [7, 1, 12]
    starts = np.cumsum([0] + lengths[:-1])
    L, d = sum(lengths), 3
    a, b, h0 = rng.uniform(-1, 1, (L, d)), rng.normal(size=(L, d)), rng.normal(size=d)
    M = rng.normal(size=(L, d, d)) / 2
    reset = resets(L, starts)
    pieces = [slice(s, s + n) for s, n in zip(starts, lengths)]
    separate_linear = np.concatenate([numpy_linear_scan(a[p], b[p], h0, reset[p] & False) for p in pieces])
    separate_matrix = np.concatenate([numpy_matrix_scan(M[p], b[p], h0, reset[p] & False) for p in pieces])
    for method in ("sequential", "parallel"):
        close(linear_scan_jit(a, b, h0, reset, method=method), separate_linear, 1e-6)
        close(matrix_scan_jit(M, b, h0, reset, method=method), separate_matrix, 1e-6)
    assert not np.allclose(matrix_scan_jit(M, b, h0, reset & False), separate_matrix)  # the resets matter


# -------------------------------------------------------------------------------------------- selective scan


def selective_inputs(rng, L, Din, N):
    x = rng.normal(size=(L, Din))
    delta = np.exp(rng.uniform(np.log(1e-3), np.log(1.0), size=(L, Din)))
    A = -np.exp(rng.normal(size=(Din, N)))
    A[0, 0] = 0.0  # a zero eigenvalue: bscale = delta there
    B, C = rng.normal(size=(L, N)), rng.normal(size=(L, N))
    D, h0 = rng.normal(size=Din), rng.normal(size=(Din, N))
    return x, delta, A, B, C, D, h0


@pytest.mark.parametrize("use_x64, tol", [(False, 1e-5), (True, 1e-12)])
@pytest.mark.parametrize("discretization", ["zoh", "euler_b"])
def test_selective_scan_forms_match_a_numpy_loop(use_x64, tol, discretization):
    rng = np.random.default_rng(4)
    L, Din, N = 37, 3, 5
    raw = selective_inputs(rng, L, Din, N)
    reset = resets(L, [10, 11, 30])
    y_ref, h_ref = numpy_selective_scan(*raw, np.asarray(reset), discretization)
    with jax.enable_x64(use_x64):
        dtype = jnp.float64 if use_x64 else jnp.float32
        args = [jnp.asarray(v, dtype) for v in raw]
        for method in ("sequential", "parallel"):
            y, h = selective_scan_jit(*args, reset=reset, discretization=discretization, method=method,
                                  return_state=True)
            assert y.shape == (L, Din) and h.shape == (Din, N) and y.dtype == dtype
            close(y, y_ref, tol)
            close(h, h_ref, tol)


@pytest.mark.parametrize("discretization, a_nonzero", [("zoh", False), ("zoh", True), ("euler_b", False)])
def test_selective_scan_gradients_agree_between_forms(x64, discretization, a_nonzero):
    """The sequential form's hand-written backward pass against JAX's autodiff of the parallel form: every input,
    through the outputs and the final state, with restarts, on a batch that shares A (vmap, as the layers use it)."""
    rng = np.random.default_rng(5)
    L, Din, N, batch = 29, 2, 3, 3
    x, delta, A, B, C, D, h0 = map(jnp.asarray, selective_inputs(rng, L, Din, N))
    if a_nonzero:
        A = A.at[0, 0].set(-0.5)
    x, delta, B, C = (jnp.stack([v * (1 + 0.3 * i) for i in range(batch)]) for v in (x, delta, B, C))
    reset = resets(L, [9, 10, 20])

    def loss(params, method):
        x_, delta_, A_, B_, C_, D_, h0_ = params
        def one(x_, delta_, B_, C_):
            y, h = selective_scan(x_, delta_, A_, B_, C_, D_, h0_, reset, discretization, method, return_state=True,
                                  a_nonzero=a_nonzero)
            return jnp.sum(jnp.sin(y)) + jnp.sum(jnp.cos(h))
        return jnp.sum(jax.vmap(one)(x_, delta_, B_, C_))

    grad = jax.jit(jax.grad(loss), static_argnums=1)
    params = (x, delta, A, B, C, D, h0)
    g_seq, g_par = grad(params, "sequential"), grad(params, "parallel")
    for gs, gp in zip(g_seq, g_par):
        assert np.isfinite(gs).all() and np.abs(gp).max() > 0
        close(gs, gp, 1e-11)


def test_selective_scan_gradients_keep_each_inputs_dtype_when_C_is_wider(x64):
    """float32 inputs with a float64 C (y is float64, the state float32): the backward pass gives each input's
    gradient in its own dtype, equal to the parallel form's."""
    x, delta, A, B, C, D, h0 = selective_inputs(np.random.default_rng(8), 9, 2, 3)
    narrow = [jnp.asarray(v, jnp.float32) for v in (x, delta, A, B, h0)]

    def loss(x, delta, A, B, C, h0, method):
        return jnp.sum(jnp.sin(selective_scan(x, delta, A, B, C, None, h0, method=method)))

    grads = {m: jax.grad(loss, argnums=range(6))(*narrow[:4], jnp.asarray(C), narrow[4], m)
             for m in ("sequential", "parallel")}
    for g_seq, g_par in zip(grads["sequential"], grads["parallel"], strict=True):
        assert g_seq.dtype == g_par.dtype
        close(g_seq, g_par, 1e-5)


def test_selective_scan_forward_mode_is_refused_in_the_sequential_form_and_computed_in_the_parallel_one(x64):
    """The sequential form's derivative is a hand-written reverse-mode backward pass: forward mode raises rather
    than computes something else; the parallel form (JAX's own derivative) has it."""
    x, delta, A, B, C, D, h0 = map(jnp.asarray, selective_inputs(np.random.default_rng(7), 6, 2, 3))

    def y(delta, method):
        return selective_scan(x, delta, A, B, C, D, h0, method=method)

    with pytest.raises(TypeError, match="forward-mode"):
        jax.jvp(lambda d: y(d, "sequential"), (delta,), (jnp.ones_like(delta),))
    _, tangent = jax.jvp(lambda d: y(d, "parallel"), (delta,), (jnp.ones_like(delta),))
    reverse = jax.vjp(lambda d: y(d, "sequential"), delta)[1]
    # <J 1, e_ij> from forward mode equals <1, J^T e_ij> from the sequential reverse mode, for every output
    rows = jax.vmap(lambda e: reverse(e)[0])(jnp.eye(tangent.size).reshape(-1, *tangent.shape))
    close(rows.sum(axis=(1, 2)), tangent.ravel(), 1e-12)


def test_selective_scan_packed_equals_separate_runs_and_zoh_vs_euler_b_gap_is_first_order(x64):
    rng = np.random.default_rng(6)
    x, delta, A, B, C, D, _ = map(jnp.asarray, selective_inputs(rng, 20, 2, 3))
    reset = resets(20, [8])
    packed = selective_scan_jit(x, delta, A, B, C, D, reset=reset)
    separate = np.concatenate([selective_scan_jit(x[:8], delta[:8], A, B[:8], C[:8], D),
                               selective_scan_jit(x[8:], delta[8:], A, B[8:], C[8:], D)])
    close(packed, separate, 1e-13)
    gaps = []
    for scale in (1e-1, 1e-2, 1e-3):
        zoh = selective_scan_jit(x, scale * delta, A, B, C, reset=reset, discretization="zoh")
        euler = selective_scan_jit(x, scale * delta, A, B, C, reset=reset, discretization="euler_b")
        gaps.append(float(jnp.abs(zoh - euler).max() / jnp.abs(zoh).max()))
    assert gaps[0] > 1e-3 and gaps[2] < 1e-3
    np.testing.assert_allclose(np.array(gaps[:2]) / np.array(gaps[1:]), 10.0, rtol=0.2)  # relative gap ~ delta


# ------------------------------------------------------------------------------------------------ the S6 layer
# One layer size and one sequence length throughout, so each compiled function is reused (expm is costly to compile).
D_IN, D_H, D_OUT, L_S6 = 3, 4, 2, 15


@eqx.filter_jit
def run_s6(layer, u, reset, method):
    return layer(u, reset, method)


def eqx_replace(module, **fields):
    names = tuple(fields)
    return eqx.tree_at(lambda m: tuple(getattr(m, n) for n in names), module, tuple(fields.values()))


def test_s6_matches_separate_numpy_runs_when_packed_in_both_forms(x64):
    layer = S6(D_IN, D_H, D_OUT, key=jax.random.key(0))
    assert layer.A.dtype == jnp.float64
    assert (layer.A.shape, layer.B.shape, layer.C.shape) == ((D_H, D_H), (D_IN + 1, D_H, D_IN), (D_IN + 1, D_H, D_OUT))
    # Delta ~ 1 so the integral's higher-order terms matter; a nonzero h_init so the reset is visible
    layer = eqx_replace(layer, h_init=jnp.array([0.5, -1.0, 0.2, 0.0]), b_delta=jnp.asarray(0.3))
    u = jax.random.normal(jax.random.key(1), (L_S6, D_IN))
    no_reset = np.zeros(L_S6, bool)
    separate = np.concatenate([numpy_s6(layer, u[:6], no_reset[:6]), numpy_s6(layer, u[6:], no_reset[6:])])
    for method in ("sequential", "parallel"):
        out = run_s6(layer, u, resets(L_S6, [6]), method)
        assert out.shape == (L_S6, D_OUT)
        close(out, separate, 1e-11)
        close(run_s6(layer, u, jnp.asarray(no_reset), method), numpy_s6(layer, u, no_reset), 1e-11)
    assert not np.allclose(separate, numpy_s6(layer, u, no_reset))  # the reset matters


def test_s6_sequential_and_parallel_agree_in_float32():
    layer = S6(D_IN, D_H, D_OUT, key=jax.random.key(2))
    u = 2 * jax.random.normal(jax.random.key(3), (L_S6, D_IN))
    reset = resets(L_S6, [9])
    close(run_s6(layer, u, reset, "parallel"), run_s6(layer, u, reset, "sequential"), 1e-5)


def test_s6_with_diagonal_A_is_a_selective_scan(x64):
    """Diagonal A = diag(a): h = exp(Delta a) h + expm1(Delta a)/a (B(u) u), o_k = C(u)[:, k]^T h, i.e. a selective
    scan with Din = 1, x_t = 1, B_t = B(u_t) u_t, delta_t = Delta(u_t), C_t = C(u_t)[:, k], h0 = h_init."""
    layer = S6(D_IN, D_H, D_OUT, key=jax.random.key(4))
    a = jnp.array([-2.0, -0.7, 0.0, -5.0])  # one zero entry: A singular
    layer = eqx_replace(layer, A=jnp.diag(a), h_init=jnp.linspace(-1, 1, D_H), b_delta=jnp.asarray(0.5))
    u = jax.random.normal(jax.random.key(5), (L_S6, D_IN))
    B_u = layer.B[0] + jnp.einsum("lm,mhi->lhi", u, layer.B[1:])
    C_u = layer.C[0] + jnp.einsum("lm,mho->lho", u, layer.C[1:])
    delta = jax.nn.softplus(u @ layer.a_delta + layer.b_delta)
    out = run_s6(layer, u, None, "sequential")
    for k in range(D_OUT):
        y = selective_scan(jnp.ones((L_S6, 1)), delta[:, None], a[None], jnp.einsum("lhi,li->lh", B_u, u),
                           C_u[:, :, k], h0=layer.h_init[None])
        close(out[:, k], y[:, 0], 1e-12)


def test_contraction_is_the_spectral_norm_of_M_and_below_one_at_init(x64):
    layer = S6(D_IN, D_H, D_OUT, key=jax.random.key(6))
    u = jax.random.normal(jax.random.key(7), (L_S6, D_IN))
    contraction = eqx.filter_jit(lambda m, u: m.contraction(u))
    r = contraction(layer, u)
    delta = np.logaddexp(0.0, np.asarray(u) @ np.asarray(layer.a_delta) + float(layer.b_delta))
    ref = [np.linalg.svd(scipy.linalg.expm(d * np.asarray(layer.A)), compute_uv=False)[0] for d in delta]
    close(r, ref, 1e-12)
    assert r.shape == (L_S6,) and np.all(np.asarray(r) < 1)
    close(contraction(eqx_replace(layer, A=-jnp.eye(D_H)), u), np.exp(-delta), 1e-13)


def test_s6_gradients_are_finite_and_reach_every_parameter():
    layer = S6(D_IN, D_H, D_OUT, key=jax.random.key(8))
    layer = eqx_replace(layer, h_init=jnp.ones(D_H))
    u = jax.random.normal(jax.random.key(9), (L_S6, D_IN))
    grads = eqx.filter_jit(jax.grad(lambda m: jnp.sum(m(u) ** 2)))(layer)
    for name in ("A", "B", "C", "a_delta", "b_delta", "h_init"):
        g = np.asarray(getattr(grads, name))
        assert np.isfinite(g).all() and np.abs(g).sum() > 0, name


# ------------------------------------------------------------------------------------------------- bad inputs


def test_bad_inputs_raise_value_errors_naming_the_problem():
    z = jnp.zeros
    with pytest.raises(ValueError, match="square"):
        zoh_integral(z((2, 3)), 0.1)
    with pytest.raises(ValueError, match="scalar"):
        zoh_integral(z((2, 2)), z(3))
    with pytest.raises(ValueError, match="B must be"):
        discretize(z((2, 2)), 0.1, z((3, 1)))
    with pytest.raises(ValueError, match="discretization"):
        discretize_diagonal(z(3), 0.1, "bilinear")
    with pytest.raises(ValueError, match="method"):
        linear_scan(z((4, 2)), z((4, 2)), method="fast")
    with pytest.raises(ValueError, match="same shape"):
        linear_scan(z((4, 2)), z((4, 3)))
    with pytest.raises(ValueError, match="h0"):
        linear_scan(z((4, 2)), z((4, 2)), h0=z(3))
    with pytest.raises(ValueError, match="reset"):
        linear_scan(z((4, 2)), z((4, 2)), reset=z(4))  # not boolean
    with pytest.raises(ValueError, match="reset"):
        matrix_scan(z((4, 2, 2)), z((4, 2)), reset=z(5, bool))
    with pytest.raises(ValueError, match="M"):
        matrix_scan(z((4, 2, 3)), z((4, 2)))
    L, Din, N = 5, 2, 3
    good = dict(x=z((L, Din)), delta=z((L, Din)), A=z((Din, N)), B=z((L, N)), C=z((L, N)))
    for name, shape, match in [("delta", (L, Din + 1), "delta"), ("A", (Din + 1, N), "A must"),
                               ("B", (L, N + 1), "B and C"), ("C", (L + 1, N), "B and C")]:
        with pytest.raises(ValueError, match=match):
            selective_scan(**{**good, name: z(shape)})
    with pytest.raises(ValueError, match="D must"):
        selective_scan(**good, D=z(Din + 1))
    with pytest.raises(ValueError, match="discretization"):
        selective_scan(**good, discretization="euler")
    with pytest.raises(ValueError, match="method"):
        selective_scan(**good, method="chunked")
    with pytest.raises(ValueError, match="d_h"):
        S6(2, 0, 1, key=jax.random.key(0))
    layer = S6(D_IN, D_H, D_OUT, key=jax.random.key(0))
    with pytest.raises(ValueError, match="d_in"):
        layer(z((5, D_IN + 1)))
    with pytest.raises(ValueError, match="method"):
        layer(z((5, D_IN)), method="parallel-ish")


def test_nonzero_a_fast_path_equals_the_general_zoh_in_value_and_gradient(x64):
    a = -jnp.exp(jnp.linspace(-3.0, 3.0, 13))  # Mamba's A = -exp(A_log), never zero
    delta = jnp.geomspace(1e-4, 2.0, 13)[:, None]
    general = discretize_diagonal(a, delta, "zoh")
    fast = discretize_diagonal(a, delta, "zoh", a_nonzero=True)
    for g, f in zip(general, fast):
        np.testing.assert_allclose(np.asarray(f), np.asarray(g), rtol=1e-12)
    grad = [jax.grad(lambda a, flag=flag: discretize_diagonal(a, delta, "zoh", flag)[1].sum())(a)
            for flag in (False, True)]
    np.testing.assert_allclose(np.asarray(grad[1]), np.asarray(grad[0]), rtol=1e-9)


# ------------------------------------------------------------------- exp(delta A) and its integral, batched
# A d x d matrix of each kind, and the largest ||delta A||_1 tried (1e5 needs 17 squarings)
EXPM_CASES = {
    "stable": (np.array([[-1.0, 2.0, 0.0, 0.5], [-2.0, -2.0, 1.0, 0.0], [0.0, -1.0, -3.0, 1.5],
                         [-0.5, 0.0, -1.5, -4.0]]), 1e5),
    "singular": (np.array([[-1.0, 0.3, 0.0, 0.2], [0.0, 0.0, 0.0, 0.0], [0.5, -0.7, -2.0, 0.0],
                           [0.0, 0.1, 0.0, -0.5]]), 1e5),
    "nilpotent": (np.diag(np.ones(3), 1), 1e2),  # exp grows like delta^3: kept where float64 holds it
    "defective": (np.diag(np.ones(3), 1) - 0.5 * np.eye(4), 1e5),  # one Jordan block at -0.5
    "unstable": (np.random.default_rng(11).normal(size=(4, 4)), 30.0),
}


def expm_reference(A, delta):
    """(exp(delta A), int_0^delta exp(sA) ds) from scipy.linalg.expm of the augmented matrix, float64."""
    d = A.shape[0]
    aug = np.zeros((2 * d, 2 * d))
    aug[:d, :d], aug[:d, d:] = A, np.eye(d)
    E = scipy.linalg.expm(delta * aug)
    return E[:d, :d], E[:d, d:]


def expm_inputs(A, top):
    deltas = np.concatenate([np.geomspace(1e-6, top, 12), [-0.4, 0.0]]) / np.linalg.norm(A, 1)
    return deltas, [expm_reference(A, delta) for delta in deltas]


@pytest.mark.parametrize("case", list(EXPM_CASES))
@pytest.mark.parametrize("use_x64, tol", [(False, 1e-5), (True, 1e-12)])
def test_expm_and_integral_match_scipy_over_norms_needing_0_to_17_squarings(case, use_x64, tol):
    A, top = EXPM_CASES[case]
    deltas, refs = expm_inputs(A, top)
    with jax.enable_x64(use_x64):
        dtype = jnp.float64 if use_x64 else jnp.float32
        M, integral = jax.jit(expm_and_integral)(jnp.asarray(A, dtype), jnp.asarray(deltas, dtype))
    assert M.shape == integral.shape == (len(deltas), 4, 4) and M.dtype == dtype
    for M_l, integral_l, (M_ref, integral_ref) in zip(M, integral, refs):
        close(M_l, M_ref, tol)
        close(integral_l, integral_ref, tol)


def test_expm_and_integral_beyond_the_squaring_reach_is_nan_not_wrong(x64):
    A = -jnp.eye(3)
    M, integral = expm_and_integral(A, jnp.array([2.0**MAX_SQUARINGS, 2.0**MAX_SQUARINGS * 1.01]))
    close(M[0], np.zeros((3, 3)), 0)
    close(integral[0], np.eye(3), 1e-15)
    assert np.isnan(M[1]).all() and np.isnan(integral[1]).all()


def _expm_loss(expm_and_integral, A, deltas, weights):
    M, integral = expm_and_integral(A, deltas)
    return jnp.sum(weights[0] * M) + jnp.sum(weights[1] * jnp.sin(integral))


def test_expm_and_integral_gradients_match_jax_scipy_expm_and_finite_differences(x64):
    """Reverse mode through the masked squarings (the hand-written adjoint with its checkpoints), against the
    gradients of jax.scipy.linalg.expm (the previous algorithm) and central differences; steps needing 0 to 17
    squarings in one call (so levels are recomputed from checkpoints 0, 4, 8, 12, 16), some not squared at all."""
    A = jnp.asarray(EXPM_CASES["stable"][0])
    deltas = jnp.array([1e-3, 0.3, 2.0, 40.0, 400.0, 7e3, 1.1e5]) / jnp.linalg.norm(A, 1)
    weights = jax.random.normal(jax.random.key(0), (2, len(deltas), 4, 4))
    grad = jax.jit(jax.grad(_expm_loss, argnums=(1, 2)), static_argnums=0)
    g_A, g_delta = grad(expm_and_integral, A, deltas, weights)
    ref_A, ref_delta = grad(expm_and_integral_reference, A, deltas, weights)
    close(g_A, ref_A, 1e-10 * float(jnp.max(jnp.abs(ref_A))))
    close(g_delta, ref_delta, 1e-10 * float(jnp.max(jnp.abs(ref_delta))))
    direction = jax.random.normal(jax.random.key(1), A.shape)
    eps = 1e-6
    few = slice(0, 5)  # central differences need a loss of moderate size
    central = (_expm_loss(expm_and_integral, A + eps * direction, deltas[few], weights[:, few])
               - _expm_loss(expm_and_integral, A - eps * direction, deltas[few], weights[:, few])) / (2 * eps)
    g_few = jax.grad(_expm_loss, argnums=1)(expm_and_integral, A, deltas[few], weights[:, few])
    close(jnp.sum(g_few * direction), central, 1e-8)


def test_expm_and_integral_gradients_under_vmap_with_different_squaring_counts(x64):
    """Under vmap each sequence's squaring loop and adjoint run to the batch's largest count, masked per step; the
    gradients equal the reference's, batch element by batch element."""
    A = jnp.asarray(EXPM_CASES["defective"][0])
    deltas = jnp.array([[1e-3, 5.0, 0.2], [3e3, 1e-5, 0.0], [0.5, 0.5, 60.0]])
    weights = jax.random.normal(jax.random.key(2), (2, 3, 4, 4))

    def batch_loss(expm_and_integral, A, deltas):
        return jnp.sum(jax.vmap(lambda d: _expm_loss(expm_and_integral, A, d, weights))(deltas))

    grad = jax.jit(jax.grad(batch_loss, argnums=(1, 2)), static_argnums=0)
    for got, ref in zip(grad(expm_and_integral, A, deltas), grad(expm_and_integral_reference, A, deltas),
                        strict=True):
        close(got, ref, 1e-10 * float(jnp.max(jnp.abs(ref))))


def test_expm_and_integral_has_no_forward_mode():
    """The squarings' derivative is a hand-written reverse-mode adjoint (a while loop has none of its own), so forward
    mode is refused loudly rather than computed wrongly."""
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jvp(lambda A: expm_and_integral(A, jnp.array([0.5, 3.0]))[0], (-jnp.eye(2),), (jnp.eye(2),))


def test_expm_and_integral_under_vmap_equals_separate_calls(x64):
    """The squaring loop stops at the largest count of the batch: smaller counts are masked, not over-squared."""
    A = jnp.asarray(EXPM_CASES["defective"][0])
    deltas = jnp.array([[1e-3, 5.0, 0.2], [3e3, 1e-5, 0.0]])
    M, integral = jax.jit(jax.vmap(expm_and_integral, (None, 0)))(A, deltas)
    for i, j in np.ndindex(deltas.shape):
        M_ij, integral_ij = expm_and_integral(A, deltas[i, j])
        close(M[i, j], M_ij, 1e-15)
        close(integral[i, j], integral_ij, 1e-15)

"""Mamba block (the A.1 student's mixer, paper 4): a plain NumPy forward as the reference, the standard init,
causality, packing with resets (through the conv too), both scans and both discretisations, bad inputs."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.layers.mamba import MambaBlock

D_MODEL, D_STATE, L = 16, 8, 23


@eqx.filter_jit
def run(block, x, reset):
    return block(x, reset)


def silu(v):
    return v / (1 + np.exp(-v))


def numpy_block(block, x, reset):
    """Token-by-token float64 forward: conv over the current sequence only, ZOH or Euler-B scan, gate, out_proj."""
    W_in, W_x, W_dt, b_dt, W_out, w_conv, b_conv, A_log, D = (np.asarray(v, float) for v in (
        block.in_proj.weight, block.x_proj.weight, block.dt_proj.weight, block.dt_proj.bias, block.out_proj.weight,
        block.conv_weight, block.conv_bias, block.A_log, block.D))
    x = np.asarray(x, float)
    K, r, N = w_conv.shape[1], W_dt.shape[1], A_log.shape[1]
    A = -np.exp(A_log)
    xz = x @ W_in.T
    x_in, z = np.split(xz, 2, axis=1)
    start, h, out = 0, None, []
    for t in range(x.shape[0]):
        if t == 0 or reset[t]:
            start, h = t, np.zeros_like(A)
        window = [x_in[s] if s >= start else np.zeros_like(x_in[t]) for s in range(t - K + 1, t + 1)]
        xc = silu(b_conv + (w_conv * np.stack(window, axis=1)).sum(1))
        proj = W_x @ xc
        dt, B, C = proj[:r], proj[r:r + N], proj[r + N:]
        delta = np.logaddexp(0.0, W_dt @ dt + b_dt)[:, None]
        bscale = np.expm1(delta * A) / A if block.discretization == "zoh" else delta
        h = np.exp(delta * A) * h + bscale * np.outer(xc, B)
        y = h @ C + D * xc
        out.append(W_out @ (y * silu(z[t])))
    return np.array(out)


def close(out, ref, tol):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * max(1.0, np.abs(ref).max()))


def test_shapes_and_standard_initialisation():
    block = MambaBlock(D_MODEL, d_state=D_STATE, key=jax.random.key(0))
    d_inner = 2 * D_MODEL
    assert block.dt_rank == 1 and MambaBlock(17, key=jax.random.key(0)).dt_rank == 2  # ceil(d_model / 16)
    assert block.in_proj.weight.shape == (2 * d_inner, D_MODEL) and block.in_proj.bias is None
    assert block.conv_weight.shape == (d_inner, 4) and block.conv_bias.shape == (d_inner,)
    assert block.x_proj.weight.shape == (1 + 2 * D_STATE, d_inner) and block.x_proj.bias is None
    assert block.dt_proj.weight.shape == (d_inner, 1) and block.dt_proj.bias.shape == (d_inner,)
    assert block.out_proj.weight.shape == (D_MODEL, d_inner) and block.out_proj.bias is None
    np.testing.assert_allclose(block.A, -np.tile(np.arange(1, D_STATE + 1), (d_inner, 1)), rtol=1e-6)  # S4D-real
    np.testing.assert_array_equal(block.D, np.ones(d_inner))
    dt = np.asarray(jax.nn.softplus(block.dt_proj.bias))
    assert dt.min() >= 1e-3 * (1 - 1e-5) and dt.max() <= 1e-1 * (1 + 1e-5) and dt.max() / dt.min() > 10
    assert np.abs(block.dt_proj.weight).max() <= 1.0  # uniform +- dt_rank^-1/2 = 1
    wide = MambaBlock(64, d_state=4, dt_min=2e-2, dt_max=2e-2, key=jax.random.key(1))
    assert np.abs(wide.dt_proj.weight).max() <= 0.5 and np.abs(wide.dt_proj.weight).max() > 0.4  # dt_rank 4
    np.testing.assert_allclose(jax.nn.softplus(wide.dt_proj.bias), 2e-2, rtol=1e-5)
    x = jax.random.normal(jax.random.key(2), (L, D_MODEL))
    inputs = block.ssm_inputs(x)
    assert {k: v.shape for k, v in inputs.items()} == {
        "xc": (L, d_inner), "z": (L, d_inner), "delta": (L, d_inner), "B": (L, D_STATE), "C": (L, D_STATE)}
    assert run(block, x, None).shape == (L, D_MODEL)


@pytest.mark.parametrize("discretization", ["zoh", "euler_b"])
def test_block_matches_a_numpy_forward_with_packed_sequences(x64, discretization):
    settings = dict(d_state=D_STATE, discretization=discretization, dt_min=0.05, dt_max=0.5, key=jax.random.key(3))
    block = MambaBlock(D_MODEL, **settings)
    assert block.A_log.dtype == jnp.float64
    x = jax.random.normal(jax.random.key(4), (L, D_MODEL))
    reset = np.zeros(L, bool)
    reset[[2, 10, 11]] = True  # a piece of length 1 and one shorter than the conv width
    ref = numpy_block(block, x, reset)
    close(run(block, x, jnp.asarray(reset)), ref, 1e-12)
    close(run(MambaBlock(D_MODEL, **settings, scan="parallel"), x, jnp.asarray(reset)), ref, 1e-12)
    pieces = np.split(np.arange(L), [2, 10, 11])
    separate = np.concatenate([numpy_block(block, x[p], np.zeros(len(p), bool)) for p in pieces])
    close(ref, separate, 1e-12)  # the reference's packing is separate runs
    assert not np.allclose(run(block, x, None), ref)  # the resets matter


def test_changing_a_later_token_leaves_earlier_outputs_unchanged():
    block = MambaBlock(D_MODEL, d_state=D_STATE, key=jax.random.key(5))
    x = jax.random.normal(jax.random.key(6), (L, D_MODEL))
    y = run(block, x, None)
    for t in (0, 7, L - 1):
        y2 = run(block, x.at[t].add(1.0), None)
        np.testing.assert_array_equal(y2[:t], y[:t])
        assert np.abs(np.asarray(y2[t:] - y[t:])).max() > 1e-4


def test_sequential_and_parallel_scans_agree_in_float32_and_gradients_are_finite():
    settings = dict(d_state=D_STATE, dt_min=0.01, dt_max=1.0, key=jax.random.key(7))
    block, parallel = MambaBlock(D_MODEL, **settings), MambaBlock(D_MODEL, **settings, scan="parallel")
    x = jax.random.normal(jax.random.key(8), (L, D_MODEL))
    reset = jnp.zeros(L, bool).at[9].set(True)
    close(run(parallel, x, reset), run(block, x, reset), 1e-5)
    grads = eqx.filter_jit(eqx.filter_grad(lambda b: jnp.sum(b(x, reset) ** 2)))(block)
    leaves = jax.tree_util.tree_leaves(eqx.filter(grads, eqx.is_array))
    assert all(np.isfinite(g).all() for g in leaves)
    assert all(np.abs(g).sum() > 0 for g in leaves)


def test_euler_b_and_zoh_blocks_agree_as_delta_vanishes():
    """The B coefficients differ by the factor expm1(dt a)/(dt a) = 1 + O(dt |a|) (checked exactly in test_s6):
    at dt = 1e-4 the blocks agree to float32 round-off, at dt = 0.3 they clearly differ."""
    x = jax.random.normal(jax.random.key(9), (L, D_MODEL))
    gaps = []
    for dt in (1e-4, 0.3):
        settings = dict(d_state=D_STATE, dt_min=dt, dt_max=dt, key=jax.random.key(10))
        zoh, euler = MambaBlock(D_MODEL, **settings), MambaBlock(D_MODEL, **settings, discretization="euler_b")
        y_zoh, y_euler = run(zoh, x, None), run(euler, x, None)
        gaps.append(float(jnp.abs(y_zoh - y_euler).max() / jnp.abs(y_zoh).max()))
    assert gaps[0] < 1e-6 and gaps[1] > 1e-3


def test_bad_inputs_raise_value_errors_naming_the_problem():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="d_state"):
        MambaBlock(D_MODEL, d_state=0, key=key)
    with pytest.raises(ValueError, match="discretization"):
        MambaBlock(D_MODEL, discretization="bilinear", key=key)
    with pytest.raises(ValueError, match="scan"):
        MambaBlock(D_MODEL, scan="chunked", key=key)
    with pytest.raises(ValueError, match="dt_rank"):
        MambaBlock(D_MODEL, dt_rank=0, key=key)
    with pytest.raises(ValueError, match="dt_min"):
        MambaBlock(D_MODEL, dt_min=0.2, dt_max=0.1, key=key)
    block = MambaBlock(D_MODEL, d_state=D_STATE, key=key)
    with pytest.raises(ValueError, match="d_model"):
        block(jnp.zeros((5, D_MODEL + 1)))
    with pytest.raises(ValueError, match="reset"):
        block(jnp.zeros((5, D_MODEL)), reset=jnp.zeros(4, bool))

"""Mamba's native selective scan (memlab.layers.native, selective_scan.cc) against the JAX scan it stands in for:
outputs, final state and every gradient, with restarts, a nonzero h0 and cotangent on the final state, in one call
and under vmap, over sequences the backward pass takes in several chunks; its exp and expm1 at the extremes; which
path a scan takes; and its build (cache, a failing compiler)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.layers import MambaBlock, native
from memlab.layers.s6 import selective_scan

pytestmark = pytest.mark.skipif(native.unavailable() is not None, reason=f"native scan: {native.unavailable()}")


def chunk_steps(D, N, itemsize):
    """The backward pass's chunk length in selective_scan.cc (kKeptBytes = 1 MiB over three (N, D) arrays)."""
    return max(1, (1 << 20) // (3 * D * N * itemsize))


def inputs(rng, batch, L, D, N, dtype):
    x = rng.normal(size=(batch, L, D))
    delta = np.log1p(np.exp(rng.normal(size=(batch, L, D)) - 1.0))  # softplus, as the block's
    A = -np.exp(rng.normal(size=(D, N)))
    B, C = rng.normal(size=(batch, L, N)), rng.normal(size=(batch, L, N))
    h0 = rng.normal(size=(D, N))
    return [jnp.asarray(v, dtype) for v in (x, delta, A, B, C, h0)]


def scan_loss(discretization, reset):
    """A loss through every output of a batch of scans sharing A and h0: y at each step and the final state."""
    def loss(x, delta, A, B, C, h0):
        def one(x, delta, B, C, reset):
            y, h = selective_scan(x, delta, A, B, C, None, h0, reset, discretization, return_state=True,
                                  a_nonzero=True)
            return jnp.sum(jnp.sin(y)) + jnp.sum(jnp.cos(h))
        return jnp.sum(jax.vmap(one)(x, delta, B, C, reset))
    return loss


def both_paths(fn, *args):
    """fn(*args) compiled with the native scan and with the JAX scan."""
    native_out = jax.jit(fn)(*args)
    with native.disabled():
        jax_out = jax.jit(lambda *a: fn(*a))(*args)  # a new function: traced again, inside disabled()
    return native_out, jax_out


def assert_close(out, ref, rtol):
    for o, r in zip(jax.tree.leaves(out), jax.tree.leaves(ref), strict=True):
        o, r = np.asarray(o, np.float64), np.asarray(r, np.float64)
        assert np.isfinite(r).all() and np.abs(r).max() > 0
        np.testing.assert_allclose(o, r, rtol=rtol, atol=rtol * np.abs(r).max())


@pytest.mark.parametrize("discretization", ["zoh", "euler_b"])
def test_native_scan_equals_the_jax_scan_in_float64_over_several_chunks(x64, discretization):
    """D = N = 64 in float64 makes chunks of 10 steps: restarts at a chunk's first step, inside one and at step 1,
    per sequence; value and the gradient of every input to 1e-12."""
    batch, L, D, N = 3, 35, 64, 64
    assert chunk_steps(D, N, 8) == 10
    x, delta, A, B, C, h0 = inputs(np.random.default_rng(0), batch, L, D, N, jnp.float64)
    reset = np.zeros((batch, L), bool)
    reset[0, [10, 20]] = True
    reset[1, [1, 17, 34]] = True
    loss = scan_loss(discretization, jnp.asarray(reset))
    value_and_grad = jax.value_and_grad(loss, argnums=range(6))
    assert_close(*both_paths(value_and_grad, x, delta, A, B, C, h0), 1e-12)


@pytest.mark.parametrize("discretization", ["zoh", "euler_b"])
def test_native_scan_equals_the_jax_scan_in_float32(discretization):
    batch, L, D, N = 4, 70, 32, 16
    x, delta, A, B, C, h0 = inputs(np.random.default_rng(1), batch, L, D, N, jnp.float32)
    reset = jnp.zeros((batch, L), bool).at[2, 33].set(True)
    value_and_grad = jax.value_and_grad(scan_loss(discretization, reset), argnums=range(6))
    assert_close(*both_paths(value_and_grad, x, delta, A, B, C, h0), 2e-5)


def test_native_scan_of_one_sequence_without_vmap(x64):
    x, delta, A, B, C, h0 = (v[0] if v.ndim == 3 else v for v in inputs(np.random.default_rng(2), 1, 23, 5, 7,
                                                                           jnp.float64))

    def loss(x, delta, A, B, C, h0):
        y, h = selective_scan(x, delta, A, B, C, None, h0, return_state=True, a_nonzero=True)
        return jnp.sum(y ** 3) + jnp.sum(h)

    assert_close(*both_paths(jax.value_and_grad(loss, argnums=range(6)), x, delta, A, B, C, h0), 1e-12)


@pytest.mark.parametrize("L", [1, 12])
def test_native_scan_under_nested_vmap_with_each_examples_own_A_and_h0(x64, L):
    """vmap over vmap (a batch of batches), every example with its own A and h0 (the batching rule must not share
    them), and the single step L = 1: value and every gradient as the JAX scan's, to 1e-12."""
    outer, inner, D, N = 2, 3, 6, 5
    rng = np.random.default_rng(3)
    x, delta, _, B, C, _ = inputs(rng, outer * inner, L, D, N, jnp.float64)
    A = jnp.asarray(-np.exp(rng.normal(size=(outer, inner, D, N))))
    h0 = jnp.asarray(rng.normal(size=(outer, inner, D, N)))
    x, delta, B, C = (v.reshape(outer, inner, *v.shape[1:]) for v in (x, delta, B, C))

    def loss(x, delta, A, B, C, h0):
        def one(x, delta, A, B, C, h0):
            y, h = selective_scan(x, delta, A, B, C, None, h0, return_state=True, a_nonzero=True)
            return jnp.sum(jnp.sin(y)) + jnp.sum(jnp.cos(h))
        return jnp.sum(jax.vmap(jax.vmap(one))(x, delta, A, B, C, h0))

    assert_close(*both_paths(jax.value_and_grad(loss, argnums=range(6)), x, delta, A, B, C, h0), 1e-12)


@pytest.mark.parametrize("dtype, near, beyond", [(jnp.float32, 88.5, 89.0), (jnp.float64, 709.6, 710.0)])
def test_exp_and_expm1_at_the_extremes_match_the_jax_scan(x64, dtype, near, beyond):
    """One channel per regime of delta a: exp underflows (-1e4), ordinary (-50, -1), expm1 ~ delta a (-1e-9), 1,
    just below exp's overflow (finite, where 2^k itself overflows) and past it: the outputs of two steps and the
    final state agree with the JAX scan's, inf and NaN where its are, with Euler-B's and ZOH's input scales."""
    z = np.array([-1e4, -50.0, -1.0, -1e-9, 1.0, near, beyond])
    delta = jnp.full((2, z.size), 0.5, dtype)
    A = jnp.asarray(z[:, None] / 0.5, dtype)  # one state entry per channel: N = 1 keeps y finite where h is
    x, B, C = jnp.ones((2, z.size), dtype), jnp.ones((2, 1), dtype), jnp.ones((2, 1), dtype)
    for discretization in ("zoh", "euler_b"):
        def scan(x, delta, A, B, C, d=discretization):
            return selective_scan(x, delta, A, B, C, discretization=d, a_nonzero=True, return_state=True)

        outs, refs = both_paths(scan, x, delta, A, B, C)
        assert not np.isfinite(refs[0]).all()  # past overflow: inf, or NaN where inf meets the zero start
        if discretization == "euler_b":  # h_1 = exp(near) / 2 + 1 / 2: finite, from a 2^k that is not
            assert np.isfinite(np.asarray(refs[0])[1, -2])
        for ours, ref in zip(outs, refs, strict=True):
            ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
            np.testing.assert_array_equal(np.isinf(ours), np.isinf(ref))
            np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
            finite = np.isfinite(ref)
            rtol = 1e-6 if dtype == jnp.float32 else 1e-13
            np.testing.assert_allclose(ours[finite], ref[finite], rtol=rtol, atol=1e-300)


def test_mamba_block_gradients_equal_with_either_scan(x64):
    block = MambaBlock(8, 16, key=jax.random.key(0))
    u = jax.random.normal(jax.random.key(1), (4, 30, 8))

    def loss(block, u):
        return jnp.sum(jax.vmap(block)(u) ** 2)

    assert_close(*both_paths(jax.value_and_grad(loss), block, u), 1e-12)


def test_the_scan_takes_the_native_path_where_it_can_and_the_jax_path_otherwise():
    x, delta, A, B, C, h0 = (v[0] if v.ndim == 3 else v for v in inputs(np.random.default_rng(3), 1, 5, 3, 2,
                                                                           jnp.float32))

    def lowered(**kw):
        return jax.jit(lambda *a: selective_scan(*a, **kw)).lower(x, delta, A, B, C).as_text()

    assert "selective_scan_zoh_f32_forward" in lowered(a_nonzero=True)
    assert "selective_scan_euler_b_f32_forward" in lowered(discretization="euler_b")
    assert "selective_scan" not in lowered()  # ZOH without a_nonzero: the series branch at a = 0 is JAX's
    assert "selective_scan" not in lowered(a_nonzero=True, method="parallel")
    with native.disabled():
        assert "selective_scan" not in lowered(a_nonzero=True)


def test_the_build_is_cached_and_a_failing_compiler_says_why_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_NATIVE_CACHE", str(tmp_path))
    compiler = native.os.environ.get("CXX") or native.shutil.which("c++") or native.shutil.which("g++")
    built = native._build(compiler)
    assert built.parent == tmp_path and built.stat().st_size > 0
    inode = built.stat().st_ino
    assert native._build(compiler) == built and built.stat().st_ino == inode  # found, not compiled again
    # other builds and a builder's leftover: removed once unused for STALE_DAYS, kept while recent
    old = native.time.time() - (native.STALE_DAYS + 1) * 86400
    stale, leftover, recent = (tmp_path / n for n in ("selective_scan-0ld.so", "selective_scan-0ld.so.1.2.part",
                                                      "selective_scan-recent.so"))
    for path in (stale, leftover, recent):
        path.write_bytes(b"")
    for path in (stale, leftover, built):
        native.os.utime(path, (old, old))
    native._remove_stale(built)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([built.name, recent.name])
    assert native._build(compiler) == built and native.time.time() - built.stat().st_mtime < 3600  # used: touched
    (tmp_path / "fails").mkdir()
    monkeypatch.setenv("MEMLAB_NATIVE_CACHE", str(tmp_path / "fails"))
    with pytest.raises(RuntimeError, match="false failed"):
        native._build(native.shutil.which("false"))
    assert list((tmp_path / "fails").iterdir()) == []

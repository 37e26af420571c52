"""Scaled-permutation recurrences h_k = c_k h_{k-1}[src_k] + b_k: sequential, parallel and a NumPy loop.

-inf entries follow the convention 0 * (-inf) = 0 (paper 1, below eq. 26).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.scan import extended_mul, permutation_scan, permutation_scan_parallel

serial = jax.jit(permutation_scan)
parallel = jax.jit(permutation_scan_parallel)




def reference_scan(src, c, b, h0):
    """NumPy float64 loop, (K, N)."""
    h, out = np.asarray(h0, float), []
    for s, ck, bk in zip(np.asarray(src), np.asarray(c, float), np.asarray(b, float)):
        with np.errstate(invalid="ignore"):
            h = np.where(ck == 0, 0.0, ck * h[s]) + bk
        out.append(h)
    return np.array(out)


def random_inputs(rng, K, N, permutations=True, minus_inf=True, c_range=(0.5, 1.5)):
    src = np.stack([rng.permutation(N) if permutations else rng.integers(0, N, size=N) for _ in range(K)])
    c = rng.uniform(*c_range, size=K) * (rng.random(K) > 0.2)  # about 20 % exact zeros
    b, h0 = rng.normal(size=(K, N)), rng.normal(size=N)
    if minus_inf:
        b[rng.random((K, N)) < 0.15] = -np.inf
        h0[rng.random(N) < 0.4] = -np.inf
    return src, c, b, h0


def assert_same(out, ref, rtol):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert not np.isnan(out).any()
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(ref))
    np.testing.assert_array_equal(np.isposinf(out), np.isposinf(ref))
    fin = np.isfinite(ref)
    scale = max(1.0, np.abs(ref[fin]).max()) if fin.any() else 1.0
    np.testing.assert_allclose(out[fin], ref[fin], rtol=rtol, atol=rtol * scale)


def test_extended_mul_convention():
    h = jnp.array([-jnp.inf, jnp.inf, 2.0, -jnp.inf])
    np.testing.assert_array_equal(extended_mul(0.0, h), [0.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(extended_mul(jnp.array([0.0, 2.0, 0.5, 3.0]), h), [0.0, np.inf, 1.0, -np.inf])


@pytest.mark.parametrize("K, N", [(1, 3), (2, 1), (37, 5)])
@pytest.mark.parametrize("permutations", [True, False])
def test_serial_and_parallel_match_numpy_with_minus_inf_and_zero_c(x64, K, N, permutations):
    """Gathers compose for any index maps, so general maps (not only permutations) are checked too."""
    rng = np.random.default_rng(K * 100 + N + permutations)
    src, c, b, h0 = random_inputs(rng, K, N, permutations)
    ref = reference_scan(src, c, b, h0)
    args = tuple(map(jnp.asarray, (src, c, b, h0)))
    assert_same(serial(*args), ref, 1e-12)
    assert_same(parallel(*args), ref, 1e-10)


def test_float32_matches_numpy():
    rng = np.random.default_rng(5)
    src, c, b, h0 = random_inputs(rng, 37, 5)
    ref = reference_scan(src, c, b, h0)
    args = (jnp.asarray(src), jnp.asarray(c, jnp.float32), jnp.asarray(b, jnp.float32), jnp.asarray(h0, jnp.float32))
    for fn in (serial, parallel):
        out = fn(*args)
        assert out.dtype == jnp.float32
        assert_same(out, ref, 1e-4)


def test_negative_and_large_factors_on_finite_inputs(x64):
    rng = np.random.default_rng(6)
    src, c, b, h0 = random_inputs(rng, 37, 5, minus_inf=False, c_range=(-1.3, 1.3))  # shapes as above: no recompile
    ref = reference_scan(src, c, b, h0)
    args = tuple(map(jnp.asarray, (src, c, b, h0)))
    assert_same(serial(*args), ref, 1e-12)
    assert_same(parallel(*args), ref, 1e-10)


def test_zero_factor_forgets_the_past_even_when_it_is_minus_inf(x64):
    K, N = 6, 3
    src = np.tile(np.arange(N), (K, 1))
    c = np.array([1.0, 0.0, 0.5, 0.0, 0.0, 2.0])
    b = np.arange(K * N, dtype=float).reshape(K, N)
    b[0, 1] = -np.inf
    h0 = np.array([-np.inf, 1.0, -np.inf])
    expect = [h0 + b[0]]  # [-inf, -inf, -inf]
    expect.append(b[1])  # c = 0: the -inf entries of h_1 do not survive
    expect.append(0.5 * expect[-1] + b[2])
    expect.append(b[3])
    expect.append(b[4])
    expect.append(2.0 * expect[-1] + b[5])
    expect = np.array(expect)
    assert np.isneginf(expect[0]).all()
    for fn in (serial, parallel):
        np.testing.assert_array_equal(fn(*map(jnp.asarray, (src, c, b, h0))), expect)


def test_all_zero_factors_give_b(x64):
    rng = np.random.default_rng(7)
    src, _, b, h0 = random_inputs(rng, 37, 5)
    c = np.zeros(37)
    for fn in (serial, parallel):
        np.testing.assert_array_equal(fn(*map(jnp.asarray, (src, c, b, h0))), b)


def test_shape_errors():
    src, c, b, h0 = jnp.zeros((5, 3), int), jnp.ones(5), jnp.zeros((5, 3)), jnp.zeros(3)
    for fn in (permutation_scan, permutation_scan_parallel):
        for bad in [(src[0], c, b, h0), (src, c[:4], b, h0), (src, c, b[:, :2], h0), (src, c, b, h0[:2]),
                    (src, c[:, None], b, h0)]:
            with pytest.raises(ValueError, match="expected src"):
                fn(*bad)


def test_parallel_keeps_minus_inf_when_the_product_of_factors_underflows():
    K, N = 64, 2  # float32: 0.1^46 < 1.4e-45 underflows to 0
    src = jnp.tile(jnp.arange(N), (K, 1))
    c, b, h0 = jnp.full(K, 0.1), jnp.zeros((K, N)), jnp.array([0.0, -jnp.inf])
    assert np.isneginf(np.asarray(serial(src, c, b, h0))[:, 1]).all()
    assert np.isneginf(np.asarray(parallel(src, c, b, h0))[:, 1]).all()

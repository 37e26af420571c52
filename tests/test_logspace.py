"""memlab.logspace: log(T exp w) against float64 NumPy, exact and in its matmul form, -inf safe; normalised logits."""

import jax.numpy as jnp
import numpy as np

from memlab.logspace import log_matvec, log_matvec_fast, normalize_logits


def test_log_matvec_is_log_of_the_product_and_minus_inf_safe(x64):
    rng = np.random.default_rng(0)
    T = rng.dirichlet(np.ones(4), size=4).T  # column-stochastic
    T[0, 1] = 0.0  # an impossible transition
    w = np.log(rng.dirichlet(np.ones(4), size=3))
    w[1, 2] = -np.inf  # a state with zero probability
    expected = np.log(np.einsum("ij,bj->bi", T, np.exp(w)))
    np.testing.assert_allclose(log_matvec(jnp.asarray(T), jnp.asarray(w)), expected, rtol=1e-13)
    np.testing.assert_allclose(log_matvec_fast(jnp.asarray(T), jnp.asarray(w)), expected, rtol=1e-13)
    assert np.all(np.asarray(log_matvec(jnp.asarray(T), jnp.full(4, -np.inf))) == -np.inf)  # never NaN


def test_log_matvec_stays_exact_where_the_matmul_form_underflows(x64):
    T = jnp.asarray([[0.5, 0.5], [0.5, 0.5]])
    w = jnp.asarray([0.0, -1000.0])  # exp(-1000) underflows in float64
    np.testing.assert_allclose(log_matvec(T, w), np.log(0.5) + np.logaddexp(0.0, -1000.0), rtol=1e-15)
    T = jnp.asarray([[1.0, 0.0], [0.0, 1.0]])
    assert float(log_matvec(T, w)[1]) == -1000.0
    assert float(log_matvec_fast(T, w)[1]) == -np.inf  # the documented loss of the matmul form


def test_normalize_logits_is_the_log_softmax_and_keeps_all_minus_inf_rows():
    w = jnp.asarray([[1.0, 2.0, -jnp.inf], [-jnp.inf, -jnp.inf, -jnp.inf]])
    out = np.asarray(normalize_logits(w))
    np.testing.assert_allclose(np.exp(out[0]).sum(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(out[0, :2], np.asarray([1.0, 2.0]) - np.logaddexp(1.0, 2.0), rtol=1e-6)
    assert np.all(out[1] == -np.inf) and out[0, 2] == -np.inf

"""memlab.small_matmul: the fused products equal ``@`` in value and gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.small_matmul import fused_matmul, fused_matvec


@pytest.mark.parametrize("a_shape, b_shape", [((3, 4), (4, 2)), ((5, 3, 4), (4, 2)), ((3, 4), (5, 4, 2)),
                                              ((5, 1, 3, 4), (1, 6, 4, 2)), ((1, 3, 4), (5, 4, 2))])
def test_fused_matmul_and_matvec_equal_matmul_with_broadcasting_values_and_gradients(x64, a_shape, b_shape):
    """fused_matmul (issue 15: the CPU-friendly product) is ``@`` in value and in its custom gradient, including
    leading axes that broadcast (size 1 or absent) and under vmap; fused_matvec likewise."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=a_shape), rng.normal(size=b_shape)
    weights = rng.normal(size=np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1]))
    np.testing.assert_allclose(fused_matmul(a, b), a @ b, rtol=1e-13, atol=1e-13)
    loss = {name: (lambda a, b, f=f: jnp.sum(weights * f(a, b)))
            for name, f in (("fused", fused_matmul), ("matmul", jnp.matmul))}
    (ga, gb), (ra, rb) = (jax.grad(loss[n], argnums=(0, 1))(a, b) for n in ("fused", "matmul"))
    assert ga.shape == a.shape and gb.shape == b.shape
    np.testing.assert_allclose(ga, ra, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, rb, rtol=1e-12, atol=1e-12)
    batched = jax.vmap(jax.grad(lambda a, b: jnp.sum(fused_matmul(a, b) ** 2)), in_axes=(None, 0))
    expected = jax.vmap(jax.grad(lambda a, b: jnp.sum((a @ b) ** 2)), in_axes=(None, 0))
    bs = np.stack([b, 2 * b])
    np.testing.assert_allclose(batched(a, bs), expected(a, bs), rtol=1e-12, atol=1e-12)
    x = rng.normal(size=a_shape[-1])
    np.testing.assert_allclose(fused_matvec(a, x), a @ x, rtol=1e-13, atol=1e-13)

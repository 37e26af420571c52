"""The installed JAX computes what memlab's hot paths rely on.

jax/jaxlib 0.10.2 return wrong numbers, without an error, for a vmapped matrix-vector product followed by a
reduction on the CPU once the batch passes a size threshold (jax-ml/jax#39103; 0.10.1 is right). In memlab it
is pi-SSM's prediction A_k x + b_k for all K modes (``fused_matvec``): every sequence past the 455th of a batch
was filtered with a wrong predicted mean, which looked like 9 % of the Pong sequences losing track and corrupted
early stopping on 500 validation sequences. pyproject.toml excludes 0.10.2; these tests fail on it.
"""

import jax
import jax.numpy as jnp
import numpy as np

from memlab.small_matmul import fused_matvec


def test_vmapped_mode_predictions_are_exact_past_the_miscompiled_batch_size():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(18, 4, 4)).astype(np.float32)  # Pong's K = 18 modes on M = 4
    b = rng.normal(size=(18, 4)).astype(np.float32)
    x = rng.normal(size=(1000, 4)).astype(np.float32)  # 0.10.2: rows 455 onwards are wrong
    out = np.asarray(jax.jit(jax.vmap(lambda x_i: fused_matvec(jnp.asarray(A), x_i) + b))(x))
    expected = np.einsum("kij,bj->bki", A.astype(np.float64), x.astype(np.float64)) + b
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_jax_issue_39103_reproducer_float32():
    """The reproducer of jax-ml/jax#39103 in float32 (32769 rows)."""
    i = jnp.arange(32_769, dtype=jnp.float32)
    x = jnp.stack((i, jnp.zeros_like(i), jnp.zeros_like(i)), axis=1)
    f = jax.vmap(lambda row: jnp.sum((jnp.eye(3, dtype=jnp.float32) @ row) ** 2))
    assert float(jax.jit(f)(x)[-1]) == 32_768.0 ** 2

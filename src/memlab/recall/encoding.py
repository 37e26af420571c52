"""Query insertion (section 4.1): the query before and after the context, each token marked by its role.

    U_0 = iota_in(q) = (m_in, q, 0),  U_t = iota_ctx(V_t, Z_t) = (m_ctx, V_t, Z_t),
    U_{T+1} = iota_out(q) = (m_out, q, 0)

The markers are the one-hot vectors of R^3, so a token is u = (marker (3), tag (d_1), content (1)) and
d_in = d_1 + 4. The first query token lets the recurrent state be query-conditioned while it scans the
context; the model reads out the answer at the last token. A.1's query token (0, v_1) is iota(q) with
content 0.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array

NUM_MARKERS = 3  # m_in, m_ctx, m_out


def token_dim(tag_dim: int) -> int:
    """d_in of the augmented token domain for tags in R^{d_1} and scalar content."""
    return NUM_MARKERS + tag_dim + 1


def encode(query: Array, context_tags: Array, context_content: Array) -> Array:
    """One example -> the length-(T+2) input sequence (T+2, d_in). query (d_1,), tags (T, d_1), content (T,)."""
    if query.ndim != 1 or context_tags.ndim != 2 or context_content.shape != context_tags.shape[:1]:
        raise ValueError(
            f"expected query (d_1,), context_tags (T, d_1), context_content (T,); got "
            f"{query.shape}, {context_tags.shape}, {context_content.shape}"
        )
    if context_tags.shape[1] != query.shape[0]:
        raise ValueError(f"query has d_1 = {query.shape[0]} but the context tags have d_1 = {context_tags.shape[1]}")
    num_context = context_tags.shape[0]
    dtype = context_content.dtype
    markers = jnp.eye(NUM_MARKERS, dtype=dtype)
    query_in = jnp.concatenate([markers[0], query.astype(dtype), jnp.zeros(1, dtype)])
    query_out = jnp.concatenate([markers[2], query.astype(dtype), jnp.zeros(1, dtype)])
    context = jnp.concatenate(
        [jnp.broadcast_to(markers[1], (num_context, NUM_MARKERS)), context_tags.astype(dtype),
         context_content[:, None]],
        axis=1,
    )
    return jnp.concatenate([query_in[None], context, query_out[None]], axis=0)

"""Proposition 4.2 / Assumption 4.1 measured on a trained S6 student: the finite-context regression function and
two estimates of the contraction factor r of the context-processing map Psi.

    F^(T)(nu, q) = E[ M^(T)(iota_in(q), iota_ctx(X_1), ..., iota_ctx(X_T), iota_out(q)) ],  X_t ~ nu i.i.d.

Prop. 4.2 says |F^(T) - F| <= 2 R L_G r^T when Psi is an r-contraction (Assumption 4.1).

* :func:`finite_context_values`: F^(T) by Monte Carlo for fixed test pairs (nu, q);
* :func:`per_step_bound`: the largest one-step decay exp(Delta_t,d A_d,n) of each S6 layer's state over the
  context tokens the student actually sees -- the Lipschitz constant of that layer's state map
  h -> M(u) h + N u (M is diagonal). The stacked map of Assumption 4.1 also carries the depthwise-conv buffers (a
  shift register, exactly forgotten after d_conv - 1 tokens) and the cross-layer coupling, which is
  block-triangular, so its asymptotic contraction rate is set by these diagonal blocks;
* :func:`coupling_distance`: two copies of the chain started from different states (different context prefixes)
  and driven by the same tokens; their distance decays like r_eff^t (the coupling argument of the proof, App. B),
  and ``metrics.coupling_rate`` reads r_eff off it.

Test pairs are a :class:`~memlab.recall.task.Batch` (``pmf`` (P, I, G) and ``query`` (P, d_1) are used); pair p
draws its contexts from ``fold_in(key, p)``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.recall.encoding import encode
from memlab.recall.students import MambaStudent
from memlab.recall.task import Batch, RecallTask, sample_context

__all__ = ["coupling_distance", "finite_context_values", "per_step_bound"]


def finite_context_values(model: eqx.Module, pairs: Batch, task: RecallTask, length: int, num_mc: int,
                          key: Array) -> tuple[np.ndarray, np.ndarray]:
    """Monte-Carlo F^(T) at T = ``length`` for each pair: (mean (P,), standard error (P,)) over ``num_mc``
    i.i.d. contexts of length T."""
    tags = jnp.asarray(task.tag_array, jnp.float32)

    @eqx.filter_jit
    def one_pair(model, pmf, query, key):
        def one_context(k):
            ctx_tags, content = sample_context(k, pmf, tags, length, task)
            return model(encode(query, ctx_tags, content))

        return jax.lax.map(one_context, jax.random.split(key, num_mc), batch_size=min(num_mc, 16))

    outs = np.stack([np.asarray(one_pair(model, pairs.pmf[p], pairs.query[p], jax.random.fold_in(key, p)))
                     for p in range(pairs.y.shape[0])])  # (P, num_mc)
    return outs.mean(1), outs.std(1, ddof=1) / np.sqrt(num_mc)


def coupling_distance(model: MambaStudent, pairs: Batch, task: RecallTask, length: int, num: int,
                      key: Array) -> np.ndarray:
    """Mean distance (length,) of the last block's output between chains started from different states, same tokens.

    Chain 1 reads a prefix (``min(length, 500)`` tokens) from pair 0's measure, chain 2 one from pair 1's measure
    (so their states differ), then both read the same ``length`` tokens from pair 0's measure; the distance is
    taken at every shared step and averaged over ``num`` draws.
    """
    tags = jnp.asarray(task.tag_array, jnp.float32)
    prefix = min(length, 500)

    @eqx.filter_jit
    def one(model, k):
        k1, k2, k3 = jax.random.split(k, 3)
        shared = sample_context(k3, pairs.pmf[0], tags, length, task)
        seqs = []
        for kp, p in ((k1, 0), (k2, 1)):
            pre = sample_context(kp, pairs.pmf[p], tags, prefix, task)
            seq_tags = jnp.concatenate([pre[0], shared[0]])
            seq_content = jnp.concatenate([pre[1], shared[1]])
            seqs.append(model.features(encode(pairs.query[0], seq_tags, seq_content))[1 + prefix: 1 + prefix + length])
        return jnp.linalg.norm(seqs[0] - seqs[1], axis=-1)

    return np.mean([np.asarray(one(model, k)) for k in jax.random.split(key, num)], axis=0)


def per_step_bound(model: MambaStudent, pairs: Batch, task: RecallTask, key: Array, length: int = 1000) -> list[float]:
    """Largest exp(Delta A) of each block's state over the context tokens of one sampled context (of ``length``
    tokens) per pair; one number per S6 layer."""
    tags = jnp.asarray(task.tag_array, jnp.float32)

    @eqx.filter_jit
    def largest_decay(model, pmf, query, k):
        _, mixer_inputs = model.trace(encode(query, *sample_context(k, pmf, tags, length, task)))
        return jnp.stack([
            # context tokens only; A < 0, so max_n A_dn is each channel's slowest mode
            jnp.exp(jnp.max(block.ssm_inputs(x)["delta"][1:-1] * jnp.max(block.A, axis=1)[None, :]))
            for block, x in zip(model.blocks, mixer_inputs)])

    per_pair = [largest_decay(model, pairs.pmf[p], pairs.query[p], jax.random.fold_in(key, p))
                for p in range(pairs.y.shape[0])]
    return np.max(np.stack(per_pair), axis=0).tolist()

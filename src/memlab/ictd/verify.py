"""Theorem 1 and Lemma 1 checked on prompts (Fig. 7, App. F.6): both transformer forms against weighted softmax TD.

For one prompt the L-layer transformer with theta* (eq. 15), in the dual-head form (eq. 14-18) and the single-head +
TSM form (eq. 21-23), is run beside the reference weighted softmax TD (eq. 11-12, the update below eq. 12) on the
same context, for one kernel kind. Prompts (the paper says only "a fresh prompt Z0"): per trial a Boyan chain of
Algorithm 2 and an on-policy trajectory of n transitions from S_0 ~ p0 (``trial_prompts``); the prompt (eq. 13)
holds x(S_0..S_n) times ``feature_scale`` and R_1..R_n, and the unscaled features are run as a robustness check.
The unnormalised kernels (relu, elu1, rbf) make the values grow, so every discrepancy is also reported relative to
max(1, |y|). E_l = log10 |v_l(S_n) - y_l|, exact zeros floored at ``ZERO_FLOOR`` (``log_discrepancy``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from memlab.ictd import softmax_td as st
from memlab.ictd import transformer as tf
from memlab.ictd.boyan import boyan_chain
from memlab.ictd.mrp import sample_trajectory

__all__ = ["ZERO_FLOOR", "log_discrepancy", "trial_prompts", "verify_trial", "verify_trials"]

ZERO_FLOOR = 1e-17  # |v - y| = 0 exactly is shown as log10(1e-17) = -17


@functools.partial(jax.jit, static_argnames=("num_states", "d", "gamma", "n"))
def trial_prompts(keys, num_states: int, d: int, gamma: float, n: int):
    """Per trial key: features (n+1, d) (unscaled) and rewards (n,) of one on-policy trajectory (S_0 ~ p0) of a
    fresh Boyan chain (Algorithm 2) with ``num_states`` states. Batched over keys: (T, n+1, d), (T, n)."""

    def one(key):
        k_task, k_traj = jax.random.split(key)
        task = boyan_chain(k_task, num_states, d, gamma)
        states, rewards = sample_trajectory(task.mrp, k_traj, n)
        return task.features[states], rewards

    return jax.vmap(one)(keys)


def verify_trial(X, R, gamma: float, num_layers: int, kind: str, alpha: float = 1.0,
                 feature_scale: float = 1.0) -> dict:
    """One trial: both transformer forms and the reference on the same prompt; discrepancies per layer (L+1,).

    X (n+1, d) unscaled features, R (n,) rewards; the prompt uses X * feature_scale (and X itself for the
    unscaled robustness check); alpha_l = alpha at every layer (V_l -> alpha_l V_l, section 3)."""
    V, A = tf.theta_star(X.shape[-1], dtype=X.dtype)
    alphas = jnp.full(num_layers, alpha, X.dtype)

    def run(X, form):
        return tf.forward(tf.make_prompt(X, R), V, A, gamma, num_layers, form, kind, alphas=alphas)

    Xs = X * feature_scale
    tsm, dual = run(Xs, "tsm"), run(Xs, "dual")
    y = st.weighted_softmax_td(Xs, R, gamma, num_layers, kind, alpha=alphas)  # (L+1, n+1)
    yq = y[:, -1]  # y_l at the query S_n
    scale = jnp.maximum(1.0, jnp.abs(yq))
    z_scale = jnp.maximum(1.0, jnp.maximum(jnp.abs(tsm), jnp.abs(dual)).max(axis=(1, 2)))
    lemma1 = jnp.abs(tsm - dual).max(axis=(1, 2))  # Lemma 1 over the whole Z_l
    X1_tsm = run(X, "tsm")  # unscaled Alg. 2 features
    y1 = st.weighted_softmax_td(X, R, gamma, num_layers, kind, alpha=alphas)[:, -1]
    return {
        "abs_tsm": jnp.abs(tf.readout(tsm) - yq), "abs_dual": jnp.abs(tf.readout(dual) - yq),
        "rel_tsm": jnp.abs(tf.readout(tsm) - yq) / scale, "rel_dual": jnp.abs(tf.readout(dual) - yq) / scale,
        "row_tsm": jnp.abs(tsm[:, -1] - y).max(axis=1),  # every column j: Z_l[d+2, j] vs y_l(S_j), eq. (37)
        "lemma1": lemma1, "lemma1_rel": lemma1 / z_scale, "y_max": jnp.abs(yq).max(),
        "unscaled_rel": (jnp.abs(tf.readout(X1_tsm) - y1) / jnp.maximum(1.0, jnp.abs(y1))).max(),
        "unscaled_y_max": jnp.abs(y1).max(),
    }


@functools.partial(jax.jit, static_argnames=("gamma", "num_layers", "kind", "alpha", "feature_scale"))
def verify_trials(X, R, gamma: float, num_layers: int, kind: str, alpha: float = 1.0,
                  feature_scale: float = 1.0) -> dict:
    """``verify_trial`` vmapped over trials: X (T, n+1, d), R (T, n); every entry gains a leading (T,) axis."""
    return jax.vmap(lambda X, R: verify_trial(X, R, gamma, num_layers, kind, alpha, feature_scale))(X, R)


def log_discrepancy(x) -> np.ndarray:
    """log10 of a discrepancy, exact zeros floored at ZERO_FLOOR."""
    return np.log10(np.maximum(np.asarray(x, np.float64), ZERO_FLOOR))

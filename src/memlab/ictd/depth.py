"""Theorem 2 (section 5): the depth-L values of the theta* transformer against v_pi, through the operator form.

When the context visits every state, the theta* transformer's value at every visited state is the iterate
v_{l+1} = T_hat(v_l) of eq. (24)-(26) (Theorem 1 + section 5; ``transformer_crosscheck`` checks this on one case).
Theorem 2 bounds ||v_L - v_pi||_inf <= (1 - C)^L ||v_0 - v_pi||_inf + C2 sqrt(log(C3/delta)/n) (eq. 29) under
Assumption 5.1. This module measures every term of that bound for a batch of tasks:

* ``covering_trajectories``: per task the first of several draws whose first n transitions visit every state
  among S_0..S_{n-1} (section 5 conditions on this event);
* ``depth_curves`` / ``task_depth_curves``: ||v_L - v_pi||, the transient ||v_L - v_inf||, the floor
  ||v_inf - v_pi||, the bias T2 of eq. (67), rho_hat of eq. (57), the empirical margin (54), ||M_hat - M_pi||
  (Lemma 4); M_hat, P_hat from the state counts (eq. 49), O(n + m^2);
* ``theorem2_statistics``: the fitted geometric rate, the Lemma 5 event, the excess over eq. (70) with the
  measured bias, and the error quantiles over the covered tasks; ``theorem2_at`` all of it for task batches of
  several state-space sizes at one context length;
* ``fitted_rate``, ``loglog_slope``: the fits the claims use.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from memlab.ictd import softmax_td as st
from memlab.ictd import transformer as tf
from memlab.ictd.mrp import sample_trajectory, stationary_distribution
from memlab.ictd.random_tasks import task_margin

__all__ = ["Crosscheck", "Theorem2Numbers", "covering_crosscheck", "covering_trajectories", "depth_curves",
           "fitted_rate", "loglog_slope", "margins_and_err0", "task_depth_curves", "theorem2_at", "theorem2_statistics",
           "transformer_crosscheck", "visits_every_state"]


def visits_every_state(states, m: int, n=None):
    """True iff {S_0, ..., S_{n-1}} is the whole state space (section 5); n defaults to len(states) - 1."""
    prev = states[:-1]
    seen = jnp.ones(prev.shape, bool) if n is None else jnp.arange(prev.shape[0]) < n
    return jnp.all(jnp.zeros(m, bool).at[prev].max(seen))


def task_depth_curves(task, states, n, num_layers: int):
    """Everything Theorem 2 asks for one task and the first n transitions of ``states`` (a covering context)."""
    m = task.features.shape[0]
    gamma, r, v_pi = task.mrp.gamma, task.mrp.r, task.v_star
    M_hat, P_hat = st.operator_from_counts(states, task.features, m, n=n)  # eq. (49)
    vs = st.iterate_operator(M_hat, P_hat, r, gamma, num_layers)  # eq. (26)
    v_inf = jnp.linalg.solve(M_hat - gamma * P_hat, M_hat @ r)  # fixed point of T_hat (eq. 25)
    T_hat = jnp.eye(m, dtype=r.dtype) - M_hat + gamma * P_hat
    M_pi = st.population_kernel(task.features, stationary_distribution(task.mrp))  # eq. (27)
    return {
        "err": jnp.abs(vs - v_pi).max(axis=1),  # ||v_L - v_pi||_inf, L = 0..num_layers
        "dist": jnp.abs(vs - v_inf).max(axis=1),  # ||v_L - v_inf||_inf, the transient part
        "floor": jnp.abs(v_inf - v_pi).max(),
        "T2": jnp.abs(st.apply_operator(v_pi, M_hat, P_hat, r, gamma) - v_pi).max(),  # bias term of eq. (67)
        "rho_hat": jnp.abs(T_hat).sum(axis=1).max(),  # ||I - M_hat + gamma P_hat||_inf, eq. (57)
        "spectral_radius": jnp.abs(jnp.linalg.eigvals(T_hat)).max(),
        "C_hat": st.diagonal_margin(M_hat, gamma),  # empirical margin: rho_hat <= 1 - 2 C_hat by (54)
        "M_dev": jnp.abs(M_hat - M_pi).sum(axis=1).max(),  # ||M_hat - M_pi||_inf, Lemma 4
    }


@functools.partial(jax.jit, static_argnames=("num_layers",))
def depth_curves(tasks, states, n, num_layers: int):
    """``task_depth_curves`` vmapped over a batch of tasks (T,) and contexts (T, length+1); compiled once per
    (m, length), whatever n."""
    return jax.vmap(lambda t, s: task_depth_curves(t, s, n, num_layers))(tasks, states)


@functools.partial(jax.jit, static_argnames=("length",))
def _sample_states(tasks, keys, length: int):
    return jax.vmap(lambda t, k: sample_trajectory(t.mrp, k, length)[0])(tasks, keys)


@jax.jit
def _covers(tasks, states, n):
    m = tasks.features.shape[1]
    return jax.vmap(lambda s: visits_every_state(s, m, n))(states)


def covering_trajectories(tasks, key, n: int, max_resamples: int, length: int | None = None):
    """Per task a trajectory (S_0 ~ p0) whose first n transitions visit every state among S_0..S_{n-1}: the first
    of up to ``max_resamples`` independent draws that does. Draws have ``length`` >= n transitions (default n;
    a common length lets one compiled sampler serve every n; only the first n are used).
    Returns states (T, length+1), covered (T,), draws used (T,)."""
    length = n if length is None else length
    if length < n:
        raise ValueError(f"length ({length}) must be >= n ({n})")
    keys = jax.random.split(key, tasks.features.shape[0])
    states = _sample_states(tasks, keys, length)
    covered, draws = _covers(tasks, states, n), jnp.ones(keys.shape[0], jnp.int32)
    for a in range(1, max_resamples):
        if bool(covered.all()):
            break
        new = _sample_states(tasks, jax.vmap(lambda k, a=a: jax.random.fold_in(k, a))(keys), length)
        take = ~covered & _covers(tasks, new, n)
        states = jnp.where(take[:, None], new, states)
        draws = jnp.where(covered, draws, draws + 1)
        covered = covered | take
    return states, covered, draws


def fitted_rate(dist, rel_floor=1e-11) -> np.ndarray:
    """Geometric rate of ||v_L - v_inf||: exp of the least-squares slope of its log over the second half of the
    layers (points below rel_floor * ||v_0 - v_inf|| are rounding and skipped). dist (T, L+1) -> (T,)."""
    dist = np.asarray(dist, np.float64)
    L = dist.shape[1] - 1
    out = np.full(dist.shape[0], np.nan)
    for i, d in enumerate(dist):
        ls = np.arange(L // 2, L + 1)
        ok = d[ls] > rel_floor * d[0]
        if ok.sum() >= 3:
            out[i] = np.exp(np.polyfit(ls[ok], np.log(d[ls[ok]]), 1)[0])
    return out


def loglog_slope(n, y) -> float:
    """Least-squares slope of log y against log n."""
    return float(np.polyfit(np.log(np.asarray(n, float)), np.log(np.asarray(y, float)), 1)[0])


@dataclasses.dataclass(frozen=True, kw_only=True)
class Theorem2Numbers:
    """Theorem 2 at one context length n, per task (N,) (``theorem2_statistics``; arrays, or lists as a stored
    ``ictd.depth-context`` record gives them back: :meth:`as_arrays`): C_hat (empirical margin, eq. 54), M_dev
    ||M_hat - M_pi||_inf (Lemma 4), T2 (bias of eq. 67), floor ||v_inf - v_pi||_inf, rho_hat = ||I - M_hat +
    gamma P_hat||_inf (eq. 57), spectral_radius of that matrix, covered (bool: the context visits every state; only
    these tasks count), draws (contexts drawn), rate (fitted decay rate of ||v_L - v_inf||; NaN if unfitted),
    rho_bounded (rho_hat <= 1 - C, the Lemma 5 event), bound70_excess (max over L of the error above eq. (70)); and
    err_q (3, L+1): the 25/50/75 % quantiles over the covered tasks of ||v_L - v_pi||_inf."""

    C_hat: np.ndarray
    M_dev: np.ndarray
    T2: np.ndarray
    floor: np.ndarray
    rho_hat: np.ndarray
    spectral_radius: np.ndarray
    covered: np.ndarray
    draws: np.ndarray
    rate: np.ndarray
    rho_bounded: np.ndarray
    bound70_excess: np.ndarray
    err_q: np.ndarray

    def as_arrays(self) -> Theorem2Numbers:
        """Every field as an array (covered and rho_bounded as bools)."""
        numbers = {f.name: np.asarray(getattr(self, f.name)) for f in dataclasses.fields(self)}
        return Theorem2Numbers(**numbers | {k: numbers[k].astype(bool) for k in ("covered", "rho_bounded")})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Crosscheck:
    """``transformer_crosscheck``: max |Z_l[d+2, j] - v_l(S_j)| (transformer_vs_operator) and |readout - v_l(S_n)|
    (readout_vs_operator) over layers and columns, max |eq. (49) - eq. (24)| over M_hat and P_hat, the largest |v_l|
    (max_abs_value), on one task with m states and a covering context of n transitions."""

    transformer_vs_operator: float
    readout_vs_operator: float
    eq49_vs_eq24: float
    max_abs_value: float
    n: int
    m: int


def theorem2_statistics(curves: dict, covered, draws, margin, err0) -> Theorem2Numbers:
    """Per-task numbers of Theorem 2 at one context length, from ``depth_curves`` of T tasks.

    margin (T,): each task's population margin C (eq. 28); err0 (T,): ||v_0 - v_pi||_inf. Adds the fitted rate of
    the transient, the Lemma 5 event rho_hat <= 1 - C, and the excess of ||v_L - v_pi|| over eq. (70) with the
    measured bias, (1 - C)^L err0 + T2 / C (max over L; <= 0 where the bound holds); replaces the per-task error
    curves by their 25/50/75 % quantiles over the covered tasks, ``err_q`` (3, L+1).
    """
    cat = {k: np.asarray(v) for k, v in curves.items()}
    cat.update(covered=np.asarray(covered), draws=np.asarray(draws))
    margin, err0 = np.asarray(margin), np.asarray(err0)
    cat["rate"] = fitted_rate(cat.pop("dist"))
    ok = cat["covered"]
    cat["rho_bounded"] = cat["rho_hat"] <= 1.0 - margin  # the event of Lemma 5
    bound_curve = (1.0 - margin)[:, None] ** np.arange(cat["err"].shape[1]) * err0[:, None]  # v_0 = 0
    excess = cat["err"] - bound_curve - (cat["T2"] / margin)[:, None]  # eq. (70)
    cat["bound70_excess"] = excess.max(axis=1)
    cat["err_q"] = np.quantile(cat.pop("err")[ok], [0.25, 0.5, 0.75], axis=0)
    return Theorem2Numbers(**cat)


def transformer_crosscheck(task, states, d: int, num_layers: int) -> Crosscheck:
    """Theorem 1 + section 5 on one small case: the theta* transformer's values Z_l[d+2, j] equal the operator
    iterates v_l(S_j) at every column j and layer l; and eq. (49) equals ``operator_form`` (eq. 24)."""
    gamma = task.mrp.gamma
    X, R = task.features[states], task.mrp.r[states[:-1]]
    V, A = tf.theta_star(d, dtype=X.dtype)
    Zs = tf.forward(tf.make_prompt(X, R), V, A, gamma, num_layers, "tsm", "softmax")
    m = task.features.shape[0]
    M24, P24 = st.operator_form(states, st.kernel_weights(st.feature_scores(X), "softmax"), m)
    M49, P49 = st.operator_from_counts(states, task.features, m)
    vs = st.iterate_operator(M24, P24, task.mrp.r, gamma, num_layers)  # (L+1, m)
    return Crosscheck(transformer_vs_operator=float(jnp.abs(Zs[:, -1, :] - vs[:, states]).max()),
                      readout_vs_operator=float(jnp.abs(tf.readout(Zs) - vs[:, states[-1]]).max()),
                      eq49_vs_eq24=float(max(jnp.abs(M24 - M49).max(), jnp.abs(P24 - P49).max())),
                      max_abs_value=float(jnp.abs(vs).max()), n=int(states.shape[0] - 1), m=int(m))


def margins_and_err0(tasks_by_m: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per task of {m: batched Task} (in dict order): the margin C of eq. (28) and ||v_0 - v_pi||_inf (v_0 = 0)."""
    margin = np.concatenate([np.asarray(jax.vmap(task_margin)(tasks)) for tasks in tasks_by_m.values()])
    err0 = np.concatenate([np.abs(np.asarray(tasks.v_star)).max(axis=1) for tasks in tasks_by_m.values()])
    return margin, err0


def theorem2_at(tasks_by_m: dict, key, n: int, num_layers: int, max_resamples: int, length: int
                ) -> Theorem2Numbers:
    """``theorem2_statistics`` of every task of {m: batched Task} at context length n; the contexts of the tasks with
    m states are ``covering_trajectories`` drawn from fold_in(key, m), ``length`` transitions each."""
    parts = []
    for m, tasks in tasks_by_m.items():
        states, covered, draws = covering_trajectories(tasks, jax.random.fold_in(key, m), n, max_resamples, length)
        parts.append({"covered": covered, "draws": draws, **depth_curves(tasks, states, n, num_layers)})
    cat = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    covered, draws = cat.pop("covered"), cat.pop("draws")
    return theorem2_statistics(cat, covered, draws, *margins_and_err0(tasks_by_m))


def covering_crosscheck(tasks, key, n: int, num_layers: int, max_resamples: int, length: int) -> Crosscheck:
    """``transformer_crosscheck`` on the first task of a batch whose context of n transitions (drawn from ``key``)
    visits every state; RuntimeError if none does."""
    states, covered, _ = covering_trajectories(tasks, key, n, max_resamples, length=length)
    i = int(np.argmax(np.asarray(covered)))
    if not bool(covered[i]):
        raise RuntimeError("no cross-check trajectory visits every state; raise max_resamples")
    d = tasks.features.shape[-1]
    return transformer_crosscheck(jax.tree.map(lambda a: a[i], tasks), states[i, :n + 1], d, num_layers)

"""In-context policy evaluation by one theta* transformer on a family of tasks (Fig. 1), and its references.

MSVE(t) = sum_s d_pi(s) (TF_theta*(tau_t, s) - v_pi(s))^2 for the L-layer dual-head softmax transformer with theta*
of eq. (15), one theta* for every task, beside weighted softmax TD (Theorem 1), its depth limit (eq. 24-26), TD on
the true successor, tabular TD and the depth floor of the population operator (eq. 27) (``METHODS``).

Choices the paper leaves open (stated in the summary of ``ictd.msve-vs-context``):

- tasks of several sizes share d, so one theta* serves them, padded to the largest size (a ``TaskSet``);
- TF(tau_t, s) for any query s is the prompt of eq. (13) with x_n := x(s): one fictitious last transition;
- trajectories start from the stationary distribution; tau_t is a prefix of one trajectory per task.

The reading of TF(tau_t, s), the references and the cost: docs/studies/ictd.md, "Policy evaluation (Fig. 1)".
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from memlab.ictd.mrp import MRP, sample_trajectory, stationary_distribution, value_function
from memlab.ictd.random_tasks import random_task
from memlab.ictd.softmax_td import (
    diagonal_margin,
    iterate_operator,
    operator_from_counts,
    population_kernel,
    tabular_td_fixed_point,
    weighted_softmax_td,
)
from memlab.ictd.transformer import forward, make_prompt, readout, theta_star

__all__ = ["METHODS", "ContextMSVE", "TaskSet", "context_msve", "depth_floor_values", "make_task_set", "method_label",
           "operator_values", "query_trajectory", "transformer_value"]

METHODS = ("transformer", "weighted_softmax_td", "depth_limit", "true_successor", "tabular_td")
LABELS = {
    "transformer": "TF(θ*), {L} layers (dual head)",
    "weighted_softmax_td": "weighted softmax TD, {L} iterations",
    "depth_limit": "weighted softmax TD, L → ∞",
    "true_successor": "weighted softmax TD, {L} it., true S_t",
    "tabular_td": "tabular TD fixed point (LSTD)",
}
PROMPT_BATCH_ELEMENTS = 10**6  # attention entries per lax.map batch: cache-sized (measured fastest on CPU)


class TaskSet(NamedTuple):
    """All tasks padded to M = max(m_values) states (N tasks, G discounts). Padded states: mu = 0, x = 0, r = 0."""

    m: np.ndarray  # (N,) state-space size of each task
    features: jax.Array  # (N, M, d)
    P: jax.Array  # (N, M, M)
    r: jax.Array  # (N, M)
    mu: jax.Array  # (N, M) stationary distribution d_pi
    states: jax.Array  # (N, t_max+1) one trajectory per task, S_0 ~ mu
    rewards: jax.Array  # (N, t_max)
    v: jax.Array  # (G, N, M) v_pi per discount
    margin: np.ndarray  # (G, N) Assumption 5.1 margin, eq. (28)
    floor: np.ndarray  # (G, N) MSVE of L population-operator iterations: the depth-L floor as t -> inf


def depth_floor_values(features, P, r, mu, gamma, num_layers: int):
    """v_L of L iterations of eq. (25)-(26) with the population kernel: M_hat -> M_pi (eq. 27), P_hat -> M_pi P."""
    M_pi = population_kernel(features, mu)
    return iterate_operator(M_pi, M_pi @ P, r, gamma, num_layers)[-1]


def _padded_tasks(key, count: int, m: int, M: int, d: int, gamma: float, num_actions: int, feature_scale: float):
    """``count`` tasks with m states, padded to M states: (features, P, r, p0, real).

    ``random_task`` is called per key (compiled once per m). Padded states get x = 0, r = 0, p0 = 0 and zero rows and
    columns in P: never reached from a real state, so mu = 0 there, v_pi = 0 there, and trajectories never visit them.
    """
    tasks = [random_task(k, m, d, gamma, num_actions, feature_scale) for k in jax.random.split(key, count)]
    pad = lambda a, axes: jnp.pad(a, [(0, M - m) if i in axes else (0, 0) for i in range(a.ndim)])  # noqa: E731
    stack = lambda f, axes: jnp.stack([pad(f(t), axes) for t in tasks])  # noqa: E731
    return (stack(lambda t: t.features, (0,)), stack(lambda t: t.mrp.P, (0, 1)), stack(lambda t: t.mrp.r, (0,)),
            stack(lambda t: t.mrp.p0, (0,)), jnp.broadcast_to(jnp.arange(M) < m, (count, M)))


@functools.partial(jax.jit, static_argnames=("gammas", "t_max", "num_layers"))
def _complete_tasks(features, P, r, p0, real, traj_keys, gammas, t_max, num_layers):
    """mu_pi, one stationary-start trajectory, and per discount v_pi, the Assumption 5.1 margin and the depth floor."""
    def one(features, P, r, p0, real, traj_key):
        mu = jnp.where(real, jnp.clip(stationary_distribution(MRP(P, r, gammas[0], p0)), 0.0), 0.0)
        mu = mu / mu.sum()  # lstsq leaves ~1e-8 residues (negative ones, and on the padded states)
        states, rewards = sample_trajectory(MRP(P, r, gammas[0], mu), traj_key, t_max)  # S_0 ~ p0 := mu_pi
        M_pi = population_kernel(features, mu)  # eq. (27); does not depend on gamma
        v, margin, floor = [], [], []
        for g in gammas:  # the same MDP, policy and features at every discount; only v_pi changes
            v_g = value_function(MRP(P, r, g, p0))
            v_floor = depth_floor_values(features, P, r, mu, g, num_layers)
            v.append(v_g)
            margin.append(diagonal_margin(M_pi + jnp.diag(~real), g))  # eq. (28) over the real states only
            floor.append(jnp.sum(mu * (v_floor - v_g) ** 2))
        return mu, states, rewards, jnp.stack(v), jnp.stack(margin), jnp.stack(floor)

    return jax.vmap(one)(features, P, r, p0, real, traj_keys)


def make_task_set(tasks_key, trajectories_key, m_values: tuple[int, ...], tasks_per_m: int, d: int,
                  gammas: tuple[float, ...], feature_scale: float, num_actions: int, t_max: int,
                  num_layers: int) -> TaskSet:
    """The task family of (a), padded to max(m_values) states, and one trajectory of t_max transitions each (c).

    Keys: fold_in(tasks_key, m) for the tasks with m states, split(trajectories_key, N) for the N trajectories. The
    tasks are drawn at gammas[0] (the discount changes only v_pi); ``num_layers`` sets the depth of the floor.
    """
    M = max(m_values)
    groups = [_padded_tasks(jax.random.fold_in(tasks_key, m), tasks_per_m, m, M, d, gammas[0], num_actions,
                            feature_scale) for m in m_values]
    features, P, r, p0, real = (jnp.concatenate(x) for x in zip(*groups))
    N = features.shape[0]
    mu, states, rewards, v, margin, floor = _complete_tasks(
        features, P, r, p0, real, jax.random.split(trajectories_key, N), tuple(gammas), t_max, num_layers)
    return TaskSet(m=np.repeat(np.asarray(m_values), tasks_per_m), features=features, P=P, r=r, mu=mu,
                   states=states, rewards=rewards, v=v.transpose(1, 0, 2), margin=np.asarray(margin).T,
                   floor=np.asarray(floor).T)


def method_label(name: str, num_layers: int) -> str:
    """Label of a method of ``METHODS`` for L = ``num_layers`` layers (figures and tables)."""
    return LABELS[name].replace("{L}", str(num_layers))


# ---------------------------------------------------------------- TF(tau_t, s) and its references


def query_trajectory(features, states, query, t: int):
    """Features (t+1, d) of the prompt for query s (reading (b)): x(S_0), ..., x(S_{t-1}), x(s)."""
    return jnp.concatenate([features[states[:t]], features[query][None]], axis=0)


def transformer_value(features, states, rewards, query, t: int, gamma, V, A, num_layers: int):
    """TF_theta*(tau_t, s) = readout of the L-layer dual-head forward (eq. 14-19) on the prompt (13) of (b)."""
    Z0 = make_prompt(query_trajectory(features, states, query, t), rewards[:t])
    return readout(forward(Z0, V, A, gamma, num_layers, form="dual")[-1])


def operator_values(features, states, r, t: int, gamma, num_iters: int, true_successor: bool = False):
    """Weighted softmax TD after ``num_iters`` iterations, at every state, through eq. (24)-(26): (M,).

    M_hat, P_hat come from the state counts of the t transitions (``softmax_td.operator_from_counts``, eq. 49), which
    defines the kernel of eq. (12) at every state, visited or not. Default (reading (b)): the successor of the last
    transition is the query, so entry s of the result is the value at query s on the trajectory
    (S_0, ..., S_{t-1}, s) — the transformer's output for num_iters = L. ``true_successor``: the real trajectory
    (S_0, ..., S_t), the same operator for all s. The rewards enter as M_hat r since R_k = r(S_{k-1}) (section 2.2).
    """
    M = features.shape[0]

    def values(trajectory):  # (t+1,) states: the t transitions S_0 -> ... -> S_t
        M_hat, P_hat = operator_from_counts(trajectory, features, M)
        return iterate_operator(M_hat, P_hat, r, gamma, num_iters)[-1]

    if true_successor:
        return values(states[: t + 1])
    return jax.vmap(lambda s: values(jnp.concatenate([states[:t], s[None]]))[s])(jnp.arange(M))


@functools.partial(jax.jit, static_argnames=("t", "num_layers", "depth_limit_layers", "batch_size"))
def _context_values(gamma, tasks: TaskSet, pair_task, pair_state, t: int, num_layers: int, depth_limit_layers: int,
                    batch_size: int):
    """Values (N, M) of every method at context length t; plus the transformer's and WSTD's (pairs,) values."""
    V, A = theta_star(tasks.features.shape[-1], dtype=tasks.features.dtype)  # the ONE theta* (eq. 15) for all tasks

    def pair(ij):
        i, s = ij
        X = query_trajectory(tasks.features[i], tasks.states[i], s, t)
        tf = transformer_value(tasks.features[i], tasks.states[i], tasks.rewards[i], s, t, gamma, V, A, num_layers)
        ref = weighted_softmax_td(X, tasks.rewards[i][:t], gamma, num_layers)[-1, -1]  # query column, Theorem 1
        return tf, ref

    tf, ref = jax.lax.map(pair, (pair_task, pair_state), batch_size=batch_size)
    M = tasks.features.shape[1]
    per_task = jax.vmap(lambda f, st, r: (
        operator_values(f, st, r, t, gamma, depth_limit_layers),
        operator_values(f, st, r, t, gamma, 2 * depth_limit_layers),
        operator_values(f, st, r, t, gamma, num_layers, true_successor=True),
        tabular_td_fixed_point(st, r, t, gamma, M)))(tasks.features, tasks.states, tasks.r)
    return tf, ref, per_task


def _msve(values, v, mu):
    """sum_s d_pi(s) (v_hat(s) - v_pi(s))^2 per task (the Fig. 1 y-axis), values (N, M)."""
    return np.sum(np.asarray(mu) * (np.asarray(values) - np.asarray(v)) ** 2, axis=1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContextMSVE:
    """``context_msve`` at one (gamma, t): msve, {method in ``METHODS``: (N,) MSVE per task}; max_abs_diff, max |TF -
    WSTD| and max_abs_value, max |WSTD| over every (task, query) prompt; depth_limit_change, the largest change of the
    depth limit from ``depth_limit_layers`` to twice as many iterations. Arrays, or lists from a stored record."""

    msve: dict[str, np.ndarray]
    max_abs_diff: float
    max_abs_value: float
    depth_limit_change: float


def context_msve(tasks: TaskSet, g: int, gamma: float, t: int, num_layers: int, depth_limit_layers: int
                 ) -> ContextMSVE:
    """MSVE (N,) of every method in ``METHODS`` for every task at discount ``gamma`` (= gammas[g] of the TaskSet) and
    context length t; max |TF - WSTD| and max |WSTD| over all (task, query) prompts; the change of the depth limit
    from ``depth_limit_layers`` to twice as many iterations."""
    pair_task = np.concatenate([np.full(m, i) for i, m in enumerate(tasks.m)]).astype(np.int32)
    pair_state = np.concatenate([np.arange(m) for m in tasks.m]).astype(np.int32)
    batch = int(np.clip(PROMPT_BATCH_ELEMENTS // (t + 1) ** 2, 1, len(pair_task)))
    tf, ref, (limit, limit2, true_succ, tabular) = _context_values(
        jnp.asarray(gamma, tasks.features.dtype), tasks, pair_task, pair_state, t, num_layers, depth_limit_layers,
        batch)
    tf, ref = np.asarray(tf), np.asarray(ref)
    tf_v, ref_v = np.zeros(tasks.mu.shape, tf.dtype), np.zeros(tasks.mu.shape, ref.dtype)
    tf_v[pair_task, pair_state], ref_v[pair_task, pair_state] = tf, ref
    real = np.arange(tasks.mu.shape[1]) < tasks.m[:, None]  # padded states have mu = 0 and do not count
    msve = {name: _msve(x, tasks.v[g], tasks.mu) for name, x in zip(METHODS, (tf_v, ref_v, limit, true_succ, tabular))}
    limit_change = np.where(real, np.abs(np.asarray(limit) - np.asarray(limit2)), 0.0)
    return ContextMSVE(msve=msve, max_abs_diff=float(np.max(np.abs(tf - ref))),
                       max_abs_value=float(np.max(np.abs(ref))), depth_limit_change=float(np.max(limit_change)))

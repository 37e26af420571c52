"""The norm of the expected TD update (NEU) of a looped softmax ICTD block (paper 2, section 6, App. E.4).

The looped parameter space of eq. (32), theta = (u, B) stored flat as ``concat(u, B.ravel())`` (theta* of eq. (15)
is ``theta_star_looped``); the TD update direction X_L of eq. (30) and J_{L,n} = ||E[X_L]||_1 of eq. (31),
estimated with the tower estimator of App. E.4 (the next state summed out exactly), for every depth l = 1..L from
one forward pass. ``summarize`` reports J-hat with its Monte-Carlo noise floor, the split-half estimate J_split
(together they bracket J), a delta-method standard error and E||X_L||_1 (the quantity Theorem 3's proof bounds).

The estimators and their biases: docs/studies/ictd.md, "The NEU objective".
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_int
from memlab.ictd.mrp import Task, sample_trajectory
from memlab.ictd.random_tasks import random_task_batch, task_margin
from memlab.ictd.transformer import forward, make_prompt, readout

NUM_U = 3  # u = (coefficient of R, of gamma v', of v)

__all__ = [
    "EstimatorStatistics",
    "NEUEstimate",
    "POINT_LABELS",
    "DepthStatistics",
    "STAT_FIELDS",
    "comparison_points",
    "estimator_statistics",
    "flatten_theta",
    "looped_params",
    "neu",
    "num_params",
    "sample_tasks",
    "summarize",
    "td_update_direction",
    "theta_star_looped",
    "unflatten_theta",
    "update_samples",
]


# ---------------------------------------------------------------- the parameter space Theta^Looped, eq. (32)

def num_params(d: int) -> int:
    """D_theta = d^2 + 3, the number of free parameters of Theta^Looped (Lemma 9)."""
    _check_d(d)
    return d * d + NUM_U


def _check_d(d) -> None:
    check_int("feature dimension d", d)


def _check_u_B(u, B) -> tuple[Array, Array]:
    u, B = jnp.asarray(u), jnp.asarray(B)
    if u.shape != (NUM_U,):
        raise ValueError(f"u must have shape (3,) (coefficients of R, gamma v', v), got {u.shape}")
    if B.ndim != 2 or B.shape[0] != B.shape[1] or B.shape[0] < 1:
        raise ValueError(f"B must be a square (d, d) matrix with d >= 1, got shape {B.shape}")
    for name, a in (("u", u), ("B", B)):
        if not isinstance(a, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(a))):
            raise ValueError(f"{name} contains NaN or inf")
    return u, B


def looped_params(u, B) -> tuple[Array, Array]:
    """(V, A), each (d+3, d+3), of eq. (32) from u (3,) and B (d, d); shared by all layers.

    V's only non-zero entries are its last row's last three, V[d+2, d:] = u (0-based rows: R is row d, the target
    memory gamma v' row d+1, the current value v row d+2); A[:d, :d] = B, every other entry 0.
    """
    u, B = _check_u_B(u, B)
    return _looped_params(u, B)


def _looped_params(u, B):
    d = B.shape[0]
    dtype = jnp.result_type(u, B, float)
    V = jnp.zeros((d + 3, d + 3), dtype).at[d + 2, d:].set(u.astype(dtype))  # eq. (32), V
    A = jnp.zeros((d + 3, d + 3), dtype).at[:d, :d].set(B.astype(dtype))  # eq. (32), A
    return V, A


def theta_star_looped(d: int, dtype=None) -> tuple[Array, Array]:
    """theta* of eq. (15) as a point (u*, B*) of Theta^Looped: u* = (1, 1, -1) (3,), B* = I_d (d, d)."""
    _check_d(d)
    return jnp.array([1.0, 1.0, -1.0], dtype), jnp.eye(d, dtype=dtype)


def flatten_theta(u, B) -> Array:
    """theta = concat(u, B.ravel()) (d^2 + 3,): the order of every gradient and update direction here."""
    u, B = _check_u_B(u, B)
    dtype = jnp.result_type(u, B, float)
    return jnp.concatenate([u.astype(dtype), B.ravel().astype(dtype)])


def unflatten_theta(theta, d: int) -> tuple[Array, Array]:
    """Inverse of ``flatten_theta``: theta (d^2 + 3,) -> u (3,), B (d, d)."""
    theta = jnp.asarray(theta)
    if theta.shape != (num_params(d),):
        raise ValueError(f"theta must have shape (d^2 + 3,) = ({num_params(d)},) for d = {d}, got {theta.shape}")
    return theta[:NUM_U], theta[NUM_U:].reshape(d, d)


POINT_LABELS = {  # the points of ``comparison_points`` (names, also cell names) -> labels of figures and tables
    "theta-star": "θ* = (u*, I)",
    "half-step": "(u*/2, I)",
    "mirror": "mirror (−u*, −I)",
    "perturbed": "θ* + ε·N(0, I)",
    "random": "random (u, B)",
    "u-zero": "(0, I): u = 0",
    "B-zero": "(u*, 0): B = 0",
}


def comparison_points(d: int, key, perturbation: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Named points (u (3,), B (d, d)) of Theta^Looped (float32) to compare with theta*; random ones drawn from ``key``.

    theta-star (u*, I); half-step (u*/2, I): the TD block with learning rate 1/2 (same fixed point, reached more
    slowly, so its J -> 0 as well); mirror (-u*, -I); perturbed theta* + eps N(0, I); random (u ~ N(0, I_3),
    B ~ N(0, I_d / d)); u-zero (0, I): the block outputs 0; B-zero (u*, 0): uniform attention.
    """
    u_star, B_star = (np.asarray(a, np.float32) for a in theta_star_looped(d))
    k_pu, k_pB, k_ru, k_rB = jax.random.split(key, 4)
    normal = lambda k, shape: np.asarray(jax.random.normal(k, shape), np.float32)  # noqa: E731
    return {
        "theta-star": (u_star, B_star),
        "half-step": (0.5 * u_star, B_star),
        "mirror": (-u_star, -B_star),
        "perturbed": (u_star + perturbation * normal(k_pu, (3,)), B_star + perturbation * normal(k_pB, (d, d))),
        "random": (normal(k_ru, (3,)), normal(k_rB, (d, d)) / np.sqrt(d)),
        "u-zero": (np.zeros(3, np.float32), B_star),
        "B-zero": (u_star, np.zeros((d, d), np.float32)),
    }


# ---------------------------------------------------------------- v_L and the update direction, eq. (30)

def _layer_values(theta, features_traj, rewards, gamma, num_layers: int) -> Array:
    """v_l(query; theta) for l = 1..L (L,): readouts of the looped tsm/softmax block on the prompt (13)."""
    d = features_traj.shape[1]
    V, A = _looped_params(theta[:NUM_U], theta[NUM_U:].reshape(d, d))
    Zs = forward(make_prompt(features_traj, rewards), V, A, gamma, num_layers, form="tsm", kind="softmax")
    return readout(Zs[1:])


def _check_sampling_args(task: Task, d: int, num_layers, n, batched: bool) -> None:
    check_int("num_layers", num_layers)
    check_int("n", n)
    feats = task.features
    want = 3 if batched else 2
    if feats.ndim != want or feats.shape[-1] != d:
        lead = "(N, m, d)" if batched else "(m, d)"
        raise ValueError(f"task features must have shape {lead} with d = {d} (the size of B), got {feats.shape}")


def _trajectory(task: Task, key, n: int):
    """Stationary trajectory of n+1 transitions: features (n+2, d), rewards (n+1,), states (n+2,)."""
    states, rewards = sample_trajectory(task.mrp, key, n + 1, stationary=True)  # S_0 ~ mu_pi, section 6
    return task.features[states], rewards, states


def td_update_direction(u, B, task: Task, key, num_layers: int, n: int, tower: bool = True) -> Array:
    """X_L = delta_L(theta) grad_theta v_L(S_n; theta) (d^2 + 3,) for one task and one trajectory, eq. (30).

    u (3,), B (d, d); ``task`` one ``Task`` (features (m, d)); ``key`` draws S_0 ~ mu_pi and S_1..S_{n+1}.
    v_L(S_n) reads the prompt of S_0..S_n, v_L(S_{n+1}) the shifted prompt of S_1..S_{n+1}; ``tower`` replaces
    delta_L by its conditional mean over S_{n+1} ~ p(. | S_n) (App. E.4). Gradient order: ``flatten_theta``.
    This is the plain definition (``jax.grad`` of v_L at one depth); ``update_samples`` is the batched form.
    """
    theta = flatten_theta(u, B)
    _check_sampling_args(task, jnp.shape(B)[0], num_layers, n, batched=False)
    return _td_update_direction(theta, task, key, int(num_layers), int(n), bool(tower))


@functools.partial(jax.jit, static_argnames=("num_layers", "n", "tower"))
def _td_update_direction(theta, task, key, num_layers, n, tower):
    feats, rewards, states = _trajectory(task, key, n)
    gamma = task.mrp.gamma

    def v_query(th):
        return _layer_values(th, feats[: n + 1], rewards[:n], gamma, num_layers)[-1]

    v_now, grad = jax.value_and_grad(v_query)(theta)
    if tower:
        v_next = jax.vmap(lambda s: _layer_values(theta, _with_query(feats[1: n + 1], task.features[s]), rewards[1:],
                                                  gamma, num_layers)[-1])(jnp.arange(task.features.shape[0]))
        next_value = task.mrp.P[states[n]] @ v_next  # E[v_L(S_{n+1}) | S_n]
    else:
        next_value = _layer_values(theta, feats[1:], rewards[1:], gamma, num_layers)[-1]
    delta = rewards[n] + gamma * next_value - v_now  # eq. (30), R_{n+1} = r(S_n)
    return delta * grad


def _with_query(context_feats, query_feat):
    """Features (n+1, d) of a prompt whose last column (the query) is ``query_feat`` (d,)."""
    return jnp.concatenate([context_feats, query_feat[None]], axis=0)


def _sample_directions(theta, task, key, num_layers, n, depths):
    """X_l for l in ``depths`` (1-based) with the tower and the plain delta: two arrays (len(depths), d^2 + 3)."""
    feats, rewards, states = _trajectory(task, key, n)
    gamma = task.mrp.gamma
    m = task.features.shape[0]

    v_now, pullback = jax.vjp(lambda th: _layer_values(th, feats[: n + 1], rewards[:n], gamma, num_layers), theta)
    rows = jnp.asarray(depths) - 1
    # (len(depths), D): grad v_l(S_n) for each depth l, one backward pass per unit cotangent; sequential (lax.map),
    # since a vmap over the cotangents multiplies the working set by their number and ran several times slower on
    # the CPU at large n
    grads = jax.lax.map(lambda e: pullback(e)[0], jnp.eye(num_layers, dtype=v_now.dtype)[rows])
    v_now = v_now[rows]
    v_next = jax.vmap(lambda s: _layer_values(theta, _with_query(feats[1: n + 1], task.features[s]), rewards[1:],
                                              gamma, num_layers))(jnp.arange(m))[:, rows]  # v_l(S_{n+1} = s')
    reward = rewards[n]  # R_{n+1} = r(S_n)
    delta_bar = reward + gamma * task.mrp.P[states[n]] @ v_next - v_now  # App. E.4: E[delta_l | S_0..S_n]
    delta = reward + gamma * v_next[states[n + 1]] - v_now  # eq. (30) with the sampled S_{n+1}
    return delta_bar[:, None] * grads, delta[:, None] * grads


def update_samples(u, B, tasks: Task, keys, num_layers: int, n: int, batch_size: int = 8,
                   depths=None) -> tuple[Array, Array]:
    """Monte-Carlo samples of the update direction at every depth: (tower, plain), each (N, L', d^2 + 3).

    ``depths``: the 1-based depths l to return (L' of them, increasing, each in 1..num_layers; default all, L' = L).
    One forward pass of ``num_layers`` layers serves every depth; each returned depth costs one backward pass.

    ``tasks``: a batch of N tasks (every field with a leading axis N, features (N, m, d), e.g. ``jax.vmap`` of
    ``random_task`` over keys), one stationary trajectory each, drawn with ``keys`` (N,). Entry [i, j] is
    X_l = delta_l grad v_l(S_n) (eq. 30) of sample i at depth l = depths[j], with delta_l the tower mean over
    S_{n+1} (``tower``) or the sampled one (``plain``). Jitted; ``lax.map`` over groups of ``batch_size``
    samples bounds the memory (reverse mode keeps L attention matrices of size (n+1)^2 per sample).
    """
    theta = flatten_theta(u, B)
    _check_sampling_args(tasks, jnp.shape(B)[0], num_layers, n, batched=True)
    N = tasks.features.shape[0]
    if jnp.shape(keys)[:1] != (N,):
        raise ValueError(f"need one key per task: keys must have leading shape ({N},), got {jnp.shape(keys)}")
    check_int("batch_size", batch_size)
    depths = tuple(range(1, num_layers + 1)) if depths is None else tuple(int(l) for l in depths)
    if not depths or list(depths) != sorted(set(depths)) or depths[0] < 1 or depths[-1] > num_layers:
        raise ValueError(f"depths must be increasing ints in 1..num_layers = 1..{num_layers}, got {depths}")
    return _update_samples(theta, tasks, keys, int(num_layers), int(n), int(min(batch_size, N)), depths)


@functools.partial(jax.jit, static_argnames=("num_layers", "n", "batch_size", "depths"))
def _update_samples(theta, tasks, keys, num_layers, n, batch_size, depths):
    def one(args):
        task, key = args
        return _sample_directions(theta, task, key, num_layers, n, depths)

    return jax.lax.map(one, (tasks, keys), batch_size=batch_size)


# ---------------------------------------------------------------- the NEU estimate, eq. (31)

@dataclasses.dataclass(frozen=True)
class DepthStatistics:
    """The statistics of one NEU estimate per depth l (each (L,)): J = ||mean X_l||_1 (eq. 31, biased up by noise);
    J_se, its delta-method standard error; noise_floor = sqrt(2/pi) ||se||_1, the expected J-hat if E[X] = 0; J_split,
    the split-half cross estimate (biased down); abs_mean, abs_se: E||X_l||_1 >= J and its standard error."""

    J: np.ndarray
    J_se: np.ndarray
    noise_floor: np.ndarray
    J_split: np.ndarray
    abs_mean: np.ndarray
    abs_se: np.ndarray


@dataclasses.dataclass(frozen=True)
class NEUEstimate(DepthStatistics):
    """Monte-Carlo estimate of J_{l,n} (eq. 31) at depths l = 1..L from N samples (its biases: docs/studies/ictd.md):
    the :class:`DepthStatistics`, and mean, se (L, D): per-parameter mean and standard error; num_samples: N.
    """

    mean: np.ndarray
    se: np.ndarray
    num_samples: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def summarize(samples) -> NEUEstimate:
    """NEU statistics of samples (N, L, D) (N >= 4 iid draws of X_l, e.g. from ``update_samples``), in float64."""
    X = np.asarray(samples, dtype=np.float64)
    if X.ndim != 3 or X.shape[0] < 4:
        raise ValueError(f"samples must have shape (N, L, D) with N >= 4, got {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("samples contain NaN or inf (the looped block diverged in floating point)")
    N = X.shape[0]
    mean = X.mean(axis=0)  # (L, D)
    se = X.std(axis=0, ddof=1) / np.sqrt(N)
    sign = np.sign(mean)
    projected = np.einsum("nld,ld->nl", X, sign)  # sign(mean) . X_i: the linearisation of ||mean||_1
    norms = np.abs(X).sum(axis=2)  # (N, L): ||X_i||_1
    half = N // 2
    m_a, m_b = X[:half].mean(axis=0), X[half: 2 * half].mean(axis=0)
    split = 0.5 * (np.sum(np.sign(m_a) * m_b, axis=1) + np.sum(np.sign(m_b) * m_a, axis=1))
    return NEUEstimate(
        J=np.abs(mean).sum(axis=1),  # eq. (31)
        J_se=projected.std(axis=0, ddof=1) / np.sqrt(N),
        noise_floor=np.sqrt(2.0 / np.pi) * se.sum(axis=1),
        J_split=split,
        abs_mean=norms.mean(axis=0),
        abs_se=norms.std(axis=0, ddof=1) / np.sqrt(N),
        mean=mean,
        se=se,
        num_samples=N,
    )


def neu(u, B, tasks: Task, keys, num_layers: int, n: int, tower: bool = True, batch_size: int = 8) -> NEUEstimate:
    """J_{l,n}(theta) (eq. 31) for l = 1..num_layers, estimated over the N given tasks ~ Delta and one stationary
    trajectory each (``update_samples``), with the tower estimator by default; returns a ``NEUEstimate``."""
    tower_samples, plain_samples = update_samples(u, B, tasks, keys, num_layers, n, batch_size)
    return summarize(tower_samples if tower else plain_samples)


# ---------------------------------------------------------------- tasks ~ Delta and the statistics of one estimate

STAT_FIELDS = tuple(f.name for f in dataclasses.fields(DepthStatistics))  # per depth, from ``summarize``


def sample_tasks(key, count: int, m: int, d: int, gamma, feature_scale, num_actions: int = 2) -> tuple[Task, Array]:
    """``count`` tasks of the ``random_tasks`` family (a batched Task) and one trajectory key each (count,)."""
    k_task, k_traj = jax.random.split(key)
    tasks = random_task_batch(k_task, count, m, d, gamma, num_actions, feature_scale)
    return tasks, jax.random.split(k_traj, count)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EstimatorStatistics:
    """``estimator_statistics`` at one point and one n (an ``ictd.neu`` cell; arrays, or lists as a stored record
    gives them back: :meth:`as_arrays`): tower, plain: the :class:`DepthStatistics` (L',) of the two estimators;
    tower_vs_plain_max_z (L',): max over the d^2 + 3 parameters of |mean(plain - tower)| / se (the difference has
    mean 0 by the tower property); variance_ratio (L',): total variance plain / tower; num_samples; depths (L',);
    margin_min, margin_median: the tasks' Assumption 5.1 margins (eq. 28)."""

    tower: DepthStatistics
    plain: DepthStatistics
    tower_vs_plain_max_z: np.ndarray
    variance_ratio: np.ndarray
    num_samples: int
    depths: np.ndarray
    margin_min: float
    margin_median: float

    def as_arrays(self) -> EstimatorStatistics:
        """Every per-depth number as a float64 / int array."""
        tower, plain = (DepthStatistics(**{f: np.asarray(getattr(e, f), np.float64) for f in STAT_FIELDS})
                        for e in (self.tower, self.plain))
        return dataclasses.replace(self, tower=tower, plain=plain,
                                   tower_vs_plain_max_z=np.asarray(self.tower_vs_plain_max_z),
                                   variance_ratio=np.asarray(self.variance_ratio), depths=np.asarray(self.depths))


def estimator_statistics(u, B, tasks: Task, keys, num_layers: int, n: int, batch_size: int = 8, depths=None
                         ) -> EstimatorStatistics:
    """J statistics of the tower and the plain estimator at ``depths`` (default 1..num_layers), how well they agree,
    and the tasks' Assumption 5.1 margins (eq. 28): :class:`EstimatorStatistics`. FloatingPointError if the block
    overflowed."""
    tower, plain = update_samples(u, B, tasks, keys, num_layers, n, batch_size, depths)
    tower, plain = np.asarray(tower, np.float64), np.asarray(plain, np.float64)
    if not (np.all(np.isfinite(tower)) and np.all(np.isfinite(plain))):
        raise FloatingPointError(f"non-finite update directions at n = {n} (the looped block overflowed)")
    est_t, est_p = summarize(tower), summarize(plain)
    diff = plain - tower  # zero-mean by the tower property: E[(delta - delta_bar) grad | S_0..S_n] = 0
    diff_se = diff.std(axis=0, ddof=1) / np.sqrt(diff.shape[0])
    z = np.abs(diff.mean(axis=0)) / np.where(diff_se > 0, diff_se, np.inf)
    var_t = tower.var(axis=0, ddof=1).sum(axis=1)
    var_p = plain.var(axis=0, ddof=1).sum(axis=1)
    margins = np.asarray(jax.vmap(task_margin)(tasks), np.float64)
    return EstimatorStatistics(
        tower=DepthStatistics(**{f: getattr(est_t, f) for f in STAT_FIELDS}),
        plain=DepthStatistics(**{f: getattr(est_p, f) for f in STAT_FIELDS}),
        tower_vs_plain_max_z=z.max(axis=1),
        variance_ratio=var_p / np.where(var_t > 0, var_t, np.nan),
        num_samples=diff.shape[0],
        depths=list(range(1, num_layers + 1)) if depths is None else list(depths),
        margin_min=float(margins.min()),
        margin_median=float(np.median(margins)),
    )

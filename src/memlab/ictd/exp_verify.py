"""Numerical checks of the paper's theory: Theorem 1 / Lemma 1 (Fig. 7, App. F.6) and Theorem 2 (section 5).

* ``ictd.verify`` — Fig. 7: the L-layer transformer with theta* (eq. 15), in the dual-head form (eq. 14-18) and
  the single-head + TSM form (eq. 21-23), against the reference weighted softmax TD (eq. 11-12, the update
  below eq. 12) on the same context, for the kernels softmax, relu, elu1, rbf, in float64.
  Prompts (the paper says only "a fresh prompt Z0"): per trial a Boyan chain of Algorithm 2 (``num_states`` states,
  d-dimensional features) and an on-policy trajectory of n transitions from S_0 ~ p0; the prompt (eq. 13) holds
  x(S_0..S_n) times ``feature_scale`` (default 1/sqrt(d), so ||x||^2 ~ 1/3) and R_1..R_n. The same trial prompts
  are used for every kernel. The unnormalised kernels (relu, elu1, rbf) still make the values grow (to ~1e3-1e5
  over 10 layers; ~1e9-1e14 with the unscaled Alg. 2 features, which are run as a robustness check), so the
  discrepancy is also reported relative to max(1, |y|). E_l = log10 |v_l(S_n) - y_l|, with exact zeros (layer 0
  always: v_0 = y_0 = 0) floored at ``ZERO_FLOOR`` = 1e-17.

* ``ictd.depth-convergence`` — Theorem 2: ||v_L - v_pi||_inf against depth L for several context lengths n on
  random tasks (``random_tasks.random_task``: random MDP + policy, features c * orthonormal in R^d; the paper does
  not state its tasks). v_L comes from iterating the operator form v_{l+1} = T_hat(v_l) (eq. 24-26), which is the
  transformer's output at every visited state by Theorem 1 when the context visits every state; the run checks
  this against ``transformer.forward`` on one small case. M_hat, P_hat are computed from the state counts by
  eq. (49) (``softmax_td.operator_from_counts``, O(n + m^2) instead of the (n+1)^2 kernel that ``softmax_td.operator_form``
  needs; the two agree, checked in the run and the tests). Trajectories start at S_0 ~ p0 and are conditioned on
  visiting every state among S_0..S_{n-1} (section 5) by resampling (up to ``max_resamples`` draws; a task left
  uncovered is dropped at that n and counted).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from memlab import plots
from memlab.checks import check_int
from memlab.ictd import softmax_td as st
from memlab.ictd import transformer as tf
from memlab.ictd.boyan import boyan_chain
from memlab.ictd.mrp import sample_trajectory, stationary_distribution
from memlab.ictd.random_tasks import random_task, task_margin
from memlab.runner import Experiment

PAPER = "softmax-transformers-in-context-td"
ZERO_FLOOR = 1e-17  # |v - y| = 0 exactly is shown as log10(1e-17) = -17
TOL = 1e-10  # Theorem 1 (relative) and Lemma 1 tolerance of the claims
KIND_COLORS = {"softmax": "C0", "relu": "C1", "elu1": "C2", "rbf": "C3"}


# =============================================================================== ictd.verify (Fig. 7)


@dataclasses.dataclass(frozen=True)
class VerifyConfig:
    """App. F.6: d = 8, n = 20, L = 10, gamma = 0.9, alpha_l = 1, 50 trials, float64; prompts from Boyan chains."""

    seed: int = 0
    d: int = 8
    n: int = 20
    num_layers: int = 10
    gamma: float = 0.9
    alpha: float = 1.0
    num_trials: int = 50
    num_states: int = 10  # Boyan chain size (Algorithm 2); the paper does not say how its prompts are drawn
    feature_scale: float = 8 ** -0.5  # prompt features x(S_j) * scale
    kinds: tuple[str, ...] = ("softmax", "relu", "elu1", "rbf")

    def validate(self):
        for name, least in (("d", 1), ("n", 1), ("num_layers", 1), ("num_trials", 1), ("num_states", 2)):
            check_int(name, getattr(self, name), least)
        st.check_gamma(self.gamma)
        if not (self.alpha > 0 and self.feature_scale > 0):
            raise ValueError(f"alpha and feature_scale must be > 0, got {self.alpha}, {self.feature_scale}")
        if not self.kinds or any(k not in st.KERNELS for k in self.kinds):
            raise ValueError(f"kinds must be a non-empty subset of {st.KERNELS}, got {self.kinds}")


@functools.partial(jax.jit, static_argnames=("cfg",))
def trial_prompts(keys, cfg: VerifyConfig):
    """Per trial key: features (n+1, d) (unscaled) and rewards (n,) of one on-policy trajectory (S_0 ~ p0) of a
    fresh Boyan chain (Algorithm 2). Batched over keys: (T, n+1, d), (T, n)."""

    def one(key):
        k_task, k_traj = jax.random.split(key)
        task = boyan_chain(k_task, cfg.num_states, cfg.d, cfg.gamma)
        states, rewards = sample_trajectory(task.mrp, k_traj, cfg.n)
        return task.features[states], rewards

    return jax.vmap(one)(keys)


def verify_trial(X, R, cfg: VerifyConfig, kind: str) -> dict:
    """One trial: both transformer forms and the reference on the same prompt; discrepancies per layer (L+1,).

    X (n+1, d) unscaled features, R (n,) rewards; the prompt uses X * feature_scale (and X itself for the
    unscaled robustness check)."""
    V, A = tf.theta_star(cfg.d, dtype=X.dtype)
    alphas = jnp.full(cfg.num_layers, cfg.alpha, X.dtype)  # V_l -> alpha_l V_l (section 3)

    def run(X, form):
        return tf.forward(tf.make_prompt(X, R), V, A, cfg.gamma, cfg.num_layers, form, kind, alphas=alphas)

    Xs = X * cfg.feature_scale
    tsm, dual = run(Xs, "tsm"), run(Xs, "dual")
    y = st.weighted_softmax_td(Xs, R, cfg.gamma, cfg.num_layers, kind, alpha=alphas)  # (L+1, n+1)
    yq = y[:, -1]  # y_l at the query S_n
    scale = jnp.maximum(1.0, jnp.abs(yq))
    z_scale = jnp.maximum(1.0, jnp.maximum(jnp.abs(tsm), jnp.abs(dual)).max(axis=(1, 2)))
    lemma1 = jnp.abs(tsm - dual).max(axis=(1, 2))  # Lemma 1 over the whole Z_l
    X1_tsm = run(X, "tsm")  # unscaled Alg. 2 features
    y1 = st.weighted_softmax_td(X, R, cfg.gamma, cfg.num_layers, kind, alpha=alphas)[:, -1]
    return {
        "abs_tsm": jnp.abs(tf.readout(tsm) - yq), "abs_dual": jnp.abs(tf.readout(dual) - yq),
        "rel_tsm": jnp.abs(tf.readout(tsm) - yq) / scale, "rel_dual": jnp.abs(tf.readout(dual) - yq) / scale,
        "row_tsm": jnp.abs(tsm[:, -1] - y).max(axis=1),  # every column j: Z_l[d+2, j] vs y_l(S_j), eq. (37)
        "lemma1": lemma1, "lemma1_rel": lemma1 / z_scale, "y_max": jnp.abs(yq).max(),
        "unscaled_rel": (jnp.abs(tf.readout(X1_tsm) - y1) / jnp.maximum(1.0, jnp.abs(y1))).max(),
        "unscaled_y_max": jnp.abs(y1).max(),
    }


@functools.partial(jax.jit, static_argnames=("cfg", "kind"))
def verify_trials(X, R, cfg: VerifyConfig, kind: str) -> dict:
    """``verify_trial`` vmapped over trials: X (T, n+1, d), R (T, n)."""
    return jax.vmap(lambda X, R: verify_trial(X, R, cfg, kind))(X, R)


def log_discrepancy(x) -> np.ndarray:
    """log10 of a discrepancy, exact zeros floored at ZERO_FLOOR."""
    return np.log10(np.maximum(np.asarray(x, np.float64), ZERO_FLOOR))


def run_verify(cfg: VerifyConfig, run) -> dict:
    prompts = []  # the same trial prompts for every kernel, drawn once when a cell needs them
    res = {}
    with jax.enable_x64(True), run.progress(len(cfg.kinds), "Theorem 1 / Lemma 1 per kernel (float64)") as advance:
        for kind in cfg.kinds:
            def compute(kind=kind):
                if not prompts:
                    prompts.extend(trial_prompts(jax.random.split(run.key, cfg.num_trials), cfg))
                out = verify_trials(*prompts, cfg, kind)
                assert out["abs_tsm"].dtype == jnp.float64
                return {k: np.asarray(v) for k, v in out.items()}

            res[kind] = {k: np.asarray(v, np.float64) for k, v in run.cell(f"kernel={kind}", compute).items()}
            advance()

    layers = np.arange(cfg.num_layers + 1)
    fields = ("abs_tsm", "abs_dual", "rel_tsm", "rel_dual", "lemma1", "lemma1_rel")
    rows = [(kind, t, k, *(r[f][t, k] for f in fields))
            for kind, r in res.items() for t in range(cfg.num_trials) for k in layers]
    run.save_csv("discrepancy.csv", ["kernel", "trial", "layer", "abs_tsm", "abs_dual", "rel_tsm", "rel_dual",
                                     "lemma1_max_abs_Z", "lemma1_max_rel_Z"], rows)

    fig, axes = plots.figure(2, 2, width=9.0, height=6.4, sharex=True)
    E_label = r"$E_l = \log_{10}|v_l(S_n) - y_l|$"
    panels = [("abs_tsm", E_label, "(a) single-head + TSM (eq. 21–23) vs reference"),
              ("abs_dual", E_label, "(b) dual-head (eq. 14–18) vs reference"),
              ("rel_tsm", r"$\log_{10}\,|v_l(S_n) - y_l| / \max(1, |y_l|)$", "(c) relative, single-head + TSM"),
              ("lemma1_rel", r"$\log_{10}\,\max|Z_l^{dual} - Z_l^{TSM}| / \max(1, \max|Z_l|)$",
               "(d) Lemma 1 over the whole $Z_l$, relative")]
    for ax, (field, ylabel, title) in zip(axes.flat, panels):
        for kind, r in res.items():
            E = log_discrepancy(r[field])
            c = KIND_COLORS.get(kind)
            ax.plot(layers, np.median(E, axis=0), marker="o", color=c, label=kind)
            ax.fill_between(layers, E.min(axis=0), E.max(axis=0), color=c, alpha=0.15, lw=0)
        if field in ("rel_tsm", "lemma1_rel"):  # the claims' rules are relative
            tol = ax.axhline(np.log10(TOL), color="k", ls=":", lw=1, label="claim tolerance 1e-10 (relative)")
            ax.legend(handles=[tol], fontsize=7, loc="upper right")
        ax.set(ylabel=ylabel, title=title, ylim=(-18, -8))
    for ax in axes[1]:
        ax.set_xlabel("layer l")
    axes[0, 0].legend(ncol=2, fontsize=7, loc="upper left")
    fig.suptitle(f"Fig. 7: Theorem 1 / Lemma 1 in float64 (d={cfg.d}, n={cfg.n}, γ={cfg.gamma}, "
                 f"{cfg.num_trials} trials; median, min–max band; zeros floored at 1e-17)", fontsize=9)
    run.save_figure(fig, "verify.png")

    table, results = [], {}
    for kind, r in res.items():
        rel = max(r["rel_tsm"].max(), r["rel_dual"].max())
        E_tsm, E_dual = log_discrepancy(r["abs_tsm"]), log_discrepancy(r["abs_dual"])
        results[kind] = {"max_E_tsm": E_tsm.max(), "max_E_dual": E_dual.max(), "median_E_L": np.median(E_tsm[:, -1]),
                         "max_rel": rel, "max_row_abs": r["row_tsm"].max(), "max_abs_y": r["y_max"].max(),
                         "lemma1_max_abs": r["lemma1"].max(), "lemma1_max_rel": r["lemma1_rel"].max(),
                         "unscaled_max_rel": r["unscaled_rel"].max(), "unscaled_max_abs_y": r["unscaled_y_max"].max()}
        s = results[kind]
        worst_E = max(s["max_E_tsm"], s["max_E_dual"])
        table.append(f"| {kind} | {s['max_E_tsm']:.1f} | {s['max_E_dual']:.1f} | {s['median_E_L']:.1f} | "
                     f"{s['max_rel']:.1e} | {s['max_abs_y']:.2g} | "
                     f"{s['lemma1_max_abs']:.1e} / {s['lemma1_max_rel']:.1e} | "
                     f"{s['unscaled_max_rel']:.1e} | {s['unscaled_max_abs_y']:.1e} |")
        run.claim(f"theorem-1[{kind}]",
                  f"v_l(S_n) of both transformer forms equals weighted softmax TD y_l at every layer l <= "
                  f"{cfg.num_layers} and trial: rule max |v - y| / max(1, |y|) <= 1e-10 (scaled and unscaled features)",
                  "Theorem 1, Fig. 7 (E_l at numerical precision across depth)",
                  f"max relative {max(rel, s['unscaled_max_rel']):.1e}; max E_l = {worst_E:.1f}",
                  bool(max(rel, s["unscaled_max_rel"]) <= TOL))
    lemma_rel = max(s["lemma1_max_rel"] for s in results.values())
    run.claim("lemma-1", "dual-head (18) and single-head + TSM (23) give the same Z_l at every layer: rule "
              "max over kernels, trials, layers, entries of |Z_dual - Z_tsm| / max(1, max |Z|) <= 1e-10",
              "Lemma 1", f"max relative {lemma_rel:.1e}, max absolute "
              f"{max(s['lemma1_max_abs'] for s in results.values()):.1e}", bool(lemma_rel <= TOL))

    run.write_summary(
        f"# ictd.verify — Fig. 7 (App. F.6): Theorem 1 and Lemma 1\n\n"
        f"Paper: d = 8, n = 20, L = 10, γ = 0.9, α_l = 1, 50 trials in double precision, kernels masked softmax, "
        f"ReLU, ELU+1, RBF; \"E_l stays at numerical precision across depth\" (Fig. 7 has no numbers).\n\n"
        f"Ours: d = {cfg.d}, n = {cfg.n}, L = {cfg.num_layers}, γ = {cfg.gamma}, α_l = {cfg.alpha}, "
        f"{cfg.num_trials} trials, float64 (quick = paper). Each trial draws a Boyan chain (Algorithm 2, "
        f"m = {cfg.num_states} states) and "
        f"an on-policy trajectory of n transitions (S_0 ~ p0); the prompt (eq. 13) holds x(S_0..S_n) × "
        f"{cfg.feature_scale:.4g} and R_1..R_n (the paper does not say how it draws prompts; the scale slows the "
        f"growth of the unnormalised kernels, see below). The same prompts serve every kernel. The relative "
        f"discrepancy is abs(v − y) / max(1, abs(y)). The reference y_l is "
        f"`weighted_softmax_td` on the same context with score <x, x'>; RBF is exp(−||x − x'||²/2). "
        f"E_l = log10 |v_l(S_n) − y_l|; exact zeros (always at layer 0, where v_0 = y_0 = 0) are floored at 1e-17.\n\n"
        f"![Fig. 7 reproduction](verify.png)\n\n"
        f"| kernel | max E_l, TSM | max E_l, dual | median E_L | max relative discrepancy (both forms) | "
        f"max abs y_l | Lemma 1 max abs / relative Z difference | unscaled features: max relative | "
        f"unscaled: max abs y_l |\n|---|---|---|---|---|---|---|---|---|\n"
        + "\n".join(table) + "\n\n"
        f"The whole current-value row also matches (eq. 37): max over kernels, trials, layers and columns j of "
        f"abs(Z_l[d+2, j] − y_l(S_j)) is {max(s['max_row_abs'] for s in results.values()):.1e} (absolute, at values "
        f"up to the max abs y_l above). Claims (rule in each): Theorem 1 to ≤ 1e-10 relative per kernel and "
        f"Lemma 1 to ≤ 1e-10 relative — see results.json.\n\n"
        f"Growth of the unnormalised kernels: relu, elu1 and rbf weights of a target can sum to more than 1, so "
        f"each TD step over-corrects and the iterates grow — to the max abs y_l of the table over 10 layers even "
        f"with the scaled features, and to ~1e9–1e14 with the unscaled Alg. 2 features. The absolute discrepancy "
        f"grows with them (max E_l ≈ log10(max abs y_l) − 15 ± 1), the relative one stays at rounding level: the "
        f"\"numerical precision\" of Fig. 7 is relative precision for these kernels; softmax (normalised) stays "
        f"O(1). Per-trial numbers: discrepancy.csv.\n")
    return {"kinds": list(cfg.kinds), "per_kernel": results}


# =============================================================================== ictd.depth-convergence (Theorem 2)


@dataclasses.dataclass(frozen=True)
class DepthConfig:
    """Theorem 2 on ``random_task`` tasks; the paper states no task sizes for it (chosen here, see summary)."""

    seed: int = 0
    context_lengths: tuple[int, ...] = (50, 100, 200, 500, 1000, 2000, 5000)
    num_layers: int = 60
    state_counts: tuple[int, ...] = (5, 6, 7, 8, 9, 10)  # m varies across tasks
    tasks_per_m: int = 50
    d: int = 10
    gamma: float = 0.9
    feature_scale: float = 3.0  # c: x(s) = c q_s, q orthonormal
    num_actions: int = 2
    max_resamples: int = 20
    slope_band: tuple[float, float] = (-0.65, -0.35)  # accepted log-log slope of the floor (theory: -1/2)

    def validate(self):
        for name, least in (("num_layers", 2), ("tasks_per_m", 1), ("num_actions", 1), ("max_resamples", 1)):
            check_int(name, getattr(self, name), least)
        ns = self.context_lengths
        if len(ns) < 2 or any(isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in ns) or \
                list(ns) != sorted(set(ns)):
            raise ValueError(f"context_lengths must be >= 2 increasing ints >= 2, got {ns}")
        if not self.state_counts or any(not isinstance(m, int) or m < 2 or m > self.d for m in self.state_counts):
            raise ValueError(f"state_counts must be ints in [2, d = {self.d}], got {self.state_counts}")
        if min(ns) < max(self.state_counts):
            raise ValueError(f"the shortest context ({min(ns)}) cannot visit all {max(self.state_counts)} states")
        st.check_gamma(self.gamma)
        if not self.feature_scale > 0:
            raise ValueError(f"feature_scale must be > 0, got {self.feature_scale}")
        lo, hi = self.slope_band
        if not lo < -0.5 < hi:
            raise ValueError(f"slope_band must contain -1/2, got {self.slope_band}")


def visits_every_state(states, m: int, n=None):
    """True iff {S_0, ..., S_{n-1}} is the whole state space (section 5); n defaults to len(states) - 1."""
    prev = states[:-1]
    seen = jnp.ones(prev.shape, bool) if n is None else jnp.arange(prev.shape[0]) < n
    return jnp.all(jnp.zeros(m, bool).at[prev].max(seen))


def task_depth_curves(task, states, n, num_layers: int):
    """Everything Theorem 2 asks for one task and the first n transitions of ``states`` (a covering context)."""
    m = task.features.shape[0]
    gamma, r, v_pi = task.mrp.gamma, task.mrp.r, task.v_star
    M_hat, P_hat = st.operator_from_counts(states, task.features, m, n=n)
    vs = st.iterate_operator(M_hat, P_hat, r, gamma, num_layers)
    v_inf = jnp.linalg.solve(M_hat - gamma * P_hat, M_hat @ r)  # fixed point of T_hat (eq. 25)
    T_hat = jnp.eye(m, dtype=r.dtype) - M_hat + gamma * P_hat
    M_pi = st.population_kernel(task.features, stationary_distribution(task.mrp))
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


def make_tasks(cfg: DepthConfig, key) -> dict:
    """``tasks_per_m`` tasks for every m in ``state_counts``: {m: batched Task}."""
    return {m: jax.vmap(lambda k, m=m: random_task(k, m, cfg.d, cfg.gamma, cfg.num_actions, cfg.feature_scale))(
        jax.random.split(jax.random.fold_in(key, m), cfg.tasks_per_m)) for m in cfg.state_counts}


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
    return float(np.polyfit(np.log(np.asarray(n, float)), np.log(np.asarray(y, float)), 1)[0])


def transformer_crosscheck(task, states, d: int, num_layers: int) -> dict:
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
    return {"transformer_vs_operator": float(jnp.abs(Zs[:, -1, :] - vs[:, states]).max()),
            "readout_vs_operator": float(jnp.abs(tf.readout(Zs) - vs[:, states[-1]]).max()),
            "eq49_vs_eq24": float(max(jnp.abs(M24 - M49).max(), jnp.abs(P24 - P49).max())),
            "max_abs_value": float(jnp.abs(vs).max()), "n": int(states.shape[0] - 1), "m": int(m)}


def run_depth(cfg: DepthConfig, run) -> dict:
    L = cfg.num_layers
    layers = np.arange(L + 1)
    n_max = max(cfg.context_lengths)  # every context is the first n transitions of a draw of this length
    with jax.enable_x64(True):
        made = {}  # tasks are drawn (and compiled, ~seconds per m) only when a cell needs them

        def tasks_of(m):
            if not made:
                made.update(make_tasks(cfg, jax.random.fold_in(run.key, 0)))
            return made[m]

        def task_summary():
            margins = [np.asarray(jax.vmap(task_margin)(tasks_of(m))) for m in cfg.state_counts]
            return {"margin": np.concatenate(margins),
                    "err0": np.concatenate([np.abs(np.asarray(tasks_of(m).v_star)).max(axis=1)
                                            for m in cfg.state_counts])}

        summary = run.cell("tasks", task_summary)
        margin, err0 = np.asarray(summary["margin"]), np.asarray(summary["err0"])
        m_of = np.repeat(cfg.state_counts, cfg.tasks_per_m)
        bound_curve = (1.0 - margin)[:, None] ** layers * err0[:, None]  # (1 - C)^L ||v_0 - v_pi||, v_0 = 0
        cells = {}
        with run.progress(len(cfg.context_lengths) + 1, "Theorem 2: operator iteration per context length") as adv:
            def crosscheck():
                m, n = cfg.state_counts[0], cfg.context_lengths[0]
                states, covered, _ = covering_trajectories(tasks_of(m), jax.random.fold_in(run.key, 1), n,
                                                           cfg.max_resamples, length=n_max)
                i = int(np.argmax(np.asarray(covered)))  # the first task with a covering context
                if not bool(covered[i]):
                    raise RuntimeError("no cross-check trajectory visits every state; raise max_resamples")
                return transformer_crosscheck(jax.tree.map(lambda a: a[i], tasks_of(m)), states[i, :n + 1], cfg.d, L)

            check = run.cell("crosscheck", crosscheck)
            adv()
            for n in cfg.context_lengths:
                def compute(n=n):
                    parts = []
                    for m in cfg.state_counts:
                        key = jax.random.fold_in(jax.random.fold_in(run.key, 2 + n), m)
                        states, covered, draws = covering_trajectories(tasks_of(m), key, n, cfg.max_resamples,
                                                                       length=n_max)
                        out = depth_curves(tasks_of(m), states, n, L)
                        parts.append({"covered": covered, "draws": draws, **out})
                    cat = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
                    cat["rate"] = fitted_rate(cat.pop("dist"))
                    ok = cat["covered"]
                    cat["rho_bounded"] = cat["rho_hat"] <= 1.0 - margin  # the event of Lemma 5
                    # eq. (70) with the measured bias T2: err_L <= (1-C)^L err_0 + T2 / C on the Lemma 5 event
                    excess = cat["err"] - bound_curve - (cat["T2"] / margin)[:, None]
                    cat["bound70_excess"] = excess.max(axis=1)
                    cat["err_q"] = np.quantile(cat.pop("err")[ok], [0.25, 0.5, 0.75], axis=0)
                    return cat

                cells[n] = {k: np.asarray(v) for k, v in run.cell(f"n={n}", compute).items()}
                adv()

    ns = np.array(cfg.context_lengths)
    ok = {n: cells[n]["covered"].astype(bool) for n in ns}

    def q(key, p=0.5):  # quantile over the covered tasks, per n
        return np.array([np.quantile(cells[n][key][ok[n]], p) for n in ns])

    med = q
    floor_med, T2_med, Mdev_med = med("floor"), med("T2"), med("M_dev")
    floor_slope, T2_slope, Mdev_slope = (loglog_slope(ns, y) for y in (floor_med, T2_med, Mdev_med))
    frac_lemma5 = np.array([cells[n]["rho_bounded"][ok[n]].mean() for n in ns])
    rate_gap = np.array([np.nanmax(cells[n]["rate"][ok[n]] - (1 - margin[ok[n]])) for n in ns])
    rate_nan = sum(int(np.isnan(cells[n]["rate"][ok[n]]).sum()) for n in ns)
    excess70 = np.array([np.max(cells[n]["bound70_excess"][ok[n] & cells[n]["rho_bounded"]], initial=-np.inf)
                         for n in ns])
    tail_gap = np.max(np.abs(np.array([cells[n]["err_q"][1, -1] for n in ns]) / floor_med - 1.0))
    bound_ratio = np.array([np.median(cells[n]["T2"][ok[n]] / margin[ok[n]] / cells[n]["floor"][ok[n]]) for n in ns])
    dropped = {int(n): int((~ok[n]).sum()) for n in ns}
    draws_max = {int(n): int(cells[n]["draws"].max()) for n in ns}

    run.save_csv("per_task.csv", ["n", "task", "m", "margin_C", "covered", "draws", "rho_hat", "one_minus_C",
                                  "C_hat", "spectral_radius", "fitted_rate", "floor", "T2", "M_dev"],
                 [(n, i, m_of[i], margin[i], bool(c["covered"][i]), c["draws"][i], c["rho_hat"][i], 1 - margin[i],
                   c["C_hat"][i], c["spectral_radius"][i], c["rate"][i], c["floor"][i], c["T2"][i], c["M_dev"][i])
                  for n in ns for c in [cells[n]] for i in range(len(margin))])
    run.save_csv("error_vs_depth.csv", ["n", "layer", "err_q25", "err_median", "err_q75", "bound_median"],
                 [(n, k, *cells[n]["err_q"][:, k], np.median(bound_curve[:, k])) for n in ns for k in layers])

    fig, axes = plots.figure(1, 3, width=13.5, height=4.0)
    ax = axes[0]
    colors = [f"C{i % 10}" for i in range(len(ns))]
    for n, c in zip(ns, colors):
        eq = cells[n]["err_q"]
        ax.plot(layers, eq[1], color=c, label=f"n = {n}")
        ax.fill_between(layers, eq[0], eq[2], color=c, alpha=0.15, lw=0)
    ax.plot(layers, np.median(bound_curve, axis=0), "k--", label="(1−C)^L ||v_0 − v_π|| (median)")
    ax.plot(layers, np.median(err0) * cfg.gamma ** layers, "k:", lw=1, label="γ^L ||v_0 − v_π|| (median)")
    ax.set(yscale="log", xlabel="depth L", ylabel="||v_L − v_π||∞",
           title="(a) error vs depth (median, IQR over tasks)")
    ax.legend(fontsize=7, ncol=2)
    ax = axes[1]
    ax.plot(ns, floor_med, "o-", color="C0", label="floor ||v_∞ − v_π||∞ (median)")
    ax.fill_between(ns, q("floor", 0.25), q("floor", 0.75), color="C0", alpha=0.15, lw=0)
    ax.plot(ns, T2_med, "s-", color="C1", label="bias T2 = ||T̂(v_π) − v_π||∞ (median)")
    ax.plot(ns, Mdev_med, "^-", color="C2", label="||M̂ − M_π||∞ (median, Lemma 4)")
    ax.plot(ns, floor_med[0] * (ns / ns[0]) ** -0.5, "k--", lw=1, label="slope −1/2 reference")
    ax.set(xscale="log", yscale="log", xlabel="context length n", ylabel="value",
           title=f"(b) floor vs n (fitted slope {floor_slope:.2f})")
    ax.legend(fontsize=7)
    ax = axes[2]
    ax.plot(ns, med("rho_hat"), "o-", color="C0", label="ρ̂ = ||I − M̂ + γP̂||∞ (median)")
    ax.plot(ns, np.array([cells[n]["rho_hat"][ok[n]].max() for n in ns]), "o--", color="C0", lw=1,
            label="ρ̂ (max over tasks)")
    ax.plot(ns, med("rate"), "s-", color="C3", label="fitted decay rate (median)")
    ax.axhline(np.median(1 - margin), color="k", ls="--", lw=1, label="1 − C (median)")
    ax.axhline(cfg.gamma, color="k", ls=":", lw=1, label="γ")
    ax.set(xscale="log", xlabel="context length n", ylabel="factor per layer",
           title="(c) contraction factor (eq. 57) and decay rate")
    ax.legend(fontsize=7)
    run.save_figure(fig, "depth_convergence.png")

    # ---------------------------------------------------------------- claims (each with its rule)
    run.claim("assumption-5.1", "the population diagonal margin C = min_s M_pi(s,s) - (1+gamma)/2 (eq. 28) is > 0 "
              "for every task used: rule min C > 0", "Assumption 5.1",
              f"C in [{margin.min():.4f}, {margin.max():.4f}], median {np.median(margin):.4f} "
              f"(at most (1-γ)/2 = {(1 - cfg.gamma) / 2:.3f})", bool(margin.min() > 0))
    run.claim("geometric-rate", "||v_L - v_inf|| (the transient part of the error) decays geometrically at a rate "
              "<= 1 - C of the task's own margin: rule fitted rate <= 1 - C for every covered task at every n",
              "Theorem 2, eq. (29) first term",
              f"max over tasks and n of (rate - (1 - C)) = {np.nanmax(rate_gap):+.4f}; median rate "
              f"{np.nanmedian(med('rate')):.4f} vs median 1 - C = {np.median(1 - margin):.4f}; {rate_nan} unfitted",
              bool(np.all(rate_gap <= 1e-9) and rate_nan == 0))
    run.claim("bound-70", "on the Lemma 5 event (rho_hat <= 1 - C), ||v_L - v_pi|| <= (1-C)^L ||v_0 - v_pi|| + T2/C "
              "for every L <= L_max, T2 the measured bias of eq. (67): rule max excess <= 1e-12",
              "Theorem 2 proof, eq. (67)-(70)",
              f"max excess {excess70.max():.2e} (negative: bound holds)", bool(excess70.max() <= 1e-12))
    run.claim("floor-slope", f"the floor ||v_inf - v_pi|| (large-L error) decreases with n: rule the median over tasks "
              f"decreases at every step of n and its log-log slope lies in [{cfg.slope_band[0]}, {cfg.slope_band[1]}]",
              "Theorem 2, eq. (29) second term O(sqrt(log(1/δ)/n))",
              f"median floor {floor_med[0]:.3g} (n={ns[0]}) → {floor_med[-1]:.3g} (n={ns[-1]}), "
              f"slope {floor_slope:.3f}",
              bool(np.all(np.diff(floor_med) < 0) and cfg.slope_band[0] <= floor_slope <= cfg.slope_band[1]))
    run.claim("lemma-5", "the empirical operator contracts with factor ||I - M_hat + gamma P_hat||_inf <= 1 - C once n "
              "is large: rule every covered task at the largest n, and the fraction does not fall from the smallest "
              "to the largest n", "Lemma 5, eq. (57)",
              "fraction with ρ̂ ≤ 1 − C: " + ", ".join(f"n={n}: {f:.3f}" for n, f in zip(ns, frac_lemma5)),
              bool(frac_lemma5[-1] == 1.0 and frac_lemma5[-1] >= frac_lemma5[0]))
    run.claim("lemma-4", f"||M_hat - M_pi||_inf = O(sqrt(log(1/δ)/n)): rule log-log slope of its median in "
              f"[{cfg.slope_band[0]}, {cfg.slope_band[1]}]", "Lemma 4, eq. (45)",
              f"median {Mdev_med[0]:.2e} → {Mdev_med[-1]:.2e}, slope {Mdev_slope:.3f}",
              bool(cfg.slope_band[0] <= Mdev_slope <= cfg.slope_band[1]))
    worst = max(check["transformer_vs_operator"], check["eq49_vs_eq24"])
    run.claim("operator-form", "the theta* transformer's values equal the operator iteration v_{l+1} = T_hat(v_l) at "
              "every state of a covering context (eq. 24-26) and eq. (49) equals eq. (24): rule max |difference| <= "
              "1e-10", "Theorem 1 + section 5, eq. (24)-(26), (49)",
              f"m = {check['m']}, n = {check['n']}, L = {L}: transformer vs operator "
              f"{check['transformer_vs_operator']:.1e}, eq. (49) vs (24) {check['eq49_vs_eq24']:.1e}",
              bool(worst <= TOL))

    rows = "\n".join(
        f"| {n} | {dropped[int(n)]} | {draws_max[int(n)]} | {floor_med[i]:.4f} | {T2_med[i]:.4f} | {Mdev_med[i]:.2e} | "
        f"{np.median(cells[n]['rho_hat'][ok[n]]):.4f} / {cells[n]['rho_hat'][ok[n]].max():.4f} | "
        f"{frac_lemma5[i]:.3f} | "
        f"{np.nanmedian(cells[n]['rate'][ok[n]]):.4f} | {np.median(cells[n]['err_q'][1, -1]):.4f} |"
        for i, n in enumerate(ns))
    run.write_summary(
        f"# ictd.depth-convergence — Theorem 2 (section 5)\n\n"
        f"**Paper.** Under Assumption 5.1, with probability ≥ 1 − δ, for all L: ‖v_L − v_π‖∞ ≤ (1 − C)^L ‖v_0 − v_π‖∞ "
        f"+ C₂ sqrt(log(C₃/δ)/n) (eq. 29): geometric decay in depth at rate 1 − C plus a statistical floor that "
        f"vanishes as n → ∞. Lemma 4: ‖M̂ − M_π‖∞ = O(sqrt(log(1/δ)/n)); Lemma 5: ‖I − M̂ + γP̂‖∞ ≤ 1 − C for "
        f"large n. The paper gives no figure or task sizes for Theorem 2.\n\n"
        f"**Tasks (our choice).** `random_task`: random MDP (Dirichlet(1) transitions, U(−1, 1) rewards, "
        f"{cfg.num_actions} actions) and Dirichlet policy; m ∈ {list(cfg.state_counts)} states, "
        f"{cfg.tasks_per_m} tasks per m ({len(margin)} tasks, the same tasks at every n); d = {cfg.d}; "
        f"features x(s) = c q_s with q orthonormal, "
        f"c = {cfg.feature_scale}; γ = {cfg.gamma} (the paper's default discount); v_0 = 0; depth L = 0..{L}; "
        f"n ∈ {list(cfg.context_lengths)}. Each context is one on-policy trajectory with S_0 ~ p0, conditioned on "
        f"visiting every state among S_0..S_{{n−1}} by resampling (up to {cfg.max_resamples} draws; tasks still "
        f"uncovered are dropped at that n: {dropped}). v_L is the operator iteration (eq. 24–26), which equals the "
        f"transformer's output (checked: max |Z_l[d+2, j] − v_l(S_j)| = {check['transformer_vs_operator']:.1e} on "
        f"m = {check['m']}, n = {check['n']}, {L} layers). M̂, P̂ via the state counts (eq. 49), equal to eq. (24) "
        f"to {check['eq49_vs_eq24']:.1e}. Float64.\n\n"
        f"Why γ = {cfg.gamma} and c = {cfg.feature_scale}: Assumption 5.1 needs M_π(s,s) ≥ (1 + γ)/2 + C, so at "
        f"γ = {cfg.gamma} more than {(1 + cfg.gamma) / 2:.0%} of every state's kernel mass must sit on itself; with "
        f"orthonormal features M_π(s,s) = μ(s)e^(c²)/(μ(s)e^(c²) + 1 − μ(s)), and c = {cfg.feature_scale} gives "
        f"{np.mean(margin > 0):.0%} of the tasks a positive margin (median "
        f"{np.median(margin):.4f}, the maximum possible being (1 − γ)/2 = {(1 - cfg.gamma) / 2:.3f}). The kernel is "
        f"therefore nearly diagonal: softmax ICTD here is close to tabular TD on the empirical model.\n\n"
        f"![error vs depth, floor vs n, contraction](depth_convergence.png)\n\n"
        f"| n | tasks dropped | max draws | median floor ‖v_∞ − v_π‖ | median T2 | median ‖M̂ − M_π‖∞ | "
        f"ρ̂ median / max | frac ρ̂ ≤ 1 − C | median fitted rate | median ‖v_{L} − v_π‖ |\n"
        f"|---|---|---|---|---|---|---|---|---|---|\n{rows}\n\n"
        f"**Beside the paper.** Geometric decay: the fitted rate of ‖v_L − v_∞‖ (least squares on its log over "
        f"L = {L // 2}..{L}) is {np.nanmedian(med('rate')):.4f} in median, below the theorem's 1 − C (median "
        f"{np.median(1 - margin):.4f}) for every task; it equals γ because M̂ and P̂ are row-stochastic, so "
        f"(I − M̂ + γP̂)1 = γ1 and γ is always an eigenvalue (spectral radius median "
        f"{np.median(np.concatenate([cells[n]['spectral_radius'][ok[n]] for n in ns])):.4f}); the bound (1 − C)^L is "
        f"valid but loose (panel a, dashed). Floor: the median of ‖v_∞ − v_π‖ falls from {floor_med[0]:.3g} to "
        f"{floor_med[-1]:.3g}, log-log slope {floor_slope:.3f} (theory −1/2 up to the log factor; bias T2 slope "
        f"{T2_slope:.3f}, Lemma 4 ‖M̂ − M_π‖ slope {Mdev_slope:.3f}). Lemma 5: the fraction of tasks with "
        f"ρ̂ ≤ 1 − C is {frac_lemma5[0]:.3f} at n = {ns[0]} and {frac_lemma5[-1]:.3f} at n = {ns[-1]}. "
        f"Eq. (70) with the "
        f"measured bias (T2/C floor) holds on that event (max excess {excess70.max():.1e}); that floor T2/C is "
        f"{bound_ratio[0]:.1f}× (n = {ns[0]}) to {bound_ratio[-1]:.1f}× (n = {ns[-1]}) the actual floor (medians). "
        f"At L = {L} the median error is within {tail_gap:.1%} of the median floor at every n (last column vs "
        f"floor column). Claims and their rules: results.json. Per-task "
        f"numbers: per_task.csv; curves: error_vs_depth.csv.\n")
    return {"context_lengths": ns, "num_tasks": len(margin),
            "margin": {"min": margin.min(), "median": np.median(margin)},
            "floor_median": floor_med, "floor_slope": floor_slope, "T2_median": T2_med, "T2_slope": T2_slope,
            "M_dev_median": Mdev_med, "M_dev_slope": Mdev_slope, "frac_lemma5": frac_lemma5,
            "rate_median": med("rate"), "rate_minus_bound_max": rate_gap, "bound70_max_excess": excess70,
            "floor_bound_ratio_median": bound_ratio,
            "dropped": dropped, "crosscheck": check}


# =============================================================================== registry

EXPERIMENTS = [
    Experiment(
        "ictd.verify", "Fig. 7, App. F.6, Theorem 1, Lemma 1", PAPER,
        "theta* transformer (dual-head and single-head + TSM) vs weighted softmax TD, 4 kernels, float64",
        {"paper": VerifyConfig(), "quick": VerifyConfig(),
         "tiny": VerifyConfig(d=4, n=8, num_layers=4, num_trials=4, num_states=5, feature_scale=0.5)},
        run_verify),
    Experiment(
        "ictd.depth-convergence", "Theorem 2 (eq. 29), Lemmas 4-5", PAPER,
        "||v_L - v_pi|| vs depth L and context length n on random tasks satisfying Assumption 5.1 (float64)",
        {"paper": DepthConfig(),
         "quick": DepthConfig(context_lengths=(50, 200, 1000, 4000), tasks_per_m=20),
         "tiny": DepthConfig(context_lengths=(30, 120), num_layers=20, state_counts=(5,), tasks_per_m=8, d=5,
                             max_resamples=30)},
        run_depth),
]

"""``belief.ringworld-env`` (Figs. 2 and 8, section 6.2, App. E.2.1): the RingWorld POMDP itself.

The ring with its beacons, goals and traps (Fig. 2), the observation model eq. (195) (Fig. 8, and E as a heat map),
and the two reference returns every PPO figure is read against: the fully informed optimum (finite-horizon DP with
the true state known; the ceiling line) and the uniformly random policy (the floor). Both are checked against
Monte-Carlo rollouts of the environment. A third panel measures how much the beacons reveal: the MAP decoding
accuracy of the LOF (eq. 7, Bayes-optimal) and of the ALF (eq. 46, delta = 0.1) against k under random actions.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from memlab import plots
from memlab.belief import lof
from memlab.belief import ringworld as rw
from memlab.belief.alf import ALF, alf_filter
from memlab.belief.filters import bayes_decode
from memlab.belief.hmm import sample
from memlab.belief.memories import ALF_DELTA
from memlab.belief.structure import check_observability_controlled
from memlab.checks import check_int, check_real
from memlab.files import summary_text
from memlab.runner import Experiment
from memlab.store import cell

PAPER = "linear-recurrent-memory-pomdp"


@dataclasses.dataclass(frozen=True)
class RingWorldEnvConfig:
    seed: int = 0
    epsilon: float = 0.05
    episode_length: int = 100  # K
    num_episodes: int = 4000  # Monte-Carlo episodes per policy and for the decoding accuracy

    def validate(self):
        check_real("epsilon", self.epsilon, 0.0, 0.5)
        check_int("episode_length", self.episode_length)
        check_int("num_episodes", self.num_episodes, low=2)


SUMMARY = summary_text(__package__, "ringworld_env")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReferenceRuns:
    """``returns``: policy ("optimal", "random", "qmdp") -> (episodes,) Monte-Carlo episode returns; ``accuracy``:
    filter ("LOF", "ALF") -> (K,) Bayes-decoding accuracy per step k under uniformly random actions."""

    returns: dict[str, list[float]]
    accuracy: dict[str, list[float]]


@cell("belief.ringworld-references", result=ReferenceRuns)
def _reference_cell(epsilon: float, episode_length: int, num_episodes: int, key) -> ReferenceRuns:
    """Monte-Carlo returns of the DP-optimal, the QMDP and the random policy, and LOF/ALF decoding accuracy per k."""
    env = rw.RingWorld(epsilon, episode_length)
    params = env.default_params
    table = jnp.asarray(rw.optimal_policy(env, params)[1])
    policies = {"optimal": lambda k, s: table[s.k, s.x], "random": rw.random_policy}
    key_mc, key_qmdp, key_decode = jax.random.split(key, 3)
    keys = jax.random.split(key_mc, num_episodes)
    returns = {name: np.asarray(jax.jit(jax.vmap(
        lambda k, p=policy: rw.rollout(env, params, k, episode_length, p)["info_episode_return"][-1]))(keys))
        for name, policy in policies.items()}
    returns["qmdp"] = np.asarray(rw.qmdp_returns(env, params, key_qmdp, num_episodes))
    traj = sample(params.hmm, key_decode, episode_length, batch=num_episodes,
                  policy=_uniform_action)
    alf = ALF.time_varying(np.asarray(params.P), params.E, ALF_DELTA)
    logits = {"LOF": jax.vmap(lambda y, a: lof(params.hmm, y, actions=a).logits)(traj.observations, traj.actions),
              "ALF": jax.vmap(lambda y, a: alf_filter(alf, y, a).logits)(traj.observations, traj.actions)}
    truth = traj.states[:, 1:]
    accuracy = {name: np.asarray(jnp.mean(bayes_decode(w) == truth, axis=0)) for name, w in logits.items()}
    return ReferenceRuns(returns=returns, accuracy=accuracy)


def _uniform_action(key, y, k):
    """``rw.random_policy`` in the policy signature of ``hmm.sample`` (it reads neither y nor k)."""
    return rw.random_policy(key, None)


def run_ringworld_env(cfg: RingWorldEnvConfig, run) -> dict:
    cells = run.sweep({"references": partial(_reference_cell, cfg.epsilon, cfg.episode_length, cfg.num_episodes,
                                               run.key_for("references"))}, "references")
    stats = analyse(cfg, cells["references"])
    _figures(cfg, stats, run)
    _claims(cfg, stats, run)
    run.write_summary(_summary(cfg, stats, run))
    return {"optimal_return": stats.optimal_return, "random_return": stats.random_return, "mc": stats.mc,
            "final_accuracy": stats.final_accuracy}


class SimulatedReturn(NamedTuple):
    """A policy's episode returns over the Monte-Carlo episodes (a tuple: results.json holds it as a list
    [mean, stderr, low, high])."""

    mean: float
    stderr: float  # of the mean
    low: float  # the smallest episode return
    high: float  # the largest


@dataclasses.dataclass(frozen=True)
class EnvStats:
    """RingWorld's references and what its beacons reveal (K = ``cfg.episode_length``).

    **Fields:**
    - ``optimal_return``: float, the fully informed optimum's expected return (finite-horizon DP): the ceiling.
    - ``random_return``: float, uniformly random actions' expected return (DP): the floor.
    - ``mc``: dict, policy ("optimal", "random", "qmdp") -> :class:`SimulatedReturn`.
    - ``E``: (4, 12) the observation model eq. (195), P(beacon | state).
    - ``accuracy``: dict, filter ("LOF", "ALF") -> (K,) the MAP decoding accuracy at k = 1..K.
    - ``final_accuracy``: dict, filter -> its accuracy averaged over the second half of the episode.
    - ``assumption_5_8``: bool, whether E satisfies Assumption 5.8.
    """

    optimal_return: float
    random_return: float
    mc: dict[str, SimulatedReturn]
    E: np.ndarray
    accuracy: dict[str, np.ndarray]
    final_accuracy: dict[str, float]
    assumption_5_8: bool


def analyse(cfg: RingWorldEnvConfig, cell: ReferenceRuns) -> EnvStats:
    """Exact references (DP) beside their Monte-Carlo estimates, the observation model, and the decoding accuracy
    curves."""
    env = rw.RingWorld(cfg.epsilon, cfg.episode_length)
    params = env.default_params
    mc = {name: SimulatedReturn(float(np.mean(r)), float(np.std(r, ddof=1) / np.sqrt(len(r))), float(np.min(r)),
                                float(np.max(r)))
          for name, r in cell.returns.items()}
    accuracy = {name: np.asarray(a) for name, a in cell.accuracy.items()}
    E = np.asarray(params.E)
    return EnvStats(optimal_return=rw.optimal_return(env, params), random_return=rw.random_return(env, params),
                       mc=mc, E=E, accuracy=accuracy,
                       final_accuracy={n: float(np.mean(a[len(a) // 2:])) for n, a in accuracy.items()},
                       assumption_5_8=bool(check_observability_controlled(E, np.zeros(E.shape[1])).holds))


def _figures(cfg: RingWorldEnvConfig, stats: EnvStats, run) -> None:
    run.save_figure(_ring_figure(), "ring.png")
    fig, (ax, ax_heat) = plots.figure(1, 2, width=8.5, height=3.2)
    states = np.arange(1, rw.NUM_STATES + 1)
    for i, row in enumerate(stats.E):
        ax.plot(states, row, marker="o", label=f"$B_{i + 1}$ (state {rw.BEACON_STATES[i] + 1})")
    ax.set(xlabel="true state $x^*$", ylabel="$P(y = u_i \\mid x^*)$", xticks=states, title="eq. (195)")
    ax.legend(fontsize=7)
    image = ax_heat.imshow(stats.E, aspect="auto", cmap="viridis")
    ax_heat.set(xticks=states - 1, xticklabels=states, yticks=range(4), yticklabels=[f"$B_{i}$" for i in range(1, 5)],
                xlabel="true state", title="E")
    ax_heat.grid(False)
    fig.colorbar(image, ax=ax_heat)
    run.save_figure(fig, "observation_model.png")
    fig, ax = plots.figure(width=5.5, height=3.2)
    for name, acc in stats.accuracy.items():
        ax.plot(np.arange(1, len(acc) + 1), acc, label=name)
    ax.axhline(1 / rw.NUM_STATES, color="0.5", ls=":", label="chance")
    ax.set(xlabel="k", ylabel="P(MAP state = true state)", ylim=(0, 1), title="Decoding under random actions")
    ax.legend()
    run.save_figure(fig, "decoding.png")


def _ring_figure():
    """Fig. 2: states on a ring (goals green, traps red), beacons outside, clockwise = increasing index."""
    fig, ax = plots.figure(width=4.2, height=4.2)
    theta = 2 * np.pi * np.arange(rw.NUM_STATES) / rw.NUM_STATES
    x, y = np.sin(theta), np.cos(theta)  # state 1 at the top, clockwise
    colour = ["tab:green" if s in rw.GOAL_STATES else "tab:red" if s in rw.TRAP_STATES else "0.85"
              for s in range(rw.NUM_STATES)]
    ax.scatter(x, y, s=520, c=colour, edgecolors="k", zorder=2)
    for s in range(rw.NUM_STATES):
        ax.text(x[s], y[s], str(s + 1), ha="center", va="center", zorder=3)
    for i, s in enumerate(rw.BEACON_STATES):
        ax.text(1.35 * x[s], 1.35 * y[s], f"$B_{i + 1}$", ha="center", va="center", fontsize=11, color="tab:blue")
    ax.annotate("", xy=(0.55, 0.35), xytext=(0.2, 0.6),
                arrowprops=dict(arrowstyle="->", connectionstyle="arc3,rad=-0.3"))
    ax.text(0.0, 0.0, "CW →\ngoal (green)\ntrap (red)", ha="center", va="center", fontsize=8)
    ax.set(xlim=(-1.6, 1.6), ylim=(-1.6, 1.6), aspect="equal", title="RingWorld")
    ax.axis("off")
    return fig


def _claims(cfg: RingWorldEnvConfig, stats: EnvStats, run) -> None:
    E, mc = stats.E, stats.mc
    state3 = E[:, 2]
    run.claim("state-3-beacons-3-4-unlikely", "At state 3 the beacons B3 and B4 are unlikely observations",
              "App. B.2, Fig. 6", f"P(B1..B4 | x = 3) = {', '.join(f'{p:.3f}' for p in state3)}",
              bool(set(np.argsort(state3)[:2]) == {2, 3}))
    run.claim("assumption-5-8", "E is strictly positive with pairwise distinct columns (Assumption 5.8)", "sec. 5.2",
              f"min E = {E.min():.3f}", stats.assumption_5_8)
    for name, exact in (("optimal", stats.optimal_return), ("random", stats.random_return)):
        mean, se, low, high = mc[name]
        run.claim(f"{name}-return-matches-simulation", f"the {name} policy's return from DP equals the simulated one "
                  "(within 4 standard errors), all episode returns in [-1, 1]", "eq. (196)",
                  f"DP {exact:.4f}, simulated {mean:.4f} ± {se:.4f}, range [{low:.2f}, {high:.2f}]",
                  bool(abs(mean - exact) <= 4 * se + 1e-6 and -1 <= low and high <= 1))


def _summary(cfg: RingWorldEnvConfig, stats: EnvStats, run) -> str:
    header = ["policy", "expected return (DP)", "simulated mean", "standard error"]
    rows = [(label, exact, stats.mc[name].mean, stats.mc[name].stderr) for label, exact, name in (
        ("fully informed optimal (ceiling)", stats.optimal_return, "optimal"),
        ("QMDP on the exact belief (a POMDP policy)", "—", "qmdp"),
        ("uniformly random (floor)", stats.random_return, "random"))]
    returns = run.save_table("reference_returns.csv", header, rows, dict.fromkeys(header[1:], ".4f"))
    column = "accuracy over the second half of the episode"
    decoding = run.save_table("decoding_accuracy.csv", ["filter", column], list(stats.final_accuracy.items()),
                              {column: ".3f"})
    return SUMMARY.format(**dataclasses.asdict(cfg), returns=returns, decoding=decoding)


EXPERIMENTS = [
    Experiment(
        "belief.ringworld-env", "Figs. 2, 8", PAPER, "RingWorld: ring, observation model, ceiling and floor returns",
        {"paper": RingWorldEnvConfig(num_episodes=20000), "quick": RingWorldEnvConfig(),
         "tiny": RingWorldEnvConfig(num_episodes=50, episode_length=20)},
        run_ringworld_env),
]

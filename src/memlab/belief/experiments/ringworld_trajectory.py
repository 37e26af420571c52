"""``belief.ringworld-trajectory`` (Fig. 6, App. B.2): a trained ALF actor's trajectory on RingWorld.

A PPO agent with the ALF memory (eq. 46, delta = 0.1) is trained (one cell, as in ``belief.ringworld-returns``) and
then plays ``num_episodes`` episodes. The first episode is plotted: the true state, the states decoded (argmax)
from the ALF logits and from the LOF logits (eq. 7) on the same observations and actions, the actions and the
observations, with irregular transitions (off the permutation backbone), off-peak observations (not the most likely
beacon of the true state) and decoding errors marked. The paper reads two things off its one trajectory; we measure
them over all episodes: the ALF errs more than the LOF, above all after off-peak observations, and the policy takes
CW1 in state 2 and CCW1 in state 3 most of the time.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import numpy as np

from memlab import plots
from memlab.belief import ringworld as rw
from memlab.belief.experiments.ringworld_ppo_sweep import QUICK_PPO, TINY_PPO
from memlab.belief.memories import LogitFilterMemory
from memlab.belief.runs import load_agent, play, train_agent
from memlab.checks import check_int
from memlab.compile_cache import LEVEL_ONLY
from memlab.files import summary_text
from memlab.rl import PPOConfig
from memlab.runner import Experiment
from memlab.store import CHECKPOINT, cell

PAPER = "linear-recurrent-memory-pomdp"
CW1, CCW1 = rw.ACTION_NAMES.index("CW1"), rw.ACTION_NAMES.index("CCW1")


@dataclasses.dataclass(frozen=True)
class TrajectoryConfig:
    seed: int = 0
    ppo: PPOConfig = PPOConfig()  # Table 1
    episode_length: int = 100
    num_episodes: int = 1000  # episodes behind the statistics (the first is plotted)
    chunk_updates: int = 10

    def validate(self):
        self.ppo.validate()
        check_int("episode_length", self.episode_length, low=2)
        check_int("num_episodes", self.num_episodes)
        check_int("chunk_updates", self.chunk_updates)


SUMMARY = summary_text(__package__, "ringworld_trajectory")



@dataclasses.dataclass(frozen=True, kw_only=True)
class PlayedEpisodes:
    """Episodes of the trained ALF agent, (episodes, K) each: the ring position ``state``, the ``action``, the
    ``next_state``, the observation ``obs`` (its index), the ``reward``, and the position the ALF agent's memory
    (``alf_decoded``) and the LOF on the same observations (``lof_decoded``) decode."""

    state: list[list[int]]
    action: list[list[int]]
    next_state: list[list[int]]
    obs: list[list[int]]
    reward: list[list[float]]
    alf_decoded: list[list[int]]
    lof_decoded: list[list[int]]


@cell("belief.trajectory-play", result=PlayedEpisodes)
def _play_cell(ppo: PPOConfig, episode_length: int, num_episodes: int, agent_bytes: bytes, key) -> PlayedEpisodes:
    """``num_episodes`` episodes of the trained ALF agent with the LOF's logits on the same stream beside its own."""
    env = rw.RingWorld(episode_length=episode_length)
    params = env.default_params
    agent = load_agent(ppo, "alf", agent_bytes, episode_length=episode_length)
    out = play(agent, env, params, key, num_episodes)
    lof = LogitFilterMemory.lof(params.hmm)
    _, lof_w = jax.vmap(lambda o, a, s: lof.sequence(lof.init_state(), o, a, s))(
        out["obs"], out["prev_action"], out["start"])
    return PlayedEpisodes(state=np.asarray(out["state"]), action=np.asarray(out["action"]),
                          next_state=np.asarray(out["next_state"]), obs=np.asarray(out["obs"]).argmax(-1),
                          reward=np.asarray(out["reward"]), alf_decoded=np.asarray(out["features"]).argmax(-1),
                          lof_decoded=np.asarray(lof_w).argmax(-1))


def run_ringworld_trajectory(cfg: TrajectoryConfig, run) -> dict:
    # the agent is belief.ringworld-returns' cell 'alf-0' (same key stream, same arguments): computed once
    train = partial(train_agent, cfg.ppo, "alf", run.key_for("ppo", "alf", 0), CHECKPOINT, cfg.chunk_updates,
                    episode_length=cfg.episode_length)
    trained = run.sweep({"train": train},
                        "train the ALF agent")["train"]
    played = run.sweep({"play": partial(_play_cell, cfg.ppo, cfg.episode_length, cfg.num_episodes, trained.agent,
                                       run.key_for("play"))}, "play")["play"]
    stats = analyse(cfg, trained.metrics, played)
    _figure(stats, run)
    _claims(stats, run)
    run.write_summary(_summary(cfg, stats, run))
    return _results(stats)


@dataclasses.dataclass(frozen=True)
class TrajectoryStats:
    """The played episodes of the trained ALF agent and what they show. Arrays are (episodes, K) with
    episodes = ``cfg.num_episodes`` and K = ``cfg.episode_length``; states, actions and beacons are 0-based.

    **Fields:**
    - ``state``, ``next_state``: int arrays, the true state before and after the step's action.
    - ``action``: int array, the action taken; ``reward``: float array, the reward received.
    - ``obs``: int array, the beacon observed (at k = 0 the null observation, not a beacon).
    - ``decoded``: dict, filter ("alf", "lof") -> int array, the argmax state of its logits.
    - ``irregular_mask``: bool array, the transition off the permutation backbone.
    - ``off_peak_mask``: bool array, an observation (k >= 1) other than the most likely beacon of the true state.
    - ``error_masks``: dict, filter -> bool array, its decoding errors (k >= 1).
    - ``train_return``: float, the training return averaged over the last 10 updates.
    - ``return_mean``: float, the mean episode return of the played episodes.
    - ``irregular``: float, the fraction of steps with an irregular transition.
    - ``off_peak``: float, the fraction of observations (k >= 1) that are off-peak.
    - ``error``: dict, filter -> its decoding error rate over k >= 1.
    - ``error_after_off_peak``: dict, filter -> its decoding error rate at off-peak observations (0 if none).
    - ``policy``: dict, "state 2", "state 3" (the paper's 1-based states) -> action name -> frequency there.
    """

    state: np.ndarray
    next_state: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    obs: np.ndarray
    decoded: dict[str, np.ndarray]
    irregular_mask: np.ndarray
    off_peak_mask: np.ndarray
    error_masks: dict[str, np.ndarray]
    train_return: float
    return_mean: float
    irregular: float
    off_peak: float
    error: dict[str, float]
    error_after_off_peak: dict[str, float]
    policy: dict[str, dict[str, float]]


def analyse(cfg: TrajectoryConfig, metrics: dict[str, list[float]], played: PlayedEpisodes) -> TrajectoryStats:
    """The training metrics and the 'play' cell -> event masks and their rates: irregular transitions, off-peak
    observations, ALF/LOF decoding errors overall and at off-peak observations, the action frequencies in states
    2 and 3."""
    state, next_state, action, reward, obs = (np.asarray(x) for x in (played.state, played.next_state, played.action,
                                                                      played.reward, played.obs))
    decoded = {"alf": np.asarray(played.alf_decoded), "lof": np.asarray(played.lof_decoded)}
    shifts = np.asarray(rw.ACTION_SHIFTS)
    irregular = next_state != (state + shifts[action]) % rw.NUM_STATES
    seen = np.ones_like(state, bool)
    seen[:, 0] = False  # the null observation at k = 0
    off_peak = seen & (obs != rw.beacon_emissions().argmax(axis=0)[state])
    errors = {name: seen & (d != state) for name, d in decoded.items()}
    policy = {}
    for paper_state, x in ((2, 1), (3, 2)):
        acts = action[state == x]
        policy[f"state {paper_state}"] = {a: float(np.mean(acts == i)) if acts.size else 0.0
                                         for i, a in enumerate(rw.ACTION_NAMES)}
    return TrajectoryStats(
        state=state, next_state=next_state, action=action, reward=reward, obs=obs, decoded=decoded,
        irregular_mask=irregular, off_peak_mask=off_peak, error_masks=errors,
        train_return=float(np.mean(np.asarray(metrics["episode_return"])[-10:])),
        return_mean=float(reward.sum(axis=1).mean()), irregular=float(irregular.mean()),
        off_peak=float(off_peak[seen].mean()), error={n: float(m[seen].mean()) for n, m in errors.items()},
        error_after_off_peak={n: float(m[off_peak].mean()) if off_peak.any() else 0.0 for n, m in errors.items()},
        policy=policy)


def _results(stats: TrajectoryStats) -> dict:
    """results.json: the returns, the decoding errors and the policy (not the episodes: they are in the cell)."""
    return {"train_return": stats.train_return, "return_mean": stats.return_mean, "error": stats.error,
            "error_after_off_peak": stats.error_after_off_peak, "policy": stats.policy}


def _figure(stats: TrajectoryStats, run) -> None:
    """Fig. 6 for the first episode: states (true, ALF-, LOF-decoded) above, actions and observations below."""
    k = np.arange(stats.state.shape[1])
    fig, (ax, ax_act) = plots.figure(2, 1, width=10.0, height=6.0, sharex=True, height_ratios=[2.2, 1])
    state, action, obs = stats.state[0], stats.action[0], stats.obs[0]
    ax.step(k, state + 1, where="mid", color="k", lw=1.4, label="true state")
    ax.plot(k[1:], stats.decoded["alf"][0][1:] + 1, "o", ms=3.5, color="tab:blue", label="ALF decoded")
    ax.plot(k[1:], stats.decoded["lof"][0][1:] + 1, "x", ms=3.5, color="tab:orange", label="LOF decoded")
    irregular = np.flatnonzero(stats.irregular_mask[0]) + 1  # the transition into step k+1
    ax.vlines(irregular, 0.5, 12.5, color="tab:purple", lw=0.8, ls=":", label="irregular transition")
    for name, marker, colour in (("alf", "v", "tab:blue"), ("lof", "^", "tab:orange")):
        bad = np.flatnonzero(stats.error_masks[name][0])
        ax.plot(bad, np.full(bad.size, 12.9 if name == "alf" else 13.3), marker, color=colour, ms=4,
                label=f"{name.upper()} decoding error")
    ax.set(ylabel="state", yticks=range(1, 13), ylim=(0.3, 13.7), title="Trajectory of the trained ALF agent")
    ax.legend(fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.02), frameon=True)
    ax_act.plot(k, action, ".", color="k", label="action")
    obs_k = k[1:]
    off = stats.off_peak_mask[0][1:]
    ax_act.plot(obs_k[~off], obs[1:][~off] + 4.5, "s", ms=3, color="tab:green", label="observation")
    ax_act.plot(obs_k[off], obs[1:][off] + 4.5, "s", ms=4, color="tab:red", label="off-peak observation")
    ax_act.set(xlabel="k", yticks=list(range(4)) + [4.5 + i for i in range(4)],
               yticklabels=list(rw.ACTION_NAMES) + [f"$B_{i}$" for i in range(1, 5)])
    ax_act.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.3))
    run.save_figure(fig, "trajectory.png")


def _claims(stats: TrajectoryStats, run) -> None:
    err, after = stats.error, stats.error_after_off_peak
    run.claim("alf-more-sensitive-to-off-peak", "ALF is more sensitive to off-peak observations than LOF: more "
              "decoding errors right after them", "App. B.2, Fig. 6",
              f"error after an off-peak observation: ALF {after['alf']:.3f}, LOF {after['lof']:.3f} "
              f"(overall {err['alf']:.3f} / {err['lof']:.3f})", bool(after["alf"] > after["lof"]))
    cw1_in_2, ccw1_in_3 = stats.policy["state 2"]["CW1"], stats.policy["state 3"]["CCW1"]
    run.claim("policy-cw1-in-2-ccw1-in-3", "the learned policy takes CW1 in state 2 and CCW1 in state 3 most of "
              "the time", "App. B.2, Fig. 6", f"P(CW1 | 2) = {cw1_in_2:.2f}, P(CCW1 | 3) = {ccw1_in_3:.2f}",
              bool(cw1_in_2 > 0.5 and ccw1_in_3 > 0.5))


def _summary(cfg: TrajectoryConfig, stats: TrajectoryStats, run) -> str:
    header = ["filter", "decoding error", "error right after an off-peak observation"]
    rows = [(n.upper(), stats.error[n], stats.error_after_off_peak[n]) for n in ("alf", "lof")]
    table = run.save_table("decoding.csv", header, rows, dict.fromkeys(header[1:], ".3f"))
    header = ["true state", *rw.ACTION_NAMES]
    rows = [(s, *freq.values()) for s, freq in stats.policy.items()]
    table += "\nAction frequencies of the policy:\n\n" + run.save_table("policy.csv", header, rows,
                                                                     dict.fromkeys(rw.ACTION_NAMES, ".2f"))
    return SUMMARY.format(**dataclasses.asdict(cfg), updates=cfg.ppo.num_updates, num_envs=cfg.ppo.num_envs,
                          unroll=cfg.ppo.unroll, train_return=stats.train_return, return_mean=stats.return_mean,
                          table=table, irregular=stats.irregular, off_peak=stats.off_peak)


EXPERIMENTS = [
    Experiment("belief.ringworld-trajectory", "Fig. 6", PAPER,
               "a trained ALF agent's trajectory: true, ALF- and LOF-decoded states, actions, observations",
               {"paper": TrajectoryConfig(), "quick": TrajectoryConfig(ppo=QUICK_PPO),
                "tiny": TrajectoryConfig(ppo=TINY_PPO, episode_length=20, num_episodes=20, chunk_updates=2)},
               # its agent is belief.ringworld-returns' alf-0 cell: the same flags keep it one cell
               run_ringworld_trajectory, quick_flags=LEVEL_ONLY),
]

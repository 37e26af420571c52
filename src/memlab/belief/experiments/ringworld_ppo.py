"""``belief.ringworld-returns`` (Fig. 3) and ``belief.deep-alf-inits`` (Figs. 9, 10): PPO on RingWorld with
linear memories, episodic return against update, mean ± std over seeds (section 6.2, App. E.2, Tables 1-2).

One cell per (memory, seed): ``agents.train_agent`` trains a PPO agent (Table 1) and checkpoints every
``chunk_updates`` updates (in the cell store), so an interrupted cell resumes where it stopped. The paper
profile is Table 1 exactly (30 M steps, 64 envs, unroll 1024, 30 epochs, 8 minibatches, lr 5e-5) over 8 seeds. The
quick profile cuts the work per update (fewer envs, a shorter unroll, fewer epochs, a larger learning rate) and the
number of seeds: it tests the orderings only, not the paper's curves, and says so in its summary.
number of seeds: it tests the orderings only, not the paper's curves, and says so in its summary.

Config and sweep in ``ringworld_ppo_sweep.py``, the analysis in ``ringworld_ppo_stats.py``, claims, figures and
summary in ``ringworld_ppo_claims.py``, ``ringworld_ppo_figures.py`` and ``ringworld_ppo_summary.py``.
"""

from __future__ import annotations

from memlab.belief.experiments.ringworld_ppo_claims import inits_claims, returns_claims
from memlab.belief.experiments.ringworld_ppo_figures import save_figure
from memlab.belief.experiments.ringworld_ppo_stats import ReturnsStats, analyse
from memlab.belief.experiments.ringworld_ppo_summary import summary
from memlab.belief.experiments.ringworld_ppo_sweep import (
    FIG3,
    FIG9,
    FIG9_10,
    FIG10,
    PAPER,
    QUICK_PPO,
    TINY_PPO,
    RingWorldPPOConfig,
    sweep_cells,
)
from memlab.compile_cache import LEVEL_ONLY
from memlab.runner import Experiment

# ------------------------------------------------------------------------------------------- Fig. 3


def run_ringworld_returns(cfg: RingWorldPPOConfig, run) -> dict:
    analysis = analyse(cfg, run.sweep(sweep_cells(cfg, run), "PPO runs"))
    save_figure(cfg, analysis, run, cfg.memories, "returns.png", "Fig. 3 (paper): episodic return vs update")
    returns_claims(cfg, analysis, run)
    run.write_summary(summary(cfg, analysis, run, "belief.ringworld-returns", "Fig. 3",
                              "![returns](returns.png)"))
    return _results(analysis)


# ------------------------------------------------------------------------------------------- Figs. 9, 10


def run_deep_alf_inits(cfg: RingWorldPPOConfig, run) -> dict:
    analysis = analyse(cfg, run.sweep(sweep_cells(cfg, run), "PPO runs"))
    fig9 = [m for m in FIG9 if m in cfg.memories]
    fig10 = [m for m in FIG10 if m in cfg.memories]
    save_figure(cfg, analysis, run, fig9, "informed.png", "Fig. 9 (paper): informed Deep ALF vs ALF and LOF + softmax")
    save_figure(cfg, analysis, run, fig10, "initialisations.png", "Fig. 10 (paper): Deep ALF initialisations vs S5")
    inits_claims(cfg, analysis, run)
    run.write_summary(summary(cfg, analysis, run, "belief.deep-alf-inits", "Figs. 9, 10",
                              "![Fig. 9](informed.png)\n\n![Fig. 10](initialisations.png)"))
    return _results(analysis)


def _results(analysis: ReturnsStats) -> dict:
    """results.json: the references and every memory's :class:`MemoryStats` (not the curves: they are in the
    cells)."""
    return {"ceiling": analysis.ceiling, "floor": analysis.floor, "qmdp": analysis.qmdp, "memories": analysis.stats}


# paper-core: Fig. 3's fixed filters x 4 seeds (ALF + softmax among them); Deep ALF (all random) and S5-12 x 3;
# S5-12 fed the previous action and start flag x 2: the smallest set that settles Fig. 3's orderings
PAPER_CORE = RingWorldPPOConfig(
    memories=("lof", "lof-softmax", "alf", "alf-softmax", "deep-alf-all-random", "s5-12", "s5-12-prev-action"),
    seeds=4,
    seed_counts=(("deep-alf-all-random", 3), ("s5-12", 3), ("s5-12-prev-action", 2)))


def _profiles(memories, quick_memories, tiny_memories, **extra):
    """Paper: Table 1 and 8 seeds. Quick: QUICK_PPO, 2 seeds. Tiny (tests): a few memories, three small updates."""
    return {**extra, "paper": RingWorldPPOConfig(memories=memories),
            "quick": RingWorldPPOConfig(memories=quick_memories, seeds=2, ppo=QUICK_PPO, tail=10),
            "tiny": RingWorldPPOConfig(memories=tiny_memories, seeds=1, ppo=TINY_PPO, tail=2, chunk_updates=2,
                                       episode_length=20, qmdp_episodes=500)}


EXPERIMENTS = [
    Experiment("belief.ringworld-returns", "Fig. 3", PAPER,
               "PPO on RingWorld: LOF, ALF (± softmax), S5-12, S5-256, Deep ALF (all random)",
               _profiles(FIG3, tuple(m for m in FIG3 if m != "s5-256"), ("alf", "s5-12"),
                         **{"paper-core": PAPER_CORE}), run_ringworld_returns, quick_flags=LEVEL_ONLY),
    Experiment("belief.deep-alf-inits", "Figs. 9, 10", PAPER,
               "Deep ALF initialisations vs ALF, LOF + softmax and S5",
               _profiles(FIG9_10, tuple(m for m in FIG9_10 if m != "s5-256"), ("deep-alf-informed", "alf")),
               run_deep_alf_inits, quick_flags=LEVEL_ONLY),
]

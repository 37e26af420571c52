"""The summary of ``belief.ringworld-returns`` and ``belief.deep-alf-inits``: the run's scale, the returns table and
the previous-action ablation of S5-12, filled into ``summaries/ringworld_ppo.md``."""

from __future__ import annotations

from memlab.belief.experiments.ringworld_ppo_stats import MemoryStats, ReturnsStats
from memlab.belief.runs import LABELS
from memlab.files import summary_text

SUMMARY = summary_text(__package__, "ringworld_ppo")
PAPER_CORE_NOTE = ("This is the paper-core profile: Table 1 exactly, on fewer memories and seeds than the paper "
                   "profile (the smallest set that settles Fig. 3's orderings). Its cells are the paper profile's "
                   "(same names, keys and arguments), so `--profile paper` reuses them.")
QUICK_NOTE = ("This is a reduced profile (less work per update, fewer updates and seeds than Table 1): "
              "it tests the paper's orderings, not its curves; `--profile paper` runs Table 1.")


def _table(cfg, analysis: ReturnsStats, run) -> str:
    header = ["memory", "return, last updates (mean)", "std over seeds",
              "first update halfway from random to the ceiling", "memory diagnostics (last update)"]
    rows = [(LABELS[m], s.tail_mean, s.tail_std, s.half_ceiling_update or "never",
             ", ".join(f"{k} = {v:.3f}" for k, v in s.diagnostics.items()))
            for m, s in analysis.stats.items()]
    return run.save_table("returns.csv", header, rows, {header[1]: ".3f", header[2]: ".3f"})


def summary(cfg, analysis: ReturnsStats, run, name, figures, figure_lines) -> str:
    ppo = cfg.ppo
    scale = {"paper": "", "paper-core": PAPER_CORE_NOTE}.get(run.profile, QUICK_NOTE)
    counts = sorted({cfg.seeds_of(m) for m in cfg.memories}, reverse=True)
    seeds = (f"{counts[0]} seeds" if len(counts) == 1 else
             "seeds per memory: " + ", ".join(f"{LABELS[m]} {cfg.seeds_of(m)}" for m in cfg.memories))
    return SUMMARY.format(name=name, figures=figures, seeds=seeds, **{k: getattr(cfg, k) for k in (
        "epsilon", "episode_length", "tail")}, updates=ppo.num_updates, num_envs=ppo.num_envs,
        unroll=ppo.unroll, steps=ppo.num_updates * ppo.num_envs * ppo.unroll, epochs=ppo.epochs,
        minibatches=ppo.minibatches, learning_rate=ppo.learning_rate, scale=scale, figure_lines=figure_lines,
        ceiling=analysis.ceiling, floor=analysis.floor, qmdp=analysis.qmdp, table=_table(cfg, analysis, run),
        ablations=previous_action_ablation(analysis.stats))


def previous_action_ablation(stats: dict[str, MemoryStats]) -> str:
    """The LOF/ALF memories see the previous action (through the action-dependent transition) and S5-12 does not;
    'S5-12 + previous action' (Lu et al.'s runner) tells whether that is S5's gap. ``stats``: memory ->
    :class:`MemoryStats`. Empty unless both ran."""
    if not {"s5-12", "s5-12-prev-action"} <= set(stats):
        return ""
    plain, fed = stats["s5-12"], stats["s5-12-prev-action"]
    best = max((m for m in ("alf", "lof-softmax", "lof") if m in stats), key=lambda m: stats[m].tail_mean,
               default=None)
    gap = "" if best is None else (f" The best fixed filter, {LABELS[best]}, ends at {stats[best].tail_mean:.3f}: "
                                   f"the previous action closes {_share(plain, fed, stats[best]):.0%} of S5-12's gap.")
    return (f"\nAblation: S5-12 fed the previous action and the start flag ends at {fed.tail_mean:.3f} ± "
            f"{fed.tail_std:.3f}, S5-12 at {plain.tail_mean:.3f} ± {plain.tail_std:.3f}.{gap}\n")


def _share(plain: MemoryStats, fed: MemoryStats, best: MemoryStats) -> float:
    """The part of the gap from ``plain`` to ``best`` (tail means) that ``fed`` closes (may be < 0 or > 1)."""
    gap = best.tail_mean - plain.tail_mean
    return (fed.tail_mean - plain.tail_mean) / gap if gap != 0 else float("nan")

"""The paper profiles ask for the same cells in several places; the cell store computes each once (issue 29).

Digests only: no cell is computed here."""

import dataclasses

import jax

from memlab import catalog
from memlab.belief.experiments import ringworld_ppo_sweep
from memlab.recall.experiments.cells import curve_cells
from memlab.runner import Run
from memlab.store import cell_digest


def _digests(cells: dict) -> dict[str, str]:
    digests = {name: cell_digest(cell) for name, cell in cells.items()}
    assert None not in digests.values(), "every cell of these sweeps must be describable"
    return digests


def _ringworld(name: str, profile: str, tmp_path) -> dict[str, str]:
    cfg = catalog.get(name).profiles[profile]
    return _digests(ringworld_ppo_sweep.sweep_cells(cfg, Run(tmp_path, cfg, profile, cfg.seed)))


def _leaderboard(profile: str, tmp_path) -> dict[str, str]:
    from memlab.arena.experiments import leaderboard

    cfg = catalog.get("arena.leaderboard").profiles[profile]
    return _digests(leaderboard.sweep_cells(cfg, Run(tmp_path, cfg, profile, 0)))


def _recall(name: str, profile: str) -> dict[str, str]:
    cfg = catalog.get(name).profiles[profile]
    run = Run(".", cfg, profile, cfg.seed)
    return _digests(curve_cells(cfg, run.key_for))


def test_deep_alf_inits_shares_40_ppo_runs_and_the_qmdp_line_with_ringworld_returns(tmp_path):
    returns = _ringworld("belief.ringworld-returns", "paper", tmp_path)
    inits = _ringworld("belief.deep-alf-inits", "paper", tmp_path)
    assert len(inits) == 72 + 1  # 9 memories x 8 seeds and the QMDP line
    shared = {n for n in inits if returns.get(n) == inits[n]}
    assert len(shared) == 41 and "qmdp" in shared
    assert {n.rsplit("-", 1)[0] for n in shared - {"qmdp"}} == {"alf", "lof-softmax", "deep-alf-all-random", "s5-12",
                                                                 "s5-256"}
    assert len(set(inits.values())) == len(inits)  # and no two cells of one sweep collide


def test_paper_core_is_a_subset_of_the_paper_profile_by_name_and_digest(tmp_path):
    paper = _ringworld("belief.ringworld-returns", "paper", tmp_path)
    core = _ringworld("belief.ringworld-returns", "paper-core", tmp_path)
    assert len(core) == 4 * 4 + 2 * 3 + 2 + 1  # LOF, LOF + softmax, ALF, ALF + softmax x 4; two learned x 3; ...
    new = {n for n in core if n.startswith("s5-12-prev-action")}  # not a memory of Fig. 3
    assert new == {"s5-12-prev-action-0", "s5-12-prev-action-1"}
    assert all(paper[n] == core[n] for n in set(core) - new)


def test_the_trajectory_agent_is_ringworld_returns_alf_0(tmp_path):
    from functools import partial

    from memlab.belief.runs import train_agent
    from memlab.store import CHECKPOINT

    for profile in ("paper", "quick", "tiny"):
        cfg = catalog.get("belief.ringworld-trajectory").profiles[profile]
        returns = _ringworld("belief.ringworld-returns", profile, tmp_path) if profile != "tiny" else None
        # the cell run_ringworld_trajectory builds, spelled as it does
        run = Run(tmp_path, cfg, profile, cfg.seed)
        train = partial(train_agent, cfg.ppo, "alf", run.key_for("ppo", "alf", 0), CHECKPOINT, cfg.chunk_updates,
                        episode_length=cfg.episode_length)
        if returns is not None:
            assert cell_digest(train) == returns["alf-0"], profile


def test_recall_profiles_share_their_common_cells():
    rate, compare = _recall("recall.rate", "paper"), _recall("recall.attention-vs-s6", "paper")
    assert len(compare) == 15 and len({n for n in compare if rate.get(n) == compare[n]}) == 10
    steps = _recall("recall.rate", "paper-equal-steps")
    assert len(steps) == 20 and len({n for n in steps if rate.get(n) == steps[n]}) == 10
    core = _recall("recall.rate", "paper-core")
    assert len(core) == 10 and all(rate[n] == core[n] for n in core)


def test_pissm_paper_core_cells_are_the_paper_profiles(tmp_path):
    from memlab.pissm.experiments import stability_sweep, table1
    from memlab.pissm.runs import LAYOUTS, load_dataset

    # both profiles load Pong from the same key; a small layout stands in for the paper's 4000 sequences
    data = load_dataset("pong", LAYOUTS["tiny"]["pong"], key=jax.random.key(0))
    for module, name, datasets in ((table1, "pissm.table1", {"pong": data}), (stability_sweep, "pissm.stability",
                                                                                   data)):
        profiles = catalog.get(name).profiles
        cells = {p: _digests(module.sweep_cells(profiles[p], datasets, Run(tmp_path, profiles[p], p, 0)))
                 for p in ("paper", "paper-core")}
        assert set(cells["paper-core"]) <= set(cells["paper"]), name
        assert all(cells["paper"][n] == d for n, d in cells["paper-core"].items()), name
    assert len(cells["paper-core"]) == 20


def test_arena_paper_core_cells_are_the_paper_profiles(tmp_path):

    profiles = catalog.get("arena.leaderboard").profiles
    cells = {p: _leaderboard(p, tmp_path) for p in ("paper", "paper-core")}
    assert set(cells["paper-core"]) < set(cells["paper"])
    assert all(cells["paper"][n] == d for n, d in cells["paper-core"].items())
    assert len(cells["paper-core"]) == 2 * len(profiles["paper-core"].layers) == 18  # pinned: the run's nine layers


def test_the_lru_init_ablation_adds_one_cell_to_paper_core_families(tmp_path):
    """Its lru and s5 cells on policy-eval and the posterior predictor beside them are paper-core-families'
    (computed once); only the LRU with S5's slow modes is new."""
    cells = {p: _leaderboard(p, tmp_path) for p in ("paper-core-families", "lru-init-ablation")}
    ablation, families = cells["lru-init-ablation"], cells["paper-core-families"]
    shared = {"policy-eval.lru", "policy-eval.s5", "policy-eval.posterior-predictor"}
    assert {n for n in ablation if families.get(n) == ablation[n]} == shared
    assert set(ablation) == shared | {"policy-eval.lru-slow-modes"}


def test_the_mqar_ablations_share_paper_core_families_cells_where_they_change_nothing(tmp_path):
    """mqar-short-conv: gated DeltaNet's mqar cell is paper-core-families' (computed once), only the one with the
    short convolution is new; mqar-budget's attention cell trains four times as long, so it is a cell of its own, as
    are mqar-warmup's and mqar-low-peak's: paper-core-families' attention cell (its keys and every size) with only
    the warm-up, or only the peak rate, changed."""
    profiles = ("paper-core-families", "mqar-short-conv", "mqar-budget", "mqar-warmup", "mqar-low-peak")
    cells = {p: _leaderboard(p, tmp_path) for p in profiles}
    families, conv, budget = cells["paper-core-families"], cells["mqar-short-conv"], cells["mqar-budget"]
    assert set(conv) == {"mqar.gated-deltanet", "mqar.gated-deltanet-conv"}
    assert {n for n in conv if families.get(n) == conv[n]} == {"mqar.gated-deltanet"}
    assert set(budget) == {"mqar.attention"} and budget["mqar.attention"] != families["mqar.attention"]
    warmup = cells["mqar-warmup"]
    assert set(warmup) == {"mqar.attention"} and warmup["mqar.attention"] not in (budget["mqar.attention"],
                                                                                    families["mqar.attention"])
    low = cells["mqar-low-peak"]
    assert set(low) == {"mqar.attention"} and low["mqar.attention"] not in (
        budget["mqar.attention"], families["mqar.attention"], warmup["mqar.attention"])
    board = catalog.get("arena.leaderboard").profiles
    paper_core = dataclasses.replace(board["paper-core-families"], tasks=("mqar",), layers=("attention",))
    for name, field, value in (("mqar-warmup", "warmup", None), ("mqar-low-peak", "learning_rate", 3e-3)):
        train = dataclasses.replace(board[name].train, **{field: value})
        assert dataclasses.replace(board[name], train=train) == paper_core, name


def test_arena_scaling_holds_the_leaderboards_cells_at_its_width(tmp_path):
    """quick: the leaderboard quick's width-32 cells of scaling's layers on hmm-mess3; paper and paper-core: its
    width-64, depth-2 cells on hmm-mess3 and lgssm (every layer), also those of the leaderboard's paper-core; and
    scaling's paper-core is a part of its paper profile."""
    from memlab.arena.experiments import leaderboard, scaling

    def cells(module, name, profile):
        cfg = catalog.get(name).profiles[profile]
        return _digests(module.sweep_cells(cfg, Run(tmp_path, cfg, profile, 0)))

    for profile, board_profile in (("quick", "quick"), ("paper", "paper"), ("paper", "paper-core"),
                                   ("paper-core", "paper-core")):
        ours, theirs = cells(scaling, "arena.scaling", profile), cells(leaderboard, "arena.leaderboard", board_profile)
        cfg = catalog.get("arena.scaling").profiles[profile]
        board = catalog.get("arena.leaderboard").profiles[board_profile]
        shared = {n for n in ours if n.endswith(f".width={board.width}") and n.removesuffix(f".width={board.width}")
                  in theirs}
        assert len(shared) == len(cfg.tasks) * len(set(cfg.layers) & set(board.layers)), (profile, board_profile)
        assert all(ours[n] == theirs[n.removesuffix(f".width={board.width}")] for n in shared), (profile, board_profile)
        assert not (set(ours.values()) - {ours[n] for n in shared}) & set(theirs.values())  # no other is theirs
        assert len(set(ours.values())) == len(ours)
    paper, core = cells(scaling, "arena.scaling", "paper"), cells(scaling, "arena.scaling", "paper-core")
    assert set(core) < set(paper) and all(paper[n] == d for n, d in core.items())


def test_arena_restricted_profiles_are_parts_of_their_paper_profiles(tmp_path):
    """paper-core-families (the leaderboard) and paper-plateau (MQAR at Zoology's setting) compute the paper
    profiles' own cells, so the full runs adopt them; paper-restricted trains 2,000 steps, so none of its are."""
    from memlab.arena.experiments import leaderboard, mqar_zoology

    def cells(module, name, profile):
        cfg = catalog.get(name).profiles[profile]
        return _digests(module.sweep_cells(cfg, Run(tmp_path, cfg, profile, 0, experiment=name)))

    for module, name, part in ((leaderboard, "arena.leaderboard", "paper-core-families"),
                               (mqar_zoology, "arena.mqar-zoology", "paper-plateau")):
        paper, ours = cells(module, name, "paper"), cells(module, name, part)
        assert set(ours) < set(paper) and all(paper[n] == d for n, d in ours.items()), name
    assert len(cells(leaderboard, "arena.leaderboard", "paper-core-families")) == 4 * 9 + 1  # and policy-eval's bound
    assert cells(mqar_zoology, "arena.mqar-zoology", "paper-plateau").keys() == {"gru.lr=0.01"}
    restricted = cells(mqar_zoology, "arena.mqar-zoology", "paper-restricted")
    assert not set(restricted.values()) & set(cells(mqar_zoology, "arena.mqar-zoology", "paper").values())

"""arena.scaling end to end (tiny profile), sharing its cells with arena.leaderboard through the cell store, and its
analysis on hand-made cells."""

from __future__ import annotations

import dataclasses
import json

import pytest

from memlab import cli
from memlab.arena.experiments.leaderboard import LeaderboardConfig
from memlab.arena.experiments.scaling import NEAR, ScalingConfig, analyse
from memlab.arena.experiments.train_and_score import train_and_score
from memlab.arena.layers import state_size
from memlab.arena.train import TrainConfig
from memlab.catalog import EXPERIMENTS
from memlab.store import typed_result


def test_tiny_profile_runs_resumes_and_adopts_the_leaderboards_cells(tmp_path, check_tiny_run):
    """The leaderboard's tiny run first (on scaling's task only), into the same root (one cell store): the scaling
    run computes only the widths the leaderboard does not train at, and finds the others in the store."""
    board, scaling = EXPERIMENTS["arena.leaderboard"].profiles["tiny"], EXPERIMENTS["arena.scaling"].profiles["tiny"]
    assert board.width in scaling.widths and scaling.board(board.width) == dataclasses.replace(board,
                                                                                              tasks=scaling.tasks)
    assert cli.main(["run", "arena.leaderboard", "--profile", "tiny", "--out", str(tmp_path / "arena.leaderboard"),
                     "--no-progress", "--set", "tasks=" + ",".join(scaling.tasks)]) == 0
    check_tiny_run("arena.scaling", tmp_path)

    doc = json.loads((tmp_path / "arena.scaling" / "results.json").read_text())  # of check_tiny_run's second run
    shared = {f"{t}.{m}.width={board.width}": f"arena.leaderboard/tiny/{t}.{m}" for t in scaling.tasks
              for m in scaling.layers}
    assert doc["cells"]["reused_from"] == shared  # computed once, by the leaderboard
    own = len(scaling.tasks) * len(scaling.layers) * (len(scaling.widths) - 1)
    assert (doc["cells"]["computed"], doc["cells"]["resumed"]) == (0, own)  # the first run computed the others
    stored = list((tmp_path / "cells" / "arena.train-and-score").glob("*.json"))  # each cell once
    assert len(stored) == len(scaling.tasks) * len(scaling.layers) * len(scaling.widths)

    stats = doc["results"]["stats"]
    leaderboard = json.loads((tmp_path / "arena.leaderboard" / "results.json").read_text())["results"]["stats"]
    i = scaling.widths.index(board.width)
    for t in scaling.tasks:
        for m in scaling.layers:
            assert [s["state"] for s in stats[t][m]] == [state_size(m, w, scaling.train.length) for w in
                                                         scaling.widths]
            assert stats[t][m][i]["per_seed"] == leaderboard[t][m]["per_seed"]
            assert all(len(s["longer"]) == len(s["longer_se"]) == 1 for s in stats[t][m])
    assert (tmp_path / "arena.scaling" / "scaling.png").exists()


def _cell(gaps, state, longer=()):
    """An ``arena.train-and-score`` result as a sweep gives it back (``store.typed_result``)."""
    return typed_result(train_and_score, {
        "gap": gaps, "eval_gap": [[g] for g in gaps], "parameters": 10, "state": state,
        "compiled_distance": [0.0] * len(gaps), "gradient_cosine": [1.0] * len(gaps), "longer_gap": list(longer)})


def test_analyse_lines_widths_up_and_finds_the_smallest_state_near_the_optimum():
    cfg = ScalingConfig(tasks=("lgssm",), layers=("gru", "lru"), widths=(4, 8), seeds=2, longer=(2,),
                        train=TrainConfig(steps=20, eval_every=20))
    cells = {"lgssm.gru.width=4": _cell([0.3, 0.5], 4, [[0.6, 1.0]]),
             "lgssm.gru.width=8": _cell([0.04, 0.04], 8, [[0.1, 0.1]]),
             "lgssm.lru.width=4": _cell([0.2, 0.2], 8, [[0.3, 0.3]]),
             "lgssm.lru.width=8": _cell([0.01, 0.03], 16, [[0.2, 0.2]])}
    result = analyse(cfg, cells)
    gru = result.stats["lgssm"]["gru"]
    assert [s.gap for s in gru] == pytest.approx([0.4, 0.04]) and gru[0].se == pytest.approx(0.1)
    assert gru[0].longer == pytest.approx([0.8]) and gru[0].longer_se == pytest.approx([0.2])
    assert result.closest == {"lgssm": ["lru", "lru"]}
    # gru at width 8 and lru at width 8 are both within NEAR; gru's state (8) is the smaller
    assert NEAR >= 0.04 and result.smallest_near == {"lgssm": ("gru", 8, 8)}
    far = {n: dataclasses.replace(c, gap=[0.5, 0.5]) for n, c in cells.items()}
    assert analyse(cfg, far).smallest_near == {"lgssm": None}


def test_config_needs_a_curve_and_the_leaderboards_fields():
    ScalingConfig(widths=(4, 8)).validate()
    for widths in ((8,), (8, 8), (16, 8), (0, 8)):
        with pytest.raises(ValueError, match="widths"):
            ScalingConfig(widths=widths).validate()
    with pytest.raises(ValueError, match="layer"):
        ScalingConfig(layers=("no-such-layer",)).validate()
    default = ScalingConfig(widths=(4, 8), depth=2)
    assert default.board(8) == LeaderboardConfig(width=8, depth=2, tasks=default.tasks)


def test_every_profile_holds_its_leaderboard_profiles_width():
    """The quick and paper profiles train at the leaderboard's width with its training run (their shared cells:
    tests/test_shared_cells.py)."""
    profiles, board = EXPERIMENTS["arena.scaling"].profiles, EXPERIMENTS["arena.leaderboard"].profiles
    for name in ("tiny", "quick", "paper"):
        cfg = profiles[name]
        assert cfg.board(board[name].width).train == board[name].train and board[name].width in cfg.widths, name
    assert len(profiles["paper"].layers) >= 8 and len(profiles["paper"].widths) >= 4

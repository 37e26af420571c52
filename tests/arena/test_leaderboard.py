"""arena.leaderboard end to end (tiny profile), its analysis on hand-made cells, and training's budget curve."""

from __future__ import annotations

import functools
import json

import equinox as eqx
import jax
import numpy as np
import pytest

from memlab import deadline, progress, store
from memlab.arena import train as train_module
from memlab.arena.compiled import compiled_model
from memlab.arena.experiments import leaderboard, leaderboard_analysis, train_and_score
from memlab.arena.experiments.leaderboard import LeaderboardConfig, analyse
from memlab.arena.experiments.train_and_score import ScoredSeeds
from memlab.arena.task import normalised_gap, per_step_mean
from memlab.arena.tasks import TASKS, make_task
from memlab.arena.train import (
    SCORING_CHUNK,
    TrainConfig,
    baselines,
    compare,
    compare_to,
    comparison_target,
    make_model,
    make_train,
    score,
    static_part,
)
from memlab.catalog import EXPERIMENTS
from memlab.runner import Run


def test_tiny_profile_runs_and_resumes(tmp_path, check_tiny_run):
    check_tiny_run("arena.leaderboard", tmp_path)
    doc = json.loads((tmp_path / "arena.leaderboard" / "results.json").read_text())
    stats = doc["results"]["stats"]
    assert set(stats) == {"hmm-mess3", "lgssm"} and set(stats["lgssm"]) == {"gru", "lru"}
    assert all(len(s["per_seed"]) == 2 and np.isfinite(s["gap"]) for t in stats.values() for s in t.values())
    assert all(np.isfinite(s["compiled_distance"]) for s in stats["lgssm"].values())  # its Kalman LRU
    assert all(len(s["longer"]) == 1 and np.isfinite(s["longer"][0]) for t in stats.values() for s in t.values())
    assert (tmp_path / "arena.leaderboard" / "gaps.png").exists()


def test_analyse_averages_seeds_and_picks_the_closest_layer():
    cfg = LeaderboardConfig(tasks=("lgssm",), layers=("gru", "lru"), seeds=2,
                            train=TrainConfig(steps=20, eval_every=10))
    cells = {"lgssm.gru": ScoredSeeds(gap=[0.2, 0.4], eval_gap=[[0.9, 0.2], [0.7, 0.4]], parameters=10, state=8,
                                      compiled_distance=[0.1, 0.3], gradient_cosine=[0.5, 0.7]),
             "lgssm.lru": ScoredSeeds(gap=[0.1, 0.1], eval_gap=[[0.5, 0.1], [0.5, 0.1]], parameters=12, state=16,
                                      compiled_distance=[0.0, 0.0], gradient_cosine=[1.0, 1.0],
                                      longer_gap=[])}  # a (0, seeds) array as the cell store gives it back
    board = analyse(cfg, cells)
    gru = board.stats["lgssm"]["gru"]
    assert gru.gap == pytest.approx(0.3) and gru.se == pytest.approx(0.1) and gru.budget == pytest.approx([0.8, 0.3])
    assert gru.compiled_distance == pytest.approx(0.2) and gru.gradient_cosine == pytest.approx(0.6)
    assert board.closest == {"lgssm": "lru"} and board.steps == [10, 20]


def test_a_task_whose_memory_margin_is_thin_is_flagged_beside_its_numbers():
    """L_trivial - L_ref under 0.01 (hmm-random: 0.0026 nats): the task is named wherever its gaps are read;
    a cell from before the losses were recorded has no margin and is not flagged."""
    cfg = LeaderboardConfig(tasks=("hmm-random", "lgssm"), layers=("gru",), seeds=2,
                            train=TrainConfig(steps=20, eval_every=10))

    def cell(reference, trivial):
        return ScoredSeeds(gap=[0.5, 0.7], eval_gap=[[0.9, 0.5], [0.9, 0.7]], parameters=1, state=1,
                           compiled_distance=[0.0, 0.0], gradient_cosine=[1.0, 1.0],
                           **({} if reference is None else {"reference_loss": [reference] * 2,
                                                            "trivial_loss": [trivial] * 2}))

    board = analyse(cfg, {"hmm-random.gru": cell(1.2000, 1.2024), "lgssm.gru": cell(0.3, 1.9)})
    assert board.stats["hmm-random"]["gru"].margin == pytest.approx(0.0024)
    assert board.stats["lgssm"]["gru"].margin == pytest.approx(1.6)
    assert leaderboard_analysis.thin_margins(board) == ["hmm-random"]
    assert leaderboard_analysis.noise_note(["hmm-random"]) == " (g is noise on hmm-random: L_trivial − L_ref < 0.01)"
    old = analyse(cfg, {"hmm-random.gru": cell(None, None), "lgssm.gru": cell(0.3, 1.9)})
    assert np.isnan(old.stats["hmm-random"]["gru"].margin) and leaderboard_analysis.thin_margins(old) == []


def test_every_layer_uses_memory_is_claimed_on_the_tasks_the_profile_names(tmp_path):
    """quick leaves the recall tasks out of the claim (200 steps are too few there) and says so; a layer at g >= 1
    on a claimed task fails it."""
    def cell(gap):
        return ScoredSeeds(gap=[gap, gap], eval_gap=[[gap], [gap]], parameters=1, state=1,
                           compiled_distance=[0.0, 0.0], gradient_cosine=[1.0, 1.0])

    def memory_claim(claimed, gaps):
        cfg = LeaderboardConfig(tasks=("lgssm", "mqar"), layers=("gru",), seeds=2, memory_claim_tasks=claimed,
                                train=TrainConfig(steps=20, eval_every=20))
        run = Run(tmp_path, cfg, "tiny", 0, progress=False)
        leaderboard.claims(cfg, analyse(cfg, {f"{t}.gru": cell(g) for t, g in gaps.items()}), ["lgssm", "mqar"], run)
        return next(c for c in run.claims if c["id"] == "every-layer-uses-memory")

    left_out = memory_claim(("lgssm",), {"lgssm": 0.1, "mqar": 1.01})
    assert left_out["holds"] and "not claimed on mqar: 20 training steps are too few" in left_out["claim"]
    every = memory_claim(None, {"lgssm": 0.1, "mqar": 1.01})
    assert not every["holds"] and every["ours"] == "not below 1: gru on mqar"
    assert not memory_claim(("lgssm",), {"lgssm": 1.0, "mqar": 0.1})["holds"]


def test_training_closes_most_of_the_gap_on_lgssm():
    """A GRU trained for 300 steps on the lgssm task predicts better than memorylessly: its held-out gap falls
    from about 1 or more towards the Kalman filter (fixed seeds; the bound is loose)."""
    task = make_task("lgssm")
    config = TrainConfig(steps=300, batch=32, length=32, eval_every=100)
    held_out = task.sample(jax.random.key(1), 256, 32)
    base = baselines(task, held_out)
    result = jax.jit(make_train(task, "gru", 16, 1, config, held_out))(jax.random.key(0))
    reference, trivial = float(base.reference.mean()), float(base.trivial.mean())
    gap = (np.asarray(result.val_loss) - reference) / (trivial - reference)
    assert reference < trivial and gap.shape == (3,) and gap[-1] < 0.5 and gap[-1] < gap[0]
    # squared error splits orthogonally: E|model - y|^2 = E|model - optimum|^2 + E|optimum - y|^2, so the distance
    # to the compiled Kalman predictor (the optimum after its transient) is the model's excess loss
    static = eqx.partition(make_model(task, "gru", 16, 1, jax.random.key(0)), eqx.is_inexact_array)[1]
    model = eqx.combine(result.params, static)
    excess = float(score(task, model, held_out, base).model.mean()) - reference
    to_compiled = compare(task, model, compiled_model(task).model, held_out)
    assert float(to_compiled.distance) == pytest.approx(excess, rel=0.15)
    assert 0.0 < float(to_compiled.gradient_cosine) < 1.0
    itself = compare(task, model, model, held_out)
    assert float(itself.distance) == 0.0 and float(itself.gradient_cosine) == pytest.approx(1.0)


def test_registered_with_quick_and_paper_profiles():
    exp = EXPERIMENTS["arena.leaderboard"]
    assert {"tiny", "quick", "paper"} <= set(exp.profiles)
    quick, paper = exp.profiles["quick"], exp.profiles["paper"]
    # every family: hmm, linear-Gaussian and its switching model, policy evaluation, recall (recall-predict and MQAR)
    assert len(quick.layers) >= 8 and set(quick.tasks) == set(leaderboard.FAMILIES) == {
        "hmm-mess3", "lgssm", "switching", "policy-eval", "recall-predict", "mqar"}
    assert set(paper.tasks) == set(TASKS) and len(paper.layers) >= 8


def test_the_static_part_comes_from_shapes_alone_unless_the_model_holds_other_arrays(monkeypatch):
    """``static_part`` (no computation) equals eqx.partition's static half of the model itself; a model holding a
    non-trainable array (a user's layer with an integer buffer) gets it from the model, never a shape in its place."""
    spec, key = make_task("hmm-mess3"), jax.random.key(0)
    model = make_model(spec, "gru", 8, 1, key)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    from_shapes = static_part(spec, "gru", 8, 1, key)
    assert jax.tree.structure(from_shapes) == jax.tree.structure(static)
    x = jax.numpy.ones((5, spec.input_size))
    np.testing.assert_array_equal(eqx.combine(params, from_shapes)(x), model(x))

    class WithBuffer(eqx.Module):
        weight: jax.Array
        index: jax.Array

    monkeypatch.setattr(train_module, "make_model", lambda *a: WithBuffer(jax.numpy.ones(3), jax.numpy.arange(3)))
    static = static_part(spec, "gru", 8, 1, key)
    assert isinstance(static.index, jax.Array) and static.weight is None


def test_scoring_a_chunk_at_a_time_equals_scoring_the_batch_at_once():
    """score, comparison_target and compare_to read the held-out batch SCORING_CHUNK sequences at a time (a batch
    that is not a multiple of it: the remainder too); the plain form here reads every sequence at once."""
    task, keys = make_task("hmm-mess3"), jax.random.split(jax.random.key(3), 3)
    batch = task.sample(keys[0], 2 * SCORING_CHUNK + 5, 12)
    assert np.all(np.asarray(batch.mask))  # every step scored: each sequence's last scored step is its final one
    model, other = make_model(task, "gru", 8, 1, keys[1]), make_model(task, "lru", 8, 1, keys[2])

    def plain(m):  # outputs and the input gradient of each sequence's final loss, all sequences at once
        def final_loss(inputs):
            return task.loss(jax.vmap(m)(inputs), batch)[:, -1].sum()
        return jax.vmap(m)(batch.inputs), jax.grad(final_loss)(batch.inputs).reshape(len(batch.inputs), -1)

    (outputs, gradient), (other_outputs, other_gradient) = plain(model), plain(other)
    close = {"rtol": 1e-5, "atol": 1e-6}
    scores, base = score(task, model, batch), baselines(task, batch)
    np.testing.assert_allclose(scores.model, per_step_mean(task.loss(outputs, batch), batch.mask), **close)
    np.testing.assert_allclose(scores.gap, normalised_gap(task.loss(outputs, batch), base.reference, base.trivial,
                                                          batch.mask), **close)
    target = comparison_target(task, other, batch)
    np.testing.assert_allclose(target.outputs, other_outputs, **close)
    np.testing.assert_allclose(target.gradient, other_gradient, **close)
    got = compare_to(task, model, target, batch)
    cosine = np.sum(gradient * other_gradient, -1) / (np.linalg.norm(gradient, axis=-1)
                                                     * np.linalg.norm(other_gradient, axis=-1))
    np.testing.assert_allclose(got.gradient_cosine, cosine.mean(), **close)
    np.testing.assert_allclose(got.distance, task.distance(outputs, other_outputs).mean(), **close)


@pytest.mark.slow  # an XLA compile at the paper sizes per layer, 5-20 s each
@pytest.mark.parametrize("layer", leaderboard.ALL_LAYERS)
def test_scoring_at_the_paper_sizes_fits_in_memory(layer):
    """The paper profile's held-out scoring (1024 sequences, up to 4 x the training length, width 64, depth 2, three
    seeds, input gradients against the compiled model) asks XLA for at most 4 GB. Scored all at once, causal linear
    attention in its cumulative-sum form asked for 15 GB at T and 58 GB at 4T and ran out of memory on a 24 GB
    machine; the gated DeltaNet (the largest now: its scan keeps a (d, d) state per step for the gradient) needs
    2.9 GB a chunk of sequences at a time."""
    cfg = EXPERIMENTS["arena.leaderboard"].profiles["paper"]
    spec, key = make_task("hmm-mess3"), jax.random.key(0)
    params = jax.vmap(lambda k: eqx.partition(make_model(spec, layer, cfg.width, cfg.depth, k),
                                              eqx.is_inexact_array)[0])(jax.random.split(key, cfg.seeds))
    static = static_part(spec, layer, cfg.width, cfg.depth, key)
    test = spec.sample(key, cfg.test_batch, max(cfg.longer) * cfg.train.length)
    side = jax.eval_shape(lambda t: train_and_score.held_out_side(spec, t, compiled_model(spec).model), test)
    base, target = jax.tree.map(lambda s: jax.numpy.zeros(s.shape, s.dtype), side)
    evaluate = jax.jit(lambda *a: train_and_score.score_seeds(spec, static, *a))
    temp = evaluate.lower(params, test, base, target).compile().memory_analysis().temp_size_in_bytes
    assert temp < 4e9, f"{temp / 1e9:.1f} GB"


def _tiny_cell(checkpoint=None):
    config = TrainConfig(steps=12, batch=4, length=8, eval_every=3)
    return train_and_score.train_and_score("hmm-mess3", "gru", 8, 1, config, jax.random.split(jax.random.key(5), 2),
                                           jax.random.key(6), 16, checkpoint=checkpoint)


def test_a_cell_stopped_at_the_time_limit_resumes_from_its_checkpoint_to_the_same_numbers(tmp_path, monkeypatch):
    """A cell's training saves after every chunk of eval_every steps; stopped by the time limit after two of four
    chunks and run again, it ends with the numbers of a run without a checkpoint (to float32 rounding: the two are
    differently compiled programs, whose matrix products XLA may sum in another order)."""
    whole = _tiny_cell()
    path = tmp_path / "checkpoint"
    checks = []

    def check(seconds=0.0):  # the time limit comes after two chunks
        checks.append(seconds)
        if len(checks) == 3:
            raise deadline.OutOfTime("time")

    monkeypatch.setattr(deadline, "check", check)
    with pytest.raises(deadline.OutOfTime):
        _tiny_cell(str(path))
    assert path.exists() and len(checks) == 3
    monkeypatch.undo()
    lines = []
    with progress.cell_running("gru"), progress.sending_to(lines.append):  # the last chunk is always reported
        resumed = _tiny_cell(str(path))
    assert len(lines) == 1 and lines[0].startswith("cell gru: step 12/12, loss ")
    for name in ("gap", "eval_gap", "model_loss", "gradient_cosine"):
        np.testing.assert_allclose(getattr(resumed, name), getattr(whole, name), rtol=1e-5, atol=1e-6, err_msg=name)


def test_the_checkpoint_argument_leaves_the_cell_key_as_it_was():
    """The checkpoint path is not part of a leaderboard cell's key: the paper-core cells finished before it existed
    are still found (the digest of a cell without the argument equals the digest with it)."""
    cfg = EXPERIMENTS["arena.leaderboard"].profiles["paper-core"]
    cells = leaderboard.sweep_cells(cfg, type("R", (), {"key_for": lambda self, *a: jax.random.key(len(a))})())
    cell = cells["hmm-mess3.gru"]
    assert cell.keywords["checkpoint"] is store.CHECKPOINT and store.takes_checkpoint(cell)
    without = functools.partial(cell.func, *cell.args)
    assert store.cell_digest(cell) == store.cell_digest(without)
    assert "CHECKPOINT" not in store.describe(cell)["arguments"]
    quick = EXPERIMENTS["arena.leaderboard"].profiles["quick"]  # a minute's cells: one compiled run, no checkpoint
    assert not store.takes_checkpoint(leaderboard.sweep_cells(quick, type("R", (), {
        "key_for": lambda self, *a: jax.random.key(len(a))})())["lgssm.gru"])

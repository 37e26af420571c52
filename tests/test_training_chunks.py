"""The long training cells (pi-SSM's ``fit``, recall's ``train_cell``, ictd's ``train_seed``) train in chunks of
epochs, one compiled chunk program whose length is an argument, and report the epochs done and the loss between
chunks (memlab.progress): the same numbers, bit for bit, as the one program they replaced (which committed cells
were computed with), whatever the chunks; and a cell run off a terminal shows its epochs while it runs."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab import progress
from memlab.compile_cache import QUICK_FLAGS
from memlab.devices import FLAG
from memlab.ictd.pretrain import PretrainConfig
from memlab.ictd.train import ChunkedTrain as IctdChunks
from memlab.ictd.train import make_chunked_train
from memlab.ictd.train import make_train as ictd_train
from memlab.ictd.train import train_in_chunks as ictd_in_chunks
from memlab.pissm import runs as pissm_runs
from memlab.pissm.train import TrainConfig as PissmConfig
from memlab.recall import runs as recall_runs
from memlab.recall.task import RecallTask, sample
from memlab.recall.train import TrainConfig as RecallConfig
from memlab.runner import Run


def arrays(result) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(result, eqx.is_array))]


def identical(a, b) -> bool:
    """Every array of two results equal bit for bit (NaN where NaN)."""
    left, right = arrays(a), arrays(b)
    return len(left) == len(right) > 0 and all(np.array_equal(x, y, equal_nan=True) for x, y in zip(left, right))


PISSM_RUNS = [
    ("pissm-gru-bounded", PissmConfig(epochs=4, warmup_epochs=1)),  # the ISS projection, a warm-up epoch
    # eq. (7)'s gain at this learning rate fails after a few epochs: the chunks stop there, as the one program does
    ("pissm-gru", PissmConfig(epochs=12, batch_size=8, stability="clip", clip_norm=20.0, warmup_epochs=0,
                              learning_rate=0.05)),
]
RECALL_RUNS = [RecallConfig(epochs=4), RecallConfig(epochs=3, steps=6)]  # A.1's epochs; a step budget
ICTD_RUN = PretrainConfig(m=16, n=5, batch_size=16, minibatches_per_epoch=2, num_epochs=5, num_seeds=1,
                          rho_start=0.5, rho_end=0.8, rho_anneal_steps=6)


def pong_data():
    return pissm_runs.load_dataset("pong", pissm_runs.LAYOUTS["tiny"]["pong"], key=jax.random.key(3))


def three_ways(chunked_run, one_program, one: bool) -> tuple:
    """``chunked_run()`` in chunks of one epoch and in one chunk, then, with ``one``, ``one_program()``."""
    chunked = [chunked_run() for progress.CHUNK_S in (0.0, 1e9)]
    return (*chunked, one_program()) if one else tuple(chunked)


def pissm_runs_three_ways(model: str, config: PissmConfig, pong, one: bool = True) -> tuple:
    """``fit``'s training (in chunks of one epoch, in one chunk) and, with ``one``, the one program it replaced."""
    key = jax.random.key(0)
    model_0, masks, key_train = pissm_runs._start(model, "pong", pong, config, key, 0.0, "reinforce")
    config = dataclasses.replace(config, batch_size=max(1, min(config.batch_size, pong.train.y.shape[0] // 8)))
    args = (key_train, model_0, pong.train.y, masks[0], pong.validation.y, masks[1])
    runs = three_ways(lambda: pissm_runs.train_in_chunks(pissm_runs.chunked_train(config), config.epochs, *args),
                      lambda: pissm_runs.compiled_train(config)(*args), one)
    if model == "pissm-gru":
        assert runs[0].failed and 0 <= runs[0].failed_epoch < config.epochs - 1, "the run must fail early to test"
    return runs


def recall_runs_three_ways(config: RecallConfig, one: bool = True) -> tuple:
    task = RecallTask(context_length=10)
    pools = recall_runs.training_pools(task, 12, 2, jax.random.key(8))
    args = (jax.random.split(jax.random.key(21), 2), pools, sample(jax.random.key(20), 9, task), jnp.asarray(6))
    return three_ways(
        lambda: recall_runs.train_in_chunks(recall_runs.chunked_train("mamba-1", 1, config), config.epochs, *args),
        lambda: recall_runs.compiled_train("mamba-1", 1, config)(*args), one)


def ictd_runs_three_ways(config: PretrainConfig, one: bool = True) -> tuple:
    return three_ways(lambda: ictd_in_chunks(IctdChunks(*map(jax.jit, make_chunked_train(config))), config.num_epochs,
                                             jax.random.key(0)),
                      lambda: jax.jit(ictd_train(config))(jax.random.key(0)), one)


def every_run_three_ways(studies: str = "pissm recall ictd", one: bool = True) -> list[tuple]:
    runs = []
    if "pissm" in studies:
        pong = pong_data()
        runs += [pissm_runs_three_ways(*run, pong, one) for run in PISSM_RUNS]
    if "recall" in studies:
        runs += [recall_runs_three_ways(config, one) for config in RECALL_RUNS]
    if "ictd" in studies:
        runs.append(ictd_runs_three_ways(ICTD_RUN, one))
    return runs


QUICK = " ".join(f"--{name}={value}" for name, value in QUICK_FLAGS.items())
LEVEL_ONLY = f"--xla_backend_optimization_level={QUICK_FLAGS['xla_backend_optimization_level']}"


@pytest.mark.first
@pytest.mark.parametrize("flags, studies", [
    (QUICK, "pissm ictd"),  # the quick flags of pi-SSM's and ictd's experiments
    (LEVEL_ONLY, "recall"),  # recall's experiments' (compile_cache.LEVEL_ONLY)
    pytest.param("", "pissm recall ictd", marks=pytest.mark.slow),  # XLA's defaults: paper profiles (~8 min)
], ids=["quick-flags", "quick-level-only", "paper-flags"])
def test_under_memlab_runs_flags_the_chunks_give_the_same_numbers_bit_for_bit(flags, studies):
    """Under the XLA flags ``memlab run`` compiles a study's cells with (XLA's defaults for paper profiles, the
    experiment's ``quick_flags`` for quick ones), the chunked runs, a chunk per epoch and all in one chunk, give the
    same numbers bit for bit, so a cell's result does not depend on how fast the machine ran its chunks; at XLA's
    defaults they are also the one program's (``make_train``'s, what users call and what the cells stored in
    paper-results/cells were computed with before training ran in chunks). Under the quick flags the one program is
    not compiled: no stored cell was computed with it there, and it doubled the test's compiles. In a fresh process:
    XLA's flags are fixed when its backend starts. (Not again at the tests' own flags, which ``memlab run`` never
    uses: 130 s of compiles that checked nothing more.)"""
    one = not flags
    code = f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_training_chunks import every_run_three_ways, identical
        runs = every_run_three_ways({studies!r}, {one!r})
        print(json.dumps([[identical(a, b) for b in rest] for a, *rest in runs]))
    """
    env = {**os.environ, "XLA_FLAGS": f"{flags} {FLAG}=1".strip()}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr
    runs = len(PISSM_RUNS) * ("pissm" in studies) + len(RECALL_RUNS) * ("recall" in studies) + ("ictd" in studies)
    assert json.loads(done.stdout.splitlines()[-1]) == [[True, True] if one else [True]] * runs


@pytest.fixture(scope="module")
def pong():
    return pong_data()


def pissm_cell(data, epochs: int) -> dict:
    return pissm_runs.fit("pissm-gru-bounded", "pong", data, PissmConfig(epochs=epochs), jax.random.key(1))[1]


EPOCH_LINE = re.compile(r"^memlab: e/paper: cell pong: epoch (\d)/3, train loss -?\d\S*, val log-lik -?\d\S*$")


def test_a_training_cell_off_a_terminal_shows_its_epochs_while_it_runs(pong, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress, "CHUNK_S", 0.0)  # a chunk per epoch
    monkeypatch.setattr(progress, "REPORT_EVERY_S", 0.0)  # and a line after each
    Run(tmp_path, None, "paper", 0, experiment="e").sweep({"pong": partial(pissm_cell, pong, 3)}, "cells")
    lines = capsys.readouterr().out.splitlines()
    assert [EPOCH_LINE.match(line)[1] for line in lines[:3]] == ["1", "2", "3"], lines
    assert lines[3].startswith("memlab: e/paper: cell pong finished in") and len(lines) == 4

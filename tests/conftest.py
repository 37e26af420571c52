"""Shared test fixtures.

Compiles: JAX's persistent cache (below) and LLVM at -O0 (``pytest_configure``); set XLA_FLAGS to override.

``check_tiny_run``: an experiment's tiny profile through the CLI, then resumed, then (``ELSEWHERE``) finished on
another executor (every study's experiment tests); it returns the run, which a study's test checks further rather
than running it again.

``x64``: float64 JAX inside one test (theorem checks to ~1e-10), restored afterwards.

``process_pool`` / ``ray_cluster``: a ProcessExecutor (2 workers) and a RayExecutor on a two-node Ray cluster
started on this machine (``ray.cluster_utils``), one of each per test process, kept for the session so their
workers keep their compiled programs between tests.

``optimizer_is_used``: a training loop's ``optimizer`` argument, its default bit-identical to passing nothing.

``fake_lab``: a tiny fake experiment (no science: random means in resumable cells), installed as the whole
catalog under the names ``fake.means`` and ``fake.other``; used by test_runner.py and test_cli.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import tempfile
import time
from functools import partial
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab import compile_cache
from memlab.devices import host_devices_flags
from memlab.runner import Experiment


def pytest_configure(config):
    """Share compiled XLA programs between the xdist workers (and later runs) through JAX's persistent cache.

    Several tests compile the same program (e.g. the recall tiny profiles train the same student); a cached
    executable is keyed by the program itself (and XLA_FLAGS), so results never depend on the cache. Compiles over
    0.25 s are stored (over 0.5 s once `memlab run` has run in the process): every test module drops its compiled
    programs (below), so a program the next module needs again comes from the cache instead of being compiled
    again. Set MEMLAB_JAX_CACHE to move it."""
    # `memlab run` inside the tests (cli.use_compile_cache) keeps to this folder, storing compiles over 0.5 s
    os.environ.setdefault("MEMLAB_JAX_CACHE", os.path.join(tempfile.gettempdir(), f"memlab-jax-cache-{os.getuid()}"))
    compile_cache.enable(os.environ["MEMLAB_JAX_CACHE"], min_compile_secs=0.25)
    # LLVM at -O0: a cold run spends about half its time compiling (measured: tests/pissm 5:18 -> 4:06 cold).
    # The codegen level can change float rounding (seen: ~1e-7 relative in a pi-SSM evaluation, growing through
    # training), so the tests compare runs made under these same flags (worker processes and Ray workers inherit
    # them) and never numbers produced by `memlab run` outside the tests. Set before the first computation.
    # XLA:CPU's older elemental emitter for fusions instead of the MLIR fusion emitters compiles in about half the
    # time (measured: a pi-SSM training program 15.0 s -> 9.0 s, eager ops 3.2 s -> 1.4 s) at the same run time.
    flags = os.environ.get("XLA_FLAGS", "")
    for flag in ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false"):
        if flag.split("=")[0] not in flags:
            flags = f"{flags} {flag}".strip()
    os.environ["XLA_FLAGS"] = flags
    # one CPU device unless XLA_FLAGS says otherwise, so `memlab run` inside the tests (which keeps a count already
    # set) computes every cell as the process pool's and Ray's workers do; tests/test_devices.py runs several
    # devices in processes of its own
    os.environ["XLA_FLAGS"] = host_devices_flags(1, override=False)


def pytest_collection_modifyitems(items):
    """The long tests first: those marked ``first`` and every experiment run (``check_tiny_run``), a minute or so
    each. pytest-xdist hands tests to its workers in this order, a batch at a time, so a long test left near the end
    (the committed-cell check, the chunk tests: collected last by their names) keeps one worker busy while the other
    has nothing left to do."""
    items.sort(key=lambda item: not (item.get_closest_marker("first") or "check_tiny_run" in item.fixturenames))


@pytest.fixture
def optimizer_is_used():
    """``check(train, default, other)`` for a training loop that takes an optax ``optimizer``: ``train(optimizer)``
    returns the trained model (any pytree); with ``optimizer=None`` and with ``default`` (the loop's own optimizer
    built again by the test) its arrays are bit-identical, with ``other`` (e.g. ``optax.sgd``) they differ."""

    def arrays(tree) -> list[np.ndarray]:
        return [np.asarray(x) for x in jax.tree.leaves(tree) if isinstance(x, jax.Array)]

    def check(train, default, other) -> None:
        implicit, explicit, changed = (arrays(train(optimizer)) for optimizer in (None, default, other))
        assert implicit and len(implicit) == len(explicit) == len(changed)
        for a, b in zip(implicit, explicit, strict=True):
            np.testing.assert_array_equal(a, b)
        assert any(a.shape != c.shape or not np.array_equal(a, c) for a, c in zip(implicit, changed, strict=True))

    return check


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after every test module.

    Each live XLA:CPU executable holds about nine memory mappings; a test worker that keeps every program of
    several hundred tests reaches the kernel's limit (vm.max_map_count, 65530), its next JIT fails and the
    worker dies (seen: SIGSEGV unwinding that error, 65318 mappings in the core). Programs compiled again later
    come from the persistent cache. (Keeping them until half that limit was tried and showed no gain: a fresh
    clone's suite took 2072 s from an empty compile cache, its two workers holding 4.6-4.9 GB each.)
    """
    yield
    jax.clear_caches()


@pytest.fixture
def check_tiny_run(request):
    """``check(name, tmp_path)``: ``memlab run NAME --profile tiny`` writes claims, a figure and a summary; run
    again into the same folder it recomputes no cell and reports the same claims; and, for one experiment of each
    study (``ELSEWHERE``; every experiment in ``make test-slow``: tests/test_elsewhere.py), another executor gives
    the same numbers (``_finish_elsewhere``). Returns the run folder and both runs' results.json (``out``,
    ``first``, ``again``) for a study's own checks on the same run."""
    from memlab import cli
    from memlab.catalog import EXPERIMENTS
    from memlab.runner import run_experiment

    def check(name: str, tmp_path) -> None:
        out = tmp_path / name
        assert cli.main(["run", name, "--profile", "tiny", "--out", str(out), "--no-progress"]) == 0
        results = json.loads((out / "results.json").read_text())
        assert results["claims"] and all(isinstance(c["holds"], bool) for c in results["claims"])
        assert list(out.glob("*.png")) and (out / "summary.md").exists()
        assert results["blank_panels"] == [], "figure panels that show nothing (all NaN, no word of why)"
        cells = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in (out / "cells").glob("*.json")}
        again = json.loads((run_experiment(EXPERIMENTS[name], profile="tiny", out_dir=out, progress=False)
                            / "results.json").read_text())
        assert again["claims"] == results["claims"]
        # the rerun recomputed no cell: each file is untouched, not only still there
        assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in (out / "cells").glob("*.json")} == cells
        if name in ELSEWHERE:
            _finish_elsewhere(request, name, out, results, tmp_path)
        return SimpleNamespace(out=out, first=results, again=again)

    return check


# The experiments whose tiny run `make test` also finishes on another executor: one of each study (a cheap one; for
# the arena its leaderboard, whose cell function arena.scaling shares), through the process pool or Ray as
# ``_executor_for`` picks (pool: ictd, pissm, arena; Ray: belief, recall). The executors themselves are tested on
# their own (test_executors.py); a copy finished elsewhere costs a third to a half of a tiny run again (the worker
# traces and lowers every program anew), so the other experiments' copies run in `make test-slow`
# (tests/test_elsewhere.py).
ELSEWHERE = ("belief.error-vs-time", "ictd.verify", "recall.sweep", "pissm.table1", "arena.leaderboard")


def pytest_generate_tests(metafunc):
    """``not_elsewhere``: a test parametrized over the experiments that ``check_tiny_run`` does not finish on another
    executor (tests/test_elsewhere.py)."""
    if "not_elsewhere" in metafunc.fixturenames:
        from memlab.catalog import EXPERIMENTS

        if not set(ELSEWHERE) <= set(EXPERIMENTS):
            raise ValueError(f"conftest.ELSEWHERE names no experiment: {sorted(set(ELSEWHERE) - set(EXPERIMENTS))}")
        metafunc.parametrize("not_elsewhere", [name for name in EXPERIMENTS if name not in ELSEWHERE])


@pytest.fixture
def finish_elsewhere(request):
    """``finish(name, out, results, tmp_path)``: ``_finish_elsewhere`` for a run folder made by the test."""
    return partial(_finish_elsewhere, request)


def _finish_elsewhere(request, name: str, out, results: dict, tmp_path) -> None:
    """A copy of the run folder ``out`` (whose results.json is ``results``) with one cell of each cell function
    removed is finished by the process pool or the Ray cluster (``_executor_for``) without the cell store, and must
    report results and claims identical to the local run: the experiment's cells travel and give the same numbers
    in another process."""
    from memlab.catalog import EXPERIMENTS
    from memlab.runner import run_experiment

    executor, share, copy = _executor_for(request, name), _one_cell_per_function(out), tmp_path / f"{name}-copy"
    shutil.copytree(out, copy)
    (copy / "results.json").unlink()
    for cell in share:
        (copy / "cells" / cell).unlink()
    # without the cell store, which holds every cell by now: the executor must compute the deleted ones
    run_experiment(EXPERIMENTS[name], profile="tiny", out_dir=copy, progress=False, executor=executor, store=False)
    doc = json.loads((copy / "results.json").read_text())
    assert doc["cells"]["computed"] == len(share), executor.name
    assert (doc["results"], doc["claims"]) == (results["results"], results["claims"]), executor.name


def _one_cell_per_function(out) -> list[str]:
    """The run folder's first cell file of each cell function (by the store beside it, ``<out>/../cells``): every
    kind of cell the experiment has, the fewest to recompute elsewhere."""
    store = out.parent / "cells"
    first: dict[str, str] = {}
    for cell in sorted((out / "cells").glob("*.json")):
        digest = cell.with_suffix(".digest")
        entries = list(store.glob(f"*/{digest.read_text().strip()}.json")) if digest.exists() else []
        first.setdefault(entries[0].parent.name if entries else "(not in the store)", cell.name)
    return sorted(first.values())


def _executor_for(request, name: str):
    """The session's process pool for every other experiment of the catalog, its Ray cluster for the rest (the pool
    for all of them without the ray extra). Both send a cell through the same cloudpickle path
    (``worker.pickled``), so one of them checks an experiment's cells away from the driver, and each still
    runs half the catalog (test_executors.py tests the executors themselves). Half the cost of running both."""
    from memlab.catalog import EXPERIMENTS

    if list(EXPERIMENTS).index(name) % 2 == 1:
        try:
            return request.getfixturevalue("ray_cluster")
        except pytest.skip.Exception:
            pass
    return request.getfixturevalue("process_pool")


@pytest.fixture(scope="session")
def process_pool():
    from memlab.executors import ProcessExecutor

    with ProcessExecutor(workers=2) as executor:
        yield executor


@pytest.fixture(scope="session")
def ray_cluster():
    """A RayExecutor on a two-node cluster (one CPU per node) on this machine; shut down after the session."""
    pytest.importorskip("ray", reason='the ray extra is not installed (pip install -e ".[ray]")')
    import ray
    from ray.cluster_utils import Cluster

    from memlab.executors import RayExecutor

    cluster = Cluster(initialize_head=True, connect=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        with RayExecutor() as executor:  # Ray is initialised: the executor uses this cluster
            yield executor
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield

# interrupt_after: raise KeyboardInterrupt when this many cells have been computed (None: never)
# fail_cell: cell index that raises RuntimeError
# swallowed_sigint_in: cell index whose compute() gets a real SIGINT inside a __del__, where Python can only
# print the KeyboardInterrupt as "Exception ignored" (as in JAX's gc callback) and compute() goes on
# sleep: seconds each cell takes (for time limits)
STATE: dict = {"interrupt_after": None, "swallowed_sigint_in": None, "fail_cell": None, "computed": 0, "sleep": 0.0}
RUNS: list = []  # the Run of each fake_run call (not in STATE: STATE travels to workers with the cells)


class _SigintInDel:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler runs here, inside __del__ (sleep is interrupted at once)


@dataclasses.dataclass(frozen=True)
class FakeConfig:
    seed: int = 0
    n_cells: int = 4
    size: int = 3

    def validate(self):
        if self.n_cells < 1:
            raise ValueError(f"n_cells must be >= 1, got {self.n_cells}")


def reference_means(seed: int, n_cells: int, size: int = 3) -> np.ndarray:
    """What the fake experiment must report, computed directly."""
    from memlab.keys import key_for

    return np.array([float(jnp.mean(jax.random.normal(key_for(seed, "cell", i), (size,)))) for i in range(n_cells)])


def fake_cell(size: int, key, i: int) -> dict:
    """One cell of the fake experiment (a module function of the config and a key, so any executor can run it)."""
    if STATE["interrupt_after"] is not None and STATE["computed"] >= STATE["interrupt_after"]:
        raise KeyboardInterrupt
    if STATE["fail_cell"] == i:
        raise RuntimeError(f"cell {i} was told to fail")
    STATE["computed"] += 1
    time.sleep(STATE["sleep"])
    if STATE["swallowed_sigint_in"] == i:
        del_in_here = _SigintInDel()
        del del_in_here
    x = jax.random.normal(key, (size,))
    return {"x": x, "mean": jnp.mean(x), "blob": bytes([i, 255, 0])}


def fake_run(config: FakeConfig, run) -> dict:
    RUNS.append(run)
    cells = run.sweep({f"cell-{i}": partial(fake_cell, config.size, run.key_for("cell", i), i)
                       for i in range(config.n_cells)}, "fake cells")
    assert all(c["blob"] == bytes([i, 255, 0]) for i, c in enumerate(cells.values())), "bytes survive a cell file"
    means = [c["mean"] for c in cells.values()]
    from memlab import plots

    means = np.array(means)
    fig, ax = plots.figure()
    ax.plot(means, "o-")
    run.save_figure(fig, "means.png")
    fig, ax = plots.figure()
    ax.hist(means)
    run.save_figure(fig, "figs/hist.png")  # not linked from the summary: the report must embed it anyway
    run.save_csv("means.csv", ["cell", "mean"], enumerate(means))
    finite = np.all(np.isfinite(means))  # a numpy bool
    run.claim("means-finite", "every cell mean is finite", "Fig. 0", f"{means.min():.3f} .. {means.max():.3f}", finite)
    run.claim("cells-enough", "at least 5 cells | a pipe", "Table 0", f"{config.n_cells} cells", config.n_cells >= 5)
    run.write_summary("# Fake experiment\n\n![means](means.png)\n\nSee [the table](means.csv).\n")
    return {"means": means, "total": np.float64(means.sum()), "not_a_number": float("nan"), "inf": np.inf}


def make_experiment(name: str = "fake.means") -> Experiment:
    profiles = {
        "tiny": FakeConfig(n_cells=4),
        "quick": FakeConfig(n_cells=6),
        "paper": FakeConfig(n_cells=50),
        "broken": FakeConfig(n_cells=0),
    }
    return Experiment(name, "Fig. 0", "fake-paper", "random means in cells", profiles, fake_run)


@pytest.fixture
def fake_lab(monkeypatch) -> SimpleNamespace:
    """Reset STATE and make the catalog hold two fake experiments; returns the helpers above."""
    from memlab import catalog

    STATE.update(interrupt_after=None, swallowed_sigint_in=None, fail_cell=None, computed=0, sleep=0.0)
    RUNS.clear()
    experiments = {e.name: e for e in (make_experiment("fake.means"), make_experiment("fake.other"))}
    monkeypatch.setattr(catalog, "EXPERIMENTS", experiments)
    return SimpleNamespace(
        experiments=experiments, STATE=STATE, FakeConfig=FakeConfig,
        make_experiment=make_experiment, reference_means=reference_means, last_run=lambda: RUNS[-1],
    )

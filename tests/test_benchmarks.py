"""The benchmark scripts' shared parts: side-by-side timing rows, and the tables the documentation shows, generated
from benchmarks/results/*.json (every number on the Benchmarks page comes from there)."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _script(name: str):
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import each other by name, as run.py arranges
    try:
        spec = importlib.util.spec_from_file_location(f"bench_script_{name}", BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


tables = _script("tables")


def test_side_by_side_rows_record_medians_quartiles_paired_ratios_and_difference():
    timing = _script("timing")
    x = np.arange(1000.0)
    rows = timing.side_by_side("sum", [("ours", lambda: x.cumsum() + 1e-9), ("peer", lambda: np.cumsum(x))],
                               extra={"n": 1000})
    assert [r["implementation"] for r in rows] == ["ours", "peer"]
    assert all(r["reference"] == "peer" and r["n"] == 1000 and timing.ROUNDS <= r["rounds"] <= timing.MAX_ROUNDS
               for r in rows)
    assert all(r["seconds_q25"] <= r["seconds"] <= r["seconds_q75"] for r in rows)
    assert rows[1]["speedup"] == 1.0 and rows[1]["max_abs_diff"] == 0.0 and "speedup_q25" not in rows[1]
    assert rows[0]["speedup"] == pytest.approx(rows[1]["seconds"] / rows[0]["seconds"])
    assert rows[0]["speedup_q25"] <= rows[0]["speedup_q75"]
    assert 0 < rows[0]["max_abs_diff"] < 1e-6
    assert all({"load1_before", "load1_after", "unreliable"} <= set(r) for r in rows)


def test_a_row_timed_beside_a_busy_process_is_marked_unreliable():
    timing = _script("timing")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    if hasattr(os, "sched_setaffinity"):  # off this process's pin (a pinned pytest): it must busy another core
        os.sched_setaffinity(busy.pid, range(os.cpu_count()))
    try:
        time.sleep(0.5)
        x = np.arange(100_000.0)
        rows = timing.side_by_side("sum", [("ours", lambda: x.cumsum()), ("peer", lambda: np.cumsum(x))])
    finally:
        busy.kill()
        busy.wait()
    assert all(r["other_cpus"] > timing.OTHER_CPUS_MAX and r["unreliable"] for r in rows), rows


def test_isolated_runs_a_workload_in_a_new_process():
    timing = _script("timing")
    assert timing.isolated(os.getpid) != os.getpid()


def test_isolated_starts_the_process_with_the_given_environment_and_leaves_this_ones_alone(monkeypatch):
    timing = _script("timing")
    monkeypatch.setenv("MEMLAB_BENCH_PROBE", "parent")
    monkeypatch.delenv("MEMLAB_BENCH_UNSET", raising=False)
    env = {"MEMLAB_BENCH_PROBE": "child", "MEMLAB_BENCH_UNSET": "set"}
    assert [timing.isolated(os.getenv, name, env=env) for name in env] == ["child", "set"]
    assert os.environ["MEMLAB_BENCH_PROBE"] == "parent" and "MEMLAB_BENCH_UNSET" not in os.environ


def test_table_shows_medians_with_quartiles_and_marks_unreliable_rows():
    rows = [_row("ours", 2, 0.01, 3.0) | {"seconds_q25": 0.009, "seconds_q75": 0.012, "speedup_q25": 2.5,
                                          "speedup_q75": 3.25, "unreliable": True, "other_cpus": 0.9,
                                          "load1_before": 1.0, "load1_after": 1.5},
            _row("peer", 2, 0.03, 1.0) | {"seconds_q25": 0.029, "seconds_q75": 0.031, "unreliable": False}]
    text = tables.side_by_side_table(rows)
    assert "| ours ⚠ unreliable: other processes used 0.90 CPUs, load average 1.00 → 1.50 | 0.01 (0.009–0.012) | " \
           "3.00× (2.50–3.25) |" in text
    assert "| peer | 0.03 (0.029–0.031) | reference | — |" in text


def _row(impl: str, N: int, seconds: float, speedup: float) -> dict:
    return {"workload": "filter", "implementation": impl, "N": N, "T": 1000, "output": "probabilities",
            "seconds": seconds, "reference": "peer", "speedup": speedup, "max_abs_diff": 1.5e-7, "rounds": 7}


def test_side_by_side_table_says_shared_sizes_once_and_varying_ones_per_row():
    rows = [_row("ours", 2, 0.01, 3.0), _row("peer", 2, 0.03, 1.0), _row("ours", 64, 0.5, 2.25),
            _row("peer", 64, 1.125, 1.0)]
    text = tables.side_by_side_table(rows)
    assert "reference: peer; T = 1000; output = probabilities; rounds = 7" in text
    assert "| N | implementation | seconds | speed-up | max output diff |" in text
    assert "| 2 | ours | 0.01 | 3.00× | 1.5e-07 |" in text
    assert "| 64 | peer | 1.12 | reference | — |" in text


def test_every_results_file_renders_with_its_date_and_machine_and_its_ratios():
    paths = sorted((BENCHMARKS / "results").glob("*.json"))
    assert paths, "no benchmark results committed"
    for path in paths:
        doc = json.loads(path.read_text())
        text = tables.markdown(path)
        assert re.search(r"Measured \d{4}-\d{2}-\d{2}", text), path.name
        assert doc["machine"]["platform"] in text
        for row in doc["rows"]:
            if "speedup" in row and row["implementation"] != row["reference"]:
                spread = f" ({row['speedup_q25']:.2f}–{row['speedup_q75']:.2f})" if "speedup_q25" in row else ""
                assert f"| {row['speedup']:.2f}×{spread} |" in text, (path.name, row["implementation"])


def test_script_title_is_the_docstrings_first_phrase():
    assert tables.script_title("belief") == "Belief study throughput on the CPU"
    assert tables.script_title("paper_memory").startswith("Peak resident memory of every experiment's paper profile")


def test_quoted_peer_ratios_are_found_on_lines_naming_a_peer():
    text = "memlab is 1.31× dynamax here\nthe recall pass runs 1.76× faster on 2 cores\nmambapy: 25×, 26.5 × torch"
    assert tables.quoted_peer_ratios(text) == ["1.31", "25", "26.5"]


def test_every_ratio_the_docs_quote_beside_a_peer_comes_from_a_results_file():
    root = BENCHMARKS.parent
    recorded = tables.recorded_ratios()
    for path in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        for ratio in tables.quoted_peer_ratios(path.read_text(encoding="utf-8")):
            assert ratio in recorded, f"{path.relative_to(root)} quotes {ratio}× beside a peer; no results file has it"


def test_s6_bound_is_the_selective_scan_it_bounds():
    """The S6 bound row computes the output of memlab's selective scan (Euler-B), so its time bounds that scan's."""
    import jax
    import jax.numpy as jnp

    from memlab.layers.s6 import selective_scan

    bench_s6 = _script("bench_s6")
    kx, kd, kb, kc = jax.random.split(jax.random.key(0), 4)
    x, delta = jax.random.normal(kx, (3, 20, 4)), jax.nn.softplus(jax.random.normal(kd, (3, 20, 4)) - 2.0)
    B, C = jax.random.normal(kb, (3, 20, 5)), jax.random.normal(kc, (3, 20, 5))
    A, D = -jnp.broadcast_to(jnp.arange(1.0, 6.0), (4, 5)), jnp.linspace(0.5, 1.5, 4)
    scan = jax.vmap(lambda x, d, b, c: selective_scan(x, d, A, b, c, D, discretization="euler_b"))
    np.testing.assert_allclose(bench_s6.bare_recursion(x, delta, A, B, C, D), scan(x, delta, B, C), atol=1e-5)


def test_kalman_bound_gives_the_means_of_memlabs_filter():
    """The Kalman bound row (one covariance recursion, then the means) gives kalman_filter's filtered means."""
    import jax
    import jax.numpy as jnp

    from memlab.kalman import kalman_filter

    bench_pissm = _script("bench_pissm")
    model = bench_pissm.random_stable_model(3, 2)
    y = np.random.default_rng(0).normal(size=(4, 30, 2))
    m = {k: jnp.asarray(v, jnp.float32) for k, v in model.items()}
    expected = jax.vmap(lambda y: kalman_filter(y, m["A"], m["C"], m["Q"], m["R"], m["initial_mean"],
                                                m["initial_cov"]).means)(jnp.asarray(y, jnp.float32))
    np.testing.assert_allclose(bench_pissm.bound_shared_covariance_filter(model, y)(), expected, atol=1e-4)


def test_compare_flags_rows_whose_median_moved_beyond_the_tolerance(tmp_path, capsys):
    compare = _script("compare")
    rows = [{"workload": "w", "implementation": "a", "seconds": 1.0, "reference": "b"},
            {"workload": "w", "implementation": "b", "seconds": 2.0, "reference": "b"},
            {"model": "gru", "seconds_per_epoch": 10.0}]
    for name, scale in (("old", {}), ("same", {"a": 1.1}), ("moved", {"b": 1.3})):
        (tmp_path / name).mkdir()
        doc = {"rows": [{**r, "seconds": r["seconds"] * scale.get(r["implementation"], 1.0)} if "seconds" in r else r
                        for r in rows]}
        (tmp_path / name / "s6.json").write_text(json.dumps(doc))  # a `make bench` benchmark's file
    assert compare.main([str(tmp_path / "old"), str(tmp_path / "same")]) == 0
    assert "3 of 3 timings within 15%" in capsys.readouterr().out
    assert compare.main([str(tmp_path / "old"), str(tmp_path / "moved")]) == 1
    out = capsys.readouterr().out
    assert "MOVED  1.300  s6: w / b [seconds]" in out and "2 of 3 timings within 15%" in out
    assert compare.main([str(tmp_path / "old"), str(tmp_path / "nowhere")]) == 2

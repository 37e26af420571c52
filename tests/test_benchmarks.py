"""The benchmark scripts' shared parts: side-by-side timing rows, and the tables the documentation shows, generated
from benchmarks/results/*.json (every number on the Benchmarks page comes from there)."""

import importlib.util
import json
import re
import sys
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


def test_side_by_side_rows_record_rounds_ratio_and_difference():
    timing = _script("timing")
    x = np.arange(1000.0)
    rows = timing.side_by_side("sum", [("ours", lambda: x.cumsum() + 1e-9), ("peer", lambda: np.cumsum(x))],
                               repeats=3, extra={"n": 1000})
    assert [r["implementation"] for r in rows] == ["ours", "peer"]
    assert all(r["reference"] == "peer" and r["n"] == 1000 and 3 <= r["rounds"] <= timing.MAX_ROUNDS for r in rows)
    assert rows[1]["speedup"] == 1.0 and rows[1]["max_abs_diff"] == 0.0
    assert rows[0]["speedup"] == pytest.approx(rows[1]["seconds"] / rows[0]["seconds"])
    assert 0 < rows[0]["max_abs_diff"] < 1e-6


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
                assert f"| {row['speedup']:.2f}× |" in text, (path.name, row["implementation"])


def test_script_title_is_the_docstrings_first_phrase():
    assert tables.script_title("belief") == "Belief study throughput on the CPU"
    assert tables.script_title("paper_memory").startswith("Peak resident memory of every experiment's paper profile")

"""The side-by-side ratios of the last benchmark runs as one Markdown table (what README's speed table shows).

Usage: ``python benchmarks/ratios.py [NAME ...]`` (default: every benchmarks/results/*.json). Reads the rows that
``timing.side_by_side`` wrote and prints, per workload, every implementation's speed-up over its reference and the
largest difference of their outputs. Ratios, not seconds: they carry over between machines far better.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
STANDARD = ("workload", "implementation", "seconds", "reference", "speedup", "max_abs_diff")  # timing.side_by_side


def ratio_rows(doc: dict) -> list[list[str]]:
    rows = []
    for row in doc["rows"]:
        if "speedup" not in row or row["implementation"] == row["reference"]:
            continue
        sizes = ", ".join(f"{k}={v}" for k, v in row.items() if k not in STANDARD and isinstance(v, int))
        rows.append([row["workload"], sizes, row["implementation"], row["reference"], f"{row['speedup']:.2f}×",
                     f"{row['max_abs_diff']:.1e}"])
    return rows


def main(argv: list[str]) -> int:
    paths = [RESULTS / f"{name}.json" for name in argv] or sorted(RESULTS.glob("*.json"))
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(f"ratios: no results {missing}; run `make bench` first", file=sys.stderr)
        return 2
    lines = ["| workload | sizes | implementation | reference | speed-up | max output diff |", "|" + " --- |" * 6]
    for path in paths:
        lines += ["| " + " | ".join(r) + " |" for r in ratio_rows(json.loads(path.read_text()))]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

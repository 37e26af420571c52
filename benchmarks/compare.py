"""Two benchmark runs row by row: does every median hold still? (issue 33: two idle runs within 15 %).

Usage: ``python benchmarks/compare.py OLD_DIR [NEW_DIR] [--tolerance 0.15]``: each folder holds ``<name>.json`` files
as ``benchmarks/run.py`` writes them (NEW_DIR defaults to benchmarks/results). Rows are matched by benchmark and by
every field that names them (workload and implementation for side-by-side rows, else the text fields such as
``model``); results of scripts other than ``bench_*.py`` (paper_memory.py) are left out. Each timed field
(``seconds``, ``seconds_per_epoch``) of a matched row is compared as NEW / OLD. Prints one line per compared value
and exits 1 if any moved by more than the tolerance, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TIMED = ("seconds", "seconds_per_epoch")


def row_key(row: dict) -> tuple:
    """What names a row: its text fields (workload, implementation, model, ...), in the row's order."""
    return tuple((k, v) for k, v in row.items() if isinstance(v, str) and k != "reference")


def timed_values(doc: dict) -> dict[tuple, float]:
    """{(row key, field): seconds} of one results file."""
    values = {}
    for row in doc["rows"]:
        for field in TIMED:
            if isinstance(row.get(field), (int, float)) and row[field] > 0:
                values[(row_key(row), field)] = float(row[field])
    return values


def compare(old_dir: Path, new_dir: Path, tolerance: float) -> list[dict]:
    """One dict per value present in both runs: benchmark, row, field, old, new, ratio, moved (beyond tolerance)."""
    out = []
    for new_path in sorted(new_dir.glob("*.json")):
        old_path = old_dir / new_path.name
        if not old_path.exists() or not (HERE / f"bench_{new_path.stem}.py").exists():  # e.g. paper_memory.py's
            continue
        old, new = (timed_values(json.loads(p.read_text())) for p in (old_path, new_path))
        for key in new.keys() & old.keys():
            ratio = new[key] / old[key]
            out.append({"benchmark": new_path.stem, "row": " / ".join(v for _, v in key[0]), "field": key[1],
                        "old": old[key], "new": new[key], "ratio": ratio, "moved": abs(ratio - 1) > tolerance})
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path, nargs="?", default=HERE / "results")
    parser.add_argument("--tolerance", type=float, default=0.15)
    args = parser.parse_args(argv)
    for folder in (args.old, args.new):
        if not folder.is_dir():
            print(f"compare: error: no such folder {folder}", file=sys.stderr)
            return 2
    rows = compare(args.old, args.new, args.tolerance)
    if not rows:
        print(f"compare: error: no benchmark rows in common between {args.old} and {args.new}", file=sys.stderr)
        return 2
    for r in sorted(rows, key=lambda r: -abs(r["ratio"] - 1)):
        mark = "MOVED" if r["moved"] else "ok"
        print(f"{mark:5} {r['ratio']:6.3f}  {r['benchmark']}: {r['row']} [{r['field']}] "
              f"{r['old']:.4g} s -> {r['new']:.4g} s")
    moved = sum(r["moved"] for r in rows)
    print(f"{len(rows) - moved} of {len(rows)} timings within {args.tolerance:.0%}")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

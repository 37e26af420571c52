"""The benchmark results as Markdown tables: what the documentation's Benchmarks page shows, generated, never typed.

Usage: ``python benchmarks/tables.py [NAME ...]`` (default: every benchmarks/results/*.json).

One section per results file: what the benchmark script's docstring says first, the date and the machine of the
measurement, then its rows. Side-by-side rows (``timing.side_by_side``) make one table per workload (and text
note), with each implementation's time, its speed-up over the reference and the largest difference of their
outputs; the sizes and notes every row of the table shares are said once above it. Any other rows make one table
per row shape, every column shown.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SIDE_BY_SIDE = ("workload", "implementation", "seconds", "reference", "speedup", "max_abs_diff",  # timing.py
                "seconds_q25", "seconds_q75", "speedup_q25", "speedup_q75", "rounds", "load1_before", "load1_after",
                "other_cpus", "unreliable")


def _cell(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("*", "\\*")  # text, not Markdown: theta* is no emphasis


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)]) + "\n"


def measured_on(path: Path, doc: dict) -> str:
    """The date (written by run.py since issue 30; else the date of the commit that last changed the file) and the
    machine of one results file."""
    date = doc.get("date")
    if not date:
        try:
            date = subprocess.run(["git", "log", "-1", "--format=%cs", "--", path.name], capture_output=True,
                                  text=True, cwd=path.parent, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            date = ""
        date = f"{date} (date of the commit that wrote it)" if date else "date not recorded"
    m = doc.get("machine", {})
    versions = m.get("versions") or {k: m[k] for k in ("jax",) if k in m}
    parts = [f"{m['cpus']} CPUs" if "cpus" in m else None, m.get("platform"),
             f"JAX devices {', '.join(m['devices'])}" if m.get("devices") else None,
             f"Python {m['python']}" if "python" in m else None,
             ", ".join(f"{k} {v}" for k, v in versions.items() if v) or None]
    return f"Measured {date} on: " + "; ".join(p for p in parts if p) + "."


def _shared(rows: list[dict], keys: list[str]) -> tuple[list[str], list[str]]:
    """The keys whose value every row shares (said once above the table) and the ones that vary (columns)."""
    if len(rows) == 1:
        return [], keys
    same = [k for k in keys if all(k in r and r[k] == rows[0][k] for r in rows)]
    return same, [k for k in keys if k not in same]


def side_by_side_table(rows: list[dict]) -> str:
    """One workload's rows: implementation, seconds, speed-up over the reference, max output difference."""
    extras = list(dict.fromkeys(k for r in rows for k in r if k not in SIDE_BY_SIDE))
    same, varying = _shared(rows, extras)
    sizes = [k for k in varying if isinstance(rows[0].get(k), int)]  # before the implementation, rates after
    rates = [k for k in varying if k not in sizes]
    reference = rows[0]["reference"]
    note = [f"reference: {_cell(reference)}", *(f"{k} = {_cell(rows[0][k])}" for k in same)]
    if "rounds" in rows[0]:
        note.append(f"rounds = {rows[0]['rounds']}" if all(r.get("rounds") == rows[0]["rounds"] for r in rows)
                    else "rounds = " + "–".join(str(f(r.get("rounds", 0) for r in rows)) for f in (min, max)))
    body = []
    for r in rows:
        if "speedup" not in r:
            ratio, diff = "—", "—"
        else:
            is_reference = r["implementation"] == reference
            ratio = "reference" if is_reference else f"{r['speedup']:.2f}×" + _range(r, "speedup", ".2f")
            diff = "—" if is_reference else f"{r['max_abs_diff']:.1e}"
        body.append([*(_cell(r.get(k, "")) for k in sizes), _cell(r["implementation"]) + _load_mark(r),
                     f"{r['seconds']:.3g}" + _range(r, "seconds", ".3g"), ratio, diff,
                     *(_cell(r.get(k, "")) for k in rates)])
    return (f"**{_cell(rows[0]['workload'])}** ({'; '.join(note)})\n\n" +
            _table([*sizes, "implementation", "seconds", "speed-up", "max output diff", *rates], body))


def _range(row: dict, name: str, spec: str) -> str:
    """" (q25–q75)" of a median the row records with its quartiles (timing.side_by_side), else nothing."""
    if f"{name}_q25" not in row:
        return ""
    return f" ({row[f'{name}_q25']:{spec}}–{row[f'{name}_q75']:{spec}})"


def _load_mark(row: dict) -> str:
    """A warning on a row timed while other processes used the CPU (timing.Load)."""
    if not row.get("unreliable"):
        return ""
    return (f" ⚠ unreliable: other processes used {row.get('other_cpus', float('nan')):.2f} CPUs, load average "
            f"{row.get('load1_before', float('nan')):.2f} → {row.get('load1_after', float('nan')):.2f}")


def other_table(rows: list[dict]) -> str:
    keys = list(rows[0])
    return _table(keys, [[_cell(r.get(k, "")) for k in keys] for r in rows])


def script_title(name: str) -> str:
    """What the benchmark script's docstring says first, up to its first colon or full stop (the docstring is read,
    not imported: the scripts import JAX)."""
    for script in (HERE / f"bench_{name}.py", HERE / f"{name}.py"):
        doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) if script.exists() else None
        if doc:
            first = " ".join(doc.split("\n\n")[0].split())
            return first.split(": ")[0].split(". ")[0].rstrip(".")
    return name


def markdown(path: Path, level: int = 2) -> str:
    """Every table of one results file, under a heading of the given level."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    name = doc.get("benchmark", path.stem)
    parts = [f"{'#' * level} {name}: {script_title(name)}", "", measured_on(path, doc), ""]
    workloads: dict[tuple, list[dict]] = {}
    shapes: dict[tuple, list[dict]] = {}
    for row in doc["rows"]:
        if all(k in row for k in ("workload", "implementation", "reference")):
            notes = tuple((k, v) for k, v in row.items() if k not in SIDE_BY_SIDE and isinstance(v, str))
            workloads.setdefault((row["workload"], row["reference"], notes), []).append(row)
        else:
            shapes.setdefault(tuple(row), []).append(row)
    parts += [side_by_side_table(rows) for rows in workloads.values()]
    parts += [other_table(rows) for rows in shapes.values()]
    return "\n".join(parts)


PEERS = re.compile(r"dynamax|mambapy|filterpy|torch|PyTorch", re.IGNORECASE)
RATIO = re.compile(r"(\d+(?:\.\d+)?)\s*×")


def quoted_peer_ratios(text: str) -> list[str]:
    """The ratios ("1.23×") that a text's lines naming a peer library quote: each must come from a results file."""
    return [m.group(1) for line in text.splitlines() if PEERS.search(line) for m in RATIO.finditer(line)]


def recorded_ratios() -> set[str]:
    """Every speed-up in benchmarks/results/*.json (median and quartiles) at the precisions the docs may quote."""
    ratios = set()
    for path in RESULTS.glob("*.json"):
        for row in json.loads(path.read_text(encoding="utf-8"))["rows"]:
            for key in ("speedup", "speedup_q25", "speedup_q75"):
                if isinstance(row.get(key), float):
                    ratios |= {f"{row[key]:.{digits}f}" for digits in (0, 1, 2)}
    return ratios


def main(argv: list[str]) -> int:
    paths = [RESULTS / f"{name}.json" for name in argv] or sorted(RESULTS.glob("*.json"))
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(f"tables: no results {missing}; run `make bench` first", file=sys.stderr)
        return 2
    print("\n".join(markdown(path) for path in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

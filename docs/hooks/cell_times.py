"""MkDocs hook: the measured per-cell times on the clusters page, generated at build time from the cells committed
in paper-results/cells/ (each record keeps its compute time, compile time, peak memory and, since they were kept,
when and on which machine it finished). The page's prose is docs/cluster.md; the table replaces its MARKER.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from memlab.files import compile_share

ROOT = Path(__file__).resolve().parents[2]
CELLS = ROOT / "paper-results" / "cells"
MARKER = "<!-- measured cells -->"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _records() -> dict[tuple[str, str], list[dict]]:
    """Finished cells by (experiment/profile that first computed them, cell function), each its record."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for path in sorted(CELLS.glob("*/*.json")):
        entry = json.loads(path.read_text(encoding="utf-8"))
        experiment, profile = entry["origin"].split("/")[:2]
        groups[(f"`{experiment}` {profile}", entry["function"])].append(entry["record"])
    return groups


def table() -> str:
    """One row per experiment, profile and cell function: cells finished, time per cell (min, median, max), the
    share of it spent compiling, the peak memory, and when and where the cells ran (where recorded)."""
    rows = ["| run | cell function | cells | time per cell: min / median / max | compiling | peak memory | "
            "finished on |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for (run, function), records in sorted(_records().items()):
        seconds = [r["seconds"] for r in records]
        compiled = compile_share((r["seconds"], r.get("compile_seconds")) for r in records)
        share = f"{100 * compiled:.0f} %" if compiled is not None else "not recorded"
        peak = max((r.get("peak_rss_mb") or 0.0) for r in records)
        dates = sorted(r["finished"][:10] for r in records if "finished" in r)
        machines = sorted({r["machine"] for r in records if "machine" in r})
        where = (f"{dates[0]}–{dates[-1]}" if dates[0] != dates[-1] else dates[0]) + ": " + "; ".join(machines) \
            if dates else "not recorded"
        rows.append(f"| {run} | `{function}` | {len(records)} | {_minutes(min(seconds))} / "
                    f"{_minutes(statistics.median(seconds))} / {_minutes(max(seconds))} | {share} | "
                    f"{peak / 1024:.1f} GB | {where} |")
    return "\n".join(rows) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != "cluster.md":
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/cluster.md lost its {MARKER!r}: the generated table has nowhere to go")
    return markdown.replace(MARKER, table())

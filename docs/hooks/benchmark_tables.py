"""MkDocs hook: the Benchmarks page's tables, generated at build time from benchmarks/results/*.json by
benchmarks/tables.py (what ``python benchmarks/tables.py`` prints), each benchmark with the date and the machine of
its measurement. The page's prose (how to run and read them) is docs/benchmarks.md; the tables replace its MARKER.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- benchmark tables -->"


def _tables_module():
    spec = importlib.util.spec_from_file_location("benchmark_tables_script", ROOT / "benchmarks" / "tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != "benchmarks.md":
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/benchmarks.md lost its {MARKER!r}: the generated tables have nowhere to go")
    tables = _tables_module()
    paths = sorted(tables.RESULTS.glob("*.json"))
    return markdown.replace(MARKER, "\n".join(tables.markdown(path, level=3) for path in paths))

"""MkDocs hook: one page per experiment, generated at build time from the catalog and from the paper-scale runs
committed in paper-results/, so the pages cannot drift from the code or the results; and the benchmark tables,
generated from benchmarks/results/ with the date and machine of each measurement.

Each page: what the experiment reproduces, its profiles and commands, and for every committed paper-scale run its
claims table and its summary (figures and tables copied beside the page). The index `experiments/index.md` lists
them by study.
"""

from __future__ import annotations

import json
from pathlib import Path

from mkdocs.structure.files import File, Files

from memlab.catalog import EXPERIMENTS
from memlab.cli import rebase_markdown
from memlab.files import markdown_table

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "paper-results"


def _runs() -> dict[str, list[tuple[Path, dict]]]:
    """Committed paper-scale runs by experiment: (folder, results.json)."""
    runs: dict[str, list[tuple[Path, dict]]] = {}
    for path in sorted(RESULTS.rglob("results.json")):
        if "cells" in path.parts:
            continue
        doc = json.loads(path.read_text(encoding="utf-8"))
        runs.setdefault(doc["experiment"], []).append((path.parent, doc))
    return runs


def _claims(doc: dict) -> str:
    rows = [(c["claim"], c["paper"], c["ours"], "✓" if c["holds"] else "✗") for c in doc.get("claims", [])]
    return markdown_table(["claim", "paper", "ours", "holds"], rows) if rows else ""


def _page(name: str, runs: list[tuple[Path, dict]], files: Files, config) -> str:
    exp = EXPERIMENTS[name]
    profiles = ", ".join(f"`{p}`" for p in exp.profiles)
    parts = [f"# {name}", "", f"**Reproduces:** {exp.paper_ref} of `{exp.paper}`.", "", exp.description + ".", "",
             f"**Profiles:** {profiles}.", "", "```bash", f"memlab run {name}                  # quick",
             f"memlab run {name} --profile paper  # the paper's sizes", "```", ""]
    if not runs:
        parts += ["No paper-scale run of this experiment is committed yet; `memlab run` writes its summary and "
                  "figures to `out/`.", ""]
    for folder, doc in runs:
        where = folder.relative_to(RESULTS).as_posix()
        target = f"experiments/{name}/{where.replace('/', '-')}"
        for extra in sorted(folder.iterdir()):
            if extra.suffix in (".png", ".csv", ".json"):
                files.append(File.generated(config, f"{target}/{extra.name}", abs_src_path=str(extra)))
        parts += [f"## Profile `{doc['profile']}` (`paper-results/{where}`)", "", _claims(doc)]
        summary = folder / "summary.md"
        if summary.exists():
            text, _ = rebase_markdown(summary.read_text(encoding="utf-8"), target.split("/", 1)[1])
            parts += [text.strip(), ""]
    return "\n".join(parts) + "\n"


def on_files(files: Files, config) -> Files:
    runs = _runs()
    index = ["# Experiment pages", "", "One page per experiment, generated from the catalog and the committed "
             "paper-scale runs (`paper-results/`).", ""]
    for study in ("belief", "ictd", "pissm", "recall"):
        index += [f"## {study}", ""]
        for name, exp in EXPERIMENTS.items():
            if name.startswith(study + "."):
                count = len(runs.get(name, []))
                index.append(f"- [{name}]({name}.md): {exp.paper_ref}" + (f" — {count} paper-scale run(s)"
                                                                            if count else ""))
        index.append("")
    files.append(File.generated(config, "experiments/index.md", content="\n".join(index)))
    for name in EXPERIMENTS:
        files.append(File.generated(config, f"experiments/{name}.md", content=_page(name, runs.get(name, []), files,
                                                                                       config)))
    files.append(File.generated(config, "benchmark-tables.md", content=benchmark_page()))
    return files


# ------------------------------------------------------------------------------------------------ benchmark tables


def _benchmark_date(path: Path, doc: dict) -> str:
    """The date the results were measured (recorded since issue 30), else the date git last changed the file."""
    if doc.get("date"):
        return doc["date"]
    import subprocess

    try:
        out = subprocess.run(["git", "log", "-1", "--format=%cs", "--", str(path)], capture_output=True, text=True,
                             cwd=ROOT, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return f"{out} (committed)" if out else "not recorded"


def benchmark_page() -> str:
    """Every benchmark's side-by-side ratios (``benchmarks/ratios.py``) with the date and the machine they were
    measured on, from benchmarks/results/*.json."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ratios", ROOT / "benchmarks" / "ratios.py")
    ratios = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ratios)
    parts = ["# Benchmark tables", "", "Generated from `benchmarks/results/*.json` (written by `make bench`): every "
             "implementation's speed-up over its reference and the largest difference of their outputs, with the "
             "date and the machine of the measurement. Ratios carry over between machines far better than seconds.",
             ""]
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        rows = ratios.ratio_rows(doc) if "rows" in doc else []
        if not rows:
            continue
        m = doc.get("machine", {})
        versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
        parts += [f"## {doc.get('benchmark', path.stem)}", "",
                  f"Measured {_benchmark_date(path, doc)} on {m.get('cpus', '?')} CPUs ({m.get('platform', '?')}); "
                  f"{versions}.", "", markdown_table(["workload", "sizes", "implementation", "reference", "speed-up",
                                                      "max output diff"], rows)]
    return "\n".join(parts) + "\n"

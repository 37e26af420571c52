"""MkDocs hook: one page per experiment, generated at build time from the catalog (``memlab.catalog``) and from the
paper-scale runs committed in paper-results/, so the pages cannot drift from the code or the results.

A page opens with what the paper shows (the experiment's paper reference and description), then, for every
committed paper-scale run, our main figure (the first one the run's summary shows), the claims table (the paper's
number beside ours and whether the claim holds by its stated rule) and the run's summary. An experiment with no
finished paper-scale run shows its quick profile's run the same way, from the copy in docs/quick-runs/
(tools/docs_quick_runs.py makes it from ``make reproduce``'s out/), and gives the paper profile's command. The
files of each run are copied beside its page. ``experiments/index.md`` lists the pages by study, with how many
claims hold; every page is in the navigation, under Experiments, by study.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

from memlab.catalog import EXPERIMENTS
from memlab.claims import SYMBOLS, status_of
from memlab.files import markdown_table
from memlab.report import rebase_markdown

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "paper-results"
QUICK_RUNS = ROOT / "docs" / "quick-runs"  # tools/docs_quick_runs.py
STUDIES = ("belief", "ictd", "pissm", "recall", "arena")
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_REFERENCE = re.compile(r"^- \*\*\[(\w+)\]\(studies/\w+\.md\)\*\*: [^*]*\*([^*]+?)\.\*", re.M)


@functools.cache
def paper_titles() -> dict[str, str]:
    """study -> the full title of its paper, as the Cite page's reference list gives it ("- **[belief](...)**:
    authors. *Title.* ..."), so each experiment page names its paper as the study page and the BibTeX do."""
    text = (ROOT / "docs" / "cite.md").read_text(encoding="utf-8")
    titles = {study: " ".join(title.split()) for study, title in _REFERENCE.findall(text)}
    if set(titles) != set(STUDIES) - {"arena"}:
        raise ValueError(f"docs/cite.md names the papers of {sorted(titles)}, not of every paper study")
    return titles


def _runs() -> dict[str, list[tuple[Path, dict]]]:
    """Committed paper-scale runs by experiment: (folder, results.json)."""
    runs: dict[str, list[tuple[Path, dict]]] = {}
    for path in sorted(RESULTS.rglob("results.json")):
        if "cells" in path.parts:
            continue
        doc = json.loads(path.read_text(encoding="utf-8"))
        runs.setdefault(doc["experiment"], []).append((path.parent, doc))
    return runs


def _unfinished() -> dict[str, list[tuple[Path, str]]]:
    """Run folders that hold a config.json but no results.json yet: (folder, profile) by experiment."""
    started: dict[str, list[tuple[Path, str]]] = {}
    for path in sorted(RESULTS.rglob("config.json")):
        if "cells" in path.parts or (path.parent / "results.json").exists():
            continue
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("experiment") in EXPERIMENTS:
            started.setdefault(doc["experiment"], []).append((path.parent, doc.get("profile", "?")))
    return started


def _held(doc: dict) -> str:
    """'5 of 6 claims hold (1 not decided); 2 of memlab's own checks hold' (memlab.claims's statuses)."""
    claims = doc.get("claims", [])
    if not claims:
        return "no claims"
    parts = []
    for by, words in (("paper", "claims hold"), ("memlab", "of memlab's own checks hold")):
        mine = [status_of(c, doc.get("profile", "")) for c in claims if c.get("by", "paper") == by]
        if mine:
            undecided = mine.count("undecided")
            parts.append(f"{mine.count('holds')} of {len(mine)} {words}"
                         + (f" ({undecided} not decided)" if undecided else ""))
    return "; ".join(parts)


def _claims(doc: dict) -> str:
    def text(value) -> str:  # claims are plain text: θ* is not the start of an emphasis
        return str(value).replace("*", r"\*")

    rows = [(text(c["claim"]) + (" (memlab's check)" if c.get("by") == "memlab" else ""), text(c["paper"]),
             text(c["ours"]), SYMBOLS[status_of(c, doc.get("profile", ""))]) for c in doc.get("claims", [])]
    return markdown_table(["claim", "paper", "ours", "status"], rows) if rows else ""


def _main_figure(folder: Path, summary: str) -> tuple[str, str] | None:
    """(caption, file name) of the run's main figure: the first its summary shows, else its first PNG."""
    for caption, target in _IMAGE.findall(summary):
        if (folder / target).is_file():
            return caption, target
    pngs = sorted(folder.glob("*.png"))
    return (pngs[0].stem, pngs[0].name) if pngs else None


def _summary(text: str, where: str, hidden: str | None) -> str:
    """The run's summary under the run's heading: its title line dropped (the page has one), the main figure (shown
    above it) replaced by a pointer, links rebased to the page, headings demoted."""
    lines = text.strip().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    if hidden:  # the main figure's place in the summary says where it went
        lines = [_IMAGE.sub(lambda m: f"*({m.group(1)}: the figure at the top of this run.)*"
                            if m.group(2) == hidden else m.group(0), line) for line in lines]
    body, _ = rebase_markdown("\n".join(lines), where)
    return f"### Summary\n\n{body.strip()}\n"


def _quick_run(name: str) -> tuple[Path, dict] | None:
    """The committed copy of the experiment's quick run (folder, results.json), if any."""
    path = QUICK_RUNS / name / "results.json"
    return (path.parent, json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None


def _run_section(name: str, folder: Path, doc: dict, files: Files, config) -> list[str]:
    quick = folder.is_relative_to(QUICK_RUNS)
    where = folder.relative_to(QUICK_RUNS.parent if quick else RESULTS).as_posix()
    target = f"experiments/{name}/{where.replace('/', '-')}"
    for extra in sorted(folder.iterdir()):
        if extra.suffix in (".png", ".csv", ".json"):
            files.append(File.generated(config, f"{target}/{extra.name}", abs_src_path=str(extra)))
    local = target.split("/", 1)[1]  # the page sits in experiments/, its run's files in experiments/<local>/
    summary_path = folder / "summary.md"
    summary = summary_path.read_text(encoding="utf-8") if summary_path.exists() else ""
    figure = _main_figure(folder, summary)
    changes = doc.get("overrides", [])  # a profile restricted with --set (e.g. to the tasks that have finished)
    restricted = f", restricted to {', '.join(f'`{c}`' for c in changes)}" if changes else ""
    command = " ".join([f"memlab run {name} --profile {doc['profile']}", *(f"--set {c}" for c in changes)])
    kind = "Quick run" if quick else "Paper-scale run"
    parts = [f"## {kind}: profile `{doc['profile']}`{restricted} ({_held(doc)})", ""]
    if figure:
        caption, image = figure
        origin = f"`docs/{where}`" if quick else f"`paper-results/{where}`"
        parts += [f"![{caption}]({local}/{image})", "", f"*Ours: {caption}* — {origin}, made by `{command}`.", ""]
    parts += ["### Claims", "", _claims(doc) or "This run states no claims.", ""]
    if summary:
        parts += [_summary(summary, local, figure[1] if figure else None)]
    return parts


def _page(name: str, runs: list[tuple[Path, dict]], unfinished: list[tuple[Path, str]], files: Files, config) -> str:
    exp = EXPERIMENTS[name]
    study = name.split(".")[0]
    titles = paper_titles()
    paper = (f"{exp.paper_ref} of *{titles[study]}*" if study in titles
             else "none alone: the arena stands above the four")
    parts = [f"# {name}", "", f"**The paper:** {paper} ([{study} study](../studies/{study}.md), "
             f"[how to cite it](../cite.md)): {exp.description}.", ""]
    quick = None if runs else _quick_run(name)
    if quick:
        runs = [quick]
        parts += ['!!! note "The quick profile\'s run: no paper-scale run is committed yet"', "",
                  "    Below is this experiment's `quick` profile: the same code at reduced sizes (fewer seeds, steps "
                  "or tasks; minutes on a laptop), so a claim marked ✗ size fails at this size only and the paper "
                  f"profile decides it. This command computes the paper-scale run (into `out/{name}/paper/`):", "",
                  f"        memlab run {name} --profile paper", ""]
    elif not runs:
        parts += ['!!! note "No paper-scale run is committed yet"', "",
                  "    `paper-results/` holds no finished paper-scale run of this experiment, so this page has no "
                  "figure or claims table yet. This command computes them (the summary, the figures and "
                  f"`results.json` with the claims go to `out/{name}/paper/`):", "",
                  f"        memlab run {name} --profile paper", ""]
    parts += [f"A `{profile}` run has started but not finished: `paper-results/"
              f"{folder.relative_to(RESULTS).as_posix()}/` holds its config; its finished cells are in "
              "`paper-results/cells/`." for folder, profile in unfinished] + [""]
    for folder, doc in runs:
        parts += _run_section(name, folder, doc, files, config)
    profiles = ", ".join(f"`{p}`" for p in exp.profiles)
    parts += ["## Run it", "", f"Profiles: {profiles} ([Running experiments](../running.md)).", "", "```bash",
              f"memlab run {name}                  # quick", f"memlab run {name} --profile paper  # the paper's sizes",
              "```", ""]
    return "\n".join(parts)


def _index(runs: dict[str, list[tuple[Path, dict]]]) -> str:
    lines = ["# Experiment pages", "", "One page per experiment, generated from the catalog and the committed "
             "paper-scale runs (`paper-results/`): the paper's claim, our figure, the claims table and the summary. "
             "An experiment without a paper-scale run shows its `quick` profile's run instead (`docs/quick-runs/`).",
             ""]
    for study in STUDIES:
        lines += [f"## {study}", ""]
        for name, exp in EXPERIMENTS.items():
            if name.startswith(study + "."):
                held = "; ".join(f"`{doc['profile']}`: {_held(doc)}" for _, doc in runs.get(name, []))
                quick = None if held else _quick_run(name)
                if quick:
                    held = f"no paper-scale run yet; the `quick` run: {_held(quick[1])}"
                lines.append(f"- [{name}]({name}.md): {exp.paper_ref} — " + (held or "no paper-scale run yet"))
        lines.append("")
    return "\n".join(lines)


def on_config(config):
    """Every experiment page in the navigation: under Experiments, one section per study."""
    for section in config.nav:
        if isinstance(section, dict) and "Experiments" in section:
            section["Experiments"] += [
                {study: [{name: f"experiments/{name}.md"} for name in EXPERIMENTS if name.startswith(study + ".")]}
                for study in STUDIES]
            return config
    raise ValueError("mkdocs.yml's nav has no Experiments section to list the experiment pages in")


def on_files(files: Files, config) -> Files:
    runs, unfinished = _runs(), _unfinished()
    files.append(File.generated(config, "experiments/index.md", content=_index(runs)))
    for name in EXPERIMENTS:
        page = _page(name, runs.get(name, []), unfinished.get(name, []), files, config)
        files.append(File.generated(config, f"experiments/{name}.md", content=page))
    return files

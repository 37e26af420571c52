"""``memlab report``: every summary.md under a folder gathered into one report.md, with each claim's verdict.

A claim's verdict is its own run's status (:mod:`memlab.claims`) unless a paper-scale run of the same experiment
(under ``paper-results/``; where that folder is absent, as for a wheel, the bundle of their claims memlab ships,
``memlab.paper_claims``) records the same claim: that run decides it (``claims.decisive_status``), so a quick run's
"fails at this size" is shown only where no paper-scale run exists. The counts at the top of the report are of these
verdicts, the papers' claims and memlab's own checks apart.
"""

from __future__ import annotations

import json
import posixpath
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from memlab.claims import (
    BY,
    LEGEND,
    STATUSES,
    SYMBOLS,
    decisive_status,
    is_paper_scale,
    paper_profile_rank,
    status_counts,
    status_of,
)
from memlab.files import atomic_write_text, compile_share, markdown_table

__all__ = ["MARKER", "build_report", "check_report_target", "check_results", "duration", "megabytes",
           "paper_scale_runs", "paper_scale_verdicts", "rebase_markdown", "read_results"]

MARKER = "<!-- written by memlab report; the next memlab report rewrites this file -->"  # report.md's first line

_LINK = re.compile(r"(!?\[[^\]]*\])\(([^)\s]+)((?:\s+\"[^\"]*\")?)\)")  # [text](target "title")
_ABSOLUTE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:|/|#)")  # URL scheme, absolute path or anchor
_CLAIM_FIELDS = ("id", "claim", "paper", "ours", "holds")


def duration(seconds: float) -> str:
    """'12.3 s' below two minutes, else '5 min 02 s'."""
    return f"{seconds:.1f} s" if seconds < 120 else f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


def megabytes(mb: float | None) -> str:
    """A peak RSS for people: '812 MB', '2.3 GB'; '?' for runs recorded before memlab kept it."""
    if mb is None:
        return "?"
    return f"{mb / 1024:.1f} GB" if mb >= 1024 else f"{mb:.0f} MB"


def cell_time(cells: dict) -> str:
    """The summed compute time of an experiment's cells and the share spent compiling (``files.compile_share``):
    '5 min 2 s (71 %)'; without the share if no cell recorded it; '?' if no cell time is known."""
    seconds = cells.get("seconds", {})
    if not any(s is not None for s in seconds.values()):
        return "?"
    compiling = cells.get("compile_seconds", {})
    share = compile_share((s, compiling.get(name)) for name, s in seconds.items())
    return duration(sum(s for s in seconds.values() if s is not None)) + (
        f" ({100 * share:.0f} %)" if share is not None else "")


def rebase_markdown(markdown: str, folder: str) -> tuple[str, set[str]]:
    """Rewrite relative link targets so they resolve from one level up, and demote headings by two levels.

    Returns the new text and the set of rewritten targets (to know which images are already shown).
    """
    targets: set[str] = set()

    def link(m: re.Match) -> str:
        target = m.group(2)
        if _ABSOLUTE.match(target):
            return m.group(0)
        target = posixpath.normpath(posixpath.join(folder, target))
        targets.add(target)
        return f"{m.group(1)}({target}{m.group(3)})"

    lines, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            line = _LINK.sub(link, line)
            if re.match(r"#{1,4}\s", line):
                line = "##" + line
        lines.append(line)
    return "\n".join(lines), targets


def check_results(doc) -> dict:
    """A results document as memlab run writes it (claims an empty list if absent); ValueError saying what is
    wrong with it."""
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in ("experiment", "profile",
                                                                                   "paper_ref")):
        raise ValueError("no experiment, profile and paper_ref")
    claims = doc.get("claims", [])
    if not isinstance(claims, list) or not all(isinstance(c, dict) and set(_CLAIM_FIELDS) <= set(c)
                                               for c in claims):
        raise ValueError(f"its claims are not a list of {{{', '.join(_CLAIM_FIELDS)}}}")
    if not isinstance(doc.get("cells", {}), dict) or not isinstance(doc.get("elapsed_s", 0.0), (int, float)):
        raise ValueError("its cells or elapsed_s are not what memlab run writes")
    if not isinstance(doc.get("overrides", []), list) or not all(isinstance(o, str) for o in doc.get("overrides", [])):
        raise ValueError("its overrides are not a list of FIELD=VALUE strings")
    return {**doc, "claims": claims}


def read_results(path: Path) -> dict | None:
    """A results.json as the report reads it, or None after one line on stderr naming the file and what is wrong
    with it (the report is then written from the others)."""
    try:
        return check_results(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        print(f"memlab: {path} is not a memlab results file ({e}); the report leaves it out", file=sys.stderr)
        return None


def paper_scale_runs(paper_root: Path) -> list[tuple[str, dict]]:
    """(folder, results document) of each paper-scale run under the folder ``paper_root`` (each results.json,
    ``read_results``; the folder relative to ``paper_root``), or, when ``paper_root`` is a file, of each run in a
    bundle of them (``memlab.paper_claims``: what a wheel ships); a damaged bundle is one line on stderr, no runs."""
    if paper_root.is_file():
        try:
            bundle = json.loads(paper_root.read_text(encoding="utf-8"))
            if not isinstance(bundle, dict) or not isinstance(bundle.get("runs"), list):
                raise ValueError("no list of runs")
            runs = [(str(doc.get("folder", "?")), check_results(doc)) for doc in bundle["runs"]]
        except (OSError, ValueError) as e:
            print(f"memlab: {paper_root} is not a bundle of paper-scale claims ({e}); the report shows no "
                  "paper-scale verdicts", file=sys.stderr)
            return []
    else:
        runs = [(path.parent.relative_to(paper_root).as_posix(), read_results(path))
                for path in sorted(paper_root.rglob("results.json"))]
    return [(folder, doc) for folder, doc in runs if doc is not None and is_paper_scale(doc["profile"])]


def paper_scale_verdicts(paper_root: Path | None, root: Path) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """experiment -> claim id -> [(profile, status), ...] of the paper-scale runs under ``paper_root``, a folder of
    runs or a bundle file (``paper_scale_runs``; none when it is ``root`` itself or missing)."""
    verdicts: dict[str, dict[str, list[tuple[str, str]]]] = {}
    if paper_root is None or not paper_root.exists() or paper_root.resolve() == root.resolve():
        return verdicts
    for _, doc in paper_scale_runs(paper_root):
        for c in doc["claims"]:
            verdicts.setdefault(doc["experiment"], {}).setdefault(c["id"], []).append(
                (doc["profile"], status_of(c, doc["profile"])))
    return verdicts


def run_name(doc: dict) -> str:
    """'experiment (profile)', or 'experiment (profile, --set a=1 b=2)' for a run with --set changes."""
    changed = f", --set {' '.join(doc['overrides'])}" if doc.get("overrides") else ""
    return f"{doc['experiment']} ({doc['profile']}{changed})"


def _section_heading(summary: str, doc: dict | None, folder: str) -> tuple[str, str]:
    """The experiment's report heading and its summary without the summary's own title (shown once, not twice)."""
    if doc is None:  # no results to name it: the folder, and the summary as it is
        return folder, summary
    lines = summary.splitlines()
    title = lines[0][2:].strip() if lines and lines[0].startswith("# ") else ""
    body = "\n".join(lines[1:]) if title else summary
    name = doc["experiment"]
    rest = title[len(name):].strip(" —-:") if title.startswith(name) else title
    heading = run_name(doc) + (f" — {rest}" if rest else "")
    if doc["paper_ref"] in heading:
        return heading, body.strip()
    return heading, f"*Paper: {doc['paper_ref']}.*\n\n{body.strip()}"


def _counts_line(verdicts: list[tuple[str, str]]) -> list[str]:
    """'- The papers' claims: 12 claims: ... .' and, if any, "- memlab's own checks: ..." ((by, verdict) pairs)."""
    return [f"- {BY[by]}: {status_counts(v for b, v in verdicts if b == by)}."
            for by in BY if any(b == by for b, _ in verdicts)]


def _verdicts(documents: dict, paper: dict) -> tuple[dict, dict]:
    """Per results.json, claim by claim: the run's own status, and the verdict that decides the claim."""
    statuses, decided = {}, {}
    for path, doc in documents.items():
        if doc is None:
            continue
        statuses[path] = [status_of(c, doc["profile"]) for c in doc["claims"]]
        scale = paper.get(doc["experiment"], {})
        # a paper-scale run being reported keeps its own verdicts (it is itself the evidence)
        decided[path] = statuses[path] if is_paper_scale(doc["profile"]) else [
            decisive_status(s, scale.get(c["id"], [])) for c, s in zip(doc["claims"], statuses[path])]
    return statuses, decided


def _timing_table(documents: Iterable[dict]) -> str:
    """The time, cells, memory and executor of each run's last invocation, as Markdown."""
    rows = []
    for doc in documents:
        cells = doc.get("cells", {})
        rows.append((doc["experiment"], "+".join([doc["profile"], *doc.get("overrides", [])]),
                     duration(float(doc.get("elapsed_s", 0.0))),
                     cells.get("computed", "?"), cells.get("resumed", "?"), cell_time(cells),
                     doc.get("executor", "local"), megabytes(doc.get("peak_rss_mb"))))
    return markdown_table(["experiment", "profile", "time", "cells computed", "cells resumed",
                           "cell time (compiling)", "executor", "peak memory"], rows)


def _claims_table(doc: dict, statuses: list[str], decided: list[str], scale: dict) -> list[str]:
    """A run's claims: each with its status and, where paper-scale runs of the experiment exist, their verdicts
    and the one that decides."""
    rows = [(c["id"] + (" (memlab's check)" if c.get("by") == "memlab" else ""), c["claim"], c["paper"],
             c["ours"], SYMBOLS[status] + (f" — {c['explained']}" if c.get("explained") else ""),
             *([", ".join(f"{p} {SYMBOLS[v]}" for p, v in sorted(scale.get(c["id"], []),
                                                                key=lambda pv: paper_profile_rank(pv[0])))
                or "—",
                SYMBOLS[verdict]] if scale else []))
            for c, status, verdict in zip(doc["claims"], statuses, decided, strict=True)]
    return [f"### Claims of {run_name(doc)}", "",
            markdown_table(["id", "claim", "paper", "ours", "status",
                            *(["paper-scale run", "verdict"] if scale else [])], rows), ""]


def check_report_target(root: Path) -> None:
    """ValueError if ``root/report.md`` exists and memlab did not write it (its first line is not :data:`MARKER`,
    nor the title reports had before the marker): it is the user's, and a report never overwrites it."""
    path = root / "report.md"
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = f.readline().rstrip("\n")
    except FileNotFoundError:
        return
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    if first not in (MARKER, "# memlab report"):
        raise ValueError(f"{path} was not written by memlab report; move it away or report into another folder")


def build_report(root: Path, paper_root: Path | None = None) -> tuple[Path, str]:
    """Gather every summary.md under ``root`` into ``root/report.md``, one section per experiment: its summary,
    figures and claims, each claim with its run's status, the verdicts of the paper-scale runs of the same
    experiment under ``paper_root`` and the verdict that decides it (module doc).

    Returns the report's path and a Markdown table of the time each experiment's last invocation took. ValueError
    (nothing written) if ``root/report.md`` is not one memlab wrote (:func:`check_report_target`).
    """
    if not root.is_dir():
        raise ValueError(f"no such folder {root}; run an experiment first (memlab run NAME)")
    check_report_target(root)
    summaries = sorted(root.rglob("summary.md"))
    if not summaries:
        raise ValueError(f"no summary.md under {root}; run an experiment first (memlab run NAME)")

    documents = {path: read_results(path) for path in sorted(root.rglob("results.json"))}
    paper = paper_scale_verdicts(paper_root, root)
    paper = {name: v for name, v in paper.items() if any(d and d["experiment"] == name for d in documents.values())}
    statuses, decided = _verdicts(documents, paper)
    contents = [(run_name(documents[path]), len(verdicts),
                 *(verdicts.count(s) or "" for s in STATUSES)) for path, verdicts in decided.items()]
    timing = _timing_table(documents[path] for path in decided)
    legend = "; ".join(f"{SYMBOLS[s]}: {LEGEND[s]}" for s in STATUSES)
    every = [(c.get("by", "paper"), v) for path, verdicts in decided.items()
             for c, v in zip(documents[path]["claims"], verdicts)]
    source = f"`{paper_root}`" if paper_root is None or paper_root.is_dir() else (
        f"the paper-scale claims bundled with memlab ({paper_root.name})")
    where = (f" Where {source} holds a `paper` or `paper-core` run of an experiment, its verdict decides the "
             "claim (the `verdict` column and these counts); other paper-scale profiles change the paper's setting "
             "and are shown beside it only; a claim no deciding run has recorded keeps this run's status." if paper
             else "")
    parts = [MARKER, "# memlab report", "", *(_counts_line(every) or ["No claims."]), "",
             f"Statuses: {legend}.{where}", ""]
    if contents:
        parts += [markdown_table(["experiment", "claims", *(SYMBOLS[s] for s in STATUSES)], contents), ""]

    for summary in summaries:
        folder = summary.parent.relative_to(root).as_posix()
        results = summary.parent / "results.json"
        doc = documents.get(results)
        heading, body = _section_heading(summary.read_text(encoding="utf-8"), doc, folder)
        text, shown = rebase_markdown(body, folder)
        parts += [f"## {heading}", "", text.strip(), ""]
        for png in sorted(summary.parent.rglob("*.png")):
            target = posixpath.normpath(posixpath.join(folder, png.relative_to(summary.parent).as_posix()))
            if target not in shown:
                parts += [f"![{png.stem}]({target})", ""]
        if doc is not None and doc["claims"]:
            parts += _claims_table(doc, statuses[results], decided[results], paper.get(doc["experiment"], {}))
    parts += ["## Time per experiment", "", "The last invocation of each run (a resumed run skips finished cells).",
              "", timing]
    return atomic_write_text(root / "report.md", "\n".join(parts)), timing

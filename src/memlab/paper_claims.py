"""The claims of the committed paper-scale runs, shipped with memlab: every paper-scale results.json under
``paper-results/`` reduced to its experiment, profile and claims, in one small JSON file of package data
(``paper_claims.json``), so ``memlab report`` installed from a wheel, with no clone and no ``paper-results/``, still
sets each claim's paper-scale verdict beside a run's own (``memlab.report.paper_scale_runs`` reads either).

The file is generated, never edited: ``python -m memlab.paper_claims`` (``make paper-claims``) rewrites it from
``paper-results/``, and tests/test_paper_claims.py fails while it differs from what that command would write.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from memlab.claims import status_of
from memlab.files import atomic_write_text
from memlab.report import paper_scale_runs

__all__ = ["PACKAGED", "bundle", "bundle_text", "main"]

PACKAGED = Path(__file__).with_name("paper_claims.json")  # package data (pyproject.toml)
_RUN_FIELDS = ("experiment", "profile", "overrides", "paper_ref")
_CLAIM_FIELDS = ("id", "claim", "paper", "ours", "holds", "status", "by", "explained", "missing")


def bundle(paper_root: Path) -> dict:
    """{"source", "runs": [...]}: each paper-scale run under ``paper_root`` (sorted by folder) with its folder
    relative to ``paper_root``, the fields that name it and its claims, each with its status (what the report and a
    reader of a claim need)."""
    runs = []
    for folder, doc in paper_scale_runs(paper_root):
        run = {"folder": folder, **{k: doc[k] for k in _RUN_FIELDS if k in doc}}
        # the status as the report reads it (results written before statuses existed carry only "holds")
        run["claims"] = [{**{k: c[k] for k in _CLAIM_FIELDS if k in c}, "status": status_of(c, doc["profile"])}
                         for c in doc["claims"]]
        runs.append(run)
    return {"source": paper_root.name, "runs": runs}


def bundle_text(paper_root: Path) -> str:
    """The bundle as the file holds it: stable key order, one claim field per line, UTF-8 text."""
    return json.dumps(bundle(paper_root), indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memlab.paper_claims", description=__doc__.split("\n\n")[0])
    parser.add_argument("paper_results", nargs="?", default="paper-results", help="the committed paper-scale runs")
    parser.add_argument("--out", default=str(PACKAGED), help=f"the bundle to write (default {PACKAGED})")
    args = parser.parse_args(argv)
    root = Path(args.paper_results)
    if not root.is_dir():
        print(f"memlab: no folder {root}: give the repository's paper-results/", file=sys.stderr)
        return 2
    text = bundle_text(root)
    atomic_write_text(Path(args.out), text)
    print(f"{args.out}: the claims of {len(json.loads(text)['runs'])} paper-scale runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

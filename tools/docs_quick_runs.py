"""The quick runs the documentation shows: for every experiment with no committed paper-scale run, its quick
profile's run (figures, claims with their verdicts, summary), copied from ``out/`` (``make reproduce``) into
``docs/quick-runs/<experiment>/``, where the experiment's page (docs/hooks/experiment_pages.py) shows it in place
of the paper-scale run it does not have yet.

    python tools/docs_quick_runs.py [OUT]        (make docs-quick-runs; OUT defaults to out)

The copies are generated, never edited: ``manifest.json`` records the SHA-256 of every file copied, and
tests/test_docs_quick_runs.py fails when a copy differs from its manifest, when its config is no longer the quick
profile's, or when an experiment without a paper-scale run has no copy. Copies of experiments that have gained a
paper-scale run are removed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

from memlab.catalog import EXPERIMENTS
from memlab.report import paper_scale_runs

ROOT = Path(__file__).resolve().parents[1]
QUICK_RUNS = ROOT / "docs" / "quick-runs"
MANIFEST = QUICK_RUNS / "manifest.json"
PROFILE = "quick"


def without_paper_scale_run(paper_root: Path = ROOT / "paper-results") -> list[str]:
    """The experiments no committed paper-scale run covers, in catalog order."""
    covered = {doc["experiment"] for _, doc in paper_scale_runs(paper_root)}
    return [name for name in EXPERIMENTS if name not in covered]


def run_files(folder: Path) -> list[Path]:
    """What the page shows of a run folder: its config, results, summary and figures."""
    return [folder / "config.json", folder / "results.json", folder / "summary.md", *sorted(folder.glob("*.png"))]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copy_quick_runs(out: Path, names: list[str]) -> dict:
    """Copy out/<name>/quick of each name into QUICK_RUNS/<name> (refusing a run that has not finished) and
    return the manifest: experiment -> file name -> SHA-256."""
    missing = [name for name in names if not (out / name / PROFILE / "results.json").is_file()]
    if missing:
        raise ValueError(f"no finished quick run in {out} of {', '.join(missing)}; run `memlab reproduce "
                         f"{' '.join(missing)} --out {out}` first")
    manifest = {}
    for name in names:
        target = QUICK_RUNS / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for source in run_files(out / name / PROFILE):
            shutil.copyfile(source, target / source.name)
        manifest[name] = {p.name: digest(p) for p in run_files(target)}
    for stale in QUICK_RUNS.iterdir():  # an experiment that has gained a paper-scale run
        if stale.is_dir() and stale.name not in names:
            shutil.rmtree(stale)
    return manifest


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "out")
    try:
        manifest = copy_quick_runs(out, without_paper_scale_run())
    except ValueError as e:
        print(f"memlab: {e}", file=sys.stderr)
        return 2
    MANIFEST.write_text(json.dumps({"profile": PROFILE, "runs": manifest}, indent=1) + "\n", encoding="utf-8")
    print(f"{QUICK_RUNS}: the quick runs of {', '.join(manifest) or 'no experiment'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

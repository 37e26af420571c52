"""The committed paper-scale claims ship with memlab (memlab.paper_claims): the packaged bundle is what its command
writes from paper-results/ today, it holds every paper-scale claim with its status, the wheel carries it, and
``memlab report`` takes the paper-scale verdicts from it where no paper-results/ folder is at hand."""

import fnmatch
import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from memlab import cli
from memlab.claims import SYMBOLS, status_of
from memlab.paper_claims import PACKAGED, bundle_text

ROOT = Path(__file__).resolve().parents[1]
PAPER_RESULTS = ROOT / "paper-results"


def test_packaged_bundle_is_what_the_command_writes_from_paper_results():
    assert PACKAGED.read_text(encoding="utf-8") == bundle_text(PAPER_RESULTS), (
        "src/memlab/paper_claims.json is stale: run `make paper-claims` (python -m memlab.paper_claims)")


def test_bundle_holds_every_paper_scale_claim_with_its_status():
    expected = set()  # read from the run folders directly, not through memlab.report
    for path in PAPER_RESULTS.rglob("results.json"):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc["profile"].startswith("paper"):
            expected |= {(path.parent.relative_to(PAPER_RESULTS).as_posix(), doc["experiment"], doc["profile"],
                          c["id"], c["claim"], c["holds"], status_of(c, doc["profile"])) for c in doc["claims"]}
    runs = json.loads(PACKAGED.read_text(encoding="utf-8"))["runs"]
    packaged = {(r["folder"], r["experiment"], r["profile"], c["id"], c["claim"], c["holds"], c["status"])
                for r in runs for c in r["claims"]}
    assert expected and packaged == expected


def _quick_run(root: Path, experiment: str, claim: dict) -> None:
    """A finished quick run of ``experiment`` whose one claim fails at this size."""
    folder = root / experiment / "quick"
    folder.mkdir(parents=True)
    (folder / "summary.md").write_text(f"# {experiment}\n\nA quick run.\n")
    mine = {**{k: claim[k] for k in ("id", "claim", "paper")}, "ours": "too few", "holds": False, "status": "size"}
    (folder / "results.json").write_text(json.dumps({"experiment": experiment, "profile": "quick",
                                                     "paper_ref": "Fig. 1", "claims": [mine]}))


def _a_paper_run_claim() -> tuple[str, str, dict]:
    path = PAPER_RESULTS / "belief.error-vs-epsilon" / "paper" / "results.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    return doc["experiment"], doc["profile"], doc["claims"][0]


def test_report_without_paper_results_takes_the_packaged_verdicts(tmp_path, monkeypatch, capsys):
    experiment, profile, claim = _a_paper_run_claim()
    monkeypatch.chdir(tmp_path)  # as after `pip install memlab`: no paper-results/ here
    _quick_run(tmp_path / "out", experiment, claim)
    assert cli.main(["report", "out"]) == 0
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    verdict = SYMBOLS[status_of(claim, profile)]
    assert "| id | claim | paper | ours | status | paper-scale run | verdict |" in report
    assert f"| too few | {SYMBOLS['size']} | {profile} {verdict} | {verdict} |" in report
    assert "the paper-scale claims bundled with memlab (paper_claims.json)" in report
    capsys.readouterr()


def test_report_reads_a_bundle_given_and_names_a_damaged_one(tmp_path, capsys):
    experiment, profile, claim = _a_paper_run_claim()
    _quick_run(tmp_path / "out", experiment, claim)
    assert cli.main(["report", str(tmp_path / "out"), "--paper-results", str(PACKAGED)]) == 0
    assert f"| {profile} {SYMBOLS[status_of(claim, profile)]} |" in (tmp_path / "out" / "report.md").read_text()
    damaged = tmp_path / "claims.json"
    damaged.write_text('{"runs": [{"experiment": "x"}]}')
    capsys.readouterr()
    assert cli.main(["report", str(tmp_path / "out"), "--paper-results", str(damaged)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(damaged) in err[0] and "not a bundle of paper-scale claims" in err[0]
    assert "paper-scale run" not in (tmp_path / "out" / "report.md").read_text()


def test_package_data_names_the_bundle():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    assert any(fnmatch.fnmatch(PACKAGED.name, pattern) for pattern in data["memlab"])


@pytest.mark.slow
def test_wheel_carries_the_bundle_the_summaries_and_the_license(tmp_path):
    """Builds the wheel as pip does (an isolated build environment: it fetches setuptools)."""
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = tmp_path.glob("memlab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "memlab/paper_claims.json" in names
    assert any(n.startswith("memlab/belief/experiments/summaries/") for n in names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in metadata

"""The quick runs the experiment pages show (docs/quick-runs/, made by tools/docs_quick_runs.py from `make
reproduce`'s out/): every experiment without a committed paper-scale run has one, each is the run of today's quick
profile, and each file is what the command copied (its manifest), not edited by hand."""

import hashlib
import importlib.util
import json
import re
from pathlib import Path

import pytest

from memlab.catalog import EXPERIMENTS
from memlab.files import to_jsonable

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_quick_runs", ROOT / "tools" / "docs_quick_runs.py")
quick_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quick_runs)
MANIFEST = json.loads(quick_runs.MANIFEST.read_text(encoding="utf-8"))["runs"]


def test_every_experiment_without_a_paper_scale_run_has_its_quick_run():
    missing = set(quick_runs.without_paper_scale_run()) - set(MANIFEST)
    assert not missing, f"run `make reproduce` then `make docs-quick-runs` for {sorted(missing)}"


def test_an_experiment_is_without_a_paper_scale_run_until_one_is_committed(tmp_path):
    run = tmp_path / "belief.error-vs-time" / "paper"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({"experiment": "belief.error-vs-time", "profile": "paper",
                                                  "paper_ref": "Fig. 7", "claims": []}))
    assert "belief.error-vs-time" not in quick_runs.without_paper_scale_run(tmp_path)
    assert quick_runs.without_paper_scale_run(tmp_path / "none") == list(EXPERIMENTS)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_quick_run_is_what_the_command_copied(name):
    folder = quick_runs.QUICK_RUNS / name
    assert {p.name for p in folder.iterdir()} == set(MANIFEST[name])
    for file, digest in MANIFEST[name].items():
        assert hashlib.sha256((folder / file).read_bytes()).hexdigest() == digest, f"{name}/{file} was edited"


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_quick_run_is_of_todays_quick_profile(name):
    folder = quick_runs.QUICK_RUNS / name
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    quick = json.loads(json.dumps(to_jsonable(EXPERIMENTS[name].profiles["quick"])))
    assert (config["experiment"], config["profile"], results["experiment"], results["profile"]) == (
        name, "quick", name, "quick")
    assert config["config"] == results["config"] == quick, (
        f"the quick profile of {name} changed: rerun it (make reproduce) and `make docs-quick-runs`")
    summary = (folder / "summary.md").read_text(encoding="utf-8")
    for image in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", summary):
        assert (folder / image).is_file(), f"{name}'s summary shows {image}, which the copy lacks"

"""Tests for the memlab command, called in-process: list, run, report, error paths, interrupt and resume."""

import json
import re

import pytest

from memlab import cli
from memlab.report import MARKER


@pytest.fixture(autouse=True)
def state(fake_lab):
    return fake_lab.STATE


def run(*args):
    return cli.main(["run", *args, "--no-progress"])


def assert_one_error_line(capsys, *fragments):
    err = capsys.readouterr().err
    assert err.startswith("memlab: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def test_list_shows_every_experiment(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for text in ["fake.means", "fake.other", "Fig. 0", "random means"]:
        assert text in out
    assert cli.main(["list", "--names"]) == 0
    assert capsys.readouterr().out.splitlines() == ["fake.means", "fake.other"]


def test_run_writes_outputs_and_prints_folder(tmp_path, capsys):
    out = tmp_path / "o"
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 0
    line, claims = capsys.readouterr().out.strip().splitlines()
    pattern = re.escape(str(out)) + (r"  \(\d+\.\d s; 4 cells computed, 0 resumed, executor local; "
                                     r"peak memory (\d+ MB|\d+\.\d GB)\)")
    assert re.fullmatch(pattern, line), line
    # the tiny profile has 4 cells: "at least 5 cells" fails
    assert claims == ("2 claims: 1 hold, 1 fail at this size (the paper profile decides); not holding: cells-enough "
                      f"(size) (summary: {out / 'summary.md'})")
    for name in ["config.json", "results.json", "summary.md", "means.png", "means.csv"]:
        assert (out / name).is_file(), name


def test_run_default_folder_and_seed_flag(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run("fake.means", "--profile", "tiny", "--seed", "5") == 0
    config = json.loads((tmp_path / "out/fake.means/tiny/config.json").read_text())
    assert config["config"]["seed"] == 5 and config["profile"] == "tiny"


def test_a_run_with_set_changes_is_named_by_them_in_its_folder_summary_and_report(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run("fake.means", "--profile", "tiny", "--set", "n_cells=2", "--set", "size=5") == 0
    out = tmp_path / "out/fake.means/tiny+n_cells=2+size=5"
    assert json.loads((out / "results.json").read_text())["overrides"] == ["n_cells=2", "size=5"]
    summary = (out / "summary.md").read_text().splitlines()
    assert summary[:3] == ["# Fake experiment", "", "*The tiny profile with --set `n_cells=2`, `size=5`.*"]
    assert run("fake.means", "--profile", "tiny") == 0  # the profile's own folder stays the profile's
    assert not (tmp_path / "out/fake.means/tiny/summary.md").read_text().count("--set")
    assert cli.main(["report", "out"]) == 0
    report = (tmp_path / "out/report.md").read_text()
    assert "## fake.means (tiny, --set n_cells=2 size=5) — Fake experiment" in report
    assert "### Claims of fake.means (tiny, --set n_cells=2 size=5)" in report and "## fake.means (tiny)" in report
    assert run("fake.means", "--profile", "tiny", "--set", "n_cells=3", "--out", "mine") == 0  # --out as given
    assert (tmp_path / "mine/results.json").exists()
    capsys.readouterr()
    assert run("fake.means", "--profile", "tiny", "--out", "") == 2
    assert_one_error_line(capsys, "argument --out: an empty folder name")


def test_report_and_reproduce_never_overwrite_a_report_md_memlab_did_not_write(tmp_path, capsys, monkeypatch):
    root = tmp_path / "out"
    assert run("fake.means", "--profile", "tiny", "--out", str(root / "fake.means/tiny")) == 0
    mine = root / "report.md"
    mine.write_text("# My notes on these runs\n")
    capsys.readouterr()
    assert cli.main(["report", str(root)]) == 2
    assert_one_error_line(capsys, f"{mine} was not written by memlab report; move it away")
    monkeypatch.setattr("memlab.reproduce.reproduce", lambda *a, **k: pytest.fail("ran experiments"))
    assert cli.main(["reproduce", "fake.means", "--profile", "tiny", "--out", str(root)]) == 2  # before any work
    assert_one_error_line(capsys, f"{mine} was not written by memlab report")
    assert mine.read_text() == "# My notes on these runs\n"
    for first in (MARKER, "# memlab report"):  # memlab's own report, with its marker or from before it had one
        mine.write_text(f"{first}\nan earlier report\n")
        assert cli.main(["report", str(root)]) == 0 and "an earlier report" not in mine.read_text()


def test_error_paths_print_one_line_and_exit_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cases = [
        (["fake.mean"], ["unknown experiment 'fake.mean'", "did you mean 'fake.means'",
                         "known: fake.means, fake.other"]),
        (["fake.means", "--profile", "huge"], ["unknown profile 'huge'"]),
        (["fake.means", "--profile", "broken"], ["invalid config", "n_cells must be >= 1"]),
        (["fake.means", "--out", str(blocker / "sub")], ["cannot write to output folder", str(blocker / "sub")]),
        (["fake.means", "--seed", "abc"], ["invalid int value: 'abc'"]),
        (["fake.means", "--data-dir", str(tmp_path)], ["reads no external data", "--data-dir"]),
    ]
    for args, fragments in cases:
        out = [] if "--out" in args else ["--out", str(tmp_path / "o")]
        assert run(*args, *out) == 2
        assert_one_error_line(capsys, *fragments)


def test_conflicting_config_in_existing_folder(tmp_path, capsys):
    out = str(tmp_path / "o")
    assert run("fake.means", "--profile", "tiny", "--out", out) == 0
    assert run("fake.means", "--profile", "tiny", "--seed", "3", "--out", out) == 2
    assert_one_error_line(capsys, out, "different config", "--out")


def test_interrupt_then_resume(state, fake_lab, tmp_path, capsys):
    out = tmp_path / "o"
    state["interrupt_after"] = 3
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 130
    err = capsys.readouterr().err
    assert err == f"memlab: interrupted; finished cells are kept in {out}; rerun the same command to resume\n"
    assert len(list((out / "cells").glob("*.json"))) == 3

    state["interrupt_after"] = None
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 0
    assert (fake_lab.last_run().cells.resumed, fake_lab.last_run().cells.computed) == (3, 1)
    assert run("fake.means", "--profile", "tiny", "--out", str(tmp_path / "fresh")) == 0
    results = [json.loads((d / "results.json").read_text())["results"] for d in (out, tmp_path / "fresh")]
    assert results[0] == results[1]


def test_report_gathers_claims_summaries_and_images(tmp_path, capsys):
    root = tmp_path / "out"
    assert run("fake.means", "--profile", "tiny", "--out", str(root / "fake.means/tiny")) == 0
    assert run("fake.other", "--profile", "quick", "--out", str(root / "fake.other/quick")) == 0
    capsys.readouterr()
    assert cli.main(["report", str(root)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == str(root / "report.md")
    assert printed[1] == ("| experiment | profile | time | cells computed | cells resumed | cell time (compiling) "
                          "| executor | peak memory |")
    assert all(re.search(r"\| \d+(\.\d)? s( \(\d+ %\))? \|", line) for line in printed[3:]), printed
    assert all(re.search(r"\| \d+ MB \|$|\| \d+\.\d GB \|$", line) for line in printed[3:]), printed
    assert [line.split(" | ")[:2] for line in printed[3:]] == [["| fake.means", "tiny"], ["| fake.other", "quick"]]
    report = (root / "report.md").read_text()

    assert report.startswith(MARKER + "\n# memlab report\n")
    # tiny has 4 cells (< 5): "at least 5 cells" fails at this size; quick has 6
    assert "- The papers' claims: 4 claims: 3 hold, 1 fail at this size (the paper profile decides)." in report
    assert "| fake.means (tiny) | 2 | 1 | 1 |  |  |" in report
    assert report.count("## fake.means (tiny)") == 1 and "Fake experiment" in report  # one heading, not two
    claims = report[report.index("### Claims of fake.means (tiny)"):]
    assert "| id | claim | paper | ours | status |" in claims
    assert "| cells-enough | at least 5 cells \\| a pipe | Table 0 | 4 cells | ✗ size |" in claims
    assert "| cells-enough | at least 5 cells \\| a pipe | Table 0 | 6 cells | ✓ |" in report
    assert "paper-scale run" not in report  # no paper-results here

    links = re.findall(r"\]\(([^)]+)\)", report)
    assert "fake.means/tiny/means.csv" in links
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert sorted(images) == sorted(f"{d}/{f}" for d in ("fake.means/tiny", "fake.other/quick")
                                    for f in ("means.png", "figs/hist.png"))
    for link in links:
        assert (root / link).is_file(), link
    assert not list(root.rglob("*.tmp"))


def test_report_without_results_is_an_error(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "missing")]) == 2
    assert_one_error_line(capsys, "no such folder")
    assert cli.main(["report", str(tmp_path)]) == 2
    assert_one_error_line(capsys, "no summary.md")


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert re.fullmatch(r"memlab \d+\.\d+\.\d+\n", capsys.readouterr().out)


def test_help_and_missing_command(capsys):
    assert cli.main(["--help"]) == 0
    assert "report" in capsys.readouterr().out
    assert cli.main([]) == 2
    assert_one_error_line(capsys, "required")


def test_report_shows_the_paper_scale_verdict_beside_each_claim(tmp_path, capsys):
    paper, out = tmp_path / "paper-results", tmp_path / "out"
    assert run("fake.means", "--profile", "paper", "--out", str(paper / "fake.means/paper")) == 0
    assert run("fake.means", "--profile", "tiny", "--out", str(out / "fake.means/tiny")) == 0
    assert cli.main(["report", str(out), "--paper-results", str(paper)]) == 0
    report = (out / "report.md").read_text()
    assert "| id | claim | paper | ours | status | paper-scale run | verdict |" in report
    # fails at the tiny size, holds in the paper profile's 50 cells: the paper profile's verdict decides, and the
    # counts at the top are of the verdicts
    assert "| cells-enough | at least 5 cells \\| a pipe | Table 0 | 4 cells | ✗ size | paper ✓ | ✓ |" in report
    assert "- The papers' claims: 2 claims: 2 hold." in report
    assert cli.main(["report", str(paper), "--paper-results", str(paper)]) == 0  # a folder is not its own reference
    assert "paper-scale run" not in (paper / "report.md").read_text()
    capsys.readouterr()


def test_report_counts_memlabs_own_checks_apart_and_undecided_claims_as_such(tmp_path, capsys):
    out = tmp_path / "out" / "x.y" / "quick"
    out.mkdir(parents=True)
    (out / "summary.md").write_text("# x.y\n\nA run.\n")
    claims = [{"id": "a", "claim": "A", "paper": "Fig. 1", "ours": "1", "holds": True, "status": "holds"},
              {"id": "b", "claim": "B", "paper": "Fig. 1", "ours": "S5-256 not run", "holds": False,
               "status": "undecided", "missing": "S5-256 not run"},
              {"id": "c", "claim": "C", "paper": "memlab", "ours": "2", "holds": True, "status": "holds",
               "by": "memlab"}]
    (out / "results.json").write_text(json.dumps({"experiment": "x.y", "profile": "quick", "paper_ref": "Fig. 1",
                                                  "claims": claims}))
    assert cli.main(["report", str(tmp_path / "out")]) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "- The papers' claims: 2 claims: 1 hold, 1 are not decided (the run lacks a member they name)." in report
    assert "- memlab's own checks: 1 claim: 1 hold." in report
    assert "| c (memlab's check) | C |" in report and "| b | B | Fig. 1 | S5-256 not run | ? not run |" in report
    capsys.readouterr()

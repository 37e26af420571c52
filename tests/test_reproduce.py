"""Tests for memlab.reproduce: experiments side by side (never more than ``jobs``), longest first when an
earlier run left its time, failures reported with their logs, and the command line's checks."""

import json
import sys

import pytest

from memlab import cli
from memlab.reproduce import memlab_run, reproduce

SCRIPT = """
import sys, time
name, out = sys.argv[1], sys.argv[2]
with open(out + ".times", "w") as f:
    f.write(repr(time.time()))
    time.sleep(0.6)
    f.write(" " + repr(time.time()))
print("ran", name)
sys.exit(3 if name == "bad" else 0)
"""


def fake_command(name, profile, out):
    out.parent.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-c", SCRIPT, name, str(out)]


def test_runs_side_by_side_but_never_more_than_jobs(tmp_path):
    names = ["a", "b", "bad", "c", "d"]
    seen = []
    runs = reproduce(names, "quick", 2, tmp_path, on_finish=seen.append, command=fake_command)
    assert sorted(r.name for r in runs) == sorted(names) and seen == runs
    assert {r.name: r.returncode for r in runs} == {"a": 0, "b": 0, "bad": 3, "c": 0, "d": 0}
    assert (tmp_path / "bad" / "quick.log").read_text() == "ran bad\n"
    spans = [tuple(map(float, (tmp_path / n / "quick.times").read_text().split())) for n in names]
    for start, _ in spans:  # how many ran at each start
        assert sum(s <= start < e for s, e in spans) <= 2
    assert max(sum(s <= start < e for s, e in spans) for start, _ in spans) == 2  # and two did overlap


def test_longest_first_when_an_earlier_run_left_its_time(tmp_path):
    for name, seconds in (("short", 1.0), ("long", 50.0)):
        (tmp_path / name / "quick").mkdir(parents=True)
        (tmp_path / name / "quick" / "results.json").write_text(json.dumps({"elapsed_s": seconds}))
    runs = reproduce(["unknown", "short", "long"], "quick", 1, tmp_path, command=fake_command)
    assert [r.name for r in runs] == ["long", "short", "unknown"]


def test_default_command_is_memlab_run(tmp_path):
    command = memlab_run("belief.logit-trace", "tiny", tmp_path / "o")
    assert command[1:] == ["-m", "memlab.cli", "run", "belief.logit-trace", "--profile", "tiny", "--out",
                           str(tmp_path / "o"), "--no-progress"]


def test_cli_checks_jobs(capsys):
    assert cli.main(["reproduce", "--jobs", "0"]) == 2
    assert capsys.readouterr().err == "memlab: error: --jobs must be >= 1, got 0\n"
    with pytest.raises(ValueError, match="jobs must be an int >= 1"):
        reproduce(["a"], "quick", 0, None)


def test_each_run_gets_its_share_of_the_cores_unless_xla_flags_names_a_count(tmp_path, monkeypatch):
    def flags_command(name, profile, out):
        out.parent.mkdir(parents=True, exist_ok=True)
        return [sys.executable, "-c", "import os; print(os.environ['XLA_FLAGS'])"]

    monkeypatch.setattr("memlab.devices.available_cpus", lambda: 8)
    for flags, jobs, expected in [("--foo", 2, "--foo --xla_force_host_platform_device_count=4"),
                                  ("", 16, "--xla_force_host_platform_device_count=1"),
                                  ("--xla_force_host_platform_device_count=3", 2,
                                   "--xla_force_host_platform_device_count=3")]:
        monkeypatch.setenv("XLA_FLAGS", flags)
        reproduce(["a"], "quick", jobs, tmp_path, command=flags_command)
        assert (tmp_path / "a" / "quick.log").read_text() == expected + "\n"

"""Tests for memlab.reproduce: experiments side by side (never more than ``jobs``), longest first when an
earlier run left its time, failures reported with their logs, and the command line's checks."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memlab import cli
from memlab import reproduce as reproduce_module
from memlab.catalog import EXPERIMENTS
from memlab.reproduce import COSTS, HELPER_MIN_S, expected_seconds, memlab_run, reproduce

SCRIPT = """
import os, sys, time
name, out, partner = sys.argv[1], sys.argv[2], sys.argv[3]
with open(out + ".times", "w") as f:
    f.write(repr(time.time()))
    f.flush()
    waited = time.time() + 20  # the partner's start, if it runs beside this one (however slow the machine)
    while partner and not os.path.exists(partner) and time.time() < waited:
        time.sleep(0.05)
    time.sleep(0.6)
    f.write(" " + repr(time.time()))
print("ran", name)
sys.exit(3 if name == "bad" else 0)
"""
PARTNERS = {"a": "b", "b": "a"}  # the first two started wait for each other, so on a loaded machine too they overlap


def fake_command(name, profile, out, time_limit=None):
    out.parent.mkdir(parents=True, exist_ok=True)
    partner = out.parent.parent / PARTNERS[name] / "quick.times" if name in PARTNERS else ""
    return [sys.executable, "-c", SCRIPT, name, str(out), str(partner)]


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


def test_a_fresh_folder_starts_by_the_committed_table_and_an_earlier_run_wins(tmp_path, monkeypatch):
    table = tmp_path / "costs.json"
    table.write_text(json.dumps({"quick": {"seconds": {"short": 1.0, "long": 50.0}}}))
    monkeypatch.setattr(reproduce_module, "COSTS", table)
    runs = reproduce(["unknown", "short", "long"], "quick", 1, tmp_path / "out", command=fake_command)
    assert [r.name for r in runs] == ["long", "short", "unknown"]
    (tmp_path / "out" / "short" / "quick").mkdir(parents=True, exist_ok=True)
    (tmp_path / "out" / "short" / "quick" / "results.json").write_text(json.dumps({"elapsed_s": 99.0}))
    assert expected_seconds(["short", "long"], "quick", tmp_path / "out") == {"short": 99.0, "long": 50.0}
    assert expected_seconds(["short"], "paper", tmp_path / "out") == {"short": 0.0}  # no table for the profile


def test_the_committed_cost_table_names_experiments_that_exist():
    tables = json.loads(COSTS.read_text(encoding="utf-8"))
    assert set(tables["quick"]["seconds"]) <= set(EXPERIMENTS)
    assert all(s > 0 for s in tables["quick"]["seconds"].values())


def test_default_command_is_memlab_run(tmp_path):
    command = memlab_run("belief.logit-trace", "tiny", tmp_path / "o")
    assert command[1:] == ["-m", "memlab.cli", "run", "belief.logit-trace", "--profile", "tiny", "--out",
                           str(tmp_path / "o"), "--no-progress"]


HELPED = """
import pathlib, sys, time
role, folder, marks = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
if role == "helper":
    try:
        (marks / "helper.started").write_text(str(folder) + "\\n" + " ".join(sys.argv[4:]))
        time.sleep(60)
    except KeyboardInterrupt:  # memlab run's Ctrl-C: finished cells kept, exit 130
        (marks / "helper.stopped").write_text("by SIGINT")
        sys.exit(130)
waited = time.time() + float(sys.argv[4])  # the experiment's own run: done once its helper has started
while not (marks / "helper.started").exists() and time.time() < waited:
    time.sleep(0.05)
sum(range(10**6))  # some CPU time
"""


@pytest.mark.parametrize("splittable, expected", [(True, 10 * HELPER_MIN_S), (True, None), (False, 10 * HELPER_MIN_S)])
def test_a_free_slot_gets_a_helper_of_a_long_splittable_experiment(tmp_path, splittable, expected):
    """With a slot free and nothing waiting, a splittable experiment expected to run long (or whose time is not
    known) gets a helper run: the same command with the experiment's cell store (out/cells) and a scratch folder
    outside ``out``, stopped (SIGINT) when the experiment's own run ends and its folder deleted; the CPU time of both
    is the experiment's."""
    (tmp_path / "long" / "quick").mkdir(parents=True)
    if expected is not None:
        (tmp_path / "long" / "quick" / "results.json").write_text(json.dumps({"elapsed_s": expected}))

    def command(name, profile, folder, time_limit=None, store=None):
        role = "own" if store is None else "helper"
        if name == "short":
            return [sys.executable, "-c", "pass"]
        return [sys.executable, "-c", HELPED, role, str(folder), str(tmp_path / "long"),
                *([str(30 if splittable else 1)] if store is None else ["--store", str(store)])]

    runs = reproduce(["long", "short"], "quick", 2, tmp_path, command=command,
                     splittable=["long"] if splittable else [])
    long = next(r for r in runs if r.name == "long")
    assert long.returncode == 0 and long.cpu_seconds > 0
    if not splittable:
        assert long.helpers == 0 and not (tmp_path / "long" / "helper.started").exists()
        return
    folder, arguments = (tmp_path / "long" / "helper.started").read_text().split("\n")
    assert long.helpers == 1 and arguments == f"--store {tmp_path / 'cells'}"
    assert (tmp_path / "long" / "helper.stopped").read_text() == "by SIGINT"
    assert tmp_path not in Path(folder).parents and Path(folder).parts[-2:] == ("long", "quick")
    assert not Path(folder).parent.parent.exists()  # the scratch folder is gone
    assert (tmp_path / "long" / "quick.helper-1.log").exists()


def test_no_helper_for_an_experiment_expected_to_end_soon_or_not_splittable(tmp_path):
    """Expected to end within HELPER_MIN_S: no helper, it would cost more than it saves; nor for an experiment not
    splittable, however long."""
    def command(name, profile, folder, time_limit=None, store=None):
        assert store is None, "no helper expected"
        return [sys.executable, "-c", "import time; time.sleep(0.5)"] if name == "long" else [sys.executable, "-c",
                                                                                               "pass"]

    (tmp_path / "long" / "quick").mkdir(parents=True)
    (tmp_path / "long" / "quick" / "results.json").write_text(json.dumps({"elapsed_s": HELPER_MIN_S / 2}))
    runs = reproduce(["long", "short", "unknown"], "quick", 2, tmp_path, command=command, splittable=["long"])
    assert all(r.helpers == 0 and r.returncode == 0 for r in runs)


def test_a_helper_that_ends_by_itself_is_not_started_again(tmp_path):
    """A helper that ends on its own (its experiment's cells all taken, or it failed) gets no successor: a failing
    one must not be restarted every poll."""
    def command(name, profile, folder, time_limit=None, store=None):
        if store is not None:
            return [sys.executable, "-c", "import sys; sys.exit(1)"]
        return [sys.executable, "-c", "import time; time.sleep(3)" if name == "long" else "pass"]

    runs = reproduce(["long", "short"], "quick", 2, tmp_path, command=command, splittable=["long"])
    assert {r.name: (r.returncode, r.helpers) for r in runs} == {"long": (0, 1), "short": (0, 0)}
    assert sorted(p.name for p in (tmp_path / "long").glob("*.log")) == ["quick.helper-1.log", "quick.log"]


def test_cli_checks_jobs(capsys):
    assert cli.main(["reproduce", "--jobs", "0"]) == 2
    assert capsys.readouterr().err == "memlab: error: --jobs must be >= 1, got 0\n"
    with pytest.raises(ValueError, match="jobs must be an int >= 1"):
        reproduce(["a"], "quick", 0, None)


def test_each_run_gets_its_share_of_the_cores_unless_xla_flags_names_a_count(tmp_path, monkeypatch):
    def flags_command(name, profile, out, time_limit=None):
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


def test_time_limit_passes_the_time_left_and_starts_nothing_after_it(tmp_path):
    limits = []

    def command(name, profile, out, time_limit=None):
        limits.append(time_limit)
        return fake_command(name, profile, out)

    runs = reproduce(["a", "b"], "quick", 1, tmp_path, command=command, time_limit=1.5)
    assert 1.0 < limits[0] <= 1.5 and len(limits) == 1  # 'a' takes 0.6 s: 'b' would start with < 1 s left
    assert {r.name: r.returncode for r in runs} == {"a": 0, "b": None}
    assert memlab_run("x", "quick", tmp_path, 125.4)[-2:] == ["--time-limit", "125"]
    assert memlab_run("x", "quick", tmp_path, store=tmp_path / "cells")[-2:] == ["--store", str(tmp_path / "cells")]


def test_cli_names_experiments_and_keeps_to_those_with_the_profile(fake_lab, tmp_path, capsys, monkeypatch):
    import dataclasses

    from memlab import catalog

    core = dataclasses.replace(fake_lab.experiments["fake.other"],
                               profiles={**fake_lab.experiments["fake.other"].profiles,
                                         "core": fake_lab.FakeConfig(n_cells=2)})
    monkeypatch.setitem(catalog.EXPERIMENTS, "fake.other", core)
    started = []
    monkeypatch.setattr("memlab.reproduce.reproduce",
                        lambda names, *a, **k: started.extend(names) or [])
    monkeypatch.setattr(cli, "build_report", lambda out, paper=None: (out / "report.md", ""))
    assert cli.main(["reproduce", "--profile", "core", "--out", str(tmp_path)]) == 0
    assert started == ["fake.other"]  # fake.means has no profile 'core'
    assert cli.main(["reproduce", "fake.means", "--profile", "core", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "memlab: error: profile 'core' is not a profile of fake.means; profiles: " \
                                      "tiny, quick, paper, broken\n"
    assert cli.main(["reproduce", "fake.nope", "--out", str(tmp_path)]) == 2
    assert "unknown experiment 'fake.nope'" in capsys.readouterr().err
    assert cli.main(["reproduce", "--profile", "huge", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "memlab: error: no experiment has a profile 'huge'; profiles: tiny, quick, " \
                                      "paper, broken, core\n"
    assert started == ["fake.other"] and not (tmp_path / "fake.means").exists()  # nothing started


SIGTERM_DRIVER = """
import sys, pathlib
from memlab.reproduce import reproduce
out = pathlib.Path(sys.argv[1])
def command(name, profile, folder, time_limit=None):
    folder.parent.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-c", EXPERIMENT, str(folder.parent)]
EXPERIMENT = '''
import os, pathlib, sys, time
folder = pathlib.Path(sys.argv[1])
(folder / "pid").write_text(str(os.getpid()))
try:
    time.sleep(120)
except KeyboardInterrupt:  # what memlab run does on Ctrl-C: keep the finished cells, say so, exit
    (folder / "stopped").write_text("by SIGINT")
    sys.exit(130)
'''
try:
    reproduce(["a"], "quick", 1, out, command=command)
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("background", [False, True])
def test_sigterm_stops_the_experiments_it_started(tmp_path, background):
    """``kill`` of memlab reproduce (SIGTERM) stops its running experiments as Ctrl-C does (each gets SIGINT and
    stops itself), leaving none behind; also when it runs as a shell's background job, started with SIGINT
    ignored (its experiments must still heed the SIGINT, not wait for the kill 30 s later)."""
    def ignore_sigint():
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    driver = subprocess.Popen([sys.executable, "-c", SIGTERM_DRIVER, str(tmp_path)],
                              preexec_fn=ignore_sigint if background else None)
    pid_file = tmp_path / "a" / "pid"
    deadline = time.time() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    driver.send_signal(signal.SIGTERM)
    assert driver.wait(timeout=60) == 130
    with pytest.raises(ProcessLookupError):  # the experiment's process is gone (reaped by the driver)
        os.kill(child, 0)
    assert (tmp_path / "a" / "stopped").read_text() == "by SIGINT"


def test_a_whole_run_records_its_wall_time_and_a_partial_one_does_not(fake_lab, tmp_path, monkeypatch):
    """``reproduce-<profile>.json`` (read by benchmarks/reproduce_costs.py) only where every experiment finished,
    saying whether the compile cache started empty."""
    from memlab.reproduce import Finished

    def fake_reproduce(names, profile, jobs, out, on_finish=lambda f: None, time_limit=None, splittable=()):
        runs = []
        for name in names:
            (out / name / profile).mkdir(parents=True, exist_ok=True)
            if name != "fake.other" or not partial:
                results = out / name / profile / "results.json"
                results.write_text("{}")
                os.utime(results, ns=(0, 0))  # a file system's coarse clock can stamp it before the run's start
            runs.append(Finished(name, 0, 0.1, out / name / f"{profile}.log"))
        return runs

    monkeypatch.setattr("memlab.reproduce.reproduce", fake_reproduce)
    monkeypatch.setattr(cli, "build_report", lambda out, paper=None: (out / "report.md", ""))
    cache = tmp_path / "cache"
    monkeypatch.setenv("MEMLAB_JAX_CACHE", str(cache))
    partial = False
    assert cli.main(["reproduce", "--profile", "tiny", "--jobs", "1", "--out", str(tmp_path / "a")]) == 0
    record = json.loads((tmp_path / "a" / "reproduce-tiny.json").read_text())
    assert record["experiments"] == ["fake.means", "fake.other"] and record["jobs"] == 1
    assert record["empty_compile_cache"] is True and record["seconds"] >= 0
    (cache / "program").parent.mkdir(parents=True)
    (cache / "program").write_text("compiled")
    assert cli.main(["reproduce", "--profile", "tiny", "--out", str(tmp_path / "b")]) == 0
    assert json.loads((tmp_path / "b" / "reproduce-tiny.json").read_text())["empty_compile_cache"] is False
    partial = True  # fake.other stops at a time limit (exit 0, no results.json): not a whole run
    assert cli.main(["reproduce", "--profile", "tiny", "--out", str(tmp_path / "c")]) == 0
    assert not (tmp_path / "c" / "reproduce-tiny.json").exists()
    # a results.json left by an earlier whole run is not this run's: resuming into "a" is again not a whole run
    (tmp_path / "a" / "reproduce-tiny.json").unlink()
    assert cli.main(["reproduce", "--profile", "tiny", "--out", str(tmp_path / "a")]) == 0
    assert not (tmp_path / "a" / "reproduce-tiny.json").exists()


def test_core_shares_deal_the_cores_out_among_the_jobs(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert reproduce_module.core_shares(1) == [{0, 1, 2, 3}]
    assert reproduce_module.core_shares(2) == [{0, 1}, {2, 3}]
    assert reproduce_module.core_shares(3) == [{0}, {1}, {2}]
    assert reproduce_module.core_shares(6) == [{0}, {1}, {2}, {3}, {0}, {1}]  # more jobs than cores: in turn
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    assert reproduce_module.core_shares(2) is None  # an OS without affinity (macOS): nothing pinned


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="the OS sets no affinity")
def test_each_running_experiment_is_pinned_to_its_slots_cores(tmp_path, monkeypatch):
    monkeypatch.setattr(reproduce_module, "core_shares", lambda jobs: [{0}, {0}])  # cores every machine has

    def command(name, profile, out, time_limit=None):
        out.parent.mkdir(parents=True, exist_ok=True)
        return [sys.executable, "-c", f"import os; open({str(out)!r} + '.cores', 'w').write(repr(sorted("
                                      f"os.sched_getaffinity(0))))"]

    runs = reproduce(["a", "b", "c"], "quick", 2, tmp_path, command=command)
    assert all(r.returncode == 0 for r in runs)
    assert [(tmp_path / n / "quick.cores").read_text() for n in "abc"] == ["[0]"] * 3

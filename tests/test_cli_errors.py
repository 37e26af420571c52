"""Mistakes at the command line and damaged files (issue 32): one line ``memlab: error: ...``, exit 2, nothing lost.

Most cases call the command in-process on the fake experiments (tests/conftest.py, ``fake_lab``); those that need a
whole ``memlab`` process run one in a subprocess.
"""

import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memlab import cli
from memlab.run_folder import LOCK

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(autouse=True)
def state(fake_lab):
    return fake_lab.STATE


def run(*args):
    return cli.main(["run", *args, "--no-progress"])


def one_error_line(capsys, *fragments) -> str:
    err = capsys.readouterr().err
    assert err.startswith("memlab: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


def memlab(*args, env=None) -> subprocess.CompletedProcess:
    """``memlab ARGS`` in a process of its own (this checkout's memlab)."""
    env = env or dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "memlab.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- 2. --seed


@pytest.mark.parametrize("seed", [2**32, 2**63 + 1, -1])
def test_seed_out_of_range_is_refused_before_anything_is_written(tmp_path, capsys, seed):
    out = tmp_path / "o"
    assert run("fake.means", "--profile", "tiny", "--seed", str(seed), "--out", str(out)) == 2
    one_error_line(capsys, "seed must be an int in [0, 2**32)", str(seed))
    assert not out.exists()


def test_config_json_of_a_run_that_computed_nothing_does_not_block(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"experiment": "fake.means", "profile": "tiny",
                                                 "config": {"seed": 99, "n_cells": 4, "size": 3}}))
    assert run("fake.means", "--profile", "tiny", "--seed", "1", "--out", str(out)) == 0
    assert json.loads((out / "config.json").read_text())["config"]["seed"] == 1


def test_seed_beyond_int64_in_a_process_of_its_own(tmp_path):
    out = tmp_path / "o"
    done = memlab("run", "belief.error-vs-epsilon", "--profile", "tiny", "--seed", str(2**64), "--out", str(out))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("memlab: error: seed must be an int in [0, 2**32)"), done.stderr
    assert not out.exists()


# ---------------------------------------------------------------- 3. --out of the user's own files


def test_out_folder_of_other_files_is_refused_and_left_alone(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "results.json").write_text('{"my": "numbers"}\n')
    (out / "notes.txt").write_text("keep me\n")
    before = snapshot(out)
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 2
    one_error_line(capsys, str(out), "not empty", "no memlab run", "--out")
    assert snapshot(out) == before and sorted(p.name for p in out.iterdir()) == ["notes.txt", "results.json"]


# ---------------------------------------------------------------- 11. two runs into one --out


def test_second_run_into_a_locked_folder_is_refused(tmp_path, capsys, fake_lab):
    out = tmp_path / "o"
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 0
    before = snapshot(out)
    with open(out / LOCK, "a+") as held:  # as a run in another process holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 2
        one_error_line(capsys, "another memlab run", str(out))
    assert snapshot(out) == before
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 0  # the lock is free again
    assert fake_lab.last_run().cells.resumed == 4


def test_lock_of_a_killed_run_does_not_block(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    code = f"import fcntl, os; f = open({str(out / LOCK)!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_EX); f.write('1'); " \
           "f.flush(); os.kill(os.getpid(), 9)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == -9
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 0


# ---------------------------------------------------------------- 4. damaged cell files

DAMAGE = {"truncated": lambda text: text[: len(text) // 2], "empty": lambda text: "", "{}": lambda text: "{}",
          "a list": lambda text: "[1, 2]", "no result": lambda text: '{"memlab_cell": 1, "seconds": 1.0}',
          "not UTF-8": lambda text: b"\xff\xfe".decode("latin-1")}


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("where", ["run folder", "store"])
def test_a_damaged_cell_file_is_named_and_recomputed(tmp_path, capsys, fake_lab, damage, where):
    out = tmp_path / "o"
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 0
    results = json.loads((out / "results.json").read_text())["results"]
    if where == "store":  # the run folder's copies gone too, else they would replace it
        path = sorted((tmp_path / "cells").rglob("*.json"))[0]
        for copy in (out / "cells").glob("*.json"):
            copy.unlink()
    else:  # the store gone, else its record would serve
        path = out / "cells" / "cell-2.json"
        shutil.rmtree(tmp_path / "cells")
    text = path.read_text()
    path.write_text(DAMAGE[damage](text), encoding="latin-1")
    capsys.readouterr()
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"memlab: cell file {path} is damaged (") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert fake_lab.last_run().cells.computed == 1
    assert json.loads((out / "results.json").read_text())["results"] == results
    record = json.loads(path.read_text())  # replaced by the recomputed cell
    assert record.get("record", record)["result"] == json.loads(text).get("record", json.loads(text))["result"]
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 0  # and read back quietly
    assert "damaged" not in capsys.readouterr().err and fake_lab.last_run().cells.computed == 0


def test_a_damaged_digest_file_recomputes_its_cell(tmp_path, capsys, fake_lab):
    out = tmp_path / "o"
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 0
    shutil.rmtree(tmp_path / "cells")  # the store gone: the run folder's copies are all there is
    (out / "cells" / "cell-1.digest").write_bytes(b"\xff\xfe")
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert (fake_lab.last_run().cells.resumed, fake_lab.last_run().cells.computed) == (3, 1)


# ---------------------------------------------------------------- 5. a full disk


def test_a_full_disk_is_one_line_and_the_cells_are_kept(tmp_path, capsys, monkeypatch, fake_lab):
    from memlab.files import atomic_write_bytes as write

    out = tmp_path / "o"

    def no_room(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as the kernel says it: no file name

    def full_for_figures(path, data):  # the disk fills up when the first figure is written
        with monkeypatch.context() as m:
            if str(path).endswith(".png"):
                m.setattr(os, "fsync", no_room)
            return write(path, data)

    with monkeypatch.context() as m:
        m.setattr("memlab.runner.atomic_write_bytes", full_for_figures)
        assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 2
    one_error_line(capsys, f"cannot write {out / 'means.png'}: No space left on device", f"kept in {out}",
                   "rerun the same command")
    assert len(list((out / "cells").glob("*.json"))) == 4 and not list(out.glob(".*.tmp"))
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 0
    assert (fake_lab.last_run().cells.resumed, fake_lab.last_run().cells.computed) == (4, 0)


# ---------------------------------------------------------------- 6. report with one bad results.json


@pytest.mark.parametrize("bad", ['{"experiment": "fake.other", "pro', "", "[]", '{"experiment": 1}',
                                 '{"experiment": "x", "profile": "y", "paper_ref": "z", "claims": [{}]}'])
def test_report_names_a_bad_results_file_and_writes_the_rest(tmp_path, capsys, bad):
    root = tmp_path / "out"
    assert run("fake.means", "--profile", "tiny", "--out", str(root / "fake.means/tiny")) == 0
    assert run("fake.other", "--profile", "quick", "--out", str(root / "fake.other/quick")) == 0
    broken = root / "fake.other/quick/results.json"
    broken.write_text(bad)
    capsys.readouterr()
    assert cli.main(["report", str(root)]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith(f"memlab: {broken} is not a memlab results file (") and \
        captured.err.endswith("; the report leaves it out\n") and captured.err.count("\n") == 1, captured.err
    assert captured.out.splitlines()[0] == str(root / "report.md")
    report = (root / "report.md").read_text()
    assert "2 claims: 1 hold, 1 fail at this size" in report and "| cells-enough | at least 5" in report
    assert "## fake.other/quick" in report and broken.read_text() == bad  # its summary still shown; file untouched


# ---------------------------------------------------------------- 7. reproduce --profile bogus


def test_reproduce_checks_the_profile_before_starting_anything(tmp_path):
    done = memlab("reproduce", "--profile", "bogus", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("memlab: error: no experiment has a profile 'bogus'; profiles: ") and \
        "quick" in done.stderr and "paper" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists() and done.stdout == ""


# ---------------------------------------------------------------- 1. and 11. option values, by their option names


@pytest.mark.parametrize("args, fragments", [
    (["--devices", "100000"], ["--devices must be at most", f"this machine's {os.cpu_count()}", "got 100000"]),
    (["--devices", "0"], ["--devices must be an int >= 1, got 0"]),
    (["--executor", "processes", "--workers", "0"], ["--workers must be an int >= 1, got 0"]),
    (["--executor", "ray", "--cpus-per-cell", "0"], ["--cpus-per-cell must be a positive number, got 0.0"]),
])
def test_option_values_out_of_range_are_refused_by_option_name(tmp_path, capsys, args, fragments):
    if "ray" in args:
        pytest.importorskip("ray")
    out = tmp_path / "o"
    assert run("fake.means", "--profile", "tiny", "--out", str(out), *args) == 2
    one_error_line(capsys, *fragments)
    assert not out.exists()


# ---------------------------------------------------------------- 9. --data-dir


def test_data_dir_must_hold_the_nclt_files(tmp_path):
    (tmp_path / "empty").mkdir()
    for folder, fragment in [(tmp_path / "missing", f"({tmp_path / 'missing'} is not a folder)"),
                             (tmp_path / "empty", f"not found under {tmp_path / 'empty'}")]:
        done = memlab("run", "pissm.table1", "--profile", "paper", "--out", str(tmp_path / "o"), "--data-dir",
                      str(folder))  # paper reads NCLT; the config is refused before any cell runs
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("memlab: error: invalid config for pissm.table1 (paper): NCLT session") and \
            fragment in done.stderr and "groundtruth_2012-01-22.csv" in done.stderr, done.stderr
    done = memlab("run", "pissm.table1", "--profile", "tiny", "--out", str(tmp_path / "o"), "--data-dir",
                  str(tmp_path / "empty"))  # tiny reads no NCLT
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "nclt data set only" in done.stderr, done.stderr
    assert not (tmp_path / "o").exists()


def test_naming_nclt_without_its_data_is_refused_not_dropped(tmp_path):
    """--set datasets=pong,nclt without --data-dir: exit 2 naming the files NCLT needs, not a run without NCLT."""
    done = memlab("run", "pissm.table1", "--profile", "tiny", "--set", "datasets=pong,nclt", "--out",
                  str(tmp_path / "o"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("memlab: error: invalid config for pissm.table1 (tiny): datasets name nclt") and \
        "gps.csv and groundtruth_2012-01-22.csv" in done.stderr and "--data-dir" in done.stderr, done.stderr
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- 8. --executor ray --address that does not answer


def test_ray_address_that_refuses_is_one_line(tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "o"  # in a process of its own: a Ray cluster another test left running here would be used
    done = memlab("run", "belief.error-vs-epsilon", "--profile", "tiny", "--out", str(out), "--executor", "ray",
                  "--address", "127.0.0.1:1")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "no Ray cluster at 127.0.0.1:1" in done.stderr and "refused" in done.stderr, done.stderr
    assert not out.exists()


def _refused_in_one_line_in_bounded_time(tmp_path, address: str, timeout: str, message: str) -> None:
    """`memlab run --executor ray --address ADDRESS` under MEMLAB_RAY_CONNECT_TIMEOUT=timeout: exit 2 with one line
    starting with ``message``, within a minute, nothing written."""
    env = {**os.environ, "MEMLAB_RAY_CONNECT_TIMEOUT": timeout}
    start = time.perf_counter()
    done = memlab("run", "belief.error-vs-epsilon", "--profile", "tiny", "--out", str(tmp_path / "o"),
                  "--executor", "ray", "--address", address, env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"memlab: error: {message}"), done.stderr
    assert time.perf_counter() - start < 60 and not (tmp_path / "o").exists()


def test_ray_address_that_does_not_answer_times_out(tmp_path):
    pytest.importorskip("ray")
    with socket.socket() as server:  # a listener whose queue is full: a connection to it neither opens nor fails
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        address = f"127.0.0.1:{server.getsockname()[1]}"
        queued = [socket.socket() for _ in range(4)]
        for client in queued:
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", server.getsockname()[1]))
        _refused_in_one_line_in_bounded_time(tmp_path, address, "0.5",
                                             f"no Ray cluster answered at {address} within 0.5 s")
        for client in queued:
            client.close()


@pytest.mark.parametrize("answer", [b"", b"HTTP/1.1 400 Bad Request\r\n\r\n"], ids=["silent", "http1"])
def test_an_address_that_accepts_but_is_no_ray_head_is_one_line_in_bounded_time(tmp_path, answer):
    pytest.importorskip("ray")
    with socket.socket() as server:  # accepts connections, then says nothing or speaks HTTP/1
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        address = f"127.0.0.1:{server.getsockname()[1]}"

        def serve():
            with contextlib.suppress(OSError):
                while True:
                    client, _ = server.accept()
                    client.sendall(answer)
                    held.append(client)

        held: list = []
        threading.Thread(target=serve, daemon=True).start()
        _refused_in_one_line_in_bounded_time(tmp_path, address, "1",
                                             f"{address} accepts connections but is no Ray head")
        for client in held:
            client.close()


# ---------------------------------------------------------------- 11. list at 80 columns, report's help


def test_list_at_80_columns_shows_every_profile_name_whole(capsys, monkeypatch, fake_lab):
    import dataclasses

    from memlab import catalog

    long = dataclasses.replace(
        fake_lab.experiments["fake.means"], paper="a-paper-slug-much-longer-than-any-column-could-hold",
        description="a description long enough to need several lines in a narrow terminal, " * 2,
        profiles={**fake_lab.experiments["fake.means"].profiles, "paper-query-past": fake_lab.FakeConfig(),
                  "quick-equal-steps": fake_lab.FakeConfig()})
    monkeypatch.setitem(catalog.EXPERIMENTS, "fake.means", long)
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 80 and not any("…" in line for line in lines), "\n".join(lines)
    cells = {line.split("│")[2].strip() for line in lines if line.count("│") == 4}  # the profiles column
    assert {"tiny", "quick", "paper", "broken", "paper-query-past", "quick-equal-steps"} <= cells, cells


def test_report_help_says_what_dir_is(capsys):
    assert cli.main(["report", "--help"]) == 0
    assert "folder of experiment folders" in capsys.readouterr().out


@pytest.mark.parametrize("damage", [b"{", b"[]", b"\xff"])
def test_a_damaged_config_json_is_one_line_and_kept(tmp_path, capsys, damage):
    out = tmp_path / "o"
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 0
    (out / "config.json").write_bytes(damage)
    before = snapshot(out)
    assert run("fake.means", "--profile", "tiny", "--out", str(out)) == 2
    one_error_line(capsys, f"{out / 'config.json'} is damaged (", "--out")
    assert snapshot(out) == before


# ---------------------------------------------------------------- Ctrl-C, SIGTERM, a terminal that cannot show a path

NAPPING_LAB = '''
import atexit, dataclasses, os, signal, sys, time
from functools import partial
from memlab import catalog, cli
from memlab.runner import Experiment

@dataclasses.dataclass(frozen=True)
class NapConfig:
    seed: int = 0
    cells: int = 6
    seconds: float = 1.0

def nap(seconds, i):
    time.sleep(seconds)
    return {"i": i}

def run(cfg, run):
    cells = run.sweep({f"nap-{i}": partial(nap, cfg.seconds, i) for i in range(cfg.cells)}, "naps")
    run.write_summary("# naps\\n")
    return {"cells": len(cells)}

def ctrl_c(seconds=0.5):  # what a user's Ctrl-C does, at a moment a test picks
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(seconds)

profiles = {"quick": NapConfig(), "paper": NapConfig(), "fast": NapConfig(cells=1, seconds=0)}
catalog.EXPERIMENTS["test.naps"] = Experiment("test.naps", "Fig. 0", "none", "cells that nap", profiles, run)
if os.environ.get("NAP_CTRL_C") == "after-the-run":  # between the last cell and the last line printed
    for module in (cli, sys.modules["__main__"]):  # the command runs as python -m memlab.cli
        module.duration = lambda seconds: ctrl_c() or "?"
elif os.environ.get("NAP_CTRL_C") == "at-exit":  # while the exit handlers run
    atexit.register(ctrl_c)
'''


def napping(tmp_path, *args, ctrl_c: str = "", env: dict | None = None) -> subprocess.Popen:
    """``memlab run test.naps ARGS`` in a process of its own (six cells of a second each by default)."""
    (tmp_path / "napping_lab.py").write_text(NAPPING_LAB)
    env = {**os.environ, **(env or {}), "NAP_CTRL_C": ctrl_c,
           "PYTHONPATH": os.pathsep.join([SRC, str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "memlab.cli", "run", "test.naps", "--plugin", "napping_lab",
                             "--no-progress", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, preexec_fn=default_signals)


def default_signals() -> None:
    """In the child: SIGINT and SIGTERM as a terminal's command starts with them. An ignored signal is inherited
    across exec, and Python keeps an ignored SIGINT ignored; under the whole suite a test worker can hold them
    ignored (seen: these tests passed alone and failed in the suite, the run never interrupted)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def after_first_cell(process: subprocess.Popen, out: Path) -> None:
    deadline = time.monotonic() + 120
    while not list(out.glob("cells/*.json")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()


@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGINT, signal.SIGINT]])
def test_sigterm_and_a_double_ctrl_c_end_in_the_interrupted_line(tmp_path, signals):
    out = tmp_path / "o"
    process = napping(tmp_path, "--out", str(out), "--executor", "processes", "--workers", "2")
    after_first_cell(process, out)
    for sent in signals:
        process.send_signal(sent)
        time.sleep(0.2)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and "Traceback" not in err, err
    assert err.splitlines()[-1] == f"memlab: interrupted; finished cells are kept in {out}; rerun the same command " \
                                   "to resume" and err.count("interrupted") == 1, err
    assert list(out.glob("cells/*.json"))  # kept


def test_ctrl_c_after_the_last_cell_is_one_line(tmp_path):
    process = napping(tmp_path, "--profile", "fast", "--out", str(tmp_path / "o"), ctrl_c="after-the-run")
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130 and err == "memlab: interrupted; finished cells are kept; rerun the same " \
                                                "command to resume\n", err
    # at exit, after the last line: nothing more (no KeyboardInterrupt from an exit handler); and a folder name the
    # output's encoding cannot show is escaped, not a UnicodeEncodeError
    process = napping(tmp_path, "--profile", "fast", "--out", str(tmp_path / "naïve"), ctrl_c="at-exit",
                      env={"PYTHONIOENCODING": "ascii"})
    printed, err = process.communicate(timeout=120)
    assert process.returncode == 0 and err == "", err
    assert printed.startswith(str(tmp_path / "na\\xefve") + "  (") and (tmp_path / "naïve/results.json").exists()

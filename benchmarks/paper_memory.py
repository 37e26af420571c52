"""Peak resident memory of every experiment's paper profile, probed without running it to the end.

Usage: ``python benchmarks/paper_memory.py [--seconds S] [NAME ...]`` (default: every experiment, S = 240).

Each paper profile is started as ``memlab run NAME --profile paper`` in its own process (into a scratch folder,
so nothing is resumed), its high-water mark (``VmHWM`` of /proc/<pid>/status, Linux) is sampled every 0.5 s, and
after S seconds it is stopped with Ctrl-C (SIGINT; the run keeps its finished cells, as any interrupted run).
A profile that finishes earlier reports its complete peak. Otherwise the peak covers what the run built in its first S
seconds -- its data sets, the compiled programs and the first cells' buffers -- which is where an experiment
allocates; a later cell of a larger size can go above it, so ``finished`` and ``cells_done`` say how far each
probe got. Full runs record their true peak in results.json (``peak_rss_mb``) and ``memlab report``.
The issue's budget is 8 GB per paper profile; ``over_8gb`` flags a probe above it.

Prints a table and writes benchmarks/results/paper_memory.json (with the machine, as run.py does); rows of
experiments not named in this call are kept from the previous file.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUDGET_MB = 8 * 1024


def _high_water_mb(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    return None


def probe(name: str, seconds: float, memlab: str) -> dict:
    """Run NAME's paper profile for at most ``seconds``; its peak RSS (MB) and how far it got."""
    with tempfile.TemporaryDirectory(prefix="memlab-mem-") as scratch:
        out = Path(scratch) / name
        start = time.perf_counter()
        proc = subprocess.Popen([memlab, "run", name, "--profile", "paper", "--out", str(out), "--no-progress"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        peak = 0.0
        while proc.poll() is None and time.perf_counter() - start < seconds:
            peak = max(peak, _high_water_mb(proc.pid) or 0.0)
            time.sleep(0.5)
        finished = proc.poll() is not None
        if not finished:
            peak = max(peak, _high_water_mb(proc.pid) or 0.0)
            proc.send_signal(signal.SIGINT)
        try:  # a cell inside one long XLA call sees Ctrl-C only when it returns: no need to wait for that
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        results = out / "results.json"
        if finished and results.exists():  # the run's own record also counts the cells it computed
            peak = max(peak, json.loads(results.read_text())["peak_rss_mb"])
        cells = len(list((out / "cells").glob("*.json"))) if (out / "cells").is_dir() else 0
        row = {"experiment": name, "peak_rss_mb": round(peak, 1), "seconds": round(time.perf_counter() - start, 1),
               "finished": finished, "cells_done": cells, "over_8gb": peak > BUDGET_MB}
        if finished and proc.returncode != 0:
            row["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"
        return row


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=240.0, help="probe length per experiment (default 240)")
    parser.add_argument("names", nargs="*", help="experiments (default: all)")
    args = parser.parse_args(argv)
    if not Path("/proc/self/status").exists():
        print("paper_memory: needs Linux's /proc to read a process's high-water mark", file=sys.stderr)
        return 2
    memlab = str(Path(sys.executable).with_name("memlab"))
    names = args.names or subprocess.run([memlab, "list", "--names"], check=True, capture_output=True,
                                         text=True).stdout.split()
    sys.path.insert(0, str(HERE))
    from run import machine_info, print_rows, write_rows  # noqa: E402  (benchmarks/run.py, same folder)

    rows = []
    for name in names:
        rows.append(probe(name, args.seconds, memlab))
        print(json.dumps(rows[-1]), flush=True)
    previous = HERE / "results" / "paper_memory.json"
    if previous.exists():  # keep the probes of experiments not named this time
        probed = {row["experiment"] for row in rows}
        rows = [r for r in json.loads(previous.read_text())["rows"] if r["experiment"] not in probed] + rows
    print_rows("paper_memory", rows)
    write_rows("paper_memory", rows, {**machine_info(), "probe_seconds": args.seconds})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

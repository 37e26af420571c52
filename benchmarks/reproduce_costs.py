"""How long ``make reproduce`` takes, per experiment and in all, and the order it starts experiments in.

Usage: ``python benchmarks/reproduce_costs.py OUT [--profile quick]``, where OUT is the ``--out`` folder of a finished
``memlab reproduce --profile PROFILE`` run (best from an empty compile cache, as a fresh clone starts).

Reads every experiment's ``OUT/<name>/<profile>/results.json`` (``elapsed_s``: its wall time) and writes them to
``src/memlab/reproduce_costs.json`` under the profile, with the date and the machine; other profiles' tables are
kept. ``memlab reproduce`` starts the longest experiments first (longest-processing-time-first, the classic rule for
keeping all workers busy to the end): by the times in its own ``--out`` folder where an earlier run left them, else
by this table. Where the run finished whole (``OUT/reproduce-<profile>.json``, which ``memlab reproduce`` writes with
its wall time), the times also go to ``benchmarks/results/reproduce.json``, the documentation's table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from memlab.catalog import EXPERIMENTS
from memlab.files import atomic_write_text, machine_description
from memlab.reproduce import COSTS


def measured(out: Path, profile: str) -> dict[str, float]:
    """``elapsed_s`` of every experiment with a results.json for ``profile`` under ``out``, in seconds."""
    seconds = {}
    for name in EXPERIMENTS:
        path = out / name / profile / "results.json"
        if path.exists():
            seconds[name] = round(float(json.loads(path.read_text(encoding="utf-8"))["elapsed_s"]), 1)
    return seconds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the --out folder of a finished memlab reproduce run")
    parser.add_argument("--profile", default="quick")
    args = parser.parse_args(argv)
    seconds = measured(args.out, args.profile)
    if not seconds:
        print(f"reproduce_costs: no {args.profile} results.json under {args.out}", file=sys.stderr)
        return 2
    tables = json.loads(COSTS.read_text(encoding="utf-8")) if COSTS.exists() else {}
    tables[args.profile] = {"date": time.strftime("%Y-%m-%d", time.gmtime()),
                            "machine": machine_description(),
                            "seconds": dict(sorted(seconds.items(), key=lambda kv: -kv[1]))}
    atomic_write_text(COSTS, json.dumps(tables, indent=2) + "\n")
    for name, s in tables[args.profile]["seconds"].items():
        print(f"{s:8.1f} s  {name}")
    print(f"wrote {COSTS}")
    whole = args.out / f"reproduce-{args.profile}.json"
    if whole.exists():
        from run import machine_info, write_rows  # benchmarks/run.py (this script's folder is on sys.path)

        run = json.loads(whole.read_text(encoding="utf-8"))
        total = {"run": f"memlab reproduce --profile {args.profile} --jobs {run['jobs']}",
                 "experiments": len(run["experiments"]), "seconds": run["seconds"],
                 "empty compile cache": run["empty_compile_cache"]}
        write_rows("reproduce_costs", [total, *({"experiment": name, "seconds": s}
                                          for name, s in tables[args.profile]["seconds"].items())], machine_info())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

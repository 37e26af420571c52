"""The ``memlab`` command: ``list``, ``run`` and ``report``.

User errors (unknown experiment, bad profile, invalid config, unusable or busy output folder, bad arguments)
and a full disk print one line ``memlab: error: <message>`` on stderr and exit with code 2; cells that raise are
reported with their tracebacks and the run exits with 1; Ctrl-C or SIGTERM exits with 130 and one line. In every
case the finished cells are kept, so the same command resumes.

``memlab run`` keeps compiled XLA programs in JAX's persistent cache (``$MEMLAB_JAX_CACHE``, default
``~/.cache/memlab/jax``; ``MEMLAB_JAX_CACHE=off`` disables it; see memlab.compile_cache).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

from memlab import __version__, catalog, compile_cache
from memlab.claims import status_counts, status_of
from memlab.devices import check_device_count, cores_for_run, use_host_devices
from memlab.executors import EXECUTORS, ClusterLost, make_executor
from memlab.paper_claims import PACKAGED
from memlab.plugins import add_plugins
from memlab.report import build_report, check_report_target, duration, megabytes
from memlab.runner import (
    CellsFailed,
    SetupError,
    TimeLimitReached,
    atomic_write_text,
    default_out_dir,
    run_experiment,
)
from memlab.store import StoreError

PAPER_RESULTS = "paper-results"  # where the committed paper-scale runs live (the repository's own)
INTERRUPTED = "memlab: interrupted; finished cells are kept; rerun the same command to resume"  # Ctrl-C, SIGTERM


def paper_scale_source(given: str = PAPER_RESULTS) -> Path:
    """Where the report reads paper-scale verdicts: the folder given, or, where the default folder is absent (memlab
    installed from a wheel, run outside a clone), the claims of the committed runs that memlab ships."""
    return PACKAGED if given == PAPER_RESULTS and not Path(given).is_dir() else Path(given)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line instead of usage + message
        self.exit(2, f"memlab: error: {message} (see '{self.prog} --help')\n")


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # no room for an output file: the run resumes once there is


def _error(message: str) -> int:
    print(f"memlab: error: {message}", file=sys.stderr)
    return 2


# ---------------------------------------------------------------- list


def cmd_list(args) -> int:
    if args.names:
        for name in catalog.EXPERIMENTS:
            print(name)
        return 0
    from rich.console import Console
    from rich.table import Table

    if not catalog.EXPERIMENTS:
        print("no experiments registered yet")
        return 0
    table = Table(title="memlab experiments", show_lines=True)
    table.add_column("experiment", no_wrap=True)
    table.add_column("profiles", no_wrap=True)  # one a line: a name is what the user types, never cut
    table.add_column("reproduces", overflow="fold")
    for exp in catalog.EXPERIMENTS.values():
        table.add_row(exp.name, "\n".join(exp.profiles), f"{exp.paper_ref} ({exp.paper}): {exp.description}")
    Console().print(table)
    return 0


# ---------------------------------------------------------------- run


def compile_cache_folder() -> Path | None:
    """$MEMLAB_JAX_CACHE (default ~/.cache/memlab/jax); None where it is 'off' or empty."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memlab" / "jax"
    folder = os.environ.get("MEMLAB_JAX_CACHE", str(default))
    return Path(folder) if folder and folder.lower() != "off" else None


def use_compile_cache() -> None:
    """Point JAX's persistent compile cache at :func:`compile_cache_folder`, unless it is off."""
    if (folder := compile_cache_folder()) is not None:
        compile_cache.enable(str(folder), min_compile_secs=0.5)


def cmd_run(args) -> int:
    try:
        add_plugins(args.plugin)
        exp = catalog.get(args.name)
        executor = make_executor(*_executor_choice(args, exp), args.address, args.cpus_per_cell)
        # before any array exists: a --devices given here wins; else a count already in XLA_FLAGS (the user's, or
        # memlab reproduce's share of the cores), else the cores each cell has to itself
        devices = None if args.devices is None else check_device_count(args.devices)
        use_host_devices(executor.devices_per_cell() if devices is None else devices, override=devices is not None)
        compile_cache.use_quick_compiles(args.profile, exp.quick_flags)  # quick profiles (memlab.compile_cache)
    except ValueError as e:
        return _error(_option_names(str(e)))
    out = Path(args.out) if args.out is not None else default_out_dir(exp, args.profile, args.overrides)
    use_compile_cache()
    start = time.perf_counter()
    try:
        with executor:
            run_experiment(exp, profile=args.profile, seed=args.seed, out_dir=out, progress=not args.no_progress,
                           data_dir=args.data_dir, executor=executor, store=args.store, time_limit=args.time_limit,
                           overrides=args.overrides)
    except (SetupError, StoreError) as e:  # errors inside the experiment itself keep their traceback
        return _error(str(e))
    except TimeLimitReached as e:
        print(f"memlab: {e}", file=sys.stderr)
        return 0
    except CellsFailed as e:
        print(f"memlab: error: {e}", file=sys.stderr)
        return 1
    except ClusterLost as e:
        kept = len(list((out / "cells").glob("*.json")))
        print(f"memlab: error: {e}; {kept} cells kept in {out}; rerun the same command to resume", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)  # Ray's exit handlers would wait for the lost head, then end the process from C++
    except KeyboardInterrupt:
        print(INTERRUPTED.replace("are kept", f"are kept in {out}"), file=sys.stderr)
        return 130
    except OSError as e:
        if e.errno not in _DISK_FULL:  # any other OSError is a bug to see in full
            raise
        return _error(f"cannot write {e.filename or out}: {e.strerror}; finished cells are kept in {out}; make room "
                      "and rerun the same command to resume")
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    cells = doc["cells"]
    reused = f", {cells['reused']} reused from other runs" if cells.get("reused") else ""
    print(f"{out}  ({duration(time.perf_counter() - start)}; {cells['computed']} cells computed, "
          f"{cells['resumed']} resumed{reused}, executor {executor.name}; "
          f"peak memory {megabytes(doc['peak_rss_mb'])})")
    claims = doc.get("claims", [])
    if claims:
        failing = [f"{c['id']} ({status_of(c, doc['profile'])})" for c in claims if not c["holds"]]
        print(status_counts(status_of(c, doc["profile"]) for c in claims) +
              (f"; not holding: {', '.join(failing)}" if failing else "") + f" (summary: {out / 'summary.md'})")
    return 0


def _option_names(message: str) -> str:
    """A library's message about one of ``memlab run``'s arguments, with the argument called by its option."""
    for name in ("cpus_per_cell", "devices", "workers"):
        if message.startswith(f"{name} must"):
            return "--" + name.replace("_", "-") + message.removeprefix(name)
    return message


def _executor_choice(args, exp) -> tuple[str, int | None]:
    """--executor and --workers as given; by default a pool of one process per core for a profile whose cells each
    keep about one core busy (``Experiment.pool_profiles``), else this process."""
    if args.executor is not None:
        return args.executor, args.workers
    cores = cores_for_run()
    if args.profile in exp.pool_profiles and cores > 1 and args.devices is None:
        return "processes", cores if args.workers is None else args.workers
    return "local", args.workers


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def parse_duration(text: str) -> float:
    """Seconds in '2h30m', '90m', '45s', '1.5h' or a plain number of seconds (argparse type)."""
    text = text.strip().replace(" ", "")
    match = _DURATION.fullmatch(text)
    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    elif match and any(match.groups()):
        hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
        seconds = 3600 * hours + 60 * minutes + secs
    else:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}; expected e.g. 2h30m, 90m, 45s or seconds")
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive, got {text!r}")
    return seconds


def folder(text: str) -> str:
    """A folder named on the command line (argparse type): an empty name would silently mean the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty folder name; name a folder, or leave the option out for the default")
    return text


# ---------------------------------------------------------------- reproduce


def _reproduced(args) -> list[str]:
    """The experiments ``memlab reproduce`` runs: those named (default: all) that have the profile; ValueError
    before any starts for a bad --jobs, an unknown name, or a named experiment without the profile."""
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    names = [catalog.get(name).name for name in args.names] if args.names else list(catalog.EXPERIMENTS)
    lacking = [name for name in names if args.profile not in catalog.EXPERIMENTS[name].profiles]
    if args.names and lacking:
        raise ValueError(f"profile {args.profile!r} is not a profile of {', '.join(lacking)}; "
                         f"profiles: {_profiles_of(lacking)}")
    if not set(names) - set(lacking):
        raise ValueError(f"no experiment has a profile {args.profile!r}; profiles: {_profiles_of(names)}")
    return [name for name in names if name not in lacking]  # e.g. paper-core: the experiments that have one


def cmd_reproduce(args) -> int:
    from memlab.reproduce import reproduce, results_stamp

    out = Path(args.out)
    try:
        names = _reproduced(args)
        check_report_target(out)  # before hours of work: the report at the end must not overwrite the user's file
    except ValueError as e:
        return _error(str(e))
    start = time.perf_counter()

    def complete(run) -> bool:  # a run that met its time limit exits 0 without writing results.json
        stamp = results_stamp(out, run.name, args.profile)
        return run.returncode == 0 and stamp is not None and stamp != stamps_before[run.name]

    def show(run):
        if run.returncode is None:
            mark = "· not started (time limit):"
        elif run.returncode == 0:
            mark = "✓" if complete(run) else f"… stopped at the time limit, see {run.log}:"
        else:
            mark = f"✗ exit {run.returncode}, see {run.log}:"
        cpu = "" if run.cpu_seconds is None else f", {run.cpu_seconds:.0f} CPU-s"
        helpers = f", {run.helpers} helper run{'s' if run.helpers > 1 else ''}" if run.helpers else ""
        print(f"{mark} {run.name} ({duration(run.seconds)}{cpu}{helpers})", flush=True)

    print(f"memlab: {len(names)} experiments, profile {args.profile}, {args.jobs} at a time", flush=True)
    stamps_before = {name: results_stamp(out, name, args.profile) for name in names}
    cache = compile_cache_folder()
    cold = cache is None or not cache.is_dir() or not any(cache.iterdir())  # every program compiled afresh
    try:
        # an experiment whose cells spread over a process per core (pool_profiles) spreads them over free job slots
        splittable = [name for name in names if args.profile in catalog.EXPERIMENTS[name].pool_profiles]
        runs = reproduce(names, args.profile, args.jobs, out, on_finish=show, time_limit=args.time_limit,
                         splittable=splittable)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    unfinished = [r.name for r in runs if r.returncode is None or (r.returncode == 0 and not complete(r))]
    if unfinished:
        print(f"memlab: time limit reached: {len(runs) - len(unfinished)} of {len(runs)} experiments finished; "
              "the same command resumes", flush=True)
    failed = [r.name for r in runs if r.returncode not in (0, None)]
    try:
        path, timing = build_report(out, paper_scale_source())
    except ValueError as e:
        return _error(str(e))
    seconds = time.perf_counter() - start
    if not unfinished and not failed:  # the wall time of a whole run, for benchmarks/reproduce_costs.py
        atomic_write_text(out / f"reproduce-{args.profile}.json", json.dumps(
            {"profile": args.profile, "jobs": args.jobs, "experiments": names, "seconds": round(seconds, 1),
             "empty_compile_cache": cold, "finished": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
             "cpu_seconds": {r.name: None if r.cpu_seconds is None else round(r.cpu_seconds, 1) for r in runs},
             "helper_runs": {r.name: r.helpers for r in runs if r.helpers}},
            indent=2) + "\n")
    print(f"{path}  ({duration(seconds)} in all)")
    print(timing, end="")
    if failed:
        return _error(f"{len(failed)} experiment(s) failed: {', '.join(failed)}; their logs are beside their folders")
    return 0


def _profiles_of(names: list[str]) -> str:
    """The profiles of the experiments ``names``, each once, in the order the experiments list them."""
    return ", ".join(dict.fromkeys(p for name in names for p in catalog.EXPERIMENTS[name].profiles))


# ---------------------------------------------------------------- report


def cmd_report(args) -> int:
    try:
        path, timing = build_report(Path(args.dir), paper_scale_source(args.paper_results))
    except (ValueError, OSError) as e:
        return _error(str(e))
    print(path)
    print(timing, end="")
    return 0


# ---------------------------------------------------------------- main


def parser() -> argparse.ArgumentParser:
    """The ``memlab`` command's argument parser: ``parser().parse_args(argv).func`` is the subcommand main runs."""
    command = _Parser(prog="memlab", description="Sequence models as memory, measured against the optimal inference.")
    command.add_argument("--version", action="version", version=f"memlab {__version__}")
    sub = command.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("list", help="list every experiment")
    p.add_argument("--names", action="store_true", help="print only the names, one per line")
    p.set_defaults(func=cmd_list)
    _add_run_parser(sub)
    p = sub.add_parser("reproduce", help="run every experiment's profile, several at once, then write the report")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="experiments to run, in this order (default: every experiment that has the profile)")
    p.add_argument("--profile", default="quick", help="config profile of every experiment (default quick)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="experiments at a time, each its own process (default: CPU count)")
    p.add_argument("--out", type=folder, default="out", help="output root (default out)")
    p.add_argument("--time-limit", type=parse_duration, default=None, metavar="DURATION",
                   help="start nothing that would not finish within DURATION (2h30m, 90m, 45s); exits 0 saying "
                        "how many experiments finished; the same command resumes")
    p.set_defaults(func=cmd_reproduce)
    p = sub.add_parser("report", help="gather every summary.md and claim under DIR into DIR/report.md")
    p.add_argument("dir", nargs="?", type=folder, default="out", metavar="DIR",
                   help="the folder of experiment folders, as memlab reproduce --out writes it (default out)")
    p.add_argument("--paper-results", default=PAPER_RESULTS, metavar="DIR",
                   help="show beside each claim the verdict of the paper-scale runs under DIR "
                        f"(default {PAPER_RESULTS}; where it is absent, the claims of the paper-scale runs "
                        "memlab ships)")
    p.set_defaults(func=cmd_report)
    return command


def _add_run_parser(sub) -> None:
    """``memlab run``'s arguments."""
    p = sub.add_parser("run", help="run one experiment")
    p.add_argument("name")
    p.add_argument("--profile", default="quick", help="config profile (quick, paper, ...; default quick)")
    p.add_argument("--seed", type=int, default=None, help="replace the profile's seed")
    p.add_argument("--out", type=folder, default=None,
                   help="output folder (default out/<name>/<profile>; with --set: out/<name>/<profile>+FIELD=VALUE...)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars and progress lines")
    p.add_argument("--data-dir", default=None, help="folder of external data (experiments that read it, e.g. NCLT)")
    p.add_argument("--executor", choices=EXECUTORS, default=None,
                   help="who computes the cells: this process, a local process pool, or a Ray cluster (default: a "
                        "pool of one process per core for profiles whose cells each use one core, e.g. pissm's "
                        "paper profiles, else this process)")
    p.add_argument("--workers", type=int, default=None, help="processes of --executor processes (default: CPU count)")
    p.add_argument("--address", default=None,
                   help="Ray cluster of --executor ray: 'auto' (ray start --head on this machine) or host:port; "
                        "default: start a local Ray instance; an address that does not answer within "
                        "$MEMLAB_RAY_CONNECT_TIMEOUT seconds (default 30) is an error")
    p.add_argument("--cpus-per-cell", type=float, default=None, help="CPUs each cell reserves on Ray (default 1)")
    p.add_argument("--devices", type=int, default=None,
                   help="CPU devices per cell process, over which long passes split their examples (default: the "
                        "cores each cell has to itself; memlab.devices)")
    p.add_argument("--store", default=None,
                   help="the cell store, finished cells shared by every experiment and profile (default: cells/ "
                        "beside the experiment folders, e.g. out/cells)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="overrides",
                   help="change a field of the profile's config, e.g. --set layers=gru,lru or --set train.steps=200 "
                        "(repeatable; the default output folder's name carries the changes)")
    p.add_argument("--layers", action="append", dest="overrides", type=lambda names: f"layers={names}", metavar="NAMES",
                   help="the same as --set layers=NAMES: the arena's layers to run, e.g. --layers running-mean,gru")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE.py|MODULE",
                   help="import your code first (e.g. it registers a layer: memlab.arena.register_layer); repeatable")
    p.add_argument("--time-limit", type=parse_duration, default=None, metavar="DURATION",
                   help="start no cell that would not finish within DURATION (2h30m, 90m, 45s); cells that "
                        "checkpoint stop at a checkpoint; exits 0 saying how many cells finished")
    p.set_defaults(func=cmd_run)


def main(argv: list[str] | None = None) -> int:
    """The ``memlab`` command; ``argv`` None: this process is the command (its arguments in ``sys.argv``)."""
    for stream in (sys.stdout, sys.stderr):  # a path the terminal's encoding cannot show is escaped, not a traceback
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")
    try:
        try:
            args = parser().parse_args(argv)
        except SystemExit as e:  # --help, or an argument error already printed
            return e.code if isinstance(e.code, int) else 2
        return args.func(args)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM outside a run's own handling (between its last cell and exit)
        print(INTERRUPTED, file=sys.stderr)
        return 130
    finally:
        if argv is None and threading.current_thread() is threading.main_thread():
            # the command is done: a Ctrl-C now would only interrupt the exit handlers (the process pool's, JAX's)
            signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())

"""How memlab compiles: JAX's persistent compile cache, XLA's optimisation level for quick runs, the time spent
compiling, and the XLA:CPU loader's false alarm.

A cached program is keyed by the program itself (and XLA_FLAGS), so the cache changes how long a run takes, never
its numbers; a warm cache cuts a short run to a fraction of its cold time, most of which is compiling.

Quick and tiny profiles compile with XLA's backend optimisation level 1 instead of its default, and with XLA:CPU's
older elemental emitter for fusions instead of the MLIR fusion emitters: their cells spend most of their time
compiling. Level 1 compiles faster while the programs run no slower. The older emitter compiles much faster and
runs somewhat slower: a quick ``memlab reproduce`` from an empty compile cache takes less CPU in all (pissm, ictd
and arena faster, RingWorld's PPO and recall's S6 runs slower: ``LEVEL_ONLY``; benchmarks/reproduce_costs.py
times each experiment). The numbers differ from the defaults' in float round-off, so both flags are part of a
cell's digest (``store.describe``) whenever they are set.
"""

from __future__ import annotations

import os
import re

import jax

_BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # XLA's compile, or its load from the cache
_compiling: list[float] = []  # [seconds so far]; empty until seconds_compiling() first starts the count


def _count(event: str, seconds: float, **_) -> None:
    if event == _BACKEND_COMPILE_EVENT:
        _compiling[0] += seconds


def seconds_compiling() -> float:
    """Seconds this process has spent in XLA compiling programs (or loading them from the persistent cache) since
    the first call of this function: the difference over a cell is its compile time (``jax.monitoring``)."""
    if not _compiling:
        _compiling.append(0.0)
        jax.monitoring.register_event_duration_secs_listener(_count)
    return _compiling[0]


# the XLA flags that change a program's numbers (in round-off), each with how a cell's digest records its value
# where XLA_FLAGS sets it (store.describe); and the values quick profiles ask for
DIGEST_FLAGS = {"xla_backend_optimization_level": int, "xla_cpu_use_fusion_emitters": str.lower}
QUICK_FLAGS = {"xla_backend_optimization_level": "1", "xla_cpu_use_fusion_emitters": "false"}
# for an experiment whose long-running programs (PPO, recall's S6 students) the older emitter slows more than it
# speeds their compiles (belief.deep-alf-inits and recall.sweep quick ran longer with it)
LEVEL_ONLY = ("xla_backend_optimization_level",)


def xla_flag(name: str) -> str | None:
    """The value of ``--name=value`` in ``XLA_FLAGS`` (None: not set, XLA's default)."""
    match = re.search(rf"(?<!\S)--{re.escape(name)}=(\S+)", os.environ.get("XLA_FLAGS", ""))
    return match.group(1) if match else None


def digest_flags() -> dict[str, int | str]:
    """The :data:`DIGEST_FLAGS` that ``XLA_FLAGS`` sets, by name, their values as a digest records them."""
    return {name: record(value) for name, record in DIGEST_FLAGS.items() if (value := xla_flag(name)) is not None}


def is_quick(profile: str) -> bool:
    """Whether ``profile`` is a quick check (tiny, quick, quick-...) rather than a paper-scale one."""
    return profile == "tiny" or profile == "quick" or profile.startswith("quick-")


def use_quick_compiles(profile: str, flags: tuple[str, ...] = tuple(QUICK_FLAGS)) -> None:
    """For a quick profile, ask XLA (via ``XLA_FLAGS``, which worker processes inherit) for the :data:`QUICK_FLAGS`
    named in ``flags`` (an experiment's ``quick_flags``; default both: optimisation level 1 and the older elemental
    emitter for fusions), each unless set already (the user's choice wins) or JAX's backend has started (too late to
    apply, so nothing is changed)."""
    from memlab.devices import backend_started

    if is_quick(profile) and not backend_started():
        unset = [f"--{name}={QUICK_FLAGS[name]}" for name in flags if xla_flag(name) is None]
        os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *unset]).strip()


def enable(folder: str, min_compile_secs: float) -> None:
    """Keep compiled programs that took over ``min_compile_secs`` to compile in ``folder``, quietly."""
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_secs)
    silence_cpu_aot_loader_alarm()


def silence_cpu_aot_loader_alarm() -> None:
    """Raise XLA's C++ log threshold to FATAL, unless the user chose a log level.

    XLA:CPU's loader logs two ERROR lines for every cached program it loads ("Target machine feature
    +prefer-no-gather is not supported on the host machine") on CPUs for which LLVM sets the tuning flags
    +prefer-no-gather / +prefer-no-scatter, mistaking them for instruction-set features (openxla/xla#44565). The
    program loads and runs all the same, on the machine that compiled it, so a warm run printed dozens of false
    alarms. Errors that matter still reach the user as Python exceptions.
    """
    # `import jax` sets TF_CPP_MIN_LOG_LEVEL to 1 when it is unset: any other value is the user's choice
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1") != "1" or jax.config.jax_logging_level not in (None, "NOTSET"):
        return
    jax.config.update("jax_logging_level", "CRITICAL")

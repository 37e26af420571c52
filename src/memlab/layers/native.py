"""Mamba's selective scan as a native CPU kernel (``selective_scan.cc``), built on first use with the machine's C++
compiler against the XLA FFI headers jaxlib ships, kept in ``$MEMLAB_NATIVE_CACHE`` (default
``~/.cache/memlab/native``) and registered with JAX as custom calls.

``memlab.layers.s6.selective_scan(method="sequential")`` runs it whenever it can: float32 or float64 operands of one
dtype, ZOH with ``a_nonzero`` (Mamba's layer) or Euler-B. Its forward and backward equal the JAX scan's to float
rounding (tests/layers/test_native.py) and make Mamba's training step several times faster on the CPU
(benchmarks/bench_arena.py). Its backward pass is itself a kernel with no derivative: a second derivative through
it (``jax.grad`` of a ``jax.grad``) raises, where the JAX scan (``disabled()``) or ``method="parallel"`` gives one.
Where it cannot be built (no compiler, a build error) memlab says so once and uses the JAX scan; ``MEMLAB_NATIVE=0``
asks for the JAX scan always. The cache folder: ``$MEMLAB_NATIVE_CACHE``, else ``$XDG_CACHE_HOME/memlab/native``,
else ``~/.cache/memlab/native``.

The build is keyed by the source, the compiler and its version, jaxlib's version and the processor (it is compiled
for this machine's instruction set, ``-march=native``), and written atomically, so processes that build at once
never load half a file. A new build removes the cache's builds no process has used for 30 days.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import threading
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np

SOURCE = Path(__file__).with_name("selective_scan.cc")
FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC")
DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}


def cache_folder() -> Path:
    """$MEMLAB_NATIVE_CACHE, else $XDG_CACHE_HOME/memlab/native, else ~/.cache/memlab/native."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memlab" / "native"
    return Path(os.environ.get("MEMLAB_NATIVE_CACHE") or default)


def _processor() -> str:
    """What the instruction set depends on: the CPU's model and feature flags where Linux tells them."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine() + platform.processor()
    wanted = [line for line in lines if line.startswith(("model name", "flags", "Features"))]
    return platform.machine() + "".join(dict.fromkeys(wanted))  # every core repeats them: once each


def _build(compiler: str) -> Path:
    """The shared library for this machine, compiled unless the cache holds it; raises RuntimeError on failure."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(), compiler, version, " ".join(FLAGS), jaxlib.__version__,
                                    _processor()]).encode()).hexdigest()[:24]
    target = cache_folder() / f"selective_scan-{key}.so"
    if target.exists():
        with contextlib.suppress(OSError):  # a read-only cache is still used
            target.touch()  # in use: _remove_stale keeps it
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.part")  # one per builder
    command = [compiler, *FLAGS, f"-I{jax.ffi.include_dir()}", str(SOURCE), "-o", str(partial)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            first = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip())
            raise RuntimeError(f"{compiler} failed: {first[:300]}")
        os.replace(partial, target)  # atomic: another process sees no file or the whole one
    finally:
        partial.unlink(missing_ok=True)
    _remove_stale(target)
    return target


STALE_DAYS = 30


def _remove_stale(built: Path) -> None:
    """Remove the cache's other builds (an older source, compiler or jaxlib) and builders' leftover partial files
    that no process has used for STALE_DAYS days (each use touches its build): a new build would otherwise leave
    the old ones forever. A process that has one loaded keeps it (unlinking does not unmap it)."""
    now = time.time()
    for old in built.parent.glob("selective_scan-*.so*"):
        try:
            if old != built and now - old.stat().st_mtime > STALE_DAYS * 86400:
                old.unlink()
        except OSError:  # another process removed it first, or the folder is read-only: keep going
            continue


_building = threading.Lock()


def _library() -> ctypes.CDLL | str:
    """The loaded kernel with its targets registered, or the reason there is none (found once per process)."""
    with _building:  # threads tracing at once build and register it once
        return _load()


@functools.cache
def _load() -> ctypes.CDLL | str:
    if os.environ.get("MEMLAB_NATIVE", "1") == "0":
        return "MEMLAB_NATIVE=0"
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        return "no C++ compiler found (set CXX)"
    try:
        library = ctypes.CDLL(str(_build(compiler)))
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        return f"building {SOURCE.name} failed: {e}"
    for name in _targets():
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(library, name)), platform="cpu")
    return library


def _targets() -> list[str]:
    return [f"selective_scan_{d}_{t}_{p}" for d in ("zoh", "euler_b") for t in DTYPES.values()
            for p in ("forward", "backward")]


def unavailable() -> str | None:
    """None when the native scan is built and registered, else why not."""
    library = _library()
    return library if isinstance(library, str) else None


@functools.cache
def _say_once(reason: str) -> None:
    if reason != "MEMLAB_NATIVE=0":
        warnings.warn(f"memlab: Mamba's native selective scan is unavailable ({reason}); using the slower JAX scan",
                      RuntimeWarning, stacklevel=3)


_switched_off: list[bool] = []  # non-empty inside `disabled()`


@contextlib.contextmanager
def disabled():
    """Within it, scans traced take the JAX path (to compare the two, or time them: benchmarks/bench_arena.py).
    It holds for the whole process: another thread tracing meanwhile takes the JAX path too (slower, same numbers)."""
    _switched_off.append(True)
    try:
        yield
    finally:
        _switched_off.pop()


def usable(discretization: str, a_nonzero: bool, *operands) -> bool:
    """Whether :func:`forward` and :func:`backward` take these operands: the kernel's discretisations (ZOH with
    a != 0, Euler-B), one float32 or float64 dtype, no empty axis, the CPU, and the kernel built."""
    if _switched_off or not (discretization == "euler_b" or (discretization == "zoh" and a_nonzero)):
        return False
    dtypes = {np.dtype(x.dtype) for x in operands}
    if len(dtypes) != 1 or next(iter(dtypes)) not in DTYPES or jax.default_backend() != "cpu":
        return False
    if any(0 in np.shape(x) for x in operands):
        return False
    reason = unavailable()
    if reason is not None:
        _say_once(reason)
    return reason is None


def _target(discretization: str, dtype, direction: str) -> str:
    return f"selective_scan_{discretization}_{DTYPES[np.dtype(dtype)]}_{direction}"


def forward(x, delta, A, B, C, h0, reset, discretization: str):
    """(y (L, D) without the skip, h_{L-1} (D, N)) of one sequence (``selective_scan``'s operands); under ``vmap``
    the kernel takes the whole batch in one call."""
    shapes = (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(h0.shape, h0.dtype))
    call = jax.ffi.ffi_call(_target(discretization, x.dtype, "forward"), shapes, vmap_method="broadcast_all")
    return call(x, delta, A, B, C, h0, jnp.asarray(reset, bool))


def backward(x, delta, A, B, C, h0, reset, gy, g_last, discretization: str):
    """The cotangents (x, delta, A, B, C, h0) of :func:`forward`'s, given those of (y, h_{L-1}); the kernel
    recomputes the states one sequence at a time rather than keeping them from the forward pass."""
    shapes = tuple(jax.ShapeDtypeStruct(v.shape, v.dtype) for v in (x, delta, A, B, C, h0))
    call = jax.ffi.ffi_call(_target(discretization, x.dtype, "backward"), shapes, vmap_method="broadcast_all")
    return call(x, delta, A, B, C, h0, jnp.asarray(reset, bool), gy, g_last)

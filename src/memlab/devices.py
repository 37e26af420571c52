"""Several CPU devices in one process: the batch of a long, embarrassingly parallel pass split over the cores.

XLA runs one computation on one CPU thread at a time (bar the odd large matmul), so a cell computed by one process
leaves the other cores idle. With ``XLA_FLAGS=--xla_force_host_platform_device_count=K`` JAX shows K CPU devices;
:func:`over_devices` then splits the leading (example) axis of a pass over them with ``shard_map`` and each device
runs its share on its own core. Each example's arithmetic is unchanged, so the outputs agree whatever the device
count, up to float rounding where XLA compiles the per-device program differently (tested to 1e-6 relative; the recall
validation MSE of a paper cell moved by 1e-7). Passes whose examples are independent are split this way (forward
passes such as a validation set). A gradient is split only where its caller asks (:func:`value_and_grad_in_parts`):
summed in parts, its additions come in another order, and training, chaotic in the float sense, then ends at other
numbers (statistically the same, not digit by digit).

The device count is fixed when JAX starts its CPU backend, so :func:`use_host_devices` must run before the first
array is made; ``memlab run`` calls it first thing (``--devices``; default :func:`default_devices`, the cores each
cell has to itself), and worker processes inherit it through ``XLA_FLAGS``.
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from memlab.checks import check_int

__all__ = ["DEVICES_PER_CORE", "available_cpus", "check_device_count", "cores_for_run", "default_devices",
           "host_devices_flags", "over_devices", "use_host_devices", "value_and_grad_in_parts"]

FLAG = "--xla_force_host_platform_device_count"
_FLAG_RE = re.compile(FLAG + r"=(\d+)")


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


DEVICES_PER_CORE = 4  # beyond this many devices per core a pass only adds threads, memory and compile time


def check_device_count(count) -> int:
    """``count`` as an int, or ValueError unless it is in [1, DEVICES_PER_CORE x this machine's cores]: each device
    is a thread pool and its own copy of every program, so a huge count exhausts the memory before any work."""
    cores = os.cpu_count() or 1
    check_int("devices", count)
    if count > DEVICES_PER_CORE * cores:
        raise ValueError(f"devices must be at most {DEVICES_PER_CORE * cores} ({DEVICES_PER_CORE} per core of this "
                         f"machine's {cores}), got {count}")
    return int(count)


def default_devices(cells_at_once: int = 1) -> int:
    """CPU devices per cell when ``cells_at_once`` cells share this machine: its cores divided among them."""
    return max(1, available_cpus() // check_int("cells_at_once", cells_at_once))


def cores_for_run() -> int:
    """The cores a run started now may use: the device count in ``XLA_FLAGS`` where one is set (``memlab
    reproduce``'s share of the machine, or the user's), else every core this process may run on."""
    match = _FLAG_RE.search(os.environ.get("XLA_FLAGS", ""))
    return int(match.group(1)) if match else available_cpus()


def backend_started() -> bool:
    """Whether JAX's backend has started (after which XLA_FLAGS no longer applies to this process)."""
    from jax._src import xla_bridge  # no public query; reading it does not start the backend

    return bool(xla_bridge._backends)


def use_host_devices(count: int, override: bool = True) -> int:
    """Ask for ``count`` CPU devices in this process (and in processes it starts), via ``XLA_FLAGS``.

    ``override=False`` keeps a device count already in ``XLA_FLAGS`` (the user's choice). Returns the count JAX
    will use; if its backend has already started, that is the count it started with (and with ``override`` a
    warning says the request came too late).
    """
    flags = host_devices_flags(count, override)
    count = int(_FLAG_RE.search(flags).group(1))
    if backend_started():
        have = jax.local_device_count("cpu")
        if have != count and override:  # an explicit request that cannot be met; a default one is best effort
            warnings.warn(f"JAX's CPU backend already started with {have} device(s); {count} requested too late "
                          f"(set {FLAG}={count} in XLA_FLAGS before the first array is made)", stacklevel=2)
        return have
    os.environ["XLA_FLAGS"] = flags
    return count


def host_devices_flags(count: int, override: bool = False) -> str:
    """This process's ``XLA_FLAGS`` with ``count`` CPU devices; ``override=False`` keeps a count already there."""
    check_int("devices", count)
    flags = os.environ.get("XLA_FLAGS", "")
    if _FLAG_RE.search(flags) and not override:
        return flags
    return (_FLAG_RE.sub("", flags).strip() + f" {FLAG}={count}").strip()


def over_devices(fn: Callable, *batches: jax.Array):
    """``fn(*batches)`` with the leading axis of every batch split evenly over this process's devices.

    ``fn`` maps examples to outputs row by row (its output's leading axis is the examples'); values it closes over
    are replicated. With one device, or fewer examples than devices, it is simply ``fn(*batches)``; examples
    beyond the largest multiple of the device count run on one device. Works inside ``jit``.
    """
    devices = jax.local_devices()  # of the default backend (one GPU: no split)
    n = batches[0].shape[0]
    if len(devices) == 1 or n < len(devices):
        return fn(*batches)
    whole = n // len(devices) * len(devices)
    mesh = Mesh(np.array(devices), ("examples",))
    split = jax.shard_map(fn, mesh=mesh, in_specs=PartitionSpec("examples"), out_specs=PartitionSpec("examples"),
                          check_vma=False)
    out = split(*(x[:whole] for x in batches))
    if whole == n:
        return out
    return jax.tree.map(lambda a, b: jnp.concatenate([a, b]), out, fn(*(x[whole:] for x in batches)))


def value_and_grad_in_parts(fn: Callable, parts: int) -> Callable:
    """``jax.value_and_grad(fn, has_aux=True)`` computed in ``parts`` parts split over this process's devices.

    ``fn(params, batches, *shared) -> (loss, aux)``: ``batches`` a tuple of arrays whose leading axis is the
    examples, ``loss`` a sum of per-example terms (any normaliser it divides by must be passed in ``shared``, not
    computed from the part) and ``aux`` a pytree of per-example rows. The examples are cut into ``parts`` equal
    consecutive parts; each part's loss and gradient are computed alone, the parts spread over the devices
    (:func:`over_devices`; on one device they run in turn) and summed in part order. Returns a function of
    ``(params, batches, *shared)`` with ``value_and_grad``'s output ((loss, aux for every example), grads).
    ``parts`` must divide the number of examples (ValueError).
    """
    check_int("parts", parts)
    value_and_grad = jax.value_and_grad(fn, has_aux=True)
    if parts == 1:
        return value_and_grad

    def in_parts(params, batches, *shared):
        n = batches[0].shape[0]
        if n % parts:
            raise ValueError(f"{parts} gradient parts do not divide the batch of {n} examples")

        def in_turn(*split):  # (parts on this device, n / parts, ...) -> each part's results, stacked
            return jax.lax.map(lambda part: value_and_grad(params, part, *shared), split)

        (loss, aux), grads = over_devices(in_turn, *(x.reshape(parts, n // parts, *x.shape[1:]) for x in batches))
        total = lambda x: functools.reduce(jnp.add, list(x))  # noqa: E731  (part order, whatever the devices)
        return (total(loss), jax.tree.map(lambda x: x.reshape(n, *x.shape[2:]), aux)), jax.tree.map(total, grads)

    return in_parts

"""The cell store: finished sweep cells kept by what determines their result, shared by every experiment under one root.

A cell built as ``functools.partial(f, *args, **kwargs)`` of a module-level function ``f`` is a described
computation: :func:`cell_digest` hashes the function's stable name (:func:`cell`) and version, its arguments (keys
included) and jax/jaxlib's major.minor version, so two experiments that ask for the same cell find one record::

    <store>/<module.function>/<digest>.json the cell record (``files.cell_text``) plus where it was first computed
    <store>/checkpoints/<digest>/           files of a cell that checkpoints (``CHECKPOINT`` in its arguments)
    <store>/claims/<digest>.lock            while a run computes the cell (:meth:`CellStore.claim`)

What goes into the digest and what does not: docs/architecture.md, "The cell store".
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import fcntl
import functools
import hashlib
import inspect
import json
import math
import os
import shutil
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from memlab import compile_cache
from memlab.files import added_at_default, atomic_write_text, is_added, read_cell, stored_key

__all__ = ["CHECKPOINT", "CellClaim", "CellStore", "DamagedRecord", "NotDescribable", "ResultMismatch", "StoreError",
           "cell", "cell_digest", "describe", "result_types", "typed_result", "with_checkpoint"]


class _Checkpoint:
    """The placeholder for a cell's checkpoint path (``CHECKPOINT``)."""

    def __repr__(self):
        return "CHECKPOINT"

    def __reduce__(self):  # one placeholder, also after pickling to a worker
        return "CHECKPOINT"


CHECKPOINT = _Checkpoint()


class StoreError(ValueError):
    """The cell store cannot be read or written (a damaged record, a folder that is not writable)."""


class DamagedRecord(StoreError):
    """A cell's file (in the store or a run folder) is not a cell record; recomputing the cell replaces it."""

    def __init__(self, path: Path, why: str):
        self.path = path
        super().__init__(f"cell file {path} is damaged ({why})")


class ResultMismatch(StoreError):
    """A stored result's keys are not the fields of the type its cell declares (:func:`typed_result`)."""


class NotDescribable(TypeError):
    """The cell is not a partial of a module-level function of describable arguments."""


def cell(name: str, version: int = 0, unkeyed: tuple[str, ...] = (), *, result: type | tuple[type, ...]
         ) -> Callable[[Callable], Callable]:
    """Decorator of a cell function: its stable ``name`` in the store (kept when the function moves to another
    module, so stored cells stay found) and its ``version`` (bump it when the cell's numbers change: older records
    are then not reused). ``unkeyed``: parameters that do not change the result and stay out of the digest (a
    checkpoint path added to a cell whose stored records must stay found).

    ``result`` (required: a cell without it is a TypeError): the type the cell returns, a frozen dataclass whose
    fields, in order, are the stored result's keys (``files.cell_text`` writes its fields as a JSON object; a field
    declared with ``metadata={"stored_as": key}`` is stored under ``key``, for a key that is no Python name); a sweep
    gives the result back as this type (:func:`typed_result`). A cell whose results come in several shapes (a model
    that does not train stores fewer numbers) declares a tuple of types, one per shape. The result is not part of the
    digest."""
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"a cell name is a non-empty string without '/', got {name!r}")
    kinds = result if isinstance(result, tuple) else (result,)
    if not (kinds and all(_is_result_type(k) for k in kinds)):
        raise ValueError(f"cell {name}: its result is declared as a frozen dataclass (or a tuple of them), "
                         f"got {result!r}")

    def mark(f):
        f.cell_name, f.cell_version, f.cell_unkeyed, f.cell_result = name, int(version), tuple(unkeyed), kinds
        return f

    return mark


def _is_result_type(kind) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen


def result_types(cell: Callable) -> tuple[type, ...] | None:
    """The result types a cell declares (:func:`cell`; a partial of a cell function too); None for a function
    without a declaration (a test's lambda, a plain function), whose results stay dicts."""
    return getattr(_cell_function(cell), "cell_result", None)


def typed_result(cell: Callable, result: Mapping) -> Any:
    """A stored result (a dict as read from its record) as the type ``cell`` declares, the first of its types
    whose fields hold every key of ``result`` and whose fields without a default are all among them (a field with
    a default: a number that older records lack); a field whose type is itself a result type (a frozen dataclass)
    is made that type in turn. ``result`` itself for a cell that declares no type. :class:`ResultMismatch` naming
    the cell and the key if no type fits."""
    kinds = result_types(cell)
    if kinds is None:
        return result
    try:
        return _as_one_of(kinds, result)
    except ResultMismatch as e:
        raise ResultMismatch(f"cell {_function_name(_cell_function(cell))}: {e}") from None


def _as_one_of(kinds: tuple[type, ...], result: Mapping) -> Any:
    mismatches = []
    for kind in kinds:
        fields = {stored_key(f): f for f in dataclasses.fields(kind)}
        unknown = [k for k in result if k not in fields]
        missing = [k for k, f in fields.items() if k not in result and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if not unknown and not missing:
            nested = {name: t for name, t in typing.get_type_hints(kind).items() if _is_result_type(t)}
            return kind(**{fields[k].name: _as_one_of((nested[fields[k].name],), v)
                           if fields[k].name in nested and isinstance(v, Mapping) else v for k, v in result.items()})
        mismatches.append((len(unknown) + len(missing), kind, unknown, missing))
    _, kind, unknown, missing = min(mismatches, key=lambda m: m[0])
    key, what = (unknown[0], "has the key") if unknown else (missing[0], "lacks the key")
    raise ResultMismatch(f"a stored result {what} {key!r}, which {kind.__module__}.{kind.__qualname__} does not "
                         "allow (give the field a default for records from before it, or declare the record's shape as "
                         "another result type)")


def _cell_function(cell: Callable) -> Callable:
    """The function of ``cell`` (a partial of it, or itself)."""
    return cell.func if isinstance(cell, functools.partial) else cell


def _array(a) -> dict:
    a = np.ascontiguousarray(np.asarray(a))
    return {"__array__": str(a.dtype), "shape": list(a.shape), "sha256": hashlib.sha256(a.tobytes()).hexdigest()}


def _number(x: float) -> str:
    return repr(float(x)) if math.isfinite(x) else str(x)


def _describe_field(i: int, f: dataclasses.Field, value: Any) -> Any:
    # an added field that is set is tagged with its place, so that two added fields never stand for each other
    return {"__added__": i, "value": describe_value(value)} if is_added(f) else describe_value(value)


def describe_value(x: Any) -> Any:
    """The JSON description of one argument (module docstring); NotDescribable for an unknown type. A dataclass (an
    Equinox module too) or NamedTuple by its fields' values in order (a ``files.added_field`` at its default left
    out), never by what its class or its fields are called or where the class lives, so that renaming or moving a
    config class or a field leaves every stored cell found; another registered pytree by its structure
    (``str(treedef)``, which names its node types) and leaves."""
    if x is CHECKPOINT:
        return "CHECKPOINT"
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, enum.Enum):
        return {"__enum__": describe_value(x.value)}
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return {"__float__": _number(float(x))}
    if isinstance(x, complex):
        return {"__complex__": [_number(x.real), _number(x.imag)]}
    if isinstance(x, bytes):
        return {"__bytes__": hashlib.sha256(x).hexdigest()}
    if isinstance(x, Path):
        return {"__path__": str(x)}
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return {"__key__": str(jax.random.key_impl(x)), "data": _array(jax.random.key_data(x))}
    if isinstance(x, (jax.Array, np.ndarray)):
        return _array(x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {"__fields__": [_describe_field(i, f, getattr(x, f.name)) for i, f in enumerate(dataclasses.fields(x))
                               if not added_at_default(f, getattr(x, f.name))]}
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # NamedTuple
        return {"__fields__": [describe_value(v) for v in x]}
    if isinstance(x, (list, tuple)):
        return [describe_value(v) for v in x]
    if isinstance(x, Mapping):
        if not all(isinstance(k, (str, int)) for k in x):
            raise NotDescribable(f"a dict argument with keys of type {type(next(iter(x))).__name__}")
        return {"__dict__": [[describe_value(k), describe_value(x[k])] for k in sorted(x, key=repr)]}
    if isinstance(x, functools.partial):
        return describe(x)
    leaves, treedef = jax.tree_util.tree_flatten(x)  # another registered pytree: its structure (static data too)
    if len(leaves) == 1 and leaves[0] is x:
        raise NotDescribable(f"an argument of type {type(x).__module__}.{type(x).__qualname__}")
    return {"__pytree__": str(treedef), "leaves": [describe_value(v) for v in leaves]}


def _function_name(f) -> str:
    """The cell name given by :func:`cell`, else ``module.qualname`` of a module-level function."""
    if getattr(f, "cell_name", None):
        return f.cell_name
    module, qualname = getattr(f, "__module__", None), getattr(f, "__qualname__", None)
    if not module or not qualname or "<" in qualname:  # <lambda>, <locals>
        raise NotDescribable(f"cell function {f!r} is not a module-level function")
    return f"{module}.{qualname}"


def describe(cell: Callable) -> dict:
    """What determines a cell's result: function, its cell_version, arguments, jax/jaxlib major.minor, and XLA's
    optimisation level and choice of fusion emitters where ``XLA_FLAGS`` sets them (quick profiles:
    ``compile_cache.use_quick_compiles``)."""
    if not isinstance(cell, functools.partial):
        raise NotDescribable(f"cell {cell!r} is not a functools.partial of a module-level function")
    import jaxlib

    name = _function_name(cell.func)
    try:  # in parameter order, defaults filled in: f(a, b) and f(a, b=b) and f(a) with b's default are one cell
        bound = inspect.signature(cell.func).bind(*cell.args, **cell.keywords)
    except (TypeError, ValueError) as e:
        raise NotDescribable(f"cell {name}: {e}") from e
    bound.apply_defaults()
    description = {"function": name, "cell_version": getattr(cell.func, "cell_version", 0),
                   # values only, so a parameter may be renamed; its position is what identifies it
                   "arguments": [describe_value(v) for k, v in bound.arguments.items()
                                 if k not in getattr(cell.func, "cell_unkeyed", ())],
                   "libraries": {"jax": ".".join(jax.__version__.split(".")[:2]),
                                 "jaxlib": ".".join(jaxlib.__version__.split(".")[:2])}}
    # absent at XLA's defaults, so the digests of cells computed there stay as they were
    return description | compile_cache.digest_flags()


def cell_digest(cell: Callable) -> str | None:
    """The store key of ``cell`` (SHA-256 of :func:`describe`, 32 hex digits), or None if it cannot be described."""
    try:
        text = json.dumps(describe(cell), sort_keys=True, separators=(",", ":"))
    except NotDescribable:
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def with_checkpoint(cell: Callable, path: Path) -> Callable:
    """``cell`` with every ``CHECKPOINT`` argument replaced by ``str(path)``; other cells unchanged."""
    if not isinstance(cell, functools.partial):
        return cell
    args = [str(path) if a is CHECKPOINT else a for a in cell.args]
    kwargs = {k: str(path) if v is CHECKPOINT else v for k, v in cell.keywords.items()}
    return functools.partial(cell.func, *args, **kwargs)


def takes_checkpoint(cell: Callable) -> bool:
    """Whether ``cell`` has a ``CHECKPOINT`` argument (it saves its progress and can stop early)."""
    return isinstance(cell, functools.partial) and (
        any(a is CHECKPOINT for a in cell.args) or any(v is CHECKPOINT for v in cell.keywords.values()))


class CellStore:
    """Finished cells under ``root``, by digest (module docstring). Records are written atomically."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, cell: Callable, digest: str) -> Path:
        """``<root>/<module.function>/<digest>.json`` (memlab's own functions without the ``memlab.`` prefix)."""
        return self.root / _function_name(cell.func).removeprefix("memlab.") / f"{digest}.json"

    def checkpoint_dir(self, digest: str) -> Path:
        return self.root / "checkpoints" / digest

    def get(self, cell: Callable, digest: str) -> dict | None:
        """The stored record (a dict with "record": the cell record, "origin") or None; :class:`DamagedRecord` if
        the file is not one (truncated, empty, another shape)."""
        path = self.path(cell, digest)
        if not path.exists():
            return None
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(entry, dict) or not isinstance(entry.get("origin"), str):
                raise ValueError("expected a stored cell (a JSON object with its record and origin)")
            read_cell(json.dumps(entry.get("record")))
        except json.JSONDecodeError as e:
            raise DamagedRecord(path, f"not valid JSON ({e})") from e
        except (ValueError, UnicodeDecodeError) as e:
            raise DamagedRecord(path, str(e)) from e
        return entry

    def put(self, cell: Callable, digest: str, record: str, origin: str) -> Path:
        """Store the record ``record`` (``files.cell_text``) first computed as ``origin`` ('experiment/profile/cell');
        removes the cell's checkpoint folder, which a finished cell no longer needs."""
        entry = json.dumps({"digest": digest, "origin": origin, "function": _function_name(cell.func),
                            "record": json.loads(record)})
        try:
            path = atomic_write_text(self.path(cell, digest), entry + "\n")
        except OSError as e:
            raise StoreError(f"cannot write to the cell store {self.root}: {e.strerror or e}") from e
        shutil.rmtree(self.checkpoint_dir(digest), ignore_errors=True)  # best effort: the result is safe
        return path

    def claim(self, digest: str) -> CellClaim | None:
        """Claim the cell ``digest`` for this process (None: another live process holds it, so two runs that share
        the store -- ``make reproduce``'s side-by-side experiments -- compute a shared cell once). An
        ``fcntl.flock`` on ``<root>/claims/<digest>.lock``: the kernel frees it when its process ends, however it
        ends, so a claim never outlives its run."""
        path = self.root / "claims" / f"{digest}.lock"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StoreError(f"cannot write to the cell store {self.root}: {e.strerror or e}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same_file = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same_file = False
        if not same_file:  # released and removed while we opened it: whoever creates the new file claims the cell
            os.close(fd)
            return None
        return CellClaim(path, fd)

    def is_free(self, digest: str) -> bool:
        """Whether no process holds the claim on ``digest`` (a probe: the claim is not kept)."""
        claim = self.claim(digest)
        if claim is None:
            return False
        claim.release()
        return True


@dataclasses.dataclass
class CellClaim:
    """A held claim on a cell (:meth:`CellStore.claim`); :meth:`release` once the cell is stored or given up."""

    path: Path
    fd: int

    def release(self) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # before unlocking: a process that opens the name next creates a new lock file
        os.close(self.fd)
        self.fd = -1

"""Files every run writes: atomic writes, JSON conversion, sweep-cell records, Markdown tables.

Every file goes through :func:`atomic_write_bytes` (temporary file in the same folder, then ``os.replace``),
so a killed run never leaves a half-written file.

JSON conversion (:func:`to_jsonable`): NumPy/JAX arrays become (nested) lists, NumPy scalars become Python
numbers, tuples become lists, dataclasses become dicts
(of their fields in order, each under :func:`stored_key`). In the public files (config.json, results.json,
``Run.save_json``) non-finite floats are written as the *strings* ``"NaN"``, ``"Infinity"`` and
``"-Infinity"`` (so the files are strict JSON and ``float(s)`` reads them back). Cell records are private to
the runner: they keep non-finite floats exactly (Python's ``NaN`` tokens) and ``bytes`` (e.g. a trained
model's serialised leaves) as ``{"__bytes__": base64}``, so a resumed run sees exactly what a fresh one saw.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import hashlib
import importlib.resources
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

__all__ = [
    "added_at_default",
    "added_field",
    "is_added",
    "atomic_write_bytes",
    "check_name",
    "atomic_write_text",
    "CellRecord",
    "cell_text",
    "content_digest",
    "dumps",
    "markdown_cell",
    "markdown_table",
    "read_cell",
    "software_versions",
    "stored_key",
    "summary_text",
    "to_jsonable",
]

_NONFINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}
_BYTES = "__bytes__"
CELL_FORMAT = 2  # version of the cell record written by cell_text; 2: it carries the digest of its content


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+,-]*$")  # experiment, profile and cell names: folder and file names


def check_name(kind: str, name: str) -> None:
    """ValueError unless ``name`` (of an experiment, profile or cell) is safe as a file or folder name."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise ValueError(f"invalid {kind} name {name!r}; expected letters, digits and . _ = + , - (no '/' or '..')")


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, then ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:  # a failed write names no file: name the one it was for
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


_ADDED = "memlab.added"


def added_field(default: Any, **kwargs) -> Any:
    """A dataclass field added to a config after runs of it were stored (``warmup: int | None = added_field(None)``):
    at ``default`` it is left out of the config's JSON (:func:`to_jsonable`) and of its cells' digests
    (``store.describe``), so every folder and cell made before it stays bound and found; a field added plainly
    would change them all."""
    return dataclasses.field(default=default, metadata={_ADDED: True}, **kwargs)


def is_added(field: dataclasses.Field) -> bool:
    return bool(field.metadata.get(_ADDED))


def added_at_default(field: dataclasses.Field, value: Any) -> bool:
    """Whether ``field`` is an :func:`added_field` and ``value`` its default (of the default's type: 0 is not
    False)."""
    return is_added(field) and type(value) is type(field.default) and value == field.default


def to_jsonable(obj: Any, strict: bool = True) -> Any:
    """Convert ``obj`` to plain JSON types. ``strict``: non-finite floats become "NaN"/"Infinity"/"-Infinity"
    and ``bytes`` are refused; otherwise floats stay as they are and bytes become ``{"__bytes__": base64}``. A
    dataclass becomes the dict of its fields, an :func:`added_field` at its default left out."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = {stored_key(f): getattr(obj, f.name) for f in dataclasses.fields(obj)
               if not added_at_default(f, getattr(obj, f.name))}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v, strict) for k, v in obj.items()}
    if isinstance(obj, (jax.Array, np.ndarray)):
        return to_jsonable(np.asarray(obj).tolist(), strict)
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item(), strict)
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v, strict) for v in obj]
    if isinstance(obj, float) and strict and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else _NONFINITE[obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, bytes) and not strict:
        return {_BYTES: base64.b64encode(obj).decode("ascii")}
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON; expected arrays, numbers, str, lists or dicts"
                    + ("" if strict else " (or bytes)"))


def stored_key(field: dataclasses.Field) -> str:
    """The key a dataclass field is written under: its name, or ``metadata["stored_as"]`` where the key is no Python
    name (``pissm.modes-rules``' "free-flight"); :func:`to_jsonable` writes it, ``store.typed_result`` reads it."""
    return field.metadata.get("stored_as", field.name)


def dumps(obj: Any) -> str:
    """Strict, indented JSON of ``obj`` (see :func:`to_jsonable`)."""
    return json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# ---------------------------------------------------------------- sweep cells


class CellRecord(NamedTuple):
    """A finished cell as stored: its result, compute time (s), the peak resident memory (MB) of the process
    that computed it, up to the end of the cell, the versions of the numerical libraries that computed it
    (``software_versions``) and the part of ``seconds`` spent compiling (XLA compiles and loads from the persistent
    compile cache); None in records written before these were kept."""

    result: dict
    seconds: float | None
    peak_rss_mb: float | None
    software: dict | None = None
    compile_seconds: float | None = None


@functools.cache  # read once per process: every cell record carries it
def machine_description() -> str:
    """The machine a cell ran on, in one line: 'Intel(R) Xeon(R) ... , 2 CPUs, Linux-6.1-x86_64' (the CPU model where
    the system names it, else the architecture)."""
    import platform

    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()}-{platform.release()}-{platform.machine()}"


def compile_share(cells: Iterable[tuple[float | None, float | None]]) -> float | None:
    """The fraction of compute time spent compiling over cells given as (seconds, compile_seconds), counting only the
    cells that recorded both; None if none did or their time sums to zero."""
    timed = [(s, c) for s, c in cells if s is not None and c is not None]
    total = sum(s for s, _ in timed)
    return sum(c for _, c in timed) / total if total > 0 else None


def software_versions() -> dict[str, str]:
    """The versions of the libraries that compute a cell's numbers in this process (jax, jaxlib, numpy): a resumed
    run can tell cells computed by another release apart (jax 0.10.2 miscompiled on the CPU, jax-ml/jax#39103)."""
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "numpy": np.__version__}


def cell_text(result: Any, seconds: float, peak_rss_mb: float | None = None,
              compile_seconds: float | None = None) -> str:
    """The record of one finished cell: its result (a dict, or a dataclass written as the dict of its fields in
    order; exact floats, bytes as base64), compute time, peak RSS, this process's ``software_versions``, the part of
    the compute time spent compiling, and when (UTC) and on which machine (:func:`machine_description`) it
    finished."""
    if not isinstance(result, Mapping) and not (dataclasses.is_dataclass(result) and not isinstance(result, type)):
        raise TypeError(f"a cell must return a dict or a dataclass, got {type(result).__name__}")
    record = {"memlab_cell": CELL_FORMAT, "seconds": round(float(seconds), 3), "software": software_versions(),
              "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine_description(),
              "result": result}
    if peak_rss_mb is not None:
        record["peak_rss_mb"] = round(float(peak_rss_mb), 1)
    if compile_seconds is not None:
        record["compile_seconds"] = round(float(compile_seconds), 3)
    record = json.loads(json.dumps(to_jsonable(record, strict=False)))  # as a reader parses it
    return json.dumps(record | {"sha256": content_digest(record)})


def content_digest(record: Mapping) -> str:
    """SHA-256 (hex) of a cell record's content: every field but ``sha256`` itself, as canonical JSON. A record
    carries it (:func:`cell_text`) so that :func:`read_cell` refuses one edited or damaged since it was written,
    also where it still parses as a valid record."""
    content = {k: v for k, v in record.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def _decode_bytes(obj: Any) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {_BYTES}:
            return base64.b64decode(obj[_BYTES])
        return {k: _decode_bytes(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode_bytes(v) for v in obj]
    return obj


def read_cell(text: str) -> CellRecord:
    """The :class:`CellRecord` of a record written by :func:`cell_text`.

    ValueError saying why if ``text`` is no such record: a damaged file (truncated, empty, ``{}``, another shape),
    one whose content no longer matches its ``sha256`` (edited or damaged since it was written), or one from before
    records carried it (format 1, or a bare result), which nothing can vouch for.
    """
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e})") from e
    if not isinstance(record, dict) or not record:
        raise ValueError(f"expected a cell record (a JSON object), got {text[:40]!r}")
    if record.get("memlab_cell") != CELL_FORMAT or "sha256" not in record:
        raise ValueError("a cell record without the checksum of its content (written before records carried one, "
                         "or not a record)")
    if record["sha256"] != content_digest(record):
        raise ValueError("its content does not match its checksum (edited or damaged since it was written)")
    if not isinstance(record.get("result"), dict) or not isinstance(record.get("seconds"), (int, float)):
        raise ValueError("a cell record without its result or compute time")
    return CellRecord(_decode_bytes(record["result"]), record["seconds"], record.get("peak_rss_mb"),
                      record.get("software"), record.get("compile_seconds"))


# ---------------------------------------------------------------- Markdown


def markdown_cell(value: Any, fmt: str = ".4g") -> str:
    """One Markdown table cell: floats with ``fmt``, ``|`` escaped, line breaks flattened."""
    if isinstance(value, (float, np.floating)):
        value = format(float(value), fmt)
    return str(value).replace("|", r"\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence], fmt: str | Mapping[str, str] = ".4g") -> str:
    """A GitHub Markdown table; ``fmt`` formats floats, one spec for all columns or per column name."""
    specs = [fmt.get(h, ".4g") if isinstance(fmt, Mapping) else fmt for h in header]
    lines = ["| " + " | ".join(markdown_cell(h) for h in header) + " |", "|" + " --- |" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(markdown_cell(v, s) for v, s in zip(row, specs, strict=True)) + " |")
    return "\n".join(lines) + "\n"


def summary_text(package: str, name: str) -> str:
    """The Markdown file ``summaries/<name>.md`` of an experiments package, read verbatim: the fixed prose of a
    summary with ``str.format`` fields for the numbers a run computes. ``package``: the calling module's
    ``__package__``; the files ship as package data (pyproject.toml)."""
    return (importlib.resources.files(package) / "summaries" / f"{name}.md").read_text(encoding="utf-8")

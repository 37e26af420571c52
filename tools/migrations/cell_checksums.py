"""One-off rewrite: give every cell record of a store, and of the run folders beside it, the checksum of its content
that ``files.read_cell`` asks for since records carry one (``CELL_FORMAT`` 2). Run it once on records one trusts:
the checksum vouches for them from then on. Nothing else in a record changes.

    python tools/migrations/cell_checksums.py STORE

STORE: ``<store>/<function>/<digest>.json`` records; the run folders are ``<STORE's parent>/**/cells/*.json``.
Idempotent; prints how many records it rewrote.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from memlab.files import CELL_FORMAT, atomic_write_text, content_digest, read_cell


def with_checksum(record: dict) -> dict:
    """A format-1 record as format 2 (its checksum added); a format-2 record unchanged."""
    if record.get("memlab_cell") == CELL_FORMAT and "sha256" in record:
        return record
    if record.get("memlab_cell") != 1:
        raise ValueError(f"not a format-1 cell record: {json.dumps(record)[:80]}")
    upgraded = {k: v for k, v in record.items() if k != "sha256"} | {"memlab_cell": CELL_FORMAT}
    upgraded["sha256"] = content_digest(upgraded)
    read_cell(json.dumps(upgraded))  # what a run will read
    return upgraded


def main(store: str) -> None:
    root, rewritten = Path(store), 0
    for path in sorted(root.glob("*/*.json")):  # store entries: the record under "record"
        entry = json.loads(path.read_text(encoding="utf-8"))
        upgraded = with_checksum(entry["record"])
        if upgraded is not entry["record"]:
            atomic_write_text(path, json.dumps(entry | {"record": upgraded}) + "\n")
            rewritten += 1
    for path in sorted(root.parent.glob("**/cells/*.json")):  # run-folder copies: the record itself
        if root in path.parents:
            continue
        record = json.loads(path.read_text(encoding="utf-8"))
        upgraded = with_checksum(record)
        if upgraded is not record:
            atomic_write_text(path, json.dumps(upgraded))
            rewritten += 1
    print(f"{rewritten} records given their checksum")


if __name__ == "__main__":
    main(*sys.argv[1:])

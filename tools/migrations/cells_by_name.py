"""Move stored cells to their new digests after a change to what a cell receives that leaves its values alone (a
cell that took a whole experiment config now takes the values it reads; an argument split in two). Two steps, one
with the code before the change and one with the code after it:

    python tools/migrations/cells_by_name.py record STORE MAP.json    # the code before: where each cell is stored
    python tools/migrations/cells_by_name.py apply STORE MAP.json     # the code after: move each to its new digest

``record`` runs every run that ``memlab.resolve`` checks (every stored origin and committed run folder, with its
``--set`` overrides), computing nothing, and writes the digest under which each cell it asks for is stored, keyed by
(run, cell name, cell function). ``apply`` runs them again with the new code: a cell not stored under its new digest
whose key MAP.json names is moved there from its old digest (the record's "digest" field, and its checkpoint folder
for a cell still in progress), then every committed results.json's "cells" -> "store" map is rewritten. A cell is
matched by the run and the name that asked for it, so the match is exactly what the old code resolved; the
``memlab.resolve`` run afterwards (tests/test_store_committed.py) proves every stored cell is found. Idempotent.
Run both steps at XLA's default flags (``XLA_FLAGS`` unset), as ``memlab.resolve`` does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from store_moves import move_cell, rewrite_results  # beside this script

from memlab.cell_cache import CellCache
from memlab.files import atomic_write_text
from memlab.resolve import resolved_digests, runs_to_resolve

current_run = ""  # "experiment/profile[+override,...]": the run being resolved


def _key(cache: CellCache, name: str, compute) -> str:
    return f"{current_run}|{name}|{cache.store.path(compute, '0').parent.name}"


def _each_run(store: Path) -> None:
    global current_run
    for experiment, profile, overrides in runs_to_resolve(store):
        current_run = "+".join([f"{experiment}/{profile}", *overrides])
        resolved_digests(experiment, profile, store, overrides)


def record(store: str, map_path: str) -> None:
    found: dict[str, str] = {}
    original = CellCache._find

    def recording_find(self, name, compute, digest):
        entry = original(self, name, compute, digest)
        if entry is not None and name in self.stored:
            found[_key(self, name, compute)] = self.stored[name]
        return entry

    CellCache._find = recording_find
    _each_run(Path(store))
    atomic_write_text(Path(map_path), json.dumps(found, indent=1, sort_keys=True) + "\n")
    print(f"{len(found)} cells recorded in {map_path}")


def apply(store: str, map_path: str) -> None:
    old_digests: dict[str, str] = json.loads(Path(map_path).read_text(encoding="utf-8"))
    root, moved = Path(store), {}
    original = CellCache._find

    def migrating_find(self, name, compute, digest):
        old = old_digests.get(_key(self, name, compute))
        if digest is not None and old is not None and old != digest:
            move_cell(self.store.root, self.store.path(compute, digest).parent, old, digest)
            moved[old] = digest
        return original(self, name, compute, digest)

    CellCache._find = migrating_find
    _each_run(root)
    rewrite_results(root, moved)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("record", "apply"):
        raise SystemExit(__doc__.split("\n\n")[1])
    {"record": record, "apply": apply}[sys.argv[1]](sys.argv[2], sys.argv[3])

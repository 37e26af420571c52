"""One-off rewrite of a cell store for new digests (issue 48's stable cell identity: a config or data argument
described by its fields' values, no longer by its class's module and name, then without field and parameter
names). Run once per change of ``store.describe``, with the store.py from before it.

    python tools/migrations/stable_cell_identity.py OLD_STORE_PY STORE [EXPERIMENT/PROFILE ...]

OLD_STORE_PY: memlab/store.py as it was before the change (``git show <commit>^:src/memlab/store.py > old.py``).
The given (experiment, profile) runs, else every stored one and every committed run folder under STORE's parent, run
against STORE computing nothing (``memlab.resolve``); each cell asked for is looked up under its new digest and, if
absent, moved there from its old one (the record's "digest" field and its checkpoint folder too). Idempotent. Then
the committed run folders' results.json ("cells" -> "store") get the new digests. Prints what moved.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from store_moves import move_cell, rewrite_results  # beside this script

import memlab.cell_cache as cell_cache
from memlab.resolve import resolved_digests, stored_origins
from memlab.store import CHECKPOINT


def main(old_store_py: str, store: str, *extra: str) -> None:
    spec = importlib.util.spec_from_file_location("store_old", old_store_py)
    old = sys.modules["store_old"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    old.CHECKPOINT = CHECKPOINT  # the placeholder cells carry is this package's, not the old module's copy
    root = Path(store)
    moved: dict[str, str] = {}
    new_digest = cell_cache.cell_digest

    def migrating_digest(cell):
        new = new_digest(cell)
        before = old.cell_digest(cell)
        if new is None or before is None or before == new:
            return new
        move_cell(root, root / old._function_name(cell.func).removeprefix("memlab."), before, new)
        moved[before] = new
        return new

    cell_cache.cell_digest = migrating_digest  # where a sweep computes its cells' digests
    runs = {tuple(x.split("/")) for x in extra}
    if not runs:  # every stored origin and committed run folder <experiment>/<profile>/
        runs = set(stored_origins(root)) | {(p.parent.parent.name, p.parent.name)
                                            for p in root.parent.glob("*/*/results.json")}
    for experiment, profile in sorted(runs):
        try:
            resolved_digests(experiment, profile, root)
        except (KeyError, ValueError) as e:  # an experiment or profile that no longer exists
            print(f"skipped {experiment}/{profile}: {e}", file=sys.stderr)
    rewrite_results(root, moved)


if __name__ == "__main__":
    main(*sys.argv[1:])

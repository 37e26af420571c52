"""What the store migrations share: move one stored cell (and an unfinished cell's checkpoint) to a new digest, and
rewrite the committed results.json digest maps after the moves."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from memlab.files import atomic_write_text


def move_cell(root: Path, folder: Path, old: str, new: str) -> None:
    """``folder/<old>.json`` -> ``folder/<new>.json`` (its "digest" field too) and ``root/checkpoints/<old>`` ->
    ``<new>``, each unless the target exists (idempotent); prints what moved."""
    source, target = folder / f"{old}.json", folder / f"{new}.json"
    if source.exists() and not target.exists():
        entry = json.loads(source.read_text(encoding="utf-8"))
        entry["digest"] = new
        atomic_write_text(target, json.dumps(entry) + "\n")
        source.unlink()
        print(f"moved {folder.name}/{old} -> {new}  ({entry['origin']})")
    checkpoint = root / "checkpoints" / old  # an unfinished cell's progress: it has no record yet
    if checkpoint.exists() and not (root / "checkpoints" / new).exists():
        shutil.move(checkpoint, root / "checkpoints" / new)
        print(f"moved checkpoints/{old} -> {new}")


def rewrite_results(root: Path, moved: dict[str, str]) -> None:
    """Every results.json under ``root``'s parent whose "cells" -> "store" map names a moved digest, rewritten as text
    (nothing else in the file changes); then how many digests changed."""
    for results in root.parent.glob("**/results.json"):
        text = results.read_text(encoding="utf-8")
        stored = json.loads(text).get("cells", {}).get("store", {})
        if any(d in moved for d in stored.values()):
            for d in stored.values():
                text = text.replace(f'"{d}"', f'"{moved.get(d, d)}"')
            atomic_write_text(results, text)
            print(f"rewrote {results}")
    print(f"{len(moved)} digests changed")

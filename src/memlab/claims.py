"""What a claim's verdict means: a claim that fails at a reduced size is not a disagreement with the paper.

Every experiment records the paper's claims it tests (``Run.claim``); each gets one status, computed from the run:

* ``holds``   -- our numbers agree with the paper's claim;
* ``size``    -- it fails, but the run is smaller than the paper's (a ``tiny`` or ``quick`` profile: fewer seeds,
  epochs, steps); the paper profile decides;
* ``differs`` -- it fails and the experiment names the evidence that explains why memlab departs from the paper (an
  ablation, an oracle, a bound), whatever the size;
* ``fails``   -- it fails at the paper's scale and nothing explains it: a real open disagreement.

A profile is paper-scale when its name starts with ``paper`` (``paper``, ``paper-core``, ``paper-equal-steps``...).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

__all__ = ["LEGEND", "STATUSES", "SYMBOLS", "claim_status", "is_paper_scale", "status_counts", "status_of"]

STATUSES = {  # status -> what it means, in the order reports list them
    "holds": "hold",
    "size": "fail at this size (the paper profile decides)",
    "differs": "differ from the paper (an experiment shows why)",
    "fails": "fail at the paper's scale",
}

SYMBOLS = {"holds": "✓", "size": "✗ size", "differs": "≠ explained", "fails": "✗"}

LEGEND = {  # status -> what one claim's symbol means
    "holds": "holds",
    "size": "fails at this run's reduced size (fewer seeds, epochs or steps than the paper's), which the paper "
            "profile decides",
    "differs": "differs from the paper, and the experiment named beside it shows why",
    "fails": "fails at the paper's scale",
}


def is_paper_scale(profile: str) -> bool:
    """Whether a run of ``profile`` has the paper's sizes (module docstring)."""
    return profile.startswith("paper")


def claim_status(holds: bool, profile: str, explained: str = "") -> str:
    """The status of a claim that ``holds`` (or not) in a run of ``profile``; ``explained``: the evidence for a known
    difference from the paper ("" if none)."""
    if holds:
        return "holds"
    if explained:
        return "differs"
    return "fails" if is_paper_scale(profile) else "size"


def status_of(claim: Mapping, profile: str) -> str:
    """A recorded claim's status (results files written before statuses existed carry only ``holds``)."""
    status = claim.get("status")
    return status if status in STATUSES else claim_status(bool(claim["holds"]), profile, claim.get("explained", ""))


def status_counts(statuses: Iterable[str]) -> str:
    """'131 claims: 79 hold, 40 fail at this size (the paper profile decides), ...' (statuses with no claim left
    out)."""
    counts = Counter(statuses)
    total = sum(counts.values())
    parts = [f"{counts[s]} {meaning}" for s, meaning in STATUSES.items() if counts[s]]
    return f"{total} claim{'s' if total != 1 else ''}: " + ", ".join(parts) if total else "no claims"

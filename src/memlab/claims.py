"""What a claim's verdict means: a claim that fails at a reduced size is not a disagreement with the paper.

Every experiment records the paper's claims it tests (``Run.claim``); each gets one status, computed from the run:

* ``holds``   -- our numbers agree with the paper's claim;
* ``size``    -- it fails, but the run is smaller than the paper's (a ``tiny`` or ``quick`` profile: fewer seeds,
  epochs, steps); the paper profile decides;
* ``differs`` -- it fails and the experiment names the evidence that explains why memlab departs from the paper (an
  ablation, an oracle, a bound), whatever the size;
* ``fails``   -- it fails at the paper's scale and nothing explains it: a real open disagreement;
* ``undecided`` -- the run lacks a member the claim names (a model, a memory, a size it did not run): no verdict,
  whatever the numbers of the members it did run say.

Claims are the paper's unless recorded as memlab's own checks (``by="memlab"``: a sanity check such as "every
memory beats random actions", which the paper does not state); reports count the two apart.

A profile is paper-scale when its name starts with ``paper`` (``paper``, ``paper-core``, ``paper-equal-steps``...).
Where a ``paper`` or ``paper-core`` run of the same experiment records the same claim, its verdict decides the claim
for a smaller run too (``decisive_status``): "fails at this size" is left only for claims no such run has decided.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

__all__ = ["BY", "DECIDING", "LEGEND", "STATUSES", "SYMBOLS", "claim_status", "decisive_status", "is_paper_scale",
           "paper_profile_rank", "status_counts", "status_of"]

STATUSES = {  # status -> what it means, in the order reports list them
    "holds": "hold",
    "size": "fail at this size (the paper profile decides)",
    "differs": "differ from the paper (an experiment shows why)",
    "fails": "fail at the paper's scale",
    "undecided": "are not decided (the run lacks a member they name)",
}

SYMBOLS = {"holds": "✓", "size": "✗ size", "differs": "≠ explained", "fails": "✗", "undecided": "? not run"}

BY = {"paper": "The papers' claims", "memlab": "memlab's own checks"}  # who makes a claim -> how reports name them

LEGEND = {  # status -> what one claim's symbol means
    "holds": "holds",
    "size": "fails at this run's reduced size (fewer seeds, epochs or steps than the paper's), which the paper "
            "profile decides",
    "differs": "differs from the paper, and the experiment named beside it shows why",
    "fails": "fails at the paper's scale",
    "undecided": "not decided: the run lacks a member the claim names",
}


def is_paper_scale(profile: str) -> bool:
    """Whether a run of ``profile`` has the paper's sizes (module docstring)."""
    return profile.startswith("paper")


def claim_status(holds: bool, profile: str, explained: str = "", missing: str = "") -> str:
    """The status of a claim that ``holds`` (or not) in a run of ``profile``; ``explained``: the evidence for a known
    difference from the paper ("" if none); ``missing``: what the claim names that the run did not run ("" if
    nothing), which leaves it undecided whatever ``holds`` says."""
    if missing:
        return "undecided"
    if holds:
        return "holds"
    if explained:
        return "differs"
    return "fails" if is_paper_scale(profile) else "size"


def status_of(claim: Mapping, profile: str) -> str:
    """A recorded claim's status (results files written before statuses existed carry only ``holds``)."""
    status = claim.get("status")
    return status if status in STATUSES else claim_status(bool(claim["holds"]), profile, claim.get("explained", ""),
                                                          claim.get("missing", ""))


DECIDING = ("paper", "paper-core")  # the paper-scale profiles whose verdicts decide a claim (module doc)


def paper_profile_rank(profile: str) -> tuple[int, str]:
    """The order in which paper-scale runs are listed and consulted: ``paper``, ``paper-core``, then the others by
    name."""
    return ({"paper": 0, "paper-core": 1}.get(profile, 2), profile)


def decisive_status(status: str, paper_scale: list[tuple[str, str]]) -> str:
    """The verdict of a claim whose own run gave ``status``: the first decided verdict of ``paper_scale`` ([(profile,
    status)] of the paper-scale runs recording the same claim) from ``paper``, then ``paper-core``; else
    ``status``. Other paper-scale profiles (``paper-lr``, ``paper-ablation``, ``paper-0.01``...) change the paper's
    setting on purpose: they are shown beside a claim but do not decide it."""
    for profile, verdict in sorted(paper_scale, key=lambda p: paper_profile_rank(p[0])):
        if profile in DECIDING and verdict != "undecided":
            return verdict
    return status


def status_counts(statuses: Iterable[str]) -> str:
    """'131 claims: 79 hold, 40 fail at this size (...), ...' (statuses with no claim left out)."""
    counts = Counter(statuses)
    total = sum(counts.values())
    parts = [f"{counts[s]} {meaning}" for s, meaning in STATUSES.items() if counts[s]]
    return f"{total} claim{'s' if total != 1 else ''}: " + ", ".join(parts) if total else "no claims"

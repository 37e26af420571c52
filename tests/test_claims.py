"""Claim statuses (memlab.claims): what a failing claim means depends on the run's size and on the evidence named."""

import pytest

from memlab.claims import claim_status, is_paper_scale, status_counts, status_of
from memlab.runner import Run


@pytest.mark.parametrize(("holds", "profile", "explained", "status"), [
    (True, "quick", "", "holds"),
    (True, "paper", "see x", "holds"),
    (False, "quick", "", "size"),
    (False, "tiny", "", "size"),
    (False, "paper-core", "", "fails"),
    (False, "paper", "", "fails"),
    (False, "quick", "the ablation in y", "differs"),
    (False, "paper", "the ablation in y", "differs"),
])
def test_claim_status(holds, profile, explained, status):
    assert claim_status(holds, profile, explained) == status


def test_paper_scale_profiles():
    assert is_paper_scale("paper") and is_paper_scale("paper-equal-steps")
    assert not is_paper_scale("quick") and not is_paper_scale("tiny")


def test_old_records_without_a_status_get_one_from_holds_and_profile():
    assert status_of({"holds": False}, "quick") == "size"
    assert status_of({"holds": False}, "paper") == "fails"
    assert status_of({"holds": False, "status": "differs"}, "paper") == "differs"


def test_status_counts_names_only_the_statuses_present():
    assert status_counts(["holds", "size", "holds"]) == \
        "3 claims: 2 hold, 1 fail at this size (the paper profile decides)"
    assert status_counts([]) == "no claims"


def test_run_records_the_status_and_the_evidence(tmp_path):
    run = Run(tmp_path, None, "quick", 0, progress=False)
    run.claim("a", "x", "p", "o", False, explained="belief.deep-alf-inits")
    run.claim("b", "x", "p", "o", False)
    assert [(c["status"], c.get("explained")) for c in run.claims] == [("differs", "belief.deep-alf-inits"),
                                                                       ("size", None)]
    with pytest.raises(ValueError, match="explained must be a string"):
        run.claim("c", "x", "p", "o", True, explained=None)

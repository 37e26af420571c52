"""Claim statuses (memlab.claims): what a failing claim means depends on the run's size and on the evidence named."""

import pytest

from memlab.claims import claim_status, decisive_status, is_paper_scale, status_counts, status_of
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


def test_a_claim_naming_a_member_not_run_is_undecided_whatever_holds_says(tmp_path):
    assert claim_status(True, "paper-core", "", "S5-256 not run") == "undecided"
    assert claim_status(False, "quick", "an ablation", "S5-256 not run") == "undecided"
    run = Run(tmp_path, None, "paper-core", 0, progress=False)
    run.claim("a", "x", "p", "o", True, missing="S5-256 not run")
    run.claim("b", "x", "p", "o", True, by="memlab")
    assert [(c["status"], c.get("missing"), c.get("by")) for c in run.claims] == [
        ("undecided", "S5-256 not run", None), ("holds", None, "memlab")]
    with pytest.raises(ValueError, match="by must be one of"):
        run.claim("c", "x", "p", "o", True, by="someone")


@pytest.mark.parametrize(("own", "paper_scale", "verdict"), [
    ("size", [], "size"),  # no paper-scale run: the run's own status
    ("size", [("paper-core", "fails")], "fails"),
    ("holds", [("paper-core", "fails")], "fails"),  # the paper's scale decides, also against a quick pass
    ("size", [("paper-core", "holds"), ("paper", "fails")], "fails"),  # paper before paper-core
    ("size", [("paper-query-past", "holds"), ("paper-core", "differs")], "differs"),
    ("size", [("paper", "undecided"), ("paper-core", "holds")], "holds"),  # undecided decides nothing
    ("holds", [("paper-core", "undecided")], "holds"),
    ("size", [("paper-lr", "holds"), ("paper-ablation", "fails")], "size"),  # a changed setting decides nothing
])
def test_the_paper_scale_verdict_decides(own, paper_scale, verdict):
    assert decisive_status(own, paper_scale) == verdict

"""The ictd experiments are registered with the catalog and listed by the command line (each runs end to end, through
it, in its own module's test: ``check_tiny_run``)."""

from __future__ import annotations

import json

import pytest

from memlab import cli
from memlab.catalog import EXPERIMENTS

ISSUE_EXPERIMENTS = {"ictd.verify", "ictd.msve-vs-context", "ictd.depth-convergence", "ictd.pretrain",
                     "ictd.mask-relaxation", "ictd.neu"}


def test_every_issue_experiment_is_registered_with_its_profiles():
    assert ISSUE_EXPERIMENTS <= set(EXPERIMENTS)
    for name in ISSUE_EXPERIMENTS:
        exp = EXPERIMENTS[name]
        assert {"quick", "paper", "tiny"} <= set(exp.profiles), name
        assert exp.paper == "softmax-transformers-in-context-td"


def test_list_shows_them(capsys):
    assert cli.main(["list", "--names"]) == 0
    assert ISSUE_EXPERIMENTS <= set(capsys.readouterr().out.split())


def _paper_claims(name, tmp_path) -> dict[str, bool]:
    from memlab.runner import run_experiment

    out = run_experiment(EXPERIMENTS[name], profile="paper", out_dir=tmp_path, progress=False)
    return {c["id"]: c["holds"] for c in json.loads((out / "results.json").read_text())["claims"]}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ictd.verify", "ictd.msve-vs-context", "ictd.depth-convergence", "ictd.neu"])
def test_paper_profile_reproduces_every_theory_claim(name, tmp_path):
    """Theorems 1-3, Lemma 1 and Fig. 1 at paper size (ictd.neu: ~15 min on 2 cores): every claim holds."""
    claims = _paper_claims(name, tmp_path)
    assert claims and all(claims.values()), [k for k, v in claims.items() if not v]


# What the pretraining experiments find at paper size (Table 1; App. F.5): the block learns a diagonal A_feat and the
# mirror image of theta* (-V*, -A*), not theta* itself, and -theta* has the lower held-out TD error on Boyan chains;
# under the F.5 rho anneal the value row settles at (-, +, +) for both masks. These outcomes are this library's
# measured replication of section 8 (see ictd.pretrain's summary.md); the slow test keeps them reproducible.
PRETRAINING_FINDINGS = {
    "ictd.pretrain": {"best-checkpoint-emergence[mirrored]": True, "v-sign-pattern": False, "a-diagonal": True,
                      "masked-entries-zero": True, "a-high-across-dt[mirrored]": True,
                      "v-rises-after-dt[mirrored]": True, "dt-increases": False, "td-error-below-theta-star": True,
                      "theta-star-beats-mirror": False},
    "ictd.mask-relaxation": {"a-diagonal[full]": True, "a-diagonal[relaxed]": True, "masked-entries-zero[full]": True,
                             "masked-entries-zero[relaxed]": True, "v-sign-pattern[full]": False,
                             "v-sign-pattern[relaxed]": False, "relaxed-mask-same-solution": True},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PRETRAINING_FINDINGS))
def test_paper_profile_pretraining_findings(name, tmp_path):
    """Algorithm 1 at paper size (~3 min and ~11 min on 2 cores): the measured outcomes listed above."""
    claims = _paper_claims(name, tmp_path)
    assert {k: claims[k] for k in PRETRAINING_FINDINGS[name]} == PRETRAINING_FINDINGS[name]

"""The π-SSM study's numbers in the documents, checked against their committed result files (issue 47).

The framework is test_doc_numbers.py's: each ``Quote`` is a short phrase of a document with ``{name}`` where a
number stands, and the test formats it from the result file and requires the document to contain it. Here: the
pissm.pong-modes paper runs (noise 0.05 and 0.01) and pissm.table1 paper-core, as docs/studies/pissm.md, its
experiment rows in docs/experiments.md and the pong-modes paragraphs of paper-results/README.md quote them. The
numbers test_doc_numbers.py already checks (the mixture's reflections at noise 0.01 in the experiment rows, the
pissm.stability and table1 paragraphs) are not repeated. Numbers from the paper, from the profiles' settings alone
(data sizes, K, noise levels) or from timings are not checked, and nothing is read from the ``claims`` list.

The README compares the noise-0.01 run with the committed run before it; that one's numbers are read from its
result file as git holds it (skipped where the checkout has no history).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ is not on the path (--import-mode=importlib)
from test_doc_numbers import ROOT, Quote, check_quote, fixed, percent  # noqa: E402
from test_doc_numbers_studies import minus, same  # noqa: E402

RESULTS_README = "paper-results/README.md"
STUDY = "docs/studies/pissm.md"
EXPERIMENTS = "docs/experiments.md"
ROW_DOCS = (STUDY, EXPERIMENTS)  # the experiment table, on both pages

MODES = "paper-results/pissm.pong-modes-paper/results.json"
MODES_SHARES = "paper-results/pissm.pong-modes-paper/mode_shares.csv"
MODES_001 = "paper-results/pissm.pong-modes-paper-0.01/results.json"
MODES_001_SHARES = "paper-results/pissm.pong-modes-paper-0.01/mode_shares.csv"
TABLE1_CORE = "paper-results/pissm.table1/paper-core/results.json"
# the noise-0.01 run the README compares with: the results.json that commit 692297b replaced
PREVIOUS_001 = ("20a2da47be634b13b79a287eec413a8ac2ff23d5", MODES_001)

ESTIMATORS = ("reinforce", "mixture")  # eq. (9), the exact mixture
WORDS = {1: "one", 2: "two", 3: "three"}

Read = Callable[[Any], str]


# ---- pissm.pong-modes ----------------------------------------------------------------------------------------------


def _model(estimator: str, field: str, write: Callable[[float], str] = fixed) -> Read:
    """A number of the full model trained by the estimator."""
    return lambda d: write(d["results"][estimator][field])


def _oracle(estimator: str, field: str, write: Callable[[float], str] = fixed) -> Read:
    """The true step maps with q(z | x) trained by the estimator."""
    return lambda d: write(d["results"]["oracle"][estimator][field])


def _rule(name: str, field: str = "test_ll", write: Callable[[float], str] = fixed) -> Read:
    """The true step maps with the hand-coded rule ('rule') or free flight ('free-flight'), untrained."""
    return lambda d: write(d["results"]["rules"][name][field])


def _two(field: str, digits: int = 2) -> dict[str, Read]:
    """eq. (9)'s and the mixture's value of a full-model field, as '{field}_9' and '{field}_m'."""
    return {f"{field}_9": _model("reinforce", field, lambda x: fixed(x, digits)),
            f"{field}_m": _model("mixture", field, lambda x: fixed(x, digits))}


def _rule_beats_learned(pick: Callable) -> Read:
    """How far the hand-coded rule scores above q(z | x) trained by an estimator (pick: min or max of the two)."""
    return lambda d: fixed(pick(d["results"]["rules"]["rule"]["test_ll"] - d["results"]["oracle"][e]["test_ll"]
                                for e in ESTIMATORS), 1)


def _reflects(d: Any, estimator: str) -> bool:
    """The full model's sampled A_z reflects somewhere."""
    r = d["results"][estimator]
    return any(r[f] > 0 for f in ("reflecting_at_bounces", "reflecting_next_to_bounces", "reflecting_elsewhere"))


def _no_bounce_modes(d: Any) -> str:
    return "no" if not any(_reflects(d, e) for e in ESTIMATORS) else "some"


def _learns_neither(d: Any) -> str:
    """eq. (9) learns neither the selection on the true maps nor reflecting modes in the full model."""
    return "neither" if d["results"]["oracle"]["reinforce"]["at_hits"] == 0 and not _reflects(d, "reinforce") \
        else "one of them"


def _modes_in_use(estimator: str) -> Read:
    """Modes with a share of at least 1 % (the results' rule), counted from mode_shares.csv."""
    return lambda rows: str(sum(float(r["share"]) >= 0.01 for r in rows if r["estimator"] == estimator))


def _modes(rows: Any) -> str:
    """K: the modes each estimator's shares list."""
    return same([str(sum(r["estimator"] == e for r in rows)) for e in ESTIMATORS])


def _claim_rule(d: Any) -> str:
    """The paper's claim rule: the mean smallest eigenvalue at the wall hits is below 0."""
    return "holds" if d["results"]["mixture"]["eigenvalue_at_bounces"] < 0 else "fails"


def _signed(digits: int = 2) -> Callable[[float], str]:
    return lambda x: minus(f"{x:+.{digits}f}")


def _whole_percent(value: float) -> str:
    """0.626 -> '63' (a range's first end, written without its ' %')."""
    return f"{100 * value:.0f}"


_NOISE_005 = {"n_9": _model("reinforce", "modes_in_use", str), "n_m": _model("mixture", "modes_in_use", str),
              "share_9": _model("reinforce", "dominant_share", percent), **_two("agreement"),
              **_two("eigenvalue_at_bounces"), **_two("eigenvalue_elsewhere"), **_two("test_ll", 3),
              **_two("best_val", 3)}

_ORACLE_005 = {"rule": _rule("rule"), "free": _rule("free-flight"), "o_9": _oracle("reinforce", "test_ll"),
               "h_9": _oracle("reinforce", "at_hits", percent), "o_m": _oracle("mixture", "test_ll"),
               "h_m": _oracle("mixture", "at_hits", percent),
               "prefers": lambda d: fixed(d["results"]["rules"]["rule"]["test_ll"]
                                          - d["results"]["rules"]["free-flight"]["test_ll"], 1)}

MODES_README = [
    Quote(RESULTS_README, "**pissm.pong-modes (4000 training sequences, {epochs} epochs, π-SSM-GRU with the bounded "
          "gain, both estimators).**", MODES, {"epochs": lambda d: str(d["config"]["epochs"])}),
    Quote(RESULTS_README, "Neither estimator learns bounce modes: eq. (9) prunes to {n_9} modes in use (the largest "
          "takes {share_9} of the steps), the mixture keeps {n_m} of", MODES, _NOISE_005),
    Quote(RESULTS_README, "the mixture keeps {n} of {k}; agreement", MODES_SHARES,
          {"n": _modes_in_use("mixture"), "k": _modes}),
    Quote(RESULTS_README, "agreement with the true quadrant modes {agreement_9} / {agreement_m}, the smallest "
          "eigenvalue of the sampled A_z {eigenvalue_at_bounces_9} / {eigenvalue_at_bounces_m} at wall hits and "
          "{eigenvalue_elsewhere_9} / {eigenvalue_elsewhere_m} elsewhere (truth −1 and 1). Test log-likelihood per "
          "step {test_ll_9} (eq. 9) and {test_ll_m} (mixture), best validation {best_val_9} / {best_val_m}.",
          MODES, _NOISE_005),
    Quote(RESULTS_README, "a hand-coded switching rule {rule}, free flight everywhere {free}, q(z | x) trained by eq. "
          "(9) {o_9} (right at {h_9} of the hits), by the exact mixture {o_m} ({h_m} of the hits). The objective "
          "prefers switching by {prefers} nats per step", MODES, _ORACLE_005),
    Quote(RESULTS_README, "q(z | x) trained by the mixture is right at {hits} of the wall hits and {flight} of the "
          "flight steps and scores {ll} per step, above the hand-coded rule ({rule}) and free flight ({free}); "
          "trained by eq. (9) it stays on free flight everywhere ({hits_9} of hits, {ll_9}).", MODES_001,
          {"hits": _oracle("mixture", "at_hits", percent), "flight": _oracle("mixture", "in_flight", percent),
           "ll": _oracle("mixture", "test_ll"), "rule": _rule("rule"), "free": _rule("free-flight"),
           "hits_9": _oracle("reinforce", "at_hits", percent), "ll_9": _oracle("reinforce", "test_ll")}),
    Quote(RESULTS_README, "In the full models the mixture keeps {n} of", MODES_001,
          {"n": _model("mixture", "modes_in_use", str)}),
    Quote(RESULTS_README, "In the full models the mixture keeps {n} of {k} modes", MODES_001_SHARES,
          {"n": _modes_in_use("mixture"), "k": _modes}),
    Quote(RESULTS_README, "its sampled A_z reflects (an eigenvalue below 0) at {at} of the wall hits, at {next} if "
          "the step after the hit counts", MODES_001,
          {"at": _model("mixture", "reflecting_at_bounces", percent),
           "next": _model("mixture", "reflecting_next_to_bounces", percent)}),
    Quote(RESULTS_README, "and at {elsewhere} of the other steps: the mean smallest eigenvalue at the hits is {eig} "
          "against {other} elsewhere, so the paper's claim rule (a mean below 0 at the hits) {rule}.", MODES_001,
          {"elsewhere": _model("mixture", "reflecting_elsewhere", percent),
           "eig": _model("mixture", "eigenvalue_at_bounces", lambda x: minus(fixed(x, 2))),
           "other": _model("mixture", "eigenvalue_elsewhere", lambda x: fixed(x, 2)), "rule": _claim_rule}),
    Quote(RESULTS_README, "Eq. (9) prunes to {n} mode (share {share}, eigenvalue {eig} everywhere, reflecting "
          "{where}). Test log-likelihood per step {ll_9} (eq. 9) and {ll_m} (mixture).", MODES_001,
          {"n": lambda d: WORDS[d["results"]["reinforce"]["modes_in_use"]],
           "share": _model("reinforce", "dominant_share", lambda x: fixed(x, 1)),
           "eig": lambda d: same([fixed(d["results"]["reinforce"][f], 2)
                                  for f in ("eigenvalue_at_bounces", "eigenvalue_elsewhere")]),
           "where": lambda d: "somewhere" if _reflects(d, "reinforce") else "nowhere",
           "ll_9": _model("reinforce", "test_ll"), "ll_m": _model("mixture", "test_ll")}),
    Quote(RESULTS_README, "–{at} of the hits against eq. (9)'s {at_9})", MODES_001,
          {"at": _model("mixture", "reflecting_at_bounces", percent),
           "at_9": _model("reinforce", "reflecting_at_bounces", percent)}),
]

# the committed noise-0.01 run before the current one (its results.json at PREVIOUS_001's commit)
PREVIOUS_README = [
    Quote(RESULTS_README, "reflected at {at} of the hits ({next} with the step after; mean eigenvalue {eig}, the claim "
          "not met, {n} modes in use, test log-likelihood {ll})", PREVIOUS_001[1],
          {"at": _model("mixture", "reflecting_at_bounces", percent),
           "next": _model("mixture", "reflecting_next_to_bounces", percent),
           "eig": _model("mixture", "eigenvalue_at_bounces", _signed()),
           "n": _model("mixture", "modes_in_use", str), "ll": _model("mixture", "test_ll")}),
    Quote(RESULTS_README, "(both runs, {at}–", PREVIOUS_001[1],
          {"at": _model("mixture", "reflecting_at_bounces", _whole_percent)}),
]

_BEATS = {"low": _rule_beats_learned(min), "high": _rule_beats_learned(max), "no": _no_bounce_modes}

MODES_ROWS = [
    *(Quote(doc, "at noise 0.05 {no} bounce modes with either estimator, although on the true step maps the "
            "hand-coded rule beats what they learn by {low}–{high} nats per step", MODES, _BEATS) for doc in ROW_DOCS),
    *(Quote(doc, "elsewhere), eq. (9) learns {neither} |", MODES_001, {"neither": _learns_neither})
      for doc in ROW_DOCS),
]


# ---- pissm.table1 paper-core ---------------------------------------------------------------------------------------


def _pong(d: Any, model: str) -> dict:
    return next(r for r in d["results"]["table"] if r["dataset"] == "pong" and r["model"] == model)


def _ll(model: str) -> Read:
    return lambda d: fixed(float(_pong(d, model)["ll_mean"]))


PAPER_GAINS = ("pissm-gru-tracking", "pissm-lstm-tracking")  # eq. (7)'s gain as printed, GRU and LSTM cells

TABLE1_ROWS = [
    Quote(doc, "at the paper's sizes on Pong (`paper-core`, `paper-results/`): particle filter {pf}, direct GRU {gru}, "
          "LG {lg}, bounded π-SSM-GRU {bounded}, π-SSM(LG) {pissm_lg}, eq. (7)'s gain fails in {failed} of {seeds} "
          "seeds |", TABLE1_CORE,
          {"pf": _ll("pf"), "gru": _ll("gru"), "lg": _ll("lg"), "bounded": _ll("pissm-gru-bounded"),
           "pissm_lg": _ll("pissm-lg"), "failed": lambda d: same([str(_pong(d, m)["failed"]) for m in PAPER_GAINS]),
           "seeds": lambda d: same([str(_pong(d, m)["seeds"]) for m in PAPER_GAINS])})
    for doc in ROW_DOCS
]

QUOTES = MODES_README + MODES_ROWS + TABLE1_ROWS


@pytest.mark.parametrize("quote", QUOTES, ids=[f"{q.doc}:{q.text[:40]}" for q in QUOTES])
def test_documents_quote_their_result_files(quote):
    check_quote(quote)


@pytest.mark.parametrize("quote", PREVIOUS_README, ids=[f"{q.doc}:{q.text[:40]}" for q in PREVIOUS_README])
def test_readme_quotes_the_previous_run_as_committed(quote, tmp_path):
    commit, path = PREVIOUS_001
    try:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{path}"], capture_output=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"no git history holding {commit[:7]}:{path}")
    previous = tmp_path / "results.json"
    previous.write_bytes(text)
    check_quote(quote._replace(source=str(previous)))  # an absolute source: ROOT / source is the file itself


def _pissm_rows(doc: str) -> list[str]:
    return [line for line in (ROOT / doc).read_text(encoding="utf-8").splitlines() if line.startswith("| `pissm.")]


def test_experiment_rows_are_the_studys():
    """docs/experiments.md repeats docs/studies/pissm.md's experiment table row for row."""
    rows = _pissm_rows(STUDY)
    assert rows and _pissm_rows(EXPERIMENTS) == rows

"""The studies' numbers in the documents, checked against their committed result files (issue 47).

The framework is test_doc_numbers.py's: each ``Quote`` is a short phrase of a document with ``{name}`` where a
number stands, and the test formats it from the result file and requires the document to contain it. Here: the
belief (RingWorld returns), ictd (Algorithm 1 pretraining, mask relaxation), recall (rate, paper-core) and arena
(leaderboard, linear-attention ablation) runs under paper-results/, as README.md, docs/studies/, docs/experiments.md
and paper-results/README.md quote them; seed and cell counts are read from the per-seed results and the cell store.
Numbers that come from the papers, from the profiles' settings alone (steps, updates, widths) or from timings are not
checked; from the ``claims`` list only how many of a run's claims hold (the folder table's counts).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ is not on the path (--import-mode=importlib)
from test_doc_numbers import Quote, check_quote, fixed, percent  # noqa: E402

README = "README.md"
RESULTS_README = "paper-results/README.md"
DEVELOPMENT = "docs/development.md"  # the paper-scale queue and its costs
EXPERIMENTS = "docs/experiments.md"
BELIEF_DOC = "docs/studies/belief.md"
ICTD_DOC = "docs/studies/ictd.md"
RECALL_DOC = "docs/studies/recall.md"
ARENA_DOC = "docs/studies/arena.md"

RINGWORLD = "paper-results/belief.ringworld-returns/paper-core/results.json"
PRETRAIN = "paper-results/ictd.pretrain-paper/results.json"
PRETRAIN_PAST = "paper-results/ictd.pretrain-paper-query-past/results.json"
MASK = "paper-results/ictd.mask-relaxation-paper/results.json"
MASK_PAST = "paper-results/ictd.mask-relaxation-paper-query-past/results.json"
RATE = "paper-results/recall.rate/paper-core/results.json"
RATE_BAND = "paper-results/recall.rate/paper-core/band.csv"
RATE_BOTH = "paper-results/recall.rate/paper/results.json"  # both students
ATTENTION = "paper-results/recall.attention-vs-s6/paper/results.json"
STABILITY = "paper-results/pissm.stability/paper/results.json"
TRAJECTORY = "paper-results/belief.ringworld-trajectory/paper/results.json"
LEADERBOARD = "paper-results/arena.leaderboard/paper-core/results.json"
ABLATION = "paper-results/arena.leaderboard/linear-attention-ablation/results.json"

Read = Callable[[Any], str]
RESIDUAL = "mamba-1-residual"


def _holding(d: Any) -> str:
    """'holding / all' of a run's claims, as the folder table writes it."""
    return f"{sum(c['status'] == 'holds' for c in d['claims'])} / {len(d['claims'])}"




# ---- formatting ----------------------------------------------------------------------------------------------------


def sig(value: float, digits: int = 2) -> str:
    """Significant digits, trailing zeros kept: 0.0010494 -> '0.0010', 0.4297 -> '0.43'."""
    return f"{value:#.{digits}g}".rstrip(".")


def minus(text: str) -> str:
    """The documents' minus sign (U+2212)."""
    return text.replace("-", "\u2212")


def bound(value: float) -> str:
    """An upper bound of one significant digit, as 'within X' is written: 0.0095 -> '0.01', 0.0033 -> '0.004'."""
    exponent = math.floor(math.log10(value))
    text = f"{math.ceil(round(value / 10**exponent, 9)) * 10**exponent:.{max(0, -exponent)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def same(values: list[str]) -> str:
    """One number that the document states for several results: they must all be written alike."""
    distinct = sorted(set(values))
    return distinct[0] if len(distinct) == 1 else " / ".join(distinct)  # several: no document says that


# ---- belief.ringworld-returns ---------------------------------------------------------------------------------------


def _memory(name: str, field: str = "tail_mean", digits: int = 3) -> Read:
    return lambda d: fixed(d["results"]["memories"][name][field], digits)


def _reference(name: str, digits: int = 3) -> Read:
    return lambda d: minus(fixed(d["results"][name], digits))


def _half(name: str) -> Read:
    return lambda d: str(d["results"]["memories"][name]["half_ceiling_update"])


def _tail(name: str) -> Callable[[Any], float]:
    return lambda d: d["results"]["memories"][name]["tail_mean"]


def _qmdp_distance(d: Any) -> str:
    return bound(max(abs(d["results"]["qmdp"] - _tail(m)(d)) for m in ("lof", "lof-softmax", "alf")))


def _gap_closed(d: Any) -> str:
    s5, prev, best = _tail("s5-12")(d), _tail("s5-12-prev-action")(d), _tail("lof-softmax")(d)
    return percent((prev - s5) / (best - s5))


def _deep_seed(which: int) -> Read:
    """Deep ALF's per-seed returns: 0 the lowest, 1 and 2 the others in seed order."""

    def read(d):
        seeds = d["results"]["memories"]["deep-alf-all-random"]["tail_per_seed"]
        low = min(seeds)
        return fixed([low, *(s for s in seeds if s != low)][which])

    return read


def _paper_core_cells(d: Any) -> str:
    """paper-core's cells that the paper profile has too: all but QMDP and S5-12 fed the previous action."""
    return str(sum(not (k == "qmdp" or k.startswith("s5-12-prev-action")) for k in d["cells"]["store"]))


def _seed_count(*names: str) -> Read:
    """Seeds per memory (its per-seed returns), the same for every memory named."""
    return lambda d: same([str(len(d["results"]["memories"][m]["tail_per_seed"])) for m in names])


_SEED_COUNTS = {"direct": _seed_count("lof", "lof-softmax", "alf", "alf-softmax"),
                "learned": _seed_count("deep-alf-all-random", "s5-12"), "prev": _seed_count("s5-12-prev-action")}

_FIG3_MEANS = {"lofsm": _memory("lof-softmax"), "alf": _memory("alf"), "lof": _memory("lof"),
               "qmdp": _reference("qmdp"), "deep": _memory("deep-alf-all-random"), "s5": _memory("s5-12")}

BELIEF = [
    Quote(README, "(LOF + softmax {lofsm}, ALF {alf}, LOF {lof}; QMDP {qmdp}), above the learned Deep ALF ({deep}) "
          "and S5-12 ({s5})", RINGWORLD, _FIG3_MEANS),
    Quote(BELIEF_DOC, "updates LOF + softmax {lofsm}, ALF {alf}, LOF {lof} (QMDP on the exact belief: {qmdp}), "
          "Deep ALF (all random) {deep} ± {deep_std}, S5-12 + previous action {prev}, S5-12 {s5}; ALF is halfway "
          "from random to the ceiling at update {alf_half}, LOF at {lof_half}", RINGWORLD,
          _FIG3_MEANS | {"deep_std": _memory("deep-alf-all-random", "tail_std"),
                         "prev": _memory("s5-12-prev-action"), "alf_half": _half("alf"), "lof_half": _half("lof")}),
    Quote(BELIEF_DOC, "(`--profile paper-core`: LOF, LOF + softmax, ALF, ALF + softmax × {direct} seeds, Deep ALF "
          "and S5-12 × {learned}, S5-12 fed the previous action × {prev};", RINGWORLD, _SEED_COUNTS),
    Quote(BELIEF_DOC, "For ε = 0.05, K = 100 the optimum is {ceiling}.", RINGWORLD,
          {"ceiling": _reference("ceiling")}),
    Quote(RESULTS_README, "LOF, LOF + softmax, ALF and ALF + softmax × {direct} seeds, Deep ALF (all random) and "
          "S5-12 × {learned}, S5-12 fed the previous action × {prev};", RINGWORLD, _SEED_COUNTS),
    Quote(RESULTS_README, "Return over the last 100 updates: LOF + softmax {lofsm} ± {lofsm_std}, ALF {alf} ± "
          "{alf_std}, ALF + softmax {alfsm} ± {alfsm_std} (halfway to the ceiling at update {alfsm_half}), LOF {lof} ± "
          "{lof_std}, Deep ALF {deep} ± {deep_std}, S5-12 + previous action {prev} ± "
          "{prev_std}, S5-12 {s5} ± {s5_std}; QMDP on the exact belief {qmdp}, the fully informed optimum {ceiling}, "
          "random actions {floor}.", RINGWORLD,
          _FIG3_MEANS | {"prev": _memory("s5-12-prev-action"), "ceiling": _reference("ceiling"),
                         "floor": _reference("floor"), "alfsm": _memory("alf-softmax"),
                         "alfsm_half": _half("alf-softmax"),
                         **{f"{key}_std": _memory(name, "tail_std") for key, name in
                            [("lofsm", "lof-softmax"), ("alf", "alf"), ("alfsm", "alf-softmax"), ("lof", "lof"),
                             ("deep", "deep-alf-all-random"), ("prev", "s5-12-prev-action"), ("s5", "s5-12")]}}),
    Quote(RESULTS_README, "(update {alf_half} against LOF's {lof_half}; the first update halfway from random to the "
          "ceiling)", RINGWORLD, {"alf_half": _half("alf"), "lof_half": _half("lof")}),
    Quote(RESULTS_README, "the three fixed filters end within {distance} of QMDP's return", RINGWORLD,
          {"distance": _qmdp_distance}),
    Quote(RESULTS_README, "one Deep ALF seed stays at {low} (the others {first}, {second}), hence its spread",
          RINGWORLD, {"low": _deep_seed(0), "first": _deep_seed(1), "second": _deep_seed(2)}),
    Quote(RESULTS_README, "its final returns do not (per seed {low}–{high}, std {std})", RINGWORLD,
          {"low": lambda d: fixed(min(d["results"]["memories"]["lof"]["tail_per_seed"])),
           "high": lambda d: fixed(max(d["results"]["memories"]["lof"]["tail_per_seed"])),
           "std": _memory("lof", "tail_std")}),
    Quote(RESULTS_README, "the last 100 updates, where it held by {lof_std} > {others_std}", RINGWORLD,
          {"lof_std": _memory("lof", "tail_std"),
           "others_std": lambda d: fixed(max(d["results"]["memories"][m]["tail_std"]
                                             for m in ("lof-softmax", "alf")))}),
    Quote(RESULTS_README, "close {share} of S5-12's gap to LOF + softmax", RINGWORLD, {"share": _gap_closed}),
    Quote(RESULTS_README, "{cells} cells, at least", RINGWORLD, {"cells": lambda d: str(len(d["cells"]["store"]))}),
    Quote(DEVELOPMENT, "56 + QMDP (paper-core: {cells} of them, done;", RINGWORLD, {"cells": _paper_core_cells}),
]


# ---- ictd.pretrain, ictd.mask-relaxation ---------------------------------------------------------------------------


def _signs(row: list[float]) -> str:
    return "".join("+" if x > 0 else "-" for x in row)


def _seeds_with(pattern: str, part: str | None = None) -> Read:
    def read(d):
        results = d["results"][part] if part else d["results"]
        return str(sum(_signs(row) == pattern for row in results["final_value_row"]))

    return read


def _seeds(d: Any) -> str:
    return str(len(d["results"]["final_value_row"]))


def _none_with(pattern: str) -> Read:
    """'no seed' reaches the pattern under either mask."""
    return lambda d: same(["no" if _seeds_with(pattern, mask)(d) == "0" else _seeds_with(pattern, mask)(d)
                           for mask in ("full", "relaxed")])


def _heldout(which: str) -> Read:
    return lambda d: fixed(d["results"]["heldout_abs_td_error"][which])


def _paper_pattern_score(d: Any) -> str:
    """The seed-mean paper-rule emergence score of the seeds that end with (+, +, -)."""
    results = d["results"]
    scores = [s for s, row in zip(results["best_score"], results["final_value_row"]) if _signs(row) == "++-"]
    return fixed(sum(scores) / len(scores), 2)


_SIGN_PATTERN_TEXT = ("with Algorithm 1's query {paper}/{n} seeds reach the paper's sign pattern ({mirror}/{n} the "
                      "mirror, which has the lower TD error on these tasks)")
_PAST_TEXT = "one step past, {paper}/{n} do and d_t rises as in Fig. 5"
_SIGN_COUNTS = {"paper": _seeds_with("++-"), "mirror": _seeds_with("--+"), "n": _seeds}
_MASK_TEXT = ("no seed reaches (+, +, −) in either layout; the feature block of A becomes diagonal (share {share}) "
              "with either mask")
_MASK_NUMBERS = {"share": lambda d: same([fixed(d["results"][m]["A_diag"], 2) for m in ("full", "relaxed")]),
                 "no": _none_with("++-")}

ICTD = [
    Quote(ICTD_DOC, _SIGN_PATTERN_TEXT, PRETRAIN, _SIGN_COUNTS),
    Quote(ICTD_DOC, _PAST_TEXT, PRETRAIN_PAST, _SIGN_COUNTS),
    Quote(EXPERIMENTS, _SIGN_PATTERN_TEXT, PRETRAIN, _SIGN_COUNTS),
    Quote(EXPERIMENTS, _PAST_TEXT, PRETRAIN_PAST, _SIGN_COUNTS),
    Quote(RESULTS_README, "{paper} of {n} seeds reach the paper's (+, +, −) value row; all {mirror} converge to the "
          "mirror image (−, −, +), d_t falls from {dt0} to {dt1} (below uniform attention), and on held-out Boyan "
          "tasks −θ* has a lower TD error than θ* ({minus_star} against {star})", PRETRAIN,
          _SIGN_COUNTS | {"dt0": lambda d: fixed(d["results"]["d_t_start"]),
                          "dt1": lambda d: fixed(d["results"]["d_t_end"]),
                          "minus_star": _heldout("-theta*"), "star": _heldout("theta*")}),
    Quote(RESULTS_README, "{paper} of {n} seeds end with (+, +, −) (their paper-rule emergence score {score}), d_t "
          "rises from {dt0} to {dt1} as the paper reports, and θ* beats −θ* ({star} against {minus_star})",
          PRETRAIN_PAST,
          _SIGN_COUNTS | {"score": _paper_pattern_score, "dt0": lambda d: fixed(d["results"]["d_t_start"]),
                          "dt1": lambda d: fixed(d["results"]["d_t_end"]),
                          "minus_star": _heldout("-theta*"), "star": _heldout("theta*")}),
    Quote(RESULTS_README, "(Algorithm 1 at Table 1, {n} seeds per layout)", PRETRAIN, {"n": _seeds}),
    Quote(RESULTS_README, "(Algorithm 1 at Table 1, {n} seeds per layout)", PRETRAIN_PAST, {"n": _seeds}),
    # one sentence about both layouts: each file must give its numbers
    Quote(RESULTS_README, _MASK_TEXT.replace("no seed", "{no} seed"), MASK, _MASK_NUMBERS),
    Quote(RESULTS_README, _MASK_TEXT.replace("no seed", "{no} seed"), MASK_PAST, _MASK_NUMBERS),
]


# ---- recall.rate paper-core ----------------------------------------------------------------------------------------


def _records(d: Any, alpha: float, student: str = "mamba-1") -> list[dict]:
    return sorted((r for r in d["results"]["records"] if r["alpha"] == alpha and r["student"] == student),
                  key=lambda r: r["n"])


def _fit(alpha: str, field: str, digits: int = 2, student: str = "mamba-1") -> Read:
    return lambda d: fixed(d["results"]["fits"][f"{student} alpha={alpha}"][field], digits)


def _ratios(d: Any, alpha: float, student: str = "mamba-1") -> list[tuple[float, int]]:
    """Best validation MSE / the tag-only risk of the same validation set, with its n."""
    return [(r["mse"] / r["val_baseline_tag_only"], r["n"]) for r in _records(d, alpha, student)]


def _lowest_ratio(alpha: float, digits: int = 3, student: str = "mamba-1") -> Read:
    return lambda d: fixed(min(_ratios(d, alpha, student))[0], digits)


def _band(column: str, alpha: str = "1.0", digits: int = 2) -> Read:
    """A cell of band.csv ('0.253 ± 0.003': its value)."""
    return lambda rows: fixed(float(next(r for r in rows if r["α"] == alpha)[column].split()[0]), digits)


def _mse_at(alpha: float, which: int, student: str = "mamba-1") -> Read:
    return lambda d: fixed(_records(d, alpha, student)[which]["mse"])


def _rises_beyond_slack(d: Any, student: str) -> str:
    """'at both α' when the risk rises from the first n to the second by more than the rule's 5 % at both α."""
    rises = [r[1]["mse"] > 1.05 * r[0]["mse"] for r in (_records(d, a, student) for a in (0.75, 1.0))]
    return "at both α" if all(rises) else f"at {sum(rises)} α"


def _grid(d: Any) -> dict[str, str]:
    records = d["results"]["records"]
    return {"alphas": str(len({r["alpha"] for r in records})), "ns": str(len({r["n"] for r in records})),
            "seeds": same([str(len(r["best_val_mse"])) for r in records])}


RECALL = [
    Quote(RECALL_DOC, "at α = 1 the context predictor is at {context} for T = 5000 and still 0.21 for T = 10⁷, "
          "against {measure} (tag-only {tag})", RATE_BAND,
          {"context": _band("context (T)"), "measure": _band("measure (T = ∞)"), "tag": _band("tag-only")}),
    Quote(EXPERIMENTS, "(C = {c075} and {c1} against the paper's 1.81 and 1.28, R² {r075} / {r1}), but up to n = {n} "
          "the student never beats the tag-only risk of its own validation set (ratio {ratio})", RATE,
          {"c075": _fit("0.75", "C"), "c1": _fit("1", "C"), "r075": _fit("0.75", "r_squared"),
           "r1": _fit("1", "r_squared"), "n": lambda d: str(max(r["n"] for r in d["results"]["records"])),
           "ratio": lambda d: same([_lowest_ratio(a, 2)(d) for a in (0.75, 1.0)])}),
    Quote(EXPERIMENTS, "Paper-core run (`paper-results/`, the literal student, {seeds} seeds)", RATE,
          {"seeds": lambda d: _grid(d)["seeds"]}),
    Quote(RESULTS_README, "(the literal A.1 student, T = 5000, {alphas} α × {ns} n × {seeds} seeds,", RATE,
          {key: (lambda d, key=key: _grid(d)[key]) for key in ("alphas", "ns", "seeds")}),
    Quote(DEVELOPMENT, "| 20 (paper-core: {cells}, done:", RATE, {"cells": lambda d: str(len(d["cells"]["store"]))}),
    Quote(RESULTS_README, "(α = 0.75: {a_first} → {a_last}; α = 1: {b_first} → {b_last}, flat from n = 4 to 16, then "
          "down)", RATE, {"a_first": _mse_at(0.75, 0), "a_last": _mse_at(0.75, -1), "b_first": _mse_at(1.0, 0),
                          "b_last": _mse_at(1.0, -1)}),
    Quote(RESULTS_README, "eq. (1)'s fit gives C = {c075} (R² {r075}) and {c1} (R² {r1}) against the paper's 1.81 "
          "and 1.28", RATE, {"c075": _fit("0.75", "C"), "c1": _fit("1", "C"), "r075": _fit("0.75", "r_squared"),
                             "r1": _fit("1", "r_squared")}),
    Quote(RESULTS_README, "(lowest ratio {r075} at α = 0.75 and {r1} at α = 1, at n = {n})", RATE,
          {"r075": _lowest_ratio(0.75), "r1": _lowest_ratio(1.0),
           "n": lambda d: same([str(min(_ratios(d, a))[1]) for a in (0.75, 1.0)])}),
    Quote(RESULTS_README, "the population risk, {p075} / {p1}, which the n = {n} points do pass; the validation sets' "
          "own tag-only risk is lower, {v075} / {v1}", RATE,
          {"p075": lambda d: fixed(_records(d, 0.75)[0]["baseline_tag_only"]),
           "p1": lambda d: fixed(_records(d, 1.0)[0]["baseline_tag_only"]),
           "v075": lambda d: fixed(_records(d, 0.75)[0]["val_baseline_tag_only"]),
           "v1": lambda d: fixed(_records(d, 1.0)[0]["val_baseline_tag_only"]),
           "n": lambda d: same([str(r["n"]) for a in (0.75, 1.0) for r in _records(d, a)
                                if r["mse"] < r["baseline_tag_only"]])}),
    Quote(RESULTS_README, "(α = 0.75, n = 4: {res_first} against the literal student's {lit_first}) and ends level "
          "with it at n = 64 ({res_last} against {lit_last})", RATE_BOTH,
          {"res_first": _mse_at(0.75, 0, RESIDUAL), "lit_first": _mse_at(0.75, 0),
           "res_last": _mse_at(0.75, -1, RESIDUAL), "lit_last": _mse_at(0.75, -1)}),
    Quote(RESULTS_README, "its risk rises from n = 4 to 8 beyond the rule's 5 % slack {where}, so", RATE_BOTH,
          {"where": lambda d: _rises_beyond_slack(d, RESIDUAL)}),
    Quote(RESULTS_README, "fit gives it C = {c075} and {c1}.", RATE_BOTH,
          {"c075": _fit("0.75", "C", student=RESIDUAL), "c1": _fit("1", "C", student=RESIDUAL)}),
    Quote(RESULTS_README, "ratio: residual {r075} at α = 0.75 and {r1} at α = 1; literal {l075} and {l1})", RATE_BOTH,
          {"r075": _lowest_ratio(0.75, student=RESIDUAL), "r1": _lowest_ratio(1.0, student=RESIDUAL),
           "l075": _lowest_ratio(0.75), "l1": _lowest_ratio(1.0)}),
    Quote(RESULTS_README, "T = 5000, {alphas} α × {ns} n × {seeds} seeds each)", RATE_BOTH,
          {key: (lambda d, key=key: _grid(d)[key]) for key in ("alphas", "ns", "seeds")}),
    Quote(RESULTS_README, "at n = 64 its MSE is {att} against {lit} (literal S6) and {res} (residual S6)", ATTENTION,
          {"att": _mse_at(1.0, -1, "attention"), "lit": _mse_at(1.0, -1), "res": _mse_at(1.0, -1, RESIDUAL)}),
    Quote(RESULTS_README, "(lowest ratio: attention {att}, residual {res}, literal {lit})", ATTENTION,
          {"att": _lowest_ratio(1.0, student="attention"), "res": _lowest_ratio(1.0, student=RESIDUAL),
           "lit": _lowest_ratio(1.0)}),
    Quote(RESULTS_README, "n = 4 … {n}, {seeds} seeds; both S6 students", ATTENTION,
          {"n": lambda d: str(max(r["n"] for r in d["results"]["records"])), "seeds": lambda d: _grid(d)["seeds"]}),
]


# ---- arena.leaderboard ---------------------------------------------------------------------------------------------

LAYER_NAMES = {"gru": "GRU", "mamba": "Mamba", "lstm": "LSTM"}


def _stat(task: str, layer: str, field: str = "gap", digits: int = 2) -> Read:
    return lambda d: sig(d["results"]["stats"][task][layer][field], digits)


def _longer(task: str, layer: str, times: int, digits: int = 2, field: str = "longer") -> Read:
    """The gap at times × the training length (the run's `longer` list: 2T, 4T; its standard error with
    field='longer_se')."""
    return lambda d: sig(d["results"]["stats"][task][layer][field][d["config"]["longer"].index(times)], digits)


def _both_tasks(layer: str, digits: int = 2) -> Read:
    return lambda d: same([sig(d["results"]["stats"][t][layer]["gap"], digits) for t in ("hmm-mess3", "lgssm")])


def _gap(d: Any, task: str, layer: str) -> float:
    return d["results"]["stats"][task][layer]["gap"]


def _within_reference(task: str) -> Read:
    """Every layer but linear attention ends within this of the reference."""
    return lambda d: bound(max(s["gap"] for layer, s in d["results"]["stats"][task].items()
                               if layer != "linear-attention"))


def _cosines(which: Callable) -> Read:
    return lambda d: fixed(which(s["gradient_cosine"] for layer, s in d["results"]["stats"]["lgssm"].items()
                                 if layer != "linear-attention"), 2)


def _beyond_gated_deltanet(layer: str, digits: int) -> Read:
    """How far the member ends from gated DeltaNet, the larger of the two tasks."""
    return lambda d: sig(max(_gap(d, t, layer) - _gap(d, t, "gated-deltanet") for t in ("hmm-mess3", "lgssm")),
                         digits)


def _first_part(task: str, fix: str) -> Read:
    """The part of linear attention's gap that one change removes."""
    return lambda d: fixed(_gap(d, task, "linear-attention") - _gap(d, task, fix), 2)


_MESS3 = {"gru": _stat("hmm-mess3", "gru"), "lstm": _stat("hmm-mess3", "lstm"), "mamba": _stat("hmm-mess3", "mamba"),
          "lof": _stat("hmm-mess3", "lof"), "gdn": _stat("hmm-mess3", "gated-deltanet"),
          "lru": _stat("hmm-mess3", "lru"), "s5": _stat("hmm-mess3", "s5"), "att": _stat("hmm-mess3", "attention"),
          "att4": _longer("hmm-mess3", "attention", 4), "la": _stat("hmm-mess3", "linear-attention")}
_LGSSM = {"mamba": _stat("lgssm", "mamba"), "gru": _stat("lgssm", "gru"), "lru": _stat("lgssm", "lru"),
          "lstm": _stat("lgssm", "lstm"), "lof": _stat("lgssm", "lof"), "s5": _stat("lgssm", "s5"),
          "gdn": _stat("lgssm", "gated-deltanet"), "att": _stat("lgssm", "attention"),
          "att4": _longer("lgssm", "attention", 4), "la": _stat("lgssm", "linear-attention")}
_SEEDS = {"seeds": lambda d: same([str(len(s["per_seed"])) for task in d["results"]["stats"].values()
                                   for s in task.values()])}
_CELLS = {"cells": lambda d: str(len(d["cells"]["store"]))}
_ABLATION_CELLS = {"new": lambda d: str(len(d["cells"]["store"]) - len(d["cells"]["reused_from"])),
                   "reused": lambda d: str(len(d["cells"]["reused_from"]))}


def _ablation_row(layer: str, what: str, digits: int = 2, at_2t: int = 2) -> Quote:
    return Quote(ARENA_DOC, f"| `{layer}` | {what} | {{mess3}} | {{lgssm}} | {{mess3_2t}} |", ABLATION,
                 {"mess3": _stat("hmm-mess3", layer, digits=digits), "lgssm": _stat("lgssm", layer, digits=digits),
                  "mess3_2t": _longer("hmm-mess3", layer, 2, at_2t)})


def _paper_core_minutes(d: Any) -> list[float]:
    """paper-core's cells' minutes, but the one slow outlier (Mamba on hmm-mess3) the queue's text names apart."""
    return [s / 60 for name, s in d["cells"]["seconds"].items() if name != "hmm-mess3.mamba"]


ARENA = [
    Quote(DEVELOPMENT, "paper-core's {cells} cells on hmm-mess3 and lgssm took {hours} h of one core ({low}–{high} "
          "min a cell but Mamba's on hmm-mess3, {mamba} min)", LEADERBOARD,
          _CELLS | {"hours": lambda d: f"{sum(d['cells']['seconds'].values()) / 3600:.1f}",
                    "low": lambda d: f"{min(_paper_core_minutes(d)):.1f}",
                    "high": lambda d: f"{max(_paper_core_minutes(d)):.0f}",
                    "mamba": lambda d: f"{d['cells']['seconds']['hmm-mess3.mamba'] / 60:.0f}"}),
    Quote(README, "every layer but linear attention ({la}) ends within {mess3} of the exact filter on Mess3 "
          "({closest_mess3} closest, {gru})", LEADERBOARD,
          {"la": _stat("hmm-mess3", "linear-attention"), "mess3": _within_reference("hmm-mess3"),
           "closest_mess3": lambda d: LAYER_NAMES[d["results"]["closest"]["hmm-mess3"]],
           "gru": _stat("hmm-mess3", "gru", digits=1)}),
    Quote(README, "within {lgssm} of the Kalman filter on a linear-Gaussian model ({closest_lgssm} closest, {mamba})",
          LEADERBOARD, {"lgssm": _within_reference("lgssm"), "mamba": _stat("lgssm", "mamba"),
                        "closest_lgssm": lambda d: LAYER_NAMES[d["results"]["closest"]["lgssm"]]}),
    Quote(README, "a decay alone closes linear attention's gap to {gla}", ABLATION,
          {"gla": _both_tasks("gated-linear-attention", 1)}),
    Quote(ARENA_DOC, "| hmm-mess3 | GRU {gru}, LSTM {lstm}, Mamba {mamba}, LOF {lof} | gated DeltaNet {gdn}, "
          "LRU {lru}, S5 {s5} | softmax attention {att} ({att4} at 4T), linear attention {la} |", LEADERBOARD, _MESS3),
    Quote(ARENA_DOC, "| lgssm | Mamba {mamba}, GRU {gru}, LRU {lru}, LSTM {lstm} | LOF {lof}, S5 {s5}, gated DeltaNet "
          "{gdn}, softmax attention {att} ({att4} at 4T) | linear attention {la} |", LEADERBOARD, _LGSSM),
    Quote(ARENA_DOC, "5000 Adam steps, {seeds} seeds, 1024 held-out sequences): {cells} cells of 4 to 27 minutes",
          LEADERBOARD, _SEEDS | _CELLS),
    Quote(ARENA_DOC, "Gaps (mean of {seeds} seeds):", LEADERBOARD, _SEEDS),
    Quote(ARENA_DOC, "but S5 ({mess3} at 4T on hmm-mess3, {lgssm} on lgssm)", LEADERBOARD,
          {"mess3": _longer("hmm-mess3", "s5", 4), "lgssm": _longer("lgssm", "s5", 4)}),
    Quote(ARENA_DOC, "loses most of its lead there ({mess3} and {lgssm} at 4T)", LEADERBOARD,
          {"mess3": _longer("hmm-mess3", "attention", 4), "lgssm": _longer("lgssm", "attention", 4)}),
    Quote(ARENA_DOC, "stays at {la} on both tasks", LEADERBOARD, {"la": _both_tasks("linear-attention")}),
    Quote(ARENA_DOC, "(cosine {low}–{high}; linear attention {la})", LEADERBOARD,
          {"low": _cosines(min), "high": _cosines(max), "la": _stat("lgssm", "linear-attention", "gradient_cosine")}),
    Quote(ARENA_DOC, "Why linear attention stays at {la} is what", ABLATION, {"la": _both_tasks("linear-attention")}),
    Quote(ARENA_DOC, "({new} new cells of 5–10 minutes, the other {reused} are paper-core's", ABLATION,
          _ABLATION_CELLS),
    _ablation_row("linear-attention", "elu + 1 features, normalised by z_t"),
    _ablation_row("unnormalised-linear-attention", "the same without the normaliser"),
    _ablation_row("beta-linear-attention", "+ write strength β (elu + 1 features still)"),
    _ablation_row("l2-linear-attention", "L2-normalised q, k in place of elu + 1", at_2t=3),
    _ablation_row("gated-linear-attention", "+ a scalar decay α_t"),
    _ablation_row("deltanet", "+ the delta rule instead"),
    _ablation_row("gated-deltanet", "+ both"),
    Quote(ARENA_DOC, "the decay alone comes within {decay} of gated DeltaNet, the delta rule alone within {delta}",
          ABLATION, {"decay": _beyond_gated_deltanet("gated-linear-attention", 1),
                     "delta": _beyond_gated_deltanet("deltanet", 2)}),
    Quote(ARENA_DOC, "({at2} at 2T, {at4} at 4T on hmm-mess3)", ABLATION,
          {"at2": _longer("hmm-mess3", "l2-linear-attention", 2, 3),
           "at4": _longer("hmm-mess3", "l2-linear-attention", 4, 3)}),
    Quote(ARENA_DOC, "The first {lgssm_part}–{mess3_part} of the gap has a different cause on each task: on lgssm it "
          "is the normaliser (dropping it alone: {la} → {un}; adding β then {beta}, and L2 features in place of "
          "elu + 1 {l2})", ABLATION,
          {"lgssm_part": _first_part("lgssm", "unnormalised-linear-attention"),
           "mess3_part": _first_part("hmm-mess3", "l2-linear-attention"), "la": _stat("lgssm", "linear-attention"),
           "un": _stat("lgssm", "unnormalised-linear-attention"), "beta": _stat("lgssm", "beta-linear-attention"),
           "l2": _stat("lgssm", "l2-linear-attention")}),
    Quote(ARENA_DOC, "(dropping the normaliser: {un}, adding β: {beta} ± {beta_se}, no change; L2-normalised q and k "
          "in place of elu + 1: {l2})", ABLATION,
          {"un": _stat("hmm-mess3", "unnormalised-linear-attention"),
           "beta": _stat("hmm-mess3", "beta-linear-attention"),
           "beta_se": _stat("hmm-mess3", "beta-linear-attention", "se"),
           "l2": _stat("hmm-mess3", "l2-linear-attention")}),
    Quote(DEVELOPMENT, "the paper profile on hmm-mess3 and lgssm, {cells} cells", LEADERBOARD, _CELLS),
    Quote(RESULTS_README, "5000 Adam steps, {seeds} seeds, 1024 held-out sequences;", LEADERBOARD, _SEEDS),
    Quote(RESULTS_README, "Normalised gaps on Mess3: GRU {gru}, LSTM {lstm}, Mamba {mamba}, LOF {lof}, gated DeltaNet "
          "{gdn}, LRU {lru}, S5 {s5}, softmax attention {att} ({att4} at 4T), linear attention {la};", LEADERBOARD,
          _MESS3),
    Quote(RESULTS_README, "on the linear-Gaussian model: Mamba {mamba}, GRU {gru}, LRU {lru}, LSTM {lstm}, LOF {lof}, "
          "S5 {s5}, gated DeltaNet {gdn}, softmax attention {att} ({att4} at 4T), linear attention {la}.",
          LEADERBOARD, _LGSSM),
    Quote(RESULTS_README, "{cells} cells of 4–27 min on one core", LEADERBOARD, _CELLS),
    Quote(RESULTS_README, "Why linear attention stays at {la}: gaps on Mess3 / the linear-Gaussian model, linear "
          "attention (elu + 1, normalised) {la_m} / {la_l}; the family's member without decay or delta rule "
          "(L2-normalised q and k, write strength β, no normaliser) {l2_m} / {l2_l}, still falling at 5000 steps and "
          "worse than no memory at 2T ({l2_m2} / {l2_l2}); adding only the scalar decay (gated linear attention) "
          "{gla_m} / {gla_l}, only the delta rule (DeltaNet) {dn_m} / {dn_l}, both (gated DeltaNet) {gdn_m} / "
          "{gdn_l}.", ABLATION,
          {"la": _both_tasks("linear-attention"),
           "l2_m2": _longer("hmm-mess3", "l2-linear-attention", 2, 3),
           "l2_l2": _longer("lgssm", "l2-linear-attention", 2, 3),
           **{f"{key}_{t[0]}": _stat(task, layer) for key, layer in
              [("la", "linear-attention"), ("l2", "l2-linear-attention"), ("gla", "gated-linear-attention"),
               ("dn", "deltanet"), ("gdn", "gated-deltanet")] for t, task in [("m", "hmm-mess3"), ("l", "lgssm")]}}),
    Quote(RESULTS_README, "the decay alone to within {decay} of gated DeltaNet", ABLATION,
          {"decay": _beyond_gated_deltanet("gated-linear-attention", 1)}),
    Quote(RESULTS_README, "Linear attention without its normaliser: {un_m} / {un_l}, so the first {part} is the "
          "normaliser on lgssm; with β added (elu + 1 features still): {beta_m} ± {beta_se} / {beta_l}, so on Mess3 "
          "it is the elu + 1 feature map (L2-normalised q and k in its place: {l2_m}), not β.", ABLATION,
          {"un_m": _stat("hmm-mess3", "unnormalised-linear-attention"),
           "un_l": _stat("lgssm", "unnormalised-linear-attention"),
           "part": _first_part("lgssm", "unnormalised-linear-attention"),
           "beta_m": _stat("hmm-mess3", "beta-linear-attention"),
           "beta_se": _stat("hmm-mess3", "beta-linear-attention", "se"),
           "beta_l": _stat("lgssm", "beta-linear-attention"), "l2_m": _stat("hmm-mess3", "l2-linear-attention")}),
    Quote(RESULTS_README, "{new} new cells of 5–10 min on one core; the other {reused} are paper-core's.", ABLATION,
          _ABLATION_CELLS),
]

RECALL_BUDGET = "paper-results/arena.leaderboard/quick-recall-budget/results.json"
ARENA += [
    Quote(ARENA_DOC, "On `recall-predict` Mamba comes closest ({mamba}), while LRU ({lru}), S5 ({s5}) and LOF ({lof}) "
          "learn least; on `mqar` the gated and attention layers level off together (GRU {gru}, softmax attention "
          "{att}, gated DeltaNet {gdn}: one block cannot form the previous-token key, see below), S5 stays at {s5_m} "
          "and LOF at {lof_m} ± {lof_se}", RECALL_BUDGET,
          {"mamba": _stat("recall-predict", "mamba"), "lru": _stat("recall-predict", "lru"),
           "s5": _stat("recall-predict", "s5"), "lof": _stat("recall-predict", "lof"), "gru": _stat("mqar", "gru"),
           "att": _stat("mqar", "attention"), "gdn": _stat("mqar", "gated-deltanet"), "s5_m": _stat("mqar", "s5"),
           "lof_m": _stat("mqar", "lof", digits=3), "lof_se": _stat("mqar", "lof", "se")}),
    Quote(ARENA_DOC, "at {steps} steps {which} layer ends below 1 on both", RECALL_BUDGET,
          {"steps": lambda d: f"{d['config']['train']['steps']:,}",
           "which": lambda d: "every" if max(s["gap"] for t in d["results"]["stats"].values()
                                              for s in t.values()) < 1 else "not every"}),
]

SWITCHING = "paper-results/arena.leaderboard/paper-core-families-switching/results.json"


def _times_gru(layers: tuple[str, ...]) -> Read:
    """'a–b': the layers' gaps on switching as multiples of GRU's, rounded outwards."""
    def read(d: Any) -> str:
        ratios = [_gap(d, "switching", m) / _gap(d, "switching", "gru") for m in layers]
        return f"{math.floor(min(ratios))}–{math.ceil(max(ratios))}"
    return read


def _drifts_most(layer: str) -> Read:
    """The layer's gap on switching at 4T, where its rise from T is the largest of the recurrent layers'."""
    def read(d: Any) -> str:
        stats = d["results"]["stats"]["switching"]
        rise = {m: s["longer"][d["config"]["longer"].index(4)] - s["gap"] for m, s in stats.items()
                if m not in ("attention", "linear-attention")}
        return _longer("switching", layer, 4)(d) if max(rise, key=rise.get) == layer else f"not {layer}"
    return read


_SWITCHING = {m: _stat("switching", layer) for m, layer in [
    ("gru", "gru"), ("lstm", "lstm"), ("mamba", "mamba"), ("lru", "lru"), ("s5", "s5"), ("lof", "lof"),
    ("att", "attention"), ("gdn", "gated-deltanet"), ("la", "linear-attention")]}

ARENA += [
    Quote(ARENA_DOC, "| switching (≈) | GRU {gru}, LSTM {lstm}, Mamba {mamba} | LRU {lru}, S5 {s5} | LOF {lof}, "
          "softmax attention {att} ({att2} at 2T, {att4} at 4T), gated DeltaNet {gdn}, linear attention {la} |",
          SWITCHING,
          _SWITCHING | {"att2": _longer("switching", "attention", 2), "att4": _longer("switching", "attention", 4)}),
    Quote(README, "{closest} comes closest to the switching model's particle filter ({gap})", SWITCHING,
          {"closest": lambda d: LAYER_NAMES[d["results"]["closest"]["switching"]],
           "gap": lambda d: _stat("switching", d["results"]["closest"]["switching"])(d)}),
    Quote(ARENA_DOC, "| task | closest | within {bound} | farther |", SWITCHING,
          {"bound": lambda d: bound(max(_gap(d, "switching", m) for m in ("lru", "s5")))}),
    Quote(ARENA_DOC, "the memory margin L_trivial − L_ref is {margin})", SWITCHING,
          {"margin": lambda d: sig(d["results"]["stats"]["switching"]["gru"]["margin"], 3)}),
    Quote(ARENA_DOC, "than from the Kalman filter on lgssm, where all but linear attention came within {lgssm}",
          LEADERBOARD, {"lgssm": _within_reference("lgssm")}),
    Quote(ARENA_DOC, "LRU and S5 follow at {times} times GRU's gap", SWITCHING, {"times": _times_gru(("lru", "s5"))}),
    Quote(ARENA_DOC, "(S5 drifts the most, to {s5} at 4T)", SWITCHING, {"s5": _drifts_most("s5")}),
    Quote(RESULTS_README, "GRU {gru}, LSTM {lstm}, Mamba {mamba}, LRU {lru}, S5 {s5}, LOF {lof}, softmax attention "
          "{att} ({att2} at 2T), gated DeltaNet {gdn}, linear attention {la}.", SWITCHING,
          _SWITCHING | {"att2": _longer("switching", "attention", 2)}),
    Quote(RESULTS_README, "in stretches over sessions beside other work (LOF's the longest) | {n} (memlab's) |",
          SWITCHING, {"n": _holding}),
]

POLICY = "paper-results/arena.leaderboard/paper-core-families-policy-eval/results.json"


def _signed(task: str, layer: str, field: str = "gap") -> Read:
    return lambda d: minus(_stat(task, layer, field)(d))


def _first_evaluation_below_0(layer: str) -> Read:
    """The step of the first held-out evaluation, where the layer's gap on policy-eval is already below 0."""
    return lambda d: (f"{d['results']['steps'][0]}" if d["results"]["stats"]["policy-eval"][layer]["budget"][0] < 0
                      else "not below 0")


def _number_word(n: int) -> str:
    """A count as a sentence starts it."""
    return ["No", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine"][n]


def _beating(d: Any) -> str:
    """How many layers end below policy-eval's reference, as a sentence starts it."""
    return _number_word(sum(s["gap"] < 0 for s in d["results"]["stats"]["policy-eval"].values()))


def _above_bound(layer: str) -> Read:
    """How far the layer's gap on policy-eval stays above the posterior predictor's (the bound)."""
    return lambda d: minus(sig(_gap(d, "policy-eval", layer) - d["results"]["bounds"]["policy-eval"]["gap"]))


def _every_above_bound(d: Any) -> str:
    bound_gap = d["results"]["bounds"]["policy-eval"]["gap"]
    return "Every" if all(s["gap"] > bound_gap for s in d["results"]["stats"]["policy-eval"].values()) else "Not every"


def _bound_gap(d: Any) -> str:
    return minus(sig(d["results"]["bounds"]["policy-eval"]["gap"], 3))


def _bound_minutes(d: Any) -> str:
    return f"{d['cells']['seconds']['policy-eval.posterior-predictor'] / 60:.0f}"


_POLICY = {k: _signed("policy-eval", m) for k, m in [
    ("gdn", "gated-deltanet"), ("gru", "gru"), ("lstm", "lstm"), ("la", "linear-attention"), ("mamba", "mamba"),
    ("att", "attention"), ("s5", "s5"), ("lru", "lru"), ("lof", "lof")]}

ARENA += [
    Quote(ARENA_DOC, "| policy-eval (≈) | gated DeltaNet {gdn}, GRU {gru}, LSTM {lstm}, linear attention {la}, Mamba "
          "{mamba}, softmax attention {att} | S5 {s5} | LRU {lru}, LOF {lof} |", POLICY,
          _POLICY),
    Quote(ARENA_DOC, "{n} layers beat the reference, the TD fixed point", POLICY, {"n": _beating}),
    Quote(RESULTS_README, "{n} layers beat the reference, so it does not", POLICY, {"n": _beating}),
    Quote(README, "{n} layers beat policy evaluation's TD fixed point, gated DeltaNet by {gdn}", POLICY,
          {"n": lambda d: _beating(d).lower(),  # by how much the lowest gap beats it
           "gdn": lambda d: (_stat("policy-eval", "gated-deltanet")(d).lstrip("-")
                             if d["results"]["closest"]["policy-eval"] == "gated-deltanet" else "not the lowest")}),
    Quote(ARENA_DOC, "paper-core-families-policy-eval/`; the memory margin is {margin})", POLICY,
          {"margin": lambda d: sig(d["results"]["stats"]["policy-eval"]["gru"]["margin"], 3)}),
    Quote(ARENA_DOC, "Gated DeltaNet is below the reference from its first evaluation (step {step})", POLICY,
          {"step": _first_evaluation_below_0("gated-deltanet")}),
    Quote(RESULTS_README, "gated DeltaNet {gdn}, GRU {gru}, LSTM {lstm}, linear attention {la}, Mamba {mamba}, "
          "softmax attention {att}, S5 {s5}, LRU {lru}, LOF {lof}.", POLICY,
          _POLICY),
    Quote(RESULTS_README, "and the posterior predictor ({minutes} min) | {n} (memlab's) |", POLICY,
          {"minutes": _bound_minutes, "n": _holding}),
    Quote(ARENA_DOC, "(gated DeltaNet {at2} at 2T, {at4} at 4T)", POLICY,
          {"at2": lambda d: minus(_longer("policy-eval", "gated-deltanet", 2)(d)),
           "at4": lambda d: minus(_longer("policy-eval", "gated-deltanet", 4)(d))}),
]

ARENA += [
    Quote(ARENA_DOC, "where its gap is {gap} ± {se} (its own sampling error over the batch's sequences)", POLICY,
          {"gap": _bound_gap, "se": lambda d: sig(d["results"]["bounds"]["policy-eval"]["gap_se"])}),
    Quote(ARENA_DOC, "{particles} particles per sequence, {minutes} min of one core)", POLICY,
          {"particles": lambda d: f"{d['config']['posterior_particles']:,}", "minutes": _bound_minutes}),
    Quote(ARENA_DOC, "{every} layer stays above it, so", POLICY, {"every": _every_above_bound}),
    Quote(ARENA_DOC, "These are differences on one batch of {batch} sequences;", POLICY,
          {"batch": lambda d: f"{d['config']['test_batch']:,}"}),
    Quote(RESULTS_README, "is at {gap} ± {se}, and {every} layer stays above it: gated DeltaNet by {gdn}, so in",
          POLICY, {"gap": _bound_gap, "se": lambda d: sig(d["results"]["bounds"]["policy-eval"]["gap_se"]),
                   "every": lambda d: _every_above_bound(d).lower(), "gdn": _above_bound("gated-deltanet")}),
    Quote(README, "gated DeltaNet by {gdn}, yet none reaches a posterior predictor's {bound};", POLICY,
          {"gdn": lambda d: _stat("policy-eval", "gated-deltanet")(d).lstrip("-"),
           "bound": lambda d: _bound_gap(d) if _every_above_bound(d) == "Every" else "(one layer reaches it)"}),
    Quote(ARENA_DOC, "The distances above it are gated DeltaNet {gdn}, GRU {gru}, LSTM {lstm}, linear attention {la}, "
          "Mamba {mamba} and softmax attention {att} (", POLICY,
          {k: _above_bound(m) for k, m in [("gdn", "gated-deltanet"), ("gru", "gru"), ("lstm", "lstm"),
                                           ("la", "linear-attention"), ("mamba", "mamba"), ("att", "attention")]}),
]

RECALL_PREDICT = "paper-results/arena.leaderboard/paper-core-families-recall-predict/results.json"
_RECALL_GROUPS = ({"lstm", "gru", "attention"}, {"linear-attention", "mamba", "s5", "gated-deltanet"}, {"lru", "lof"})
_RECALL_LOW, _RECALL_HIGH = ("lstm", "gru", "linear-attention"), ("mamba", "s5")  # every seed of one below the other's


def _recall(d: Any) -> dict:
    return d["results"]["stats"]["recall-predict"]


def _recall_columns(d: Any) -> str:
    """'0.01 | within 0.015' where the table's three columns hold exactly the layers with gaps in (0, 0.01),
    [0.01, 0.015) and from 0.015 on (so none beats the reference)."""
    columns = [{m for m, s in _recall(d).items() if lo <= s["gap"] < hi and s["gap"] > 0}
               for lo, hi in ((0.0, 0.01), (0.01, 0.015), (0.015, math.inf))]
    return "0.01 | within 0.015" if columns == list(_RECALL_GROUPS) else f"(columns {columns})"


def _seeds(d: Any, layers) -> list[float]:
    return [x for m in layers for x in _recall(d)[m]["per_seed"]]


def _seed_order(d: Any) -> str:
    """'a–b': the standard errors of the difference between the means of each pair of a layer in _RECALL_LOW and one
    in _RECALL_HIGH, where every seed of the first ends below every seed of the second."""
    if max(_seeds(d, _RECALL_LOW)) >= min(_seeds(d, _RECALL_HIGH)):
        return "(seeds overlap)"
    z = [abs(_recall(d)[a]["gap"] - _recall(d)[b]["gap"]) / math.hypot(_recall(d)[a]["se"], _recall(d)[b]["se"])
         for a in _RECALL_LOW for b in _RECALL_HIGH]
    return f"{min(z):.1f}–{max(z):.1f}"


def _overlapping_se(layer: str) -> Read:
    """The layer's standard error, where its seeds' range overlaps that of every other layer of the first seven."""
    def read(d: Any) -> str:
        seven = _RECALL_GROUPS[0] | _RECALL_GROUPS[1]
        lo, hi = min(_seeds(d, [layer])), max(_seeds(d, [layer]))
        if all(min(_seeds(d, [m])) <= hi and lo <= max(_seeds(d, [m])) for m in seven - {layer}):
            return _stat("recall-predict", layer, "se")(d)
        return "(no overlap)"
    return read


def _learning_rate_left(d: Any) -> str:
    """The training's learning rate 1,000 steps before the end, as a share of its peak."""
    from memlab.arena.train import TrainConfig, learning_rate_schedule

    config = TrainConfig(**d["config"]["train"])
    return percent(float(learning_rate_schedule(config)(config.steps - 1000)) / config.learning_rate)


def _shrank_last_1000(d: Any) -> str:
    """'a–b': how many times each layer's held-out gap shrank from 1,000 steps before the end (all still falling)."""
    steps = d["results"]["steps"]
    if not all(s["budget"][-1] < s["budget"][-2] for s in _recall(d).values()):
        return "(not every gap still falling)"
    ratios = [s["budget"][steps.index(steps[-1] - 1000)] / s["budget"][-1] for s in _recall(d).values()]
    return f"{min(ratios):.1f}–{max(ratios):.1f}"


def _at_4t_classes(d: Any) -> str:
    """'0.1' where exactly softmax attention, linear attention, GRU and LRU stay under 0.1 at 4T."""
    four = d["config"]["longer"].index(4)
    under = {m for m, s in _recall(d).items() if s["longer"][four] < 0.1}
    return "0.1" if under == {"attention", "linear-attention", "gru", "lru"} else f"(under 0.1: {sorted(under)})"


def _share_lost(layer: str) -> Read:
    """What share of what it learned the layer loses by 4T, in words: its 4T gap about 0.5, or above 0.75."""
    def read(d: Any) -> str:
        at4 = _recall(d)[layer]["longer"][d["config"]["longer"].index(4)]
        return "about half" if 0.35 <= at4 <= 0.65 else "most" if at4 > 0.75 else f"({at4:.2f})"
    return read


def _mamba_among(d: Any) -> str:
    ok = _recall(d)["mamba"]["gap"] < 0.015 and min(_seeds(d, ["mamba"])) > max(_seeds(d, ["lstm", "gru"]))
    return "above LSTM and GRU in every seed" if ok else "(not above LSTM and GRU in every seed)"


def _pair_at(layer: str) -> dict[str, Read]:
    """The layer's gaps at 2T and 4T, as '{x2}' and '{x4}'."""
    return {f"{layer}2": _longer("recall-predict", layer, 2), f"{layer}4": _longer("recall-predict", layer, 4)}


_RECALL = {k: _stat("recall-predict", m) for k, m in [
    ("lstm", "lstm"), ("gru", "gru"), ("att", "attention"), ("la", "linear-attention"), ("mamba", "mamba"),
    ("s5", "s5"), ("gdn", "gated-deltanet"), ("lru", "lru"), ("lof", "lof")]}
_AT_4T_SE = {"gdn4se": _longer("recall-predict", "gated-deltanet", 4, field="longer_se"),
             "s54se": _longer("recall-predict", "s5", 4, field="longer_se")}

ARENA += [
    Quote(ARENA_DOC, "| recall-predict (≈) | LSTM {lstm}, GRU {gru}, softmax attention {att} | linear attention {la}, "
          "Mamba {mamba}, S5 {s5}, gated DeltaNet {gdn} | LRU {lru}, LOF {lof} |", RECALL_PREDICT, _RECALL),
    Quote(ARENA_DOC, "| task | within {columns} | farther |", RECALL_PREDICT, {"columns": _recall_columns}),
    Quote(ARENA_DOC, "paper-core-families-recall-predict/`; the memory margin is {margin}, the squared error of Y at "
          "the one scored step, the last; a gap of 0.01 is {step} of it)", RECALL_PREDICT,
          {"margin": lambda d: sig(_recall(d)["gru"]["margin"], 3), "step": lambda d: sig(0.01 * _recall(d)["gru"]
                                                                                             ["margin"])}),
    Quote(ARENA_DOC, "not measured. {no} layer beats it:", RECALL_PREDICT,
          {"no": lambda d: "No" if all(s["gap"] > 0 for s in _recall(d).values()) else "(one)"}),
    Quote(ARENA_DOC, "Mamba and S5 ({z} standard errors of the difference between the means)", RECALL_PREDICT,
          {"z": _seed_order}),
    Quote(ARENA_DOC, "(standard errors {att} and {gdn}), overlap every other layer's seeds", RECALL_PREDICT,
          {"att": _overlapping_se("attention"), "gdn": _overlapping_se("gated-deltanet")}),
    Quote(ARENA_DOC, "on the same {batch} held-out sequences", RECALL_PREDICT,
          {"batch": lambda d: f"{d['config']['test_batch']:,}"}),
    Quote(ARENA_DOC, "the learning rate from {share} of its peak to 0, every gap shrank {ratios} times.",
          RECALL_PREDICT, {"share": _learning_rate_left, "ratios": _shrank_last_1000}),
    Quote(ARENA_DOC, "Softmax attention ({attention2} at 2T, {attention4} at 4T), linear attention "
          "({linear-attention2}, {linear-attention4}), GRU ({gru2}, {gru4}) and LRU ({lru2}, {lru4}) stay under "
          "{under}. {closest}, the closest at T, does not ({lstm2}, {lstm4}), nor Mamba ({mamba2}, {mamba4}), nor LOF "
          "({lof2}, {lof4}). Gated DeltaNet loses {gdn_share} of what it learned ({gated-deltanet4} ± {gdn4se} at 4T) "
          "and S5 {s5_share} of it ({s54} ± {s54se};", RECALL_PREDICT,
          {k: v for m in ("attention", "linear-attention", "gru", "lru", "lstm", "mamba", "lof", "gated-deltanet",
                          "s5") for k, v in _pair_at(m).items()}
          | _AT_4T_SE | {"closest": lambda d: LAYER_NAMES.get(d["results"]["closest"]["recall-predict"], "?"),
                         "under": _at_4t_classes, "gdn_share": _share_lost("gated-deltanet"),
                         "s5_share": _share_lost("s5")}),
    Quote(ARENA_DOC, "Paper 4's subject, Mamba, ends among the first seven, {where}.", RECALL_PREDICT,
          {"where": _mamba_among}),
    Quote(README, "on recall–predict {n} layers end within 0.015 of the recall band's (approximate) predictor, LSTM, "
          "GRU and softmax attention closest ({lo}–{hi})", RECALL_PREDICT,
          {"n": lambda d: _number_word(sum(0 < s["gap"] < 0.015 for s in _recall(d).values())).lower(),
           "lo": lambda d: sig(min(_recall(d)[m]["gap"] for m in _RECALL_GROUPS[0])),
           "hi": lambda d: sig(max(_recall(d)[m]["gap"] for m in _RECALL_GROUPS[0])) if
           _recall_columns(d).startswith("0.01") else "(columns differ)"}),
    Quote(RESULTS_README, "none does): LSTM {lstm}, GRU {gru}, softmax attention {att}, linear attention {la}, Mamba "
          "{mamba}, S5 {s5}, gated DeltaNet {gdn}, LRU {lru}, LOF {lof}. Three seeds", RECALL_PREDICT, _RECALL),
    Quote(RESULTS_README, "({which}every seed of LSTM, GRU and linear attention below every seed of Mamba and S5)",
          RECALL_PREDICT, {"which": lambda d: "" if "–" in _seed_order(d) else "(not) "}),
    Quote(RESULTS_README, "every gap shrank {ratios} times. At 4T softmax attention ({a4}) stays under {under} and S5 "
          "({s4} ± {s4se}) does not.", RECALL_PREDICT,
          {"ratios": _shrank_last_1000, "a4": _longer("recall-predict", "attention", 4), "under": _at_4t_classes,
           "s4": _longer("recall-predict", "s5", 4), "s4se": _AT_4T_SE["s54se"]}),
    Quote(RESULTS_README, "about 2 h; LOF {lof} min from step ≈ 1,000) | {n} (memlab's) |", RECALL_PREDICT,
          {"lof": lambda d: f"{d['cells']['seconds']['recall-predict.lof'] / 60:.0f}", "n": _holding}),
]

LRU_INIT = "paper-results/arena.leaderboard/lru-init-ablation/results.json"


def _lru_init_row(layer: str, start: str) -> Quote:
    return Quote(ARENA_DOC, f"| `{layer}` | {start} | {{gap}} ± {{se}} | {{at2}} | {{at4}} |", LRU_INIT,
                 {"gap": _stat("policy-eval", layer), "se": _stat("policy-eval", layer, "se"),
                  "at2": _longer("policy-eval", layer, 2), "at4": _longer("policy-eval", layer, 4)})


def _lag_closed(d: Any) -> str:
    """The share of the LRU's gap beyond S5's that S5's start removes."""
    lru, slow, s5 = (_gap(d, "policy-eval", m) for m in ("lru", "lru-slow-modes", "s5"))
    return percent((lru - slow) / (lru - s5))


ARENA += [
    Quote(ARENA_DOC, "In the queue's policy-eval cells LRU ended at {lru} and S5 at {s5} (gap to the TD fixed point, "
          "mean of {seeds} seeds)", LRU_INIT,
          {"lru": _stat("policy-eval", "lru"), "s5": _stat("policy-eval", "s5"), **_SEEDS}),
    Quote(ARENA_DOC, "and changes nothing else ({new} new cell of", LRU_INIT, _ABLATION_CELLS),
    Quote(ARENA_DOC, "the other {reused} are paper-core-families'", LRU_INIT, _ABLATION_CELLS),
    _lru_init_row("lru", "ring [0, 0.99] (the LRU paper's)"),
    _lru_init_row("lru-slow-modes", "0.951–0.9995 (S5's)"),
    _lru_init_row("s5", "HiPPO-N over S5's step range"),
    Quote(ARENA_DOC, "The start accounts for {share} of the LRU's lag behind S5.", LRU_INIT, {"share": _lag_closed}),
    Quote(ARENA_DOC, "than S5 beyond the training length ({slow} against {s5} at 4T)", LRU_INIT,
          {"slow": _longer("policy-eval", "lru-slow-modes", 4), "s5": _longer("policy-eval", "s5", 4)}),
    Quote(RESULTS_README, "instead of its ring [0, 0.99] ends at {slow} ± {slow_se}, against {lru} ± {lru_se} with its "
          "own start and S5's {s5} ± {s5_se}: the start is {share} of the lag. At 4T it holds better than S5 "
          "({slow4} against {s54}).", LRU_INIT,
          {**{f"{k}{suffix}": _stat("policy-eval", m, field) for k, m in
              [("slow", "lru-slow-modes"), ("lru", "lru"), ("s5", "s5")] for suffix, field in [("", "gap"),
                                                                                             ("_se", "se")]},
           "share": _lag_closed, "slow4": _longer("policy-eval", "lru-slow-modes", 4),
           "s54": _longer("policy-eval", "s5", 4)}),
    Quote(RESULTS_README, "({new} new cell; the other {reused} are paper-core-families') | {n} (memlab's; an "
          "ablation) |", LRU_INIT, {"n": _holding, **_ABLATION_CELLS}),
]

MQAR = "paper-results/arena.mqar-zoology/paper-restricted/results.json"
PLATEAU = "paper-results/arena.mqar-zoology/paper-plateau/results.json"


def _best(layer: str) -> Read:
    """A layer's best held-out accuracy over the learning rates."""
    return lambda d: fixed(max(d["results"][layer]["accuracy"]))


def _mqar_levels(d: Any) -> Any:
    """The run's level stretches (mqar_zoology.levels) from its results file."""
    from memlab.arena.experiments.mqar_levels import levels
    from memlab.arena.experiments.mqar_zoology import LayerAccuracy

    train = d["config"]["train"]
    return levels({m: LayerAccuracy(**{**r, "curve": [float(a) for a in r["curve"]]}) for m, r in d["results"].items()},
                  train["eval_every"], train["stop_at"])


def _broke(d: Any) -> str:
    """The level stretch a layer broke out of, as the summary writes it."""
    from memlab.arena.experiments.mqar_levels import span

    return span(_mqar_levels(d).broke[1])


def _broke_steps(d: Any) -> str:
    """How many steps the level a layer broke out of lasted."""
    first, last = _mqar_levels(d).broke[1]
    return f"{last - first:,}"


def _gru_last_level_if_short(d: Any) -> str:
    """GRU's last level stretch, where it is shorter than the level a layer broke out of (the claim fails)."""
    from memlab.arena.experiments.mqar_levels import span

    lv = _mqar_levels(d)
    return "(not shorter)" if lv.outlasted["gru"] else span(lv.unsolved["gru"])


def _broke_band(d: Any) -> str:
    """The accuracies of the level a layer broke out of, as the summary writes them."""
    from memlab.arena.experiments.mqar_levels import band

    m, stretch = _mqar_levels(d).broke
    return band([float(a) for a in d["results"][m]["curve"]], stretch, d["config"]["train"]["eval_every"])


_MQAR_BEST = {"att": _best("attention"), "gdn": _best("gated-deltanet"), "mamba": _best("mamba"),
              "gru": _best("gru"), "lru": _best("lru"), "s5": _best("s5")}
ARENA += [
    Quote(README, "softmax attention ({att}), gated DeltaNet ({gdn}) and Mamba ({mamba}) recall (Zoology: attention "
          "≈ 0.97); GRU ({gru}), LRU ({lru}) and S5 ({s5}) do not", MQAR, _MQAR_BEST),
    Quote(ARENA_DOC, "rates, attention {att}, gated DeltaNet {gdn} ({conv} with the short convolution), Mamba {mamba}, "
          "GRU {gru}, LRU {lru}, S5 {s5}.", MQAR, {**_MQAR_BEST, "conv": _best("gated-deltanet-conv")}),
    Quote(ARENA_DOC, "`accuracy-levelled-off` {status}: gated DeltaNet sat level at ≈ 0.2 over steps {broke} and then "
          "passed 0.99 by step 1,600, and {short} ended level for less than that", MQAR,
          {"status": lambda d: next(c["status"] for c in d["claims"] if c["id"] == "accuracy-levelled-off"),
           "broke": _broke,
           "short": lambda d: " and ".join({"mamba": "Mamba", "lru": "LRU"}.get(m, m)
                                           for m, ok in _mqar_levels(d).outlasted.items() if not ok)}),
    Quote(RESULTS_README, "at least {hours} h of one core ({cells} cells of {low}–{high} min; a cell resumed", MQAR,
          {"hours": lambda d: f"{sum(d['cells']['seconds'].values()) / 3600:.1f}",
           "cells": lambda d: str(len(d["cells"]["seconds"])),
           "low": lambda d: f"{min(d['cells']['seconds'].values()) / 60:.1f}",
           "high": lambda d: f"{max(d['cells']['seconds'].values()) / 60:.0f}"}),
    Quote(RESULTS_README, "| {holding} (the third, memlab's, fails", MQAR, {"holding": _holding}),
    Quote(DEVELOPMENT, "arena.mqar-zoology paper-restricted ({cells} cells, at least {hours} h of one core)", MQAR,
          {"cells": lambda d: str(len(d["cells"]["seconds"])),
           "hours": lambda d: f"{sum(d['cells']['seconds'].values()) / 3600:.1f}"}),
    Quote(ARENA_DOC, "GRU's level at {gru} (≈ 1/4, what naming one of the sequence's 4 values at random scores) "
          "lasted {steps} steps", MQAR,
          {"gru": _best("gru"), "steps": lambda d: f"{(lambda s: s[1] - s[0])(_mqar_levels(d).unsolved['gru']):,}"}),
    Quote(ARENA_DOC, "GRU sat within a band 0.02 wide over steps {broke} (accuracy {band}), then rose out of it and "
          "reached {gru} at step {steps}. A level at 1/K held {held} steps there and still broke", PLATEAU,
          {"broke": _broke, "band": _broke_band, "gru": _best("gru"), "held": _broke_steps,
           "steps": lambda d: f"{d['results']['gru']['steps']:,.0f}"}),
    Quote(ARENA_DOC, "`accuracy-levelled-off` fails as well: GRU's last level, steps {last} (where", PLATEAU,
          {"last": _gru_last_level_if_short}),
    Quote(ARENA_DOC, "trains GRU at 1e-2 (where the restricted run's GRU ended at {at}) for", MQAR,
          {"at": lambda d: fixed(d["results"]["gru"]["accuracy"][d["config"]["learning_rates"].index(1e-2)])}),
    Quote(README, "GRU leaves its level at ≈ 0.24 after {held} steps and reaches {gru}", PLATEAU,
          {"held": _broke_steps, "gru": _best("gru")}),
    Quote(DEVELOPMENT, "it left its level at ≈ 0.24 after {held} steps", PLATEAU, {"held": _broke_steps}),
    Quote(RESULTS_README, "| {holding} (memlab's: GRU's last level is shorter than the {held}-step one it left)",
          PLATEAU, {"holding": _holding, "held": _broke_steps}),
]

# the folder table's claim counts of the runs added last
HOLDING = [Quote(RESULTS_README, "{n} (" + name + ")", path, {"n": _holding})
           for name, path in (("rate", RATE_BOTH), ("attention-vs-s6", ATTENTION), ("trajectory", TRAJECTORY),
                              ("stability; 3 differ, explained", STABILITY))]

QUOTES = BELIEF + ICTD + RECALL + ARENA + HOLDING


@pytest.mark.parametrize("quote", QUOTES, ids=[f"{q.doc}:{q.text[:40]}" for q in QUOTES])
def test_documents_quote_their_result_files(quote):
    check_quote(quote)


def test_formats():
    assert sig(0.0010494) == "0.0010" and sig(0.4297) == "0.43" and sig(1.2772, 3) == "1.28"
    assert sig(0.00037452) == "0.00037" and sig(0.000375, 1) == "0.0004"
    assert bound(0.0095) == "0.01" and bound(0.00326) == "0.004" and bound(0.0099) == "0.01"
    assert bound(0.004) == "0.004" and bound(0.000386) == "0.0004"
    assert minus(fixed(-0.0833)) == "−0.083"
    assert same(["0.92", "0.92"]) == "0.92" and same(["0.92", "0.93"]) == "0.92 / 0.93"

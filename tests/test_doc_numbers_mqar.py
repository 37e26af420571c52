"""The numbers and the words the documents state about MQAR at paper-core's sizes (``arena.leaderboard
--profile paper-core-families --set tasks=mqar``) and its ablations (``mqar-short-conv``, ``mqar-budget``,
``mqar-warmup``, ``mqar-low-peak``), each read from the result file (tests/test_doc_numbers.py: ``Quote``)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ is not on the path (--import-mode=importlib)
from test_doc_numbers import Quote, check_quote, load  # noqa: E402
from test_doc_numbers_studies import (  # noqa: E402
    ARENA_DOC,
    DEVELOPMENT,
    PLATEAU,
    README,
    RESULTS_README,
    _broke,
    _broke_steps,
    _holding,
    _longer,
    _stat,
    same,
    sig,
)
from test_doc_numbers_studies import MQAR as ZOOLOGY  # noqa: E402

MQAR = "paper-results/arena.leaderboard/paper-core-families-mqar/results.json"
SHORT_CONV = "paper-results/arena.leaderboard/mqar-short-conv/results.json"
WHOLE = "paper-results/arena.leaderboard/paper-core-families/results.json"
BUDGET = "paper-results/arena.leaderboard/mqar-budget/results.json"
WARMUP = "paper-results/arena.leaderboard/mqar-warmup/results.json"
LOW_PEAK = "paper-results/arena.leaderboard/mqar-low-peak/results.json"
# paper-core-families' softmax attention cell on mqar in the store (its folder's results predate per-seed curves)
PAPER_CORE_ATTENTION = "paper-results/cells/arena.train-and-score/e88cb94872d4c7c58cdea4bc3e9396b4.json"
ONE_IN_FOUR = math.log(4) / math.log(64)  # the gap of an even spread over the sequence's 4 values (loss log 4): 1/3
AT_LEVEL = ("gated-deltanet", "gru", "linear-attention", "attention", "lstm")
NAMES = {"gated-deltanet": "gated DeltaNet", "gru": "GRU", "linear-attention": "linear attention",
         "attention": "softmax attention", "lstm": "LSTM", "mamba": "Mamba", "lru": "LRU", "s5": "S5", "lof": "LOF"}


def _stats(d: Any) -> dict:
    return d["results"]["stats"]["mqar"]


def _gap(layer: str) -> Callable[[Any], str]:
    return _stat("mqar", layer)


def _at_level(per_seed: list[float]) -> bool:
    """Every seed ends above the one-in-four level, within 0.05 of it."""
    return all(0 < g - ONE_IN_FOUR < 0.05 for g in per_seed)


def _columns(d: Any) -> str:
    """The table's three columns as the document names them, where they hold exactly: the layers below 0.01, those
    whose every seed ends within 0.05 above the one-in-four level, and the rest (all farther above it)."""
    seeds = {m: s["per_seed"] for m, s in _stats(d).items()}
    recall = {m for m, x in seeds.items() if max(x) < 0.01}
    level = {m for m, x in seeds.items() if _at_level(x)}
    rest = set(seeds) - recall - level
    ok = recall == {"mamba"} and level == set(AT_LEVEL) and all(min(seeds[m]) > ONE_IN_FOUR + 0.05 for m in rest)
    return "recalls | at the one-in-four level" if ok else f"(columns {recall}, {level}, {rest})"


def _above_level(d: Any) -> str:
    """'a and b': how far above the one-in-four level the five layers' seeds end, the nearest and the farthest."""
    above = [g - ONE_IN_FOUR for m in AT_LEVEL for g in _stats(d)[m]["per_seed"]]
    return f"{sig(min(above))} and {sig(max(above))}"


def _first_below(layer: str, level: float):
    """The first evaluation from which the layer's mean gap over seeds (the budget curve) stays below ``level``."""
    def read(d: Any) -> str:
        steps, curve = d["results"]["steps"], _stats(d)[layer]["budget"]
        return f"{steps[next(i for i in range(len(curve)) if all(g < level for g in curve[i:]))]:,}"
    return read


def _status(claim: str):
    return lambda d: next(c["status"] for c in d["claims"] if c["id"] == claim)


def _minutes(cell: str):
    return lambda d: f"{d['cells']['seconds'][cell] / 60:.0f}"


def _train(d: Any) -> dict:
    return d["config"]["train"]


def _attention(d: Any) -> dict:
    return _stats(d)["attention"]


def _seed(i: int, recalls: bool):
    """Seed i's gap where it recalls (below 0.01) or ends at the level (within 0.05 of 1/3), as ``recalls`` says."""
    def read(d: Any) -> str:
        g = _attention(d)["per_seed"][i]
        return sig(g) if (g < 0.01 if recalls else abs(g - ONE_IN_FOUR) < 0.05) else f"(seed {i} {g})"
    return read


def _recalling(d: Any) -> list[int]:
    return [i for i, g in enumerate(_attention(d)["per_seed"]) if g < 0.01]


def _recalling_curves(d: Any) -> list[list[float]]:
    return [_attention(d)["seed_budgets"][i] for i in _recalling(d)]


def _left(d: Any) -> int:
    """The index of the first evaluation at which every recalling seed is below the level by more than 0.05."""
    curves = _recalling_curves(d)
    return next(k for k in range(len(curves[0])) if all(c[k] < ONE_IN_FOUR - 0.05 for c in curves))


def _left_step(d: Any) -> int:
    """The step of that evaluation."""
    return d["results"]["steps"][_left(d)]


def _same_seeds(d: Any) -> str:
    """'the same two': mqar-warmup's recalling seeds are mqar-budget's, and there are two."""
    ours, budget = _recalling(d), _recalling(load(BUDGET))
    return "the same two" if ours == budget and len(ours) == 2 else f"(seeds {ours} against {budget})"


def _equal_through(d: Any) -> str:
    """The last step through which mqar-warmup's per-seed curves equal mqar-budget's exactly."""
    ours, budget = _attention(d)["seed_budgets"], _attention(load(BUDGET))["seed_budgets"]
    k = next((k for k in range(len(ours[0])) if any(a[k] != b[k] for a, b in zip(ours, budget, strict=True))),
             len(ours[0]))
    return f"{d['results']['steps'][k - 1]:,}" if k else "(not equal at the first)"


def _paper_core_at_left(d: Any) -> str:
    """paper-core's three seeds at the evaluation where mqar-budget's recalling seeds had left the level: 'lo–hi',
    if every one is still within 0.1 of it."""
    # the same index: paper-core's cell evaluates every 250 steps, as mqar-budget does
    at = [curve[_left(load(BUDGET))] for curve in d["record"]["result"]["eval_gap"]]
    ok = all(abs(g - ONE_IN_FOUR) < 0.1 for g in at)
    return f"{sig(min(at))}–{sig(max(at))}" if ok else f"(not at the level: {at})"


def _failing(d: Any) -> str:
    """'fails in all four runs (a, b, c, d)': paper-core's, mqar-budget's, mqar-warmup's and mqar-low-peak's mean
    gaps."""
    runs = [d, load(BUDGET), load(WARMUP), load(LOW_PEAK)]
    failed = all(_status("attention-solves-mqar")(r) != "holds" for r in runs)
    gaps = ", ".join(_gap("attention")(r) for r in runs)
    return ("fails in all four runs" if failed else "(holds in one)") + f" ({gaps})"


def _seed_left(d: Any) -> str:
    """'a and b': the steps by which each recalling seed is below the level by more than 0.05."""
    steps = [d["results"]["steps"][next(k for k, g in enumerate(c) if g < ONE_IN_FOUR - 0.05)]
             for c in _recalling_curves(d)]
    return " and ".join(f"{s:,}" for s in steps)


def _budget_left_step() -> int:
    """The step by which mqar-budget's recalling seeds had left the level."""
    return _left_step(load(BUDGET))


def _train_config(d: Any):
    from memlab.arena.train import TrainConfig

    return TrainConfig(**_train(d))


def _schedule(d: Any):
    """The run's learning rate by step (memlab.arena.train.learning_rate_schedule)."""
    from memlab.arena.train import learning_rate_schedule

    return learning_rate_schedule(_train_config(d))


def _summed_rate(d: Any, steps: int) -> float:
    """The learning rate of the run's schedule summed over its first ``steps`` steps."""
    schedule = _schedule(d)
    return sum(float(schedule(k)) for k in range(steps))


def _warmup_steps(d: Any) -> str:
    return f"{_train_config(d).warmup_steps():,}"


def _at_left(i: int, offset: int = 0):
    """Seed i's gap at the evaluation where the recalling seeds had left the level (``offset`` evaluations away)."""
    return lambda d: sig(_attention(d)["seed_budgets"][i][_left(d) + offset])


def _rate_at(d: Any, step: int) -> str:
    """The learning rate of the run's schedule at ``step``."""
    return f"{float(_schedule(d)(step)):.3g}"


BUDGET_LEFT = {"bleft": lambda d: f"{_left_step(d):,}", "bseen": lambda d: f"{_left_step(d) * _train(d)['batch']:,}"}


MQAR_QUOTES = [
    Quote(DEVELOPMENT, "mqar's LRU {lru} min (beside a CI run, 10 min of it paused), S5 {s5} min, GRU {gru} min, Mamba "
          "{mamba} min from step ≈ 3,750, LSTM {lstm} min (beside another cell), attention {attention} min, linear "
          "attention {linear-attention} min, gated DeltaNet {gated-deltanet} min, LOF {lof} min", MQAR,
          {m: _minutes(f"mqar.{m}") for m in NAMES}),
    Quote(DEVELOPMENT, "with the short convolution on MQAR) took {conv} min for its one new cell", SHORT_CONV,
          {"conv": _minutes("mqar.gated-deltanet-conv")}),
    Quote(README, "on MQAR, within {steps} steps of {batch}, only Mamba recalls ({mamba}), five layers end at the "
          "one-in-four level ({lo}–{hi})", MQAR,
          {"steps": lambda d: f"{_train(d)['steps']:,}", "batch": lambda d: str(_train(d)["batch"]),
           "mamba": lambda d: _gap("mamba")(d) if _columns(d).startswith("recalls") else "(columns differ)",
           "lo": lambda d: sig(min(_stats(d)[m]["gap"] for m in AT_LEVEL)),
           "hi": lambda d: sig(max(_stats(d)[m]["gap"] for m in AT_LEVEL))}),
    Quote(README, "gated DeltaNet given a short convolution with silu recalls too ({conv})", SHORT_CONV,
          {"conv": _gap("gated-deltanet-conv")}),
    Quote(RESULTS_README, "Every layer uses memory (the claim {memory}), but within this budget only one recalls: "
          "against exact lookup Mamba {mamba}, then gated DeltaNet, GRU, linear attention and softmax attention {four} "
          "and LSTM {lstm}, just above the one-in-four level g = 1/3 (the sequence's four values known, not which key "
          "each belongs to), LRU {lru}, S5 {s5}, LOF {lof}. `attention-solves-mqar` {attention} ({att} against "
          "memlab's threshold g ≤ 0.05 for Zoology's accuracy ≈ 0.97)", MQAR,
          {**{m: _gap(m) for m in ("mamba", "lstm", "lru", "s5", "lof")}, "att": _gap("attention"),
           "four": lambda d: same([_gap(m)(d) for m in ("gated-deltanet", "gru", "linear-attention", "attention")]),
           "memory": _status("every-layer-uses-memory"), "attention": _status("attention-solves-mqar")}),
    Quote(RESULTS_README, "the convolution and its silu added) ends at {conv} instead of {plain}.", SHORT_CONV,
          {"conv": _gap("gated-deltanet-conv"), "plain": _gap("gated-deltanet")}),
    Quote(RESULTS_README, "| {holding} (attention-solves-mqar fails: docs/studies/arena.md) |", MQAR,
          {"holding": _holding}),
    Quote(RESULTS_README, "| {holding} (as mqar's) |", WHOLE, {"holding": _holding}),
    Quote(RESULTS_README, "| {holding} (memlab's; an ablation) |", SHORT_CONV, {"holding": _holding}),
    Quote(ARENA_DOC, "| task | {columns} | farther |", MQAR, {"columns": _columns}),
    Quote(ARENA_DOC, "Within this budget {one} layer recalls (recalls: every seed below 0.01; at the level: every seed "
          "within 0.05 above 1/3):", MQAR,
          {"one": lambda d: "one" if sum(max(s["per_seed"]) < 0.01 for s in _stats(d).values()) == 1 else "(not one)"}),
    Quote(ARENA_DOC, "| mqar | Mamba {mamba} | gated DeltaNet {gated-deltanet}, GRU {gru}, linear attention "
          "{linear-attention}, softmax attention {attention}, LSTM {lstm} | LRU {lru}, S5 {s5}, LOF {lof} |", MQAR,
          {m: _gap(m) for m in NAMES}),
    Quote(ARENA_DOC, "the memory margin is log 64 = {margin} nats", MQAR,
          {"margin": lambda d: sig(_stats(d)["mamba"]["margin"], 3)}),
    Quote(ARENA_DOC, "Its mean gap is below 0.01 from step {step} on and ends at {conv}, where without them it ends "
          "at the level ({plain}). Within this budget", SHORT_CONV,
          {"step": _first_below("gated-deltanet-conv", 0.01), "conv": _gap("gated-deltanet-conv"),
           "plain": lambda d: (_gap("gated-deltanet")(d) if _at_level(_stats(d)["gated-deltanet"]["per_seed"])
                               else "(not at the level)")}),
    Quote(ARENA_DOC, "the accuracy level (≈ 1/4) that `arena.mqar-zoology`'s GRU held for {held} steps of 512 before "
          "it rose", PLATEAU,
          {"held": _broke_steps}),
    Quote(ARENA_DOC, "no seed left the level within this budget: {steps} steps of {batch} sequences, {seen} in all",
          MQAR,
          {"steps": lambda d: f"{_train(d)['steps']:,}", "batch": lambda d: str(_train(d)["batch"]),
           "seen": lambda d: f"{_train(d)['steps'] * _train(d)['batch']:,}"}),
    Quote(ARENA_DOC, "it passed 0.99 accuracy within {steps} steps of {batch} ({seen}; `arena.mqar-zoology`) at the "
          "{rate} rate, and stayed at ≈ 1/4 for {all} steps of 512 at the two lowest", ZOOLOGY,
          {"rate": lambda d: "highest" if d["results"]["attention"]["best"] == max(d["config"]["learning_rates"])
           else "(not the highest)",
           "all": lambda d: f"{_train(d)['steps']:,}" if all(
               a < 0.3 for a in d["results"]["attention"]["accuracy"][:2]) else "(not at ≈ 1/4)",
           "steps": lambda d: f"{d['results']['attention']['steps']:,.0f}",
           "batch": lambda d: str(d["config"]["train"]["batch"]),
           "seen": lambda d: f"{d['results']['attention']['steps'] * d['config']['train']['batch']:,.0f}"}),
    Quote(ARENA_DOC, "without them, at memlab's version of Zoology's recipe, it sat at a level over steps {broke} and "
          "then passed 0.99 accuracy", ZOOLOGY, {"broke": _broke}),
    Quote(ARENA_DOC, "Every seed of the five ends between {above} above it; Mamba's mean gap is below it from step "
          "{step} on and ends at {mamba} ({mamba4} at 4T)", MQAR,
          {"above": _above_level, "step": _first_below("mamba", ONE_IN_FOUR), "mamba": _gap("mamba"),
           "mamba4": _longer("mqar", "mamba", 4)}),
    Quote(ARENA_DOC, "its linear warm-up takes {budget} steps where paper-core's takes {paper_core}. Its seeds start",
          BUDGET, {"budget": _warmup_steps, "paper_core": lambda d: _warmup_steps(load(MQAR))}),
    Quote(ARENA_DOC, "Two seeds recall ({b0} and {b1}: below 0.01, as above) and one ends at the level ({b2}); the "
          "mean, {bmean}, fails memlab's threshold. The two dropped away between steps {before} and {bleft} (from "
          "{from0} and {from1} to {bat0} and {bat1}), before they reached the level, after {bseen} sequences", BUDGET,
          {"b0": _seed(0, True), "b1": _seed(1, True), "b2": _seed(2, False), "bmean": _gap("attention"),
           **BUDGET_LEFT, "bat0": _at_left(0), "bat1": _at_left(1), "from0": _at_left(0, -1),
           "from1": _at_left(1, -1), "before": lambda d: f"{d['results']['steps'][_left(d) - 1]:,}"}),
    Quote(ARENA_DOC, "paper-core's three seeds were at {at}, still falling towards the level, and all ended at the "
          "level after 160,000", PAPER_CORE_ATTENTION, {"at": _paper_core_at_left}),
    Quote(ARENA_DOC, "its warm-up lengthened to {steps} steps: same models, batches, held-out set and 5,000 steps. Its "
          "curves equal mqar-budget's exactly through step {through} (the same rates on the same batches), so the "
          "escape, which happens inside that stretch, is mqar-budget's; what it adds is that {same} seeds go on to "
          "recall under paper-core's faster decay, within paper-core's budget ({w0} and {w1}); the third ends "
          "at the level ({w2}).", WARMUP,
          {"steps": _warmup_steps, "through": _equal_through, "same": _same_seeds, "w0": _seed(0, True),
           "w1": _seed(1, True), "w2": _seed(2, False)}),
    Quote(ARENA_DOC, "not how its warm-up ramps ({paper_core} at step {step} against mqar-budget's {budget})", BUDGET,
          {"step": lambda d: f"{_left_step(d):,}", "paper_core": lambda d: _rate_at(load(MQAR), _left_step(d)),
           "budget": lambda d: _rate_at(d, _left_step(d))}),
    Quote(ARENA_DOC, "keeps paper-core's {warmup}-step warm-up and halves the peak rate to {peak} (by step {step} "
          "about as much rate summed as mqar-budget's: {low} against {budget}): {same} seeds drop away by steps "
          "{left} and recall ({l0} and {l1}); the third ends at the level ({l2}).", LOW_PEAK,
          {"warmup": _warmup_steps, "peak": lambda d: f"{_train(d)['learning_rate']:g}",
           "step": lambda d: f"{_budget_left_step():,}",
           "low": lambda d: f"{_summed_rate(d, _budget_left_step()):.2f}",
           "budget": lambda d: f"{_summed_rate(load(BUDGET), _budget_left_step()):.2f}",
           "same": _same_seeds, "left": _seed_left, "l0": _seed(0, True), "l1": _seed(1, True),
           "l2": _seed(2, False)}),
    Quote(ARENA_DOC, "Fig. 2 accuracy ≈ 0.97) {failing}; at paper-core", MQAR, {"failing": _failing}),
    Quote(RESULTS_README, "two seeds recall ({b0}, {b1}) and one ends at the level ({b2}), mean {bmean}; the two "
          "dropped away from their way to the level by step {bleft}, after {bseen} sequences", BUDGET,
          {"b0": _seed(0, True), "b1": _seed(1, True), "b2": _seed(2, False), "bmean": _gap("attention"),
           **BUDGET_LEFT}),
    Quote(RESULTS_README, "lengthened to {steps} steps: {same} seeds recall ({w0}, {w1}), the third ends at the level "
          "({w2}), mean {wmean}", WARMUP,
          {"steps": _warmup_steps, "same": _same_seeds, "w0": _seed(0, True), "w1": _seed(1, True),
           "w2": _seed(2, False), "wmean": _gap("attention")}),
    Quote(RESULTS_README, "(the cell's record counts the last, {last} min; 1 cell: 3 seeds of {steps} steps) | "
          "{holding} (attention-solves-mqar fails", BUDGET,
          {"last": _minutes("mqar.attention"), "steps": lambda d: f"{_train(d)['steps']:,}", "holding": _holding}),
    Quote(RESULTS_README, "| {minutes} min of one core beside other work (1 cell) | {holding} (attention-solves-mqar "
          "fails", WARMUP, {"minutes": _minutes("mqar.attention"), "holding": _holding}),
    Quote(README, "softmax attention's warm-up, lengthened from {paper_core} to {steps} steps, lets two of its three "
          "seeds recall ({w0}, {w1}) while the third ends at the level ({w2}; `attention-solves-mqar` {status}: "
          "{wmean})", WARMUP,
          {"paper_core": lambda d: _warmup_steps(load(MQAR)), "steps": _warmup_steps, "w0": _seed(0, True),
           "w1": _seed(1, True), "w2": _seed(2, False), "wmean": _gap("attention"),
           "status": lambda d: "fails" if _status("attention-solves-mqar")(d) != "holds" else "holds"}),
    Quote(RESULTS_README, "Paper-core's {warmup}-step warm-up with the peak rate halved: {same} seeds recall ({l0}, "
          "{l1}), the third ends at the level ({l2}), mean {lmean}.", LOW_PEAK,
          {"warmup": _warmup_steps, "same": _same_seeds, "l0": _seed(0, True), "l1": _seed(1, True),
           "l2": _seed(2, False), "lmean": _gap("attention")}),
    Quote(RESULTS_README, "| {minutes} min of one core beside a CI run (1 cell) | {holding} (attention-solves-mqar "
          "fails", LOW_PEAK, {"minutes": _minutes("mqar.attention"), "holding": _holding}),
    Quote(DEVELOPMENT, "the same cell with half the peak rate: {minutes} min of one core beside a CI run", LOW_PEAK,
          {"minutes": _minutes("mqar.attention")}),
    Quote(DEVELOPMENT, "with a {steps}-step warm-up: {minutes} min of one core", WARMUP,
          {"steps": _warmup_steps, "minutes": _minutes("mqar.attention")}),
]


@pytest.mark.parametrize("quote", MQAR_QUOTES, ids=[f"{q.doc}:{q.text[:40]}" for q in MQAR_QUOTES])
def test_documents_quote_the_mqar_results(quote):
    check_quote(quote)

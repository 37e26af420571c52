"""Numbers the documents quote from committed result files, checked against those files (issue 47).

Each ``Quote`` is a phrase of a document with ``{name}`` where a number stands, the result file it comes from, and
how each number is read from that file and written. The test formats the phrase from the file and requires the
document to contain it: when a rerun changes a result, the document that quotes the old number fails here until it
is brought up to date. Documents: README.md, docs/, paper-results/README.md. More quotes: test_doc_numbers_studies.py.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent


class Quote(NamedTuple):
    doc: str  # relative to the repository's root
    text: str  # the phrase, with {name} where each number stands
    source: str  # the result file (JSON or CSV) the numbers come from, relative to the root
    numbers: dict[str, Callable[[Any], str]]  # name -> the number as the document writes it, from the loaded file


def percent(value: float, digits: int = 0) -> str:
    """0.8698 -> '87 %' (the documents' spacing)."""
    return f"{100 * value:.{digits}f} %"


def fixed(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}f}"


def load(source: str) -> Any:
    path = ROOT / source
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    import csv

    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def check_quote(quote: Quote) -> None:
    """The document holds the phrase with the numbers of its result file (module doc)."""
    data = load(quote.source)
    expected = quote.text.format(**{name: read(data) for name, read in quote.numbers.items()})
    text = " ".join((ROOT / quote.doc).read_text(encoding="utf-8").split())  # line breaks as spaces
    assert expected in text, f"{quote.doc} should say {expected!r} ({quote.source})"


def _mixture_001(field: str, digits: int = 0) -> Callable[[Any], str]:
    return lambda d: percent(d["results"]["mixture"][field], digits)


MODES_001 = "paper-results/pissm.pong-modes-paper-0.01/results.json"
_REFLECTIONS_001 = {"at": _mixture_001("reflecting_at_bounces"), "next": _mixture_001("reflecting_next_to_bounces"),
                    "elsewhere": _mixture_001("reflecting_elsewhere", 1),
                    "oracle": lambda d: percent(d["results"]["oracle"]["mixture"]["at_hits"])}
_REFLECTIONS_TEXT = ("the exact mixture learns the selection on the true maps ({oracle} of hits) and reflecting modes "
                     "in the full model (its A_z reflects at {at} of hits, {next} counting the step after, "
                     "{elsewhere} elsewhere)")

QUOTES = [
    Quote("docs/studies/pissm.md", _REFLECTIONS_TEXT, MODES_001, _REFLECTIONS_001),
    Quote("docs/experiments.md", _REFLECTIONS_TEXT, MODES_001, _REFLECTIONS_001),
]


# ---------------------------------------------------------------------------------------------- pi-SSM (issue 47)

STABILITY = "paper-results/pissm.stability/{}/results.json"
TABLE1_CORE = "paper-results/pissm.table1/paper-core/results.json"
ONE_MODE = "paper-results/pissm.table1/paper-core-one-mode/results.json"
MIXTURE = "paper-results/pissm.table1/paper-core-mixture/results.json"
LORENZ_NS = "paper-results/pissm.table1/paper-core-lorenz-navier-stokes/results.json"
PISSM_ROW_DOCS = ("docs/studies/pissm.md", "docs/experiments.md")  # the experiments table, on both pages


def _rows(d) -> list[dict]:
    return d["results"]["table"]


def _trained(d) -> str:
    return str(round(sum(r["success"] * r["runs"] for r in _rows(d))))


def _runs(d) -> str:
    return str(sum(r["runs"] for r in _rows(d)))


def _steps(d, pick) -> str:
    return f"{pick(float(v) for r in _rows(d) for v in (r['nonfinite_step_min'], r['nonfinite_step_max'])):.0f}"


def _one_step(d) -> str:
    """The step every failing run of the file went non-finite at (one number only if they all agree)."""
    low, high = _steps(d, min), _steps(d, max)
    return low if low == high else f"{low}–{high}"


def _only(d, model: str) -> dict:
    """The results file ``d`` with only ``model``'s rows."""
    return {"results": {"table": [r for r in _rows(d) if r["model"] == model]}}


def _ll(model: str, std: bool = True) -> Callable[[Any], str]:
    def read(d):
        row = next(r for r in _rows(d) if r["model"] == model and r["dataset"] == "pong")
        return f"{float(row['ll_mean']):.3f}" + (f" ± {float(row['ll_std']):.3f}" if std else "")
    return read


def _learning_std(memory: str) -> Callable[[Any], str]:
    return lambda d: fixed(d["results"]["memories"][memory]["learning_std"])


def _survival(model: str, size: float = 0.011) -> Callable[[Any], str]:
    """The median share of ``model``'s test filters still finite after a random step of ``size`` (pissm.stability's
    start survival)."""
    return lambda d: percent(d["results"]["start_survival"][model][d["results"]["step_sizes"].index(size)][0])


def _survival_row(d, model: str) -> list[float]:
    """The median shares of ``model``'s test filters still finite, per step size (the sizes in order)."""
    return [median for median, _, _ in d["results"]["start_survival"][model]]


def _row(d, dataset: str, model: str) -> dict:
    return next(r for r in _rows(d) if r["model"] == model and r["dataset"] == dataset)


def _row_ll(dataset: str, model: str) -> Callable[[Any], str]:
    """A row's mean test log-likelihood as the documents write it (the minus sign as −)."""
    return lambda d: f"{float(_row(d, dataset, model)['ll_mean']):.3f}".replace("-", "−")


def _signed_ll(text: str) -> str:
    """A '-1.234 ± 0.5' of ``_ll`` with the documents' minus sign."""
    return text.replace("-", "−")


def _signed(value: float) -> str:
    return f"{value:.3f}".replace("-", "−")


QUOTES += [
    Quote("paper-results/README.md", "From that start {trained} of {runs} runs train", STABILITY.format("paper-core"),
          {"trained": _trained, "runs": _runs}),
    Quote("paper-results/README.md", "every run's parameters are non-finite after optimiser step {step}",
          STABILITY.format("paper-core"), {"step": _one_step}),
    Quote("paper-results/README.md", "{trained} of {runs} runs train: the parameters are non-finite after between "
          "{low} and {high} optimiser steps", STABILITY.format("paper-prior-init"),
          {"trained": _trained, "runs": _runs, "low": lambda d: _steps(d, min), "high": lambda d: _steps(d, max)}),
    Quote("paper-results/README.md", "mean per setting, {low} to {high}, where the exact gain's π-SSM(LG) ends at",
          STABILITY.format("paper-prior-init"),
          {"low": lambda d: _signed(min(float(r["best_val_mean"]) for r in _rows(d))),
           "high": lambda d: _signed(max(float(r["best_val_mean"]) for r in _rows(d)))}),
    Quote("paper-results/README.md", "LG {lg}, π-SSM-GRU with the bounded gain {bounded},", TABLE1_CORE,
          {"lg": _ll("lg"), "bounded": _ll("pissm-gru-bounded")}),
    *(Quote(doc, "({trained} of {runs} from the tracking start, non-finite after optimiser step {step};",
            STABILITY.format("paper-core"), {"trained": _trained, "runs": _runs, "step": _one_step})
      for doc in PISSM_ROW_DOCS),
    *(Quote(doc, "{trained} of {runs} from the first step's factor)", STABILITY.format("paper-prior-init"),
            {"trained": _trained, "runs": _runs}) for doc in PISSM_ROW_DOCS),
    Quote("paper-results/README.md", "{trained} of {runs} runs train. From the tracking start every run's parameters "
          "are again non-finite after optimiser step {step};", STABILITY.format("paper-lr"),
          {"trained": _trained, "runs": _runs, "step": lambda d: _one_step(_only(d, "pissm-gru-tracking"))}),
    Quote("paper-results/README.md", "between {low} and {high} optimiser steps (up to {epochs} of the 60 epochs), and "
          "reach a best validation log-likelihood per step of {best_low} to {best_high}", STABILITY.format("paper-lr"),
          {"low": lambda d: _steps(_only(d, "pissm-gru"), min), "high": lambda d: _steps(_only(d, "pissm-gru"), max),
           # 125 optimiser steps per epoch: 4000 training sequences in minibatches of 32
           "epochs": lambda d: f"{float(_steps(_only(d, 'pissm-gru'), max)) / 125:.0f}",
           "best_low": lambda d: fixed(min(float(r["best_val_mean"]) for r in _rows(_only(d, "pissm-gru")))),
           "best_high": lambda d: fixed(max(float(r["best_val_mean"]) for r in _rows(_only(d, "pissm-gru"))))}),
    *(Quote(doc, "{trained} of {runs} with normalised inputs, non-finite after optimiser step {step};",
            STABILITY.format("paper-normalised"), {"trained": _trained, "runs": _runs, "step": _one_step})
      for doc in PISSM_ROW_DOCS),
    *(Quote(doc, "a random step of Adam's size ({lr}) in the gain's parameters leaves {tracking} of the tracking "
            "start's test filters finite ({normalised} with normalised inputs), {prior} of the first step's factor's "
            "(which has lost track) and {bounded} of the bounded gain's", STABILITY.format("paper-ablation"),
            {"lr": lambda d: "0.011", "tracking": _survival("pissm-gru-tracking"),
             "normalised": lambda d: _survival("pissm-gru-normalised")(load(STABILITY.format("paper-normalised"))),
             "prior": _survival("pissm-gru"), "bounded": _survival("pissm-gru-bounded")}) for doc in PISSM_ROW_DOCS),
    Quote("paper-results/README.md", "the GRU failed in all {seeds} seeds after some epochs, {ll} on the test split",
          "paper-results/pissm.table1/paper-core-prior-init/results.json",
          {"seeds": lambda d: str(next(r for r in _rows(d) if r["model"] == "pissm-gru")["failed"]),
           "ll": lambda d: _signed_ll(_ll("pissm-gru")(d))}),
    Quote("paper-results/README.md", "Lorenz: particle filter {pf}, LG {lg}, direct GRU {gru}, π-SSM(LG) {pissm_lg}, "
          "bounded π-SSM-GRU {bounded}, eq. (7)'s gain failed in all {failed} seeds", LORENZ_NS,
          {"pf": _row_ll("lorenz", "pf"), "lg": _row_ll("lorenz", "lg"), "gru": _row_ll("lorenz", "gru"),
           "pissm_lg": _row_ll("lorenz", "pissm-lg"), "bounded": _row_ll("lorenz", "pissm-gru-bounded"),
           "failed": lambda d: str(_row(d, "lorenz", "pissm-gru-tracking")["failed"])}),
    Quote("paper-results/README.md", "Navier–Stokes: direct GRU {gru}, LG {lg}, π-SSM(LG) {pissm_lg}, bounded "
          "π-SSM-GRU {bounded} (one of 3 seeds failed)", LORENZ_NS,
          {"gru": _row_ll("navier-stokes", "gru"), "lg": _row_ll("navier-stokes", "lg"),
           "pissm_lg": _row_ll("navier-stokes", "pissm-lg"), "bounded": _row_ll("navier-stokes", "pissm-gru-bounded")}),
    Quote("paper-results/README.md", "π-SSM(LG) and LG end level ({pissm} against {lg},", ONE_MODE,
          {"pissm": _ll("pissm-lg-one-mode", False), "lg": _ll("lg-one-mode", False)}),
    Quote("paper-results/README.md", "with Pong's 18 modes LG's soft mixture gains {lg} nats over its one mode, "
          "π-SSM(LG)'s sampled modes trained by REINFORCE {pissm}", ONE_MODE,
          {"lg": lambda d: fixed(float(_ll("lg", False)(d)) - float(_ll("lg-one-mode", False)(d))),
           "pissm": lambda d: fixed(float(_ll("pissm-lg", False)(d)) - float(_ll("pissm-lg-one-mode", False)(d)))}),
    Quote("paper-results/README.md", "π-SSM(LG) reaches {pissm} and the bounded π-SSM-GRU {gru}, still below LG's {lg}",
          MIXTURE, {"pissm": _ll("pissm-lg", False), "gru": _ll("pissm-gru-bounded", False),
                    "lg": _ll("lg", False)}),
    Quote("paper-results/README.md", "π-SSM-GRU with the bounded gain {gru}, π-SSM-LSTM with the bounded gain {lstm}, "
          "π-SSM(LG) (exact Kalman gain) {pissm_lg}", TABLE1_CORE,
          {"gru": _ll("pissm-gru-bounded"), "lstm": _ll("pissm-lstm-bounded"), "pissm_lg": _ll("pissm-lg")}),
    Quote("paper-results/README.md", "after a random step of 1e-4 in every parameter of the gain a median of {small} "
          "of the tracking start's test filters stay finite, after 1e-3 or Adam's 0.011 {large}",
          STABILITY.format("paper-core"), {"small": _survival("pissm-gru-tracking", 1e-4),
                                            "large": lambda d: "none" if max(_survival_row(d, "pissm-gru-tracking")[
                                                3:]) == 0 else "some"}),
    Quote("paper-results/README.md", "from the first step's factor, and for the scale-free gains with or without the "
          "bound, {all} at every size up to 0.011", STABILITY.format("paper-ablation"),
          {"all": lambda d: percent(min(min(_survival_row(d, m)) for m in ("pissm-gru", "pissm-gru-unbounded",
                                                                           "pissm-gru-bounded")))}),
    Quote("paper-results/README.md", "With the inputs normalised (a fixed tanh scaling set on the exact-gain paths) "
          "and the readout fitted as in paper-core, {trained} of {runs} runs train, every run non-finite after "
          "optimiser step {step}", STABILITY.format("paper-normalised"),
          {"trained": _trained, "runs": _runs, "step": _one_step}),
    Quote("paper-results/README.md", "survives random steps of 1e-3 ({mid} of test filters finite, median) but not of "
          "0.011 ({lr})", STABILITY.format("paper-normalised"),
          {"mid": _survival("pissm-gru-normalised", 1e-3), "lr": _survival("pissm-gru-normalised")}),
    Quote("paper-results/README.md", "the first 60 of 457 updates: LOF {lof}, LOF + softmax {lofsm}, ALF {alf})",
          "paper-results/belief.ringworld-returns/paper-core/results.json",
          {k: _learning_std(m) for k, m in (("lof", "lof"), ("lofsm", "lof-softmax"), ("alf", "alf"))}),
    Quote("paper-results/README.md", "so its {gap} nats below LG come from training", TABLE1_CORE,
          {"gap": lambda d: f"{float(_ll('lg', False)(d)) - float(_ll('pissm-lg', False)(d)):.2f}"}),
]


def _mamba_over_median(workload: str, implementation: str = "mamba") -> Callable[[Any], str]:
    """benchmarks/results/arena.json: a Mamba row's time over the median of the other layers' (not Mamba's rows)."""
    def read(d):
        rows = {r["implementation"]: r["seconds"] for r in d["rows"] if r["workload"].startswith(workload)}
        others = sorted(v for k, v in rows.items() if not k.startswith("mamba"))
        median = (others[(len(others) - 1) // 2] + others[len(others) // 2]) / 2
        return f"{rows[implementation] / median:.2f}"
    return read


_ARENA_STEP = "arena, {} sizes: 10 Adam steps ({})"
_LAX_SCAN = "mamba, lax.scan selective scan (before the native kernel)"
QUOTES.append(Quote(
    "docs/development.md", "median {quick_before} → {quick} times (quick sizes and flags), {defaults_before} → "
    "{defaults} (quick sizes, defaults), {paper_before} → {paper} (paper sizes);", "benchmarks/results/arena.json",
    {f"{name}{suffix}": _mamba_over_median(_ARENA_STEP.format(size, flags), row)
     for name, size, flags in (("quick", "quick", "quick profile's XLA flags"),
                               ("defaults", "quick", "XLA's default flags"), ("paper", "paper", "XLA's default flags"))
     for suffix, row in (("", "mamba"), ("_before", _LAX_SCAN))}))


@pytest.mark.parametrize("quote", QUOTES, ids=[f"{q.doc}:{q.text[:40]}" for q in QUOTES])
def test_documents_quote_their_result_files(quote):
    check_quote(quote)


def test_a_changed_result_fails_its_quote(tmp_path, monkeypatch):
    """The check is not vacuous: the same quote against a result file with another number fails."""
    doc = tmp_path / "doc.md"
    doc.write_text("it reflects at 87 % of hits\n")
    result = tmp_path / "r.json"
    result.write_text(json.dumps({"x": 0.8698}))
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    quote = Quote("doc.md", "reflects at {x} of hits", "r.json", {"x": lambda d: percent(d["x"])})
    check_quote(quote)
    result.write_text(json.dumps({"x": 0.63}))
    with pytest.raises(AssertionError, match="63 %"):
        check_quote(quote)

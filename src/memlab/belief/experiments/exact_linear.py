"""``belief.exact-linear-filter``: Theorem 4.4 and Corollary 4.5 against the LOF, and Example 1 observability.

For random deterministic systems (transient chains of several lengths, so nilpotent
indices ell > 2 are exercised) with random emissions, priors and an arbitrary w_0, the
exact linear filters are run on sampled observation sequences in float64 and compared
entry by entry with the LOF eq. (7) (``metrics.logit_agreement``): the largest absolute
difference over finite entries and the number of entries whose -inf pattern differs.

Three families: Theorem 4.4 with pi0 > 0 and E > 0 (the theorem's implicit setting),
Theorem 4.4 with zeros in E and pi0 (where a linear update cannot always be exact;
the filter flags those rows, and the unflagged rows must still match), and
Corollary 4.5 with action-dependent permutations and random actions. "Exact" means an
error of at most 1e-10 and no -inf mismatch.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from memlab import plots
from memlab.belief import lof
from memlab.belief.exact_linear import make_exact_linear_filter, make_exact_linear_filter_controlled
from memlab.belief.examples import EXAMPLE1_BAD_E, EXAMPLE1_E, EXAMPLE1_P
from memlab.belief.hmm import HMM, ControlledHMM, sample
from memlab.belief.metrics import LogitAgreement, logit_agreement, merge_agreement
from memlab.belief.random_models import random_columns, random_deterministic, random_permutation
from memlab.belief.structure import ObservabilityReport, check_observability
from memlab.checks import check_int, check_real
from memlab.files import summary_text
from memlab.runner import Experiment
from memlab.store import cell

PAPER = "linear-recurrent-memory-pomdp"
TOLERANCE = 1e-10  # float64: what "exact" allows
FAMILIES = {"positive": "Thm 4.4, π0 > 0, E > 0", "zeros": "Thm 4.4, π0 and E with zeros", "controlled": "Cor 4.5"}


@dataclasses.dataclass(frozen=True)
class ExactLinearConfig:
    seed: int = 0
    # (N, r, chain): states, transient states, length of the longest transient chain (ell >= chain)
    systems: tuple[tuple[int, int, int], ...] = ((4, 0, 1), (6, 2, 1), (8, 3, 3), (12, 5, 5), (12, 8, 8), (16, 6, 4))
    controlled: tuple[tuple[int, int], ...] = ((4, 2), (8, 3), (12, 4))  # (N, A) for Corollary 4.5
    num_models: int = 20
    num_sequences: int = 20
    num_steps: int = 200
    num_obs: int = 3
    zero_frac: float = 0.3  # fraction of zero entries in E and pi0 for the "zeros" family

    def validate(self):
        for N, r, chain in self.systems:
            if not (0 <= r < N and 1 <= chain <= max(r, 1)):
                raise ValueError(f"system (N={N}, r={r}, chain={chain}) needs 0 <= r < N and 1 <= chain <= max(r, 1)")
        for N, A in self.controlled:
            check_int("N of a controlled system", N)
            check_int("A of a controlled system", A)
        for name in ("num_models", "num_sequences", "num_steps", "num_obs"):
            check_int(name, getattr(self, name))
        check_real("zero_frac", self.zero_frac, 0.0, 1.0, open_high=True)


SUMMARY = summary_text(__package__, "exact_linear")


class RandomModels(NamedTuple):
    """What a cell reads: ``num_models`` random systems, each filtered on ``num_sequences`` sequences of
    ``num_steps`` observations of ``num_obs`` symbols; ``zero_frac`` of E's and pi0's entries zero where zeros are
    asked for."""

    num_models: int
    num_sequences: int
    num_steps: int
    num_obs: int
    zero_frac: float

    @classmethod
    def of(cls, cfg: ExactLinearConfig) -> RandomModels:
        return cls(cfg.num_models, cfg.num_sequences, cfg.num_steps, cfg.num_obs, cfg.zero_frac)


@jax.jit
def _filter_batch(filt, ys, actions=None):
    """An exact linear filter on a batch of sequences ys (B, K) (and actions (B, K) for Corollary 4.5)."""
    if actions is None:
        return jax.vmap(filt.forward)(ys)
    return jax.vmap(filt.forward)(ys, actions)


@jax.jit
def _lof_batch(model, ys, actions=None):
    """LOF logits (B, K, N) from log pi0 — the optimal logits w^o_k, whatever w_0 the linear filter used."""
    if actions is None:
        return jax.vmap(lambda y: lof(model, y).logits)(ys)
    return jax.vmap(lambda y, a: lof(model, y, actions=a).logits)(ys, actions)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Systems:
    """One family's random systems: the ``family`` (``FAMILIES``), N states, r transient states, the nilpotent index
    ``ell`` ('lowest–highest' over the systems)."""

    family: str
    N: int
    r: int
    ell: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class FilterCheck(LogitAgreement, Systems):
    """An exact linear filter against the LOF on one family's random systems (a row of exact_linear.csv): the
    :class:`Systems`, then the ``metrics.LogitAgreement`` over every system's sequences, LOF as the reference and the
    rows the filter flags as not exactly linear skipped (fields are collected from the last base to the first)."""


HEADER = [f.name for f in dataclasses.fields(FilterCheck)]  # exact_linear.csv: a column per field


@cell("belief.theorem-4.4", result=FilterCheck)
def _theorem44_cell(models: RandomModels, N: int, r: int, chain: int, zeros: bool, key) -> FilterCheck:
    """Theorem 4.4 on ``models.num_models`` random systems (N states, r transient, a chain of ``chain``)."""
    key_models, key_obs = jax.random.split(key)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key_models)).ravel())  # T, E, pi0, w0
    frac = models.zero_frac if zeros else 0.0
    stats, ells = [], []
    for m in range(models.num_models):
        T, _ = random_deterministic(rng, N, r, chain)
        E = random_columns(rng, models.num_obs, N, frac)
        pi0 = random_columns(rng, N, 1, frac)[:, 0]
        w0 = rng.normal(scale=3.0, size=N)
        hmm = HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
        filt = make_exact_linear_filter(T, E, pi0, w0)
        ys = sample(hmm, jax.random.fold_in(key_obs, m), models.num_steps, batch=models.num_sequences).observations
        out = _filter_batch(filt, ys)
        stats.append(logit_agreement(np.asarray(out.w), np.asarray(_lof_batch(hmm, ys)), np.asarray(out.inexact)))
        ells.append(filt.ell)
    return FilterCheck(family=FAMILIES["zeros" if zeros else "positive"], N=N, r=r, ell=f"{min(ells)}–{max(ells)}",
                       **dataclasses.asdict(merge_agreement(stats)))


@cell("belief.corollary-4.5", result=FilterCheck)
def _corollary45_cell(models: RandomModels, N: int, A: int, key) -> FilterCheck:
    """Corollary 4.5 on ``models.num_models`` random controlled systems (N states, A permutations), random actions."""
    key_models, key_obs = jax.random.split(key)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key_models)).ravel())  # T(a), E, pi0, w0
    stats = []
    for m in range(models.num_models):
        T = np.stack([random_permutation(rng, N) for _ in range(A)])
        E = random_columns(rng, models.num_obs, N, models.zero_frac)
        pi0 = random_columns(rng, N, 1, models.zero_frac)[:, 0]
        w0 = rng.normal(scale=3.0, size=N)
        model = ControlledHMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
        filt = make_exact_linear_filter_controlled(T, E, pi0, w0)
        key_actions, key_ys = jax.random.split(jax.random.fold_in(key_obs, m))
        actions = jax.random.randint(key_actions, (models.num_sequences, models.num_steps), 0, A)
        ys = sample(model, key_ys, models.num_steps, batch=models.num_sequences, actions=actions).observations
        out = _filter_batch(filt, ys, actions)
        stats.append(logit_agreement(np.asarray(out.w), np.asarray(_lof_batch(model, ys, actions)),
                                     np.asarray(out.inexact)))
    return FilterCheck(family=f"{FAMILIES['controlled']}, {A} actions", N=N, r=0, ell="1",
                       **dataclasses.asdict(merge_agreement(stats)))


def sweep_cells(cfg: ExactLinearConfig, run) -> dict:
    models = RandomModels.of(cfg)
    cells = {f"thm44_N{N}_r{r}_chain{c}_{z}": partial(_theorem44_cell, models, N, r, c, z == "zeros",
                                                      run.key_for("thm44", z, N, r, c))
             for z in ("positive", "zeros") for N, r, c in cfg.systems}
    return cells | {f"cor45_N{N}_A{A}": partial(_corollary45_cell, models, N, A, run.key_for("cor45", N, A))
                    for N, A in cfg.controlled}


def run_exact_linear(cfg: ExactLinearConfig, run) -> dict:
    """Cells of random systems (float64) -> exact_linear.csv, figure, claims, summary."""
    with jax.enable_x64(True):
        rows = list(run.sweep(sweep_cells(cfg, run), "exact linear filters vs LOF (float64)").values())
    stats = analyse(rows)
    _figures(stats, run)
    _claims(stats, run)
    run.write_summary(_summary(cfg, stats, run))
    return {"rows": rows, "example1_holds": stats.example1.holds, "example1_bad_reasons": stats.bad.reasons}


@dataclasses.dataclass(frozen=True)
class FamilyStats:
    """The cells of one family of systems (``FAMILIES``) taken together.

    **Fields:**
    - ``rows``: its cell records.
    - ``max_error``: float, the largest |w - w_LOF| over finite entries (0 without rows).
    - ``mismatches``: int, the entries whose -inf pattern differs from the LOF's.
    - ``flagged``: int, the rows the filter flags as not exactly linear.
    - ``max_ell``: int, the largest nilpotent index ell among its systems (0 without rows).
    - ``exact``: bool, every row within ``TOLERANCE`` and without mismatches.
    """

    rows: list[FilterCheck]
    max_error: float
    mismatches: int
    flagged: int
    max_ell: int
    exact: bool


@dataclasses.dataclass(frozen=True)
class ExactLinearStats:
    """Theorem 4.4 and Corollary 4.5 against the LOF, and Example 1 against Assumption 5.6.

    **Fields:**
    - ``rows``: list of every cell record, in sweep order.
    - ``positive``, ``zeros``, ``controlled``: :class:`FamilyStats` of the three families (Thm 4.4 with pi0, E > 0;
      Thm 4.4 with zeros in pi0 and E; Cor 4.5).
    - ``example1``: ``structure.ObservabilityReport`` of Example 1 (App. A.1).
    - ``bad``: the same for its variant with x2, x4 also alike (it fails).
    - ``x1_x3_alike``: bool, whether x1 and x3 of Example 1 have identical emission columns.
    """

    rows: list[FilterCheck]
    positive: FamilyStats
    zeros: FamilyStats
    controlled: FamilyStats
    example1: ObservabilityReport
    bad: ObservabilityReport
    x1_x3_alike: bool


def _family(rows: list[FilterCheck], name: str) -> FamilyStats:
    """The rows of the family whose description (``FAMILIES``) is ``name`` -> their :class:`FamilyStats`."""
    sel = [row for row in rows if row.family.startswith(name)]
    return FamilyStats(
        rows=sel, max_error=max((row.max_abs_error for row in sel), default=0.0),
        mismatches=sum(row.pattern_mismatches for row in sel), flagged=sum(row.flagged_rows for row in sel),
        max_ell=max((int(row.ell.split("–")[-1]) for row in sel), default=0),
        exact=all(row.max_abs_error <= TOLERANCE and row.pattern_mismatches == 0 for row in sel))


def analyse(rows: list[FilterCheck]) -> ExactLinearStats:
    """Rows (one cell record each) -> per family (``FAMILIES``) its :class:`FamilyStats`; Example 1 and its
    failing variant checked against Assumption 5.6."""
    families = {kind: _family(rows, name) for kind, name in FAMILIES.items()}  # FAMILIES' keys are field names
    return ExactLinearStats(rows=rows, **families,
                               example1=check_observability(EXAMPLE1_E, EXAMPLE1_P),
                               bad=check_observability(EXAMPLE1_BAD_E, EXAMPLE1_P),
                               x1_x3_alike=bool(np.array_equal(EXAMPLE1_E[:, 0], EXAMPLE1_E[:, 2])))


def _figures(stats: ExactLinearStats, run) -> None:
    rows = stats.rows
    color = {FAMILIES["positive"]: "tab:blue", FAMILIES["zeros"]: "tab:orange"}
    labels = [f"{row.family.split(',')[0]} N={row.N} r={row.r}"
              + (" (zeros)" if row.family == FAMILIES["zeros"] else "") for row in rows]
    fig, ax = plots.figure(width=7.0, height=3.4)
    ax.bar(range(len(rows)), [max(row.max_abs_error, 1e-18) for row in rows],
           color=[color.get(row.family, "tab:green") for row in rows])
    ax.axhline(TOLERANCE, color="r", ls="--", lw=1, label=f"tolerance {TOLERANCE:g}")
    ax.set(yscale="log", ylabel="max |w − w_LOF| (finite entries)", ylim=(1e-18, 1e-6),
           title="Exact linear filters vs LOF, float64 (blue: π0, E > 0; orange: with zeros; green: Cor. 4.5)")
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=6)
    ax.legend(loc="upper left")
    run.save_figure(fig, "exact_linear.png")


def _claims(stats: ExactLinearStats, run) -> None:
    pos, cor, ex1 = stats.positive, stats.controlled, stats.example1
    run.claim("thm44-exact", "Theorem 4.4: the linear filter eq. (14) reproduces the optimal logits for any w0",
              "Thm 4.4", f"max error {pos.max_error:.1e}, {pos.mismatches} −∞ mismatches, {pos.flagged} "
              f"flagged rows, ell up to {pos.max_ell}", bool(pos.exact and pos.flagged == 0))
    run.claim("cor45-exact", "Corollary 4.5: the time-varying filter eq. (18) reproduces the optimal logits",
              "Cor 4.5", f"max error {cor.max_error:.1e}, {cor.mismatches} −∞ mismatches", bool(cor.exact))
    run.claim("example1-observable", "Example 1 satisfies Assumption 5.6 although x1 and x3 emit alike",
              "App. A.1, eq. (50)-(51)", f"5.6 holds: {ex1.holds}; x1, x3 alike: {stats.x1_x3_alike}",
              bool(ex1.holds and stats.x1_x3_alike))


def _summary(cfg: ExactLinearConfig, stats: ExactLinearStats, run) -> str:
    table = run.save_table("exact_linear.csv", HEADER, [[getattr(row, h) for h in HEADER] for row in stats.rows],
                           {"max_abs_error": ".1e"})
    return SUMMARY.format(**dataclasses.asdict(cfg), table=table, zeros_exact=("NO", "yes")[stats.zeros.exact],
                          example1_holds=stats.example1.holds, example1_M=stats.example1.M,
                          example1_bad="; ".join(stats.bad.reasons))


EXPERIMENTS = [
    Experiment(
        "belief.exact-linear-filter", "Thm 4.4, Cor 4.5, App. A.1", PAPER,
        "exact linear filters vs LOF on random deterministic systems (float64); Example 1 observability",
        {"paper": ExactLinearConfig(num_models=50, num_sequences=50, num_steps=1000),
         "quick": ExactLinearConfig(),
         "tiny": ExactLinearConfig(systems=((4, 0, 1), (6, 3, 3)), controlled=((4, 2),), num_models=2,
                                   num_sequences=3, num_steps=20)},
        run_exact_linear),
]

"""Runs of Algorithm 1 as ``ictd.pretrain`` and ``ictd.mask-relaxation`` both use them, and the numbers read from them.

``train_seed`` is one run of ``pretrain.make_train`` plus its two checkpoints and held-out errors, as a JSON-able dict
(a sweep cell); ``evaluate_references`` the held-out errors of theta*, -theta* and the zero block.
``setting_from_cells`` stacks the cells of one training config into a :class:`Setting` (arrays with a leading seed
axis), ``make_view`` picks the paper's or the mirrored emergence scores of a setting (training converges to the
mirror image of theta*, see ``pretrain``), and plain NumPy diagnostics read them: the sign-agnostic diagonal share of
A_feat, the value row and its sign pattern, trailing and truncated seed means, the d_t bins of Fig. 3(b) and the
numbers behind its claims.

Checkpoints: both are tracked exactly inside ``make_train``'s scan -- "best" by the paper's rule max min(V_em, A_em),
"mirror" by the mirrored rule max min(V_em(-V), A_em(-A)), first step on ties. A rule whose best score is 0 at every
step selects nothing (the paper's "first step on ties" would return the initial noise), so the end of training then
stands in for its checkpoint. Held-out errors use ``pretrain.evaluate`` on ``eval_tasks`` fresh tasks (the same tasks
for every parameter set) at the rho the training ends with.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from memlab.ictd.pretrain import Params, PretrainConfig, evaluate, make_train, rho_schedule
from memlab.ictd.transformer import theta_star
from memlab.store import cell

__all__ = ["FORMS", "TINY_TRAIN", "TRACE_FIELDS", "AlongDt", "Binned", "Checkpoint", "HeldOut", "Setting",
           "SignMajority", "Traces", "View", "binned_by_dt", "diagonal_share", "emergence_along_dt",
           "evaluate_references", "first_last_dt", "majority_pattern", "make_view", "setting_cells",
           "setting_from_cells", "sign_pattern", "train_seed", "trailing_mean", "truncated_mean_sem", "value_row"]

TRACE_FIELDS = ("V_em", "A_em", "V_em_neg", "A_em_neg", "d_t", "abs_delta", "loss")
FORMS = {"paper": ("V_em", "A_em"), "mirrored": ("V_em_neg", "A_em_neg")}  # score form -> trace fields
TINY_TRAIN = dict(m=16, n=5, batch_size=16, minibatches_per_epoch=2, num_epochs=30, num_seeds=2)  # tiny profiles


@functools.lru_cache(maxsize=32)
def _jitted_train(config: PretrainConfig):
    return jax.jit(make_train(config))


@functools.lru_cache(maxsize=8)
def _jitted_evaluate(config: PretrainConfig, num_tasks: int):
    return jax.jit(lambda params, key, rho: evaluate(params, config, key, num_tasks, rho=rho))


def _errors(config: PretrainConfig, params: Params, eval_key, eval_tasks: int) -> dict:
    e = _jitted_evaluate(config, eval_tasks)(params, eval_key, rho_schedule(config, config.num_steps - 1))
    return {"abs_td_error": float(e.abs_td_error), "abs_value_error": float(e.abs_value_error)}


@cell("ictd.pretrain-seed")
def train_seed(config: PretrainConfig, key, eval_key, eval_tasks: int) -> dict:
    """One run of Algorithm 1 (``make_train``) with its two checkpoints and held-out errors, as a JSON-able dict.

    Keys: trace (TRACE_FIELDS -> (T,)); best_step/best_score and mirror_step/mirror_score after the stand-in of the
    module docstring; scan_best_step (make_train's own pick); params {final, best, mirror} -> {V, A} (d+3, d+3);
    eval {same names} -> {abs_td_error, abs_value_error} at the rho training ends with.
    """
    result = jax.block_until_ready(_jitted_train(config)(key))
    last = config.num_steps - 1

    def pick(ckpt):  # a rule whose best score is 0 selects nothing: the end of training stands in
        score = float(ckpt.score)
        return (int(ckpt.step), score, ckpt.params) if score > 0 else (last, score, result.params)

    best_step, best_score, best = pick(result.best)
    mirror_step, mirror_score, mirror = pick(result.best_mirrored)
    params = {"final": result.params, "best": best, "mirror": mirror}
    return {
        "trace": {name: np.asarray(getattr(result.trace, name)) for name in TRACE_FIELDS},
        "best_step": best_step, "best_score": best_score, "scan_best_step": int(result.best.step),
        "mirror_step": mirror_step, "mirror_score": mirror_score,
        "params": {name: {"V": np.asarray(p.V), "A": np.asarray(p.A)} for name, p in params.items()},
        "eval": {name: _errors(config, p, eval_key, eval_tasks) for name, p in params.items()},
    }


@cell("ictd.pretrain-references")
def evaluate_references(config: PretrainConfig, eval_key, eval_tasks: int) -> dict:
    """Held-out errors of theta* (eq. 15), its mirror -theta* and the zero block, on the learned runs' tasks."""
    V, A = theta_star(config.d)
    points = {"theta*": Params(V, A), "-theta*": Params(-V, -A), "zero": Params(jnp.zeros_like(V), jnp.zeros_like(A))}
    return {name: _errors(config, p, eval_key, eval_tasks) for name, p in points.items()}


# --------------------------------------------------------------------------- the seeds of one training config


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """Held-out errors (``pretrain.evaluate``): mean |TD error| and mean |value error|, (S,) per seed for a learned
    checkpoint, floats for a reference parameter set."""

    abs_td_error: np.ndarray | float
    abs_value_error: np.ndarray | float


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of every seed: step (S,) the training step; score (S,) the value of its rule (None for the end
    of training, which no rule picks); V, A (S, d+3, d+3) the block; heldout: ``HeldOut`` (S,)."""

    step: np.ndarray
    score: np.ndarray | None
    V: np.ndarray
    A: np.ndarray
    heldout: HeldOut


@dataclasses.dataclass(frozen=True)
class Traces:
    """Per seed and training step (S, T), as ``make_train`` records them: the paper's emergence scores V_em, A_em
    (eq. 109-111), the mirrored V_em(-V), A_em(-A), the kernel diagonal mean d_t (eq. 34, at rho = 0), the mini-batch's
    mean |delta| and loss."""

    V_em: np.ndarray
    A_em: np.ndarray
    V_em_neg: np.ndarray
    A_em_neg: np.ndarray
    d_t: np.ndarray
    abs_delta: np.ndarray
    loss: np.ndarray


@dataclasses.dataclass(frozen=True)
class Setting:
    """All S seeds of one training config, stacked: trace ``Traces``; final, best (paper rule), mirror (mirrored
    rule): ``Checkpoint``; scan_best_step (S,) make_train's own paper-rule pick (first step on ties, also when the
    score is 0); references name -> ``HeldOut`` of theta*, -theta*, the zero block; seconds (S,) compute time per seed
    cell (NaN if unknown)."""

    label: str
    config: PretrainConfig
    trace: Traces
    final: Checkpoint
    best: Checkpoint
    mirror: Checkpoint
    scan_best_step: np.ndarray
    references: dict[str, HeldOut]
    seconds: np.ndarray

    def checkpoints(self) -> dict[str, Checkpoint]:
        """name -> checkpoint, in the order of the tables: final, best, mirror."""
        return {"final": self.final, "best": self.best, "mirror": self.mirror}

    def of_form(self, form: str) -> Checkpoint:
        """The checkpoint chosen by the rule of score form "paper" (best) or "mirrored" (mirror)."""
        return self.best if form == "paper" else self.mirror


def _checkpoint(records: list[dict], name: str, step, score) -> Checkpoint:
    """Checkpoint ``name`` of every seed's ``train_seed`` record (a cell-record read)."""
    stack = lambda get: np.array([get(r) for r in records])  # noqa: E731
    return Checkpoint(step, score, stack(lambda r: r["params"][name]["V"]), stack(lambda r: r["params"][name]["A"]),
                      HeldOut(stack(lambda r: r["eval"][name]["abs_td_error"]),
                              stack(lambda r: r["eval"][name]["abs_value_error"])))


def stack_setting(label: str, config: PretrainConfig, records: list[dict], references: dict, seconds) -> Setting:
    """A Setting from the ``train_seed`` records of every seed (in seed order) and the references record."""
    stack = lambda key: np.array([r[key] for r in records])  # noqa: E731
    return Setting(
        label=label, config=config,
        trace=Traces(**{f: np.array([r["trace"][f] for r in records]) for f in TRACE_FIELDS}),
        final=_checkpoint(records, "final", np.full(len(records), config.num_steps - 1), None),
        best=_checkpoint(records, "best", stack("best_step"), stack("best_score")),
        mirror=_checkpoint(records, "mirror", stack("mirror_step"), stack("mirror_score")),
        scan_best_step=stack("scan_best_step"), references={k: HeldOut(**v) for k, v in references.items()},
        seconds=np.asarray(seconds, float))


@dataclasses.dataclass(frozen=True)
class View:
    """One score form of one setting, as the figures use it. Arrays (S, T); stop (S,) = last plotted step per seed."""

    title: str
    V_em: np.ndarray
    A_em: np.ndarray
    d_t: np.ndarray
    stop: np.ndarray
    n: int  # context length (uniform attention has d_t = 1/n)


def setting_cells(config: PretrainConfig, slug: str, seed_keys, eval_key, eval_tasks: int) -> dict:
    """Sweep cells of one training config: ``<slug>-seed=<s>`` (``train_seed`` with ``seed_keys[s]``) for every seed
    and ``<slug>-references`` (``evaluate_references``); every cell evaluates on the tasks of ``eval_key``."""
    cells = {f"{slug}-seed={s}": functools.partial(train_seed, config, seed_keys[s], eval_key, eval_tasks)
             for s in range(config.num_seeds)}
    cells[f"{slug}-references"] = functools.partial(evaluate_references, config, eval_key, eval_tasks)
    return cells


def setting_from_cells(label: str, config: PretrainConfig, slug: str, results: Mapping,
                       seconds: Mapping | None = None) -> Setting:
    """The Setting of the cells of ``setting_cells(config, slug, ...)`` from a sweep's results (``seconds``: the
    compute time of each cell by name, e.g. ``Run.cells.seconds``; missing ones count as NaN)."""
    names = [f"{slug}-seed={s}" for s in range(config.num_seeds)]
    times = [(seconds or {}).get(name) for name in names]
    return stack_setting(label, config, [results[name] for name in names], results[f"{slug}-references"],
                         [np.nan if t is None else t for t in times])


def make_view(setting: Setting, form: str) -> View:
    """The paper's or the mirrored scores of ``setting``; Fig. 5 truncation at that form's checkpoint (the end of
    training for a seed whose best score is 0, see ``train_seed``)."""
    v_name, a_name = FORMS[form]
    what = "paper scores V_em, A_em" if form == "paper" else "mirrored scores V_em(−V), A_em(−A)"
    return View(f"{setting.label}: {what}", getattr(setting.trace, v_name), getattr(setting.trace, a_name),
                setting.trace.d_t, setting.of_form(form).step, setting.config.n)


def first_last_dt(setting: Setting, window: int) -> tuple[float, float]:
    """Seed-mean d_t over the first ``window`` steps and over the last 10 % of steps."""
    d_t = setting.trace.d_t
    return float(d_t[:, :window].mean()), float(d_t[:, -max(1, d_t.shape[1] // 10):].mean())


# --------------------------------------------------------------------------- diagnostics (numbers behind the figures)


def diagonal_share(A: np.ndarray) -> np.ndarray:
    """A_diag of App. F.4.2 (sign-agnostic): share of the column-normalised |A_feat| on the diagonal.

    A: (..., d+3, d+3) -> (...). Zero columns count as zero (as in eq. (111)); an all-zero A_feat gives 0.
    """
    d = A.shape[-1] - 3
    feat = np.abs(A[..., :d, :d])
    norms = np.linalg.norm(feat, axis=-2, keepdims=True)
    hat = np.divide(feat, norms, out=np.zeros_like(feat, dtype=float), where=norms > 0)
    total = hat.sum(axis=(-2, -1))
    return np.divide(np.trace(hat, axis1=-2, axis2=-1), total, out=np.zeros_like(total), where=total > 0)


def value_row(V: np.ndarray) -> np.ndarray:
    """(p_r, p_gamma v', p_v) = V[d+2, d:d+3] (the paper's (V)_{d+3, d:d+3}); V (..., d+3, d+3) -> (..., 3)."""
    d = V.shape[-1] - 3
    return V[..., d + 2, d : d + 3]


def sign_pattern(row: np.ndarray) -> str:
    """'(+, +, -)' style string of the signs of a (3,) row (0 shows as 0)."""
    return "(" + ", ".join({1.0: "+", -1.0: "−", 0.0: "0"}[float(np.sign(x))] for x in row) + ")"


class SignMajority(NamedTuple):
    """The most common sign pattern of the seeds' value rows and how many seeds have it."""

    pattern: str
    seeds: int


def majority_pattern(rows: np.ndarray) -> SignMajority:
    """The most common sign pattern of (S, 3) value rows and how many seeds have it."""
    patterns = sorted(sign_pattern(r) for r in rows)
    top = max(patterns, key=patterns.count)
    return SignMajority(top, patterns.count(top))


def trailing_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing average over the last ``window`` steps (fewer at the start) along the last axis."""
    c = np.cumsum(np.asarray(x, float), axis=-1)
    shifted = np.concatenate([np.zeros(c.shape[:-1] + (window,)), c], axis=-1)[..., : c.shape[-1]]  # c[t - window]
    count = np.minimum(np.arange(1, c.shape[-1] + 1), window)
    return (c - shifted) / count


def truncated_mean_sem(x: np.ndarray, stop: np.ndarray):
    """Mean and s.e.m. over seeds of x (S, T) truncated at each seed's ``stop`` (inclusive).

    Returns (mean, sem, count), each (max(stop) + 1,): at step t only seeds with stop >= t count; sem = 0 for one seed.
    """
    T = int(np.max(stop)) + 1
    alive = np.arange(T)[None, :] <= np.asarray(stop)[:, None]  # (S, T)
    vals = np.where(alive, x[:, :T], np.nan)
    count = alive.sum(0)
    mean = np.nanmean(vals, 0)
    sd = np.sqrt(np.nanmean((vals - mean) ** 2, 0) * count / np.maximum(count - 1, 1))
    return mean, np.where(count > 1, sd / np.sqrt(count), 0.0), count


@dataclasses.dataclass(frozen=True)
class Binned:
    """One score (S, T) in B equal-width d_t bins over all (S, T) points: edges (B+1,), centers (B,), count (B,)
    points per bin; mean (B,) the pooled mean of the score; q25, q75 (B,) the quartiles of the per-seed bin means.
    NaN in empty bins."""

    edges: np.ndarray
    centers: np.ndarray
    count: np.ndarray
    mean: np.ndarray
    q25: np.ndarray
    q75: np.ndarray


def binned_by_dt(d_t: np.ndarray, score: np.ndarray, num_bins: int) -> Binned:
    """Fig. 3(b): ``score`` (S, T) in ``num_bins`` equal-width bins of d_t (S, T), the last edge inclusive."""
    lo, hi = float(np.min(d_t)), float(np.max(d_t))
    hi = hi if hi > lo else lo + 1e-6
    edges = np.linspace(lo, hi, num_bins + 1)
    idx = np.clip(np.searchsorted(edges, d_t, side="right") - 1, 0, num_bins - 1)  # (S, T), last edge inclusive
    onehot = idx[..., None] == np.arange(num_bins)  # (S, T, B)
    count_seed = onehot.sum(1)  # (S, B)
    count = count_seed.sum(0)
    total_seed = np.einsum("st,stb->sb", np.asarray(score, float), onehot)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total_seed.sum(0) / count
        per_seed = np.where(count_seed > 0, total_seed / np.maximum(count_seed, 1), np.nan)
    occupied = count > 0
    q = np.full((2, num_bins), np.nan)
    q[:, occupied] = np.nanpercentile(per_seed[:, occupied], [25, 75], axis=0)
    return Binned(edges, 0.5 * (edges[1:] + edges[:-1]), count, mean, *q)


@dataclasses.dataclass(frozen=True)
class AlongDt:
    """The numbers behind the Fig. 3(b) claims, with the occupied d_t bins ordered from the start-of-training d_t
    toward its end: A_high_fraction, the fraction of bins with mean A_em >= ``high``; V_first_third, the pooled V_em
    over the first third of the bins; V_last_third_max, the largest binned V_em over the last third; direction +1 / -1,
    the way d_t moved."""

    A_high_fraction: float
    V_first_third: float
    V_last_third_max: float
    direction: float


def emergence_along_dt(view: View, num_bins: int, d_start: float, d_end: float, high: float = 0.5) -> AlongDt:
    """``AlongDt`` of ``view`` in ``num_bins`` bins, d_t moving from ``d_start`` to ``d_end``."""
    V, A = binned_by_dt(view.d_t, view.V_em, num_bins), binned_by_dt(view.d_t, view.A_em, num_bins)
    occupied = V.count > 0
    direction = 1.0 if d_end >= d_start else -1.0
    order = [int(i) for i in np.argsort(direction * V.centers) if occupied[i]]
    third = max(1, len(order) // 3)
    first, last = order[:third], order[-third:]
    return AlongDt(A_high_fraction=float(np.mean(A.mean[occupied] >= high)),
                   V_first_third=float(np.sum((V.mean * V.count)[first]) / np.sum(V.count[first])),
                   V_last_third_max=float(np.max(V.mean[last])), direction=direction)

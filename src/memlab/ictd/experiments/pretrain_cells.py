"""Runs of Algorithm 1 as the pretraining experiments use them: one training seed per cell, stacked per setting.

``train_seed`` is one run of ``pretrain.make_train`` plus its two checkpoints and held-out errors, as a JSON-able dict
(a sweep cell); ``evaluate_references`` the held-out errors of theta*, -theta* and the zero block. ``stack_setting``
stacks the cells of one training config into a :class:`Setting` (arrays with a leading seed axis), ``make_view`` picks
the paper's or the mirrored emergence scores of a setting (see ``pretrain``: training converges to the mirror image of
theta*), and ``setting_tables`` / ``setting_results`` turn settings into CSV rows and results.json numbers.

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

import jax
import jax.numpy as jnp
import numpy as np

from memlab.ictd.experiments.pretrain_figures import View, binned_by_dt, diagonal_share, value_row
from memlab.ictd.pretrain import Params, PretrainConfig, evaluate, make_train, rho_schedule
from memlab.ictd.transformer import theta_star
from memlab.store import cell

__all__ = ["CHECKPOINT_HEADER", "FORMS", "TRACE_FIELDS", "Setting", "evaluate_references", "first_last_dt",
           "make_view", "setting_cells", "setting_from_cells", "setting_results", "setting_tables", "stack_setting",
           "train_seed"]

TRACE_FIELDS = ("V_em", "A_em", "V_em_neg", "A_em_neg", "d_t", "abs_delta", "loss")
FORMS = {"paper": ("V_em", "A_em"), "mirrored": ("V_em_neg", "A_em_neg")}  # score form -> trace fields
CHECKPOINTS = ("final", "best", "mirror")
METRICS = ("abs_td_error", "abs_value_error")
CHECKPOINT_HEADER = ["setting", "seed", "checkpoint", "step", "V_em", "A_em", "V_em_neg", "A_em_neg", "p_r",
                     "p_gamma_v", "p_v", "A_diag", "A_feat_diag_mean", "abs_td_error", "abs_value_error"]


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


@dataclasses.dataclass
class Setting:
    """All seeds of one training config, stacked: traces (S, T), steps/scores (S,), params name -> (V, A) (S, D, D),
    evals name -> metric -> (S,), references name -> metric -> float, seconds (S,) compute time per seed cell."""

    label: str
    config: PretrainConfig
    trace: dict
    best_step: np.ndarray
    best_score: np.ndarray
    mirror_step: np.ndarray
    mirror_score: np.ndarray
    scan_best_step: np.ndarray  # make_train's own paper-rule pick (first step on ties, also when the score is 0)
    params: dict
    evals: dict
    references: dict
    seconds: np.ndarray


def stack_setting(label: str, config: PretrainConfig, cells: list[dict], references: dict, seconds) -> Setting:
    """A Setting from the ``train_seed`` records of every seed (in seed order) and the references record."""
    stack = lambda get: np.array([get(c) for c in cells])  # noqa: E731
    return Setting(
        label=label, config=config,
        trace={f: stack(lambda c, f=f: c["trace"][f]) for f in TRACE_FIELDS},
        best_step=stack(lambda c: c["best_step"]), best_score=stack(lambda c: c["best_score"]),
        mirror_step=stack(lambda c: c["mirror_step"]), mirror_score=stack(lambda c: c["mirror_score"]),
        scan_best_step=stack(lambda c: c["scan_best_step"]),
        params={n: (stack(lambda c, n=n: c["params"][n]["V"]), stack(lambda c, n=n: c["params"][n]["A"]))
                for n in CHECKPOINTS},
        evals={n: {m: stack(lambda c, n=n, m=m: c["eval"][n][m]) for m in METRICS} for n in CHECKPOINTS},
        references=references, seconds=np.asarray(seconds, float))


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
    compute time of each cell by name, e.g. ``Run.cell_seconds``; missing ones count as NaN)."""
    names = [f"{slug}-seed={s}" for s in range(config.num_seeds)]
    times = [(seconds or {}).get(name) for name in names]
    return stack_setting(label, config, [results[name] for name in names], results[f"{slug}-references"],
                         [np.nan if t is None else t for t in times])


def make_view(setting: Setting, form: str) -> View:
    """The paper's or the mirrored scores of ``setting``; Fig. 5 truncation at that form's checkpoint (the end of
    training for a seed whose best score is 0, see ``train_seed``)."""
    v_name, a_name = FORMS[form]
    stop = setting.best_step if form == "paper" else setting.mirror_step
    what = "paper scores V_em, A_em" if form == "paper" else "mirrored scores V_em(−V), A_em(−A)"
    return View(f"{setting.label}: {what}", setting.trace[v_name], setting.trace[a_name], setting.trace["d_t"],
                stop, setting.config.n)


def first_last_dt(setting: Setting, window: int) -> tuple[float, float]:
    """Seed-mean d_t over the first ``window`` steps and over the last 10 % of steps."""
    d_t = setting.trace["d_t"]
    return float(d_t[:, :window].mean()), float(d_t[:, -max(1, d_t.shape[1] // 10):].mean())


def checkpoint_rows(setting: Setting) -> list[tuple]:
    """Per seed and checkpoint (final, best = paper rule, mirror = mirrored rule): step, the four scores, the value
    row, A_diag, mean diagonal of A_feat and the held-out errors (columns of CHECKPOINT_HEADER)."""
    steps = {"final": np.full(setting.best_step.shape, setting.config.num_steps - 1),
             "best": setting.best_step, "mirror": setting.mirror_step}
    d = setting.config.d
    rows = []
    for name, step in steps.items():
        V, A = setting.params[name]
        for s in range(step.size):
            t = int(step[s])
            scores = [setting.trace[f][s, t] for f in ("V_em", "A_em", "V_em_neg", "A_em_neg")]
            rows.append((setting.label, s, name, t, *scores, *value_row(V[s]), diagonal_share(A[s]),
                         float(np.mean(np.diag(A[s][:d, :d]))), setting.evals[name]["abs_td_error"][s],
                         setting.evals[name]["abs_value_error"][s]))
    return rows


def setting_tables(settings: list[Setting], views: list[View], num_bins: int) -> dict[str, tuple[list, list]]:
    """{csv name: (header, rows)}: trace_mean.csv (every step, mean and s.e.m. over seeds), trace_per_seed.csv (epoch
    ends), checkpoints.csv, heldout.csv and emergence_vs_dt.csv (the Fig. 3(b) / 6(c,d) bins of every view)."""
    mean_rows, seed_rows, ck_rows, eval_rows = [], [], [], []
    for st in settings:
        S, T = st.trace["d_t"].shape
        rho = np.asarray(jax.vmap(lambda t, c=st.config: rho_schedule(c, t))(jnp.arange(T)))
        stats = {f: (x.mean(0), x.std(0, ddof=1) / np.sqrt(S) if S > 1 else np.zeros(T)) for f, x in st.trace.items()}
        mean_rows += [(st.label, t, rho[t], *(v[t] for f in TRACE_FIELDS for v in stats[f])) for t in range(T)]
        M = st.config.minibatches_per_epoch
        seed_rows += [(st.label, s, t, rho[t], *(st.trace[f][s, t] for f in TRACE_FIELDS))
                      for s in range(S) for t in range(M - 1, T, M)]
        ck_rows += checkpoint_rows(st)
        eval_rows += [(st.label, f"learned ({name})", S, *(x for m in METRICS for x in (e[m].mean(), e[m].std())))
                      for name, e in st.evals.items()]
        eval_rows += [(st.label, name, 1, e["abs_td_error"], 0.0, e["abs_value_error"], 0.0)
                      for name, e in st.references.items()]
    bin_rows = []
    for view in views:
        b = binned_by_dt(view.d_t, {"V": view.V_em, "A": view.A_em}, num_bins)
        bin_rows += [(view.title, i, b["edges"][i], b["edges"][i + 1], b["count"][i],
                      *(b[f"{n}_{k}"][i] for n in ("V", "A") for k in ("mean", "q25", "q75"))) for i in range(num_bins)]
    return {
        "trace_mean.csv": (["setting", "step", "rho", *(f"{f}_{k}" for f in TRACE_FIELDS for k in ("mean", "sem"))],
                           mean_rows),
        "trace_per_seed.csv": (["setting", "seed", "step", "rho", *TRACE_FIELDS], seed_rows),
        "checkpoints.csv": (CHECKPOINT_HEADER, ck_rows),
        "heldout.csv": (["setting", "params", "num_seeds", "abs_td_error_mean", "abs_td_error_sd",
                         "abs_value_error_mean", "abs_value_error_sd"], eval_rows),
        "emergence_vs_dt.csv": (["view", "bin", "d_lo", "d_hi", "count", "V_mean", "V_q25", "V_q75", "A_mean", "A_q25",
                                 "A_q75"], bin_rows),
    }


def setting_results(setting: Setting) -> dict:
    """The per-setting numbers of results.json: checkpoints, final value rows and A_diag, held-out |δ|."""
    learned = {f"learned_{k}": v["abs_td_error"] for k, v in setting.evals.items()}
    return {"best_step": setting.best_step, "best_score": setting.best_score, "scan_best_step": setting.scan_best_step,
            "mirror_step": setting.mirror_step, "mirror_score": setting.mirror_score,
            "final_value_row": value_row(setting.params["final"][0]),
            "A_diag_final": diagonal_share(setting.params["final"][1]),
            "heldout_abs_td_error": {**learned, **{k: v["abs_td_error"] for k, v in setting.references.items()}}}

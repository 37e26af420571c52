"""The CSV tables and results.json numbers of trained settings (:class:`~.setting.Setting`), as ``ictd.pretrain`` and
``ictd.mask-relaxation`` both write them: traces (mean and per seed), checkpoints, held-out errors and the d_t bins
of every view."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from memlab.ictd.experiments.diagnostics import binned_by_dt, diagonal_share, value_row
from memlab.ictd.experiments.setting import TRACE_FIELDS, Setting, View
from memlab.ictd.pretrain import rho_schedule

__all__ = ["CHECKPOINT_HEADER", "checkpoint_rows", "setting_results", "setting_tables"]

CHECKPOINT_HEADER = ["setting", "seed", "checkpoint", "step", "V_em", "A_em", "V_em_neg", "A_em_neg", "p_r",
                     "p_gamma_v", "p_v", "A_diag", "A_feat_diag_mean", "abs_td_error", "abs_value_error"]


def checkpoint_rows(setting: Setting) -> list[tuple]:
    """Per seed and checkpoint (final, best = paper rule, mirror = mirrored rule): step, the four scores, the value
    row, A_diag, mean diagonal of A_feat and the held-out errors (columns of CHECKPOINT_HEADER)."""
    d, trace = setting.config.d, setting.trace
    rows = []
    for name, ck in setting.checkpoints().items():
        for s in range(ck.step.size):
            t = int(ck.step[s])
            scores = [trace.V_em[s, t], trace.A_em[s, t], trace.V_em_neg[s, t], trace.A_em_neg[s, t]]
            rows.append((setting.label, s, name, t, *scores, *value_row(ck.V[s]), diagonal_share(ck.A[s]),
                         float(np.mean(np.diag(ck.A[s][:d, :d]))), ck.heldout.abs_td_error[s],
                         ck.heldout.abs_value_error[s]))
    return rows


def setting_tables(settings: list[Setting], views: list[View], num_bins: int) -> dict[str, tuple[list, list]]:
    """{csv name: (header, rows)}: trace_mean.csv (every step, mean and s.e.m. over seeds), trace_per_seed.csv (epoch
    ends), checkpoints.csv, heldout.csv and emergence_vs_dt.csv (the Fig. 3(b) / 6(c,d) bins of every view)."""
    mean_rows, seed_rows, ck_rows, eval_rows = [], [], [], []
    for st in settings:
        S, T = st.trace.d_t.shape
        rho = np.asarray(jax.vmap(lambda t, c=st.config: rho_schedule(c, t))(jnp.arange(T)))
        trace = {f: getattr(st.trace, f) for f in TRACE_FIELDS}
        stats = {f: (x.mean(0), x.std(0, ddof=1) / np.sqrt(S) if S > 1 else np.zeros(T)) for f, x in trace.items()}
        mean_rows += [(st.label, t, rho[t], *(v[t] for f in TRACE_FIELDS for v in stats[f])) for t in range(T)]
        M = st.config.minibatches_per_epoch
        seed_rows += [(st.label, s, t, rho[t], *(trace[f][s, t] for f in TRACE_FIELDS))
                      for s in range(S) for t in range(M - 1, T, M)]
        ck_rows += checkpoint_rows(st)
        eval_rows += [(st.label, f"learned ({name})", S, e.abs_td_error.mean(), e.abs_td_error.std(),
                       e.abs_value_error.mean(), e.abs_value_error.std())
                      for name, ck in st.checkpoints().items() for e in [ck.heldout]]
        eval_rows += [(st.label, name, 1, e.abs_td_error, 0.0, e.abs_value_error, 0.0)
                      for name, e in st.references.items()]
    bin_rows = []
    for view in views:
        V, A = binned_by_dt(view.d_t, view.V_em, num_bins), binned_by_dt(view.d_t, view.A_em, num_bins)
        bin_rows += [(view.title, i, V.edges[i], V.edges[i + 1], V.count[i],
                      *(x[i] for b in (V, A) for x in (b.mean, b.q25, b.q75))) for i in range(num_bins)]
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
    learned = {f"learned_{k}": ck.heldout.abs_td_error for k, ck in setting.checkpoints().items()}
    return {"best_step": setting.best.step, "best_score": setting.best.score, "scan_best_step": setting.scan_best_step,
            "mirror_step": setting.mirror.step, "mirror_score": setting.mirror.score,
            "final_value_row": value_row(setting.final.V), "A_diag_final": diagonal_share(setting.final.A),
            "heldout_abs_td_error": {**learned, **{k: v.abs_td_error for k, v in setting.references.items()}}}

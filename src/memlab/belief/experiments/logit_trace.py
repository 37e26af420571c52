"""``belief.logit-trace`` (Fig. 5, App. B.1): the logit difference w_k(x2) - w_k(x1) of the LOF eq. (7) and of two
ALFs eq. (24) on one sampled trajectory of the HMM of eq. (54) (D = I).

The paper shows one trajectory and reads two properties off it; we measure them over ``num_runs`` trajectories:
the decoding error (eq. (19), ties at random), the roughness of a trace (mean |w_k - w_{k-1}| of the logit
difference) and the lag after a state switch (``metrics.switch_lags``: steps until the sign of the logit
difference agrees with the new state). The first trajectory is the one plotted. w_0 = 0, pi0 = [1, 0].
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from memlab import plots
from memlab.belief import lof
from memlab.belief.alf import ALF, alf_filter
from memlab.belief.examples import two_state_example
from memlab.belief.hmm import sample
from memlab.belief.metrics import switch_lags
from memlab.belief.montecarlo import decoding_error
from memlab.checks import check_int, check_real
from memlab.files import summary_text
from memlab.runner import Experiment
from memlab.store import cell

PAPER = "linear-recurrent-memory-pomdp"


@dataclasses.dataclass(frozen=True)
class LogitTraceConfig:
    seed: int = 0
    eps: float = 0.005
    emission: float = 0.8
    deltas: tuple[float, ...] = (0.07, 0.19)  # delta_1 < delta_2 of App. B.1
    num_steps: int = 700
    num_runs: int = 2000  # trajectories behind the summary statistics (one is plotted)

    def validate(self):
        check_real("eps", self.eps, 0.0, 1.0, open_low=True, open_high=True)
        check_real("emission", self.emission, 0.5, 1.0, open_low=True, open_high=True)
        if len(self.deltas) != 2 or not all(0.0 < d < 1.0 for d in self.deltas) or self.deltas[0] >= self.deltas[1]:
            raise ValueError(f"deltas must be two increasing values in (0, 1), got {self.deltas}")
        check_int("num_steps", self.num_steps, low=10)
        check_int("num_runs", self.num_runs)


SUMMARY = summary_text(__package__, "logit_trace")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogitTraces:
    """The filters' logits on eq. (54)'s trajectories, the LOF then one ALF per delta (F filters): ``states`` (K,)
    x_1..x_K and ``diffs`` (F, K) the logit differences w_k(x2) - w_k(x1) of the first trajectory; over every
    trajectory, per filter, the decoding ``error``, the ``roughness`` (mean |step| of the difference) and the
    ``mean_lag`` after a switch (F,) each, and the first filter's ``num_switches``."""

    states: list[int]
    diffs: list[list[float]]
    error: list[float]
    roughness: list[float]
    mean_lag: list[float]
    num_switches: int


@cell("belief.logit-traces", result=LogitTraces)
def _traces_cell(eps: float, emission: float, deltas: tuple[float, ...], num_steps: int, num_runs: int,
                 key) -> LogitTraces:
    """LOF and ALF (one per delta) logits on ``num_runs`` trajectories of eq. (54): the first trajectory's states
    and logit differences (K,), and per filter the decoding error, the roughness and the mean lag after a switch."""
    hmm, D = two_state_example(eps, emission, flip=False)  # eq. (54): D = I
    w0 = np.zeros(2, np.float32)
    alfs = [ALF.time_invariant(D, np.asarray(hmm.E), np.float32(d), w0=w0) for d in deltas]
    traj = sample(hmm, key, num_steps, batch=num_runs)
    ws = [jax.vmap(lambda y: lof(hmm, y, w0=w0).logits)(traj.observations)]
    ws += [jax.vmap(lambda y, a=a: alf_filter(a, y).logits)(traj.observations) for a in alfs]
    x = np.asarray(traj.states[:, 1:])  # (B, K): x_1..x_K
    diffs = [np.asarray(w[..., 1] - w[..., 0]) for w in ws]  # (B, K) each
    onehot = jax.nn.one_hot(x, 2, dtype=bool)
    err = [float(jnp.mean(decoding_error(w.reshape(-1, 2), onehot.reshape(-1, 2)))) for w in ws]
    rough = [float(np.mean(np.abs(np.diff(d, axis=1)))) for d in diffs]
    lags = [switch_lags((d > 0).astype(int), x) for d in diffs]
    return LogitTraces(states=x[0], diffs=[d[0] for d in diffs], error=err, roughness=rough,
                       mean_lag=[float(lg.mean()) if lg.size else float("nan") for lg in lags],
                       num_switches=int(lags[0].size))


def run_logit_trace(cfg: LogitTraceConfig, run) -> dict:
    """One cell of traces -> trace.csv, figure, claims, summary."""
    cells = run.sweep({"traces": partial(_traces_cell, cfg.eps, cfg.emission, cfg.deltas, cfg.num_steps, cfg.num_runs,
                                                 run.key_for("trajectories"))}, "logit traces")
    stats = analyse(cfg, cells["traces"])
    run.save_csv("trace.csv", ["k", "true_state"] + [f"{n}: w(x2)-w(x1)" for n in stats.filters],
                 [(k, x + 1, *d) for k, x, d in zip(stats.k, stats.states, zip(*stats.diffs))])
    _figures(cfg, stats, run)
    _claims(cfg, stats, run)
    run.write_summary(_summary(cfg, stats, run))
    return {"filters": stats.filters, "error": stats.error, "roughness": stats.roughness, "mean_lag": stats.mean_lag}


@dataclasses.dataclass(frozen=True)
class TraceStats:
    """Fig. 5's trajectory and the statistics over ``cfg.num_runs`` trajectories; K = ``cfg.num_steps``, F = 3
    filters (the LOF, then the ALFs of ``cfg.deltas``).

    **Fields:**
    - ``filters``: list of the F filter names.
    - ``k``: (K,) the steps 1..K.
    - ``states``: int (K,), the plotted trajectory's states x_1..x_K (0: x1, 1: x2).
    - ``diffs``: list of F arrays (K,), each filter's logit difference w_k(x2) - w_k(x1) on that trajectory.
    - ``switches``: int (n,), the steps k at which x_k != x_{k-1} on that trajectory.
    - ``error``: list of F floats, the decoding error (eq. 19, ties at random) over all steps and trajectories.
    - ``roughness``: list of F floats, the mean |step| of the logit difference.
    - ``mean_lag``: list of F floats, the mean number of steps after a switch until the sign of the logit
      difference agrees with the new state (NaN without switches).
    - ``num_switches``: int, the switches behind ``mean_lag`` (over all trajectories).
    """

    filters: list[str]
    k: np.ndarray
    states: np.ndarray
    diffs: list[np.ndarray]
    switches: np.ndarray
    error: list[float]
    roughness: list[float]
    mean_lag: list[float]
    num_switches: int


def analyse(cfg: LogitTraceConfig, cell: LogitTraces) -> TraceStats:
    """The cell -> the plotted trajectory (states, one logit difference per filter, switch steps) and the
    statistics per filter (LOF first)."""
    x = np.array(cell.states)
    k = np.arange(1, cfg.num_steps + 1)
    return TraceStats(filters=["LOF"] + [f"ALF δ = {d}" for d in cfg.deltas], k=k, states=x,
                         diffs=[np.array(d) for d in cell.diffs], switches=k[np.flatnonzero(np.diff(x)) + 1],
                         error=cell.error, roughness=cell.roughness, mean_lag=cell.mean_lag,
                         num_switches=cell.num_switches)


def _figures(cfg: LogitTraceConfig, stats: TraceStats, run) -> None:
    k, x = stats.k, stats.states
    fig, ax = plots.figure(width=7.0, height=3.6)
    for d, n, c in zip(stats.diffs, stats.filters, ["k", "tab:blue", "tab:orange"]):
        ax.plot(k, d, color=c, lw=1.0 if n == "LOF" else 1.2, label=n)
    ax.fill_between(k, 0, 1, where=x == 1, transform=ax.get_xaxis_transform(), color="0.9", step="mid",
                    label="true state x2")
    for s in stats.switches:
        ax.axvline(s, color="r", ls=":", lw=0.8)
    ax.axhline(0, color="0.5", lw=0.5)
    ax.set(xlabel="k", ylabel="$w_k(x_2) - w_k(x_1)$", title=f"Logit difference, ε = {cfg.eps} (switches dotted red)")
    fig.legend(loc="outside lower center", fontsize=7, ncol=4)
    run.save_figure(fig, "logit_trace.png")


def _claims(cfg: LogitTraceConfig, stats: TraceStats, run) -> None:
    err, rough, lag = stats.error, stats.roughness, stats.mean_lag
    small, large = cfg.deltas
    run.claim("alf-decodes-well", "ALF decodes the state well despite differing from LOF", "App. B.1, Fig. 5",
              f"error LOF {err[0]:.3f}, ALF {err[1]:.3f} / {err[2]:.3f}", bool(max(err[1:]) <= 2.5 * err[0]))
    run.claim("small-delta-smoother", f"δ = {small} gives a smoother trace than δ = {large}",
              "App. B.1", f"mean |Δ| {rough[1]:.3f} vs {rough[2]:.3f}", bool(rough[1] < rough[2]))
    run.claim("small-delta-lags", f"δ = {small} lags longer after a switch than δ = {large}",
              "App. B.1", f"mean lag {lag[1]:.1f} vs {lag[2]:.1f} steps", bool(lag[1] > lag[2]))


def _summary(cfg: LogitTraceConfig, stats: TraceStats, run) -> str:
    header = ["filter", "decoding error", "mean abs. step of the trace", "mean lag after a switch (steps)"]
    rows = zip(stats.filters, stats.error, stats.roughness, stats.mean_lag)
    table = run.save_table("trace_stats.csv", header, rows, dict(zip(header[1:], (".4f", ".3f", ".2f"))))
    return SUMMARY.format(**dataclasses.asdict(cfg), emission_c=1 - cfg.emission, table=table,
                          switches=", ".join(str(int(s)) for s in stats.switches), num_switches=stats.num_switches)


EXPERIMENTS = [
    Experiment(
        "belief.logit-trace", "Fig. 5", PAPER, "w_k(x2) − w_k(x1) of LOF and ALF (δ = 0.07, 0.19) on eq. (54)",
        {"paper": LogitTraceConfig(), "quick": LogitTraceConfig(num_runs=500),
         "tiny": LogitTraceConfig(num_runs=20, num_steps=100)},
        run_logit_trace),
]

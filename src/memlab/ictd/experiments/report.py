"""What ``ictd.pretrain`` and ``ictd.mask-relaxation`` both report about a trained :class:`~.cells.Setting`: the
claims both test (with their rules), the sign-pattern sentence, the held-out table, the setup and task-layout
sections, the decisions where the paper is ambiguous, the CSV tables and results.json numbers of a setting, and one
plotting function per figure kind (Fig. 3, 5, 6). Pure functions of the numbers; the experiments record the claims
and write the files."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from memlab import plots
from memlab.files import markdown_table, summary_text
from memlab.ictd.boyan import chain_statistics
from memlab.ictd.experiments.cells import (
    FORMS,
    TRACE_FIELDS,
    Setting,
    View,
    binned_by_dt,
    diagonal_share,
    majority_pattern,
    sign_pattern,
    trailing_mean,
    truncated_mean_sem,
    value_row,
)
from memlab.ictd.pretrain import PretrainConfig, masks, rho_schedule

__all__ = ["AMBIGUITIES", "CHECKPOINT_HEADER", "DIAGONAL", "HIGH", "PRESERVED", "SettingNumbers", "checkpoint_title",
           "claims_markdown", "heldout_markdown", "layout_markdown", "plot_blocks", "plot_emergence_vs_dt",
           "plot_trajectories", "query_words", "setting_claims", "setting_results", "setting_tables", "setup_line",
           "sign_sentence", "tagged"]

HIGH = 0.5  # a score "high" / emergence "present"
DIAGONAL = 0.8  # A_feat "diagonal": diagonal share A_diag >= this
PRESERVED = 0.8  # relaxed best score >= this fraction of the full-mask best score
MIRRORED_NOTE = {"paper": "", "mirrored": " [mirrored reading, not the paper's metric]"}
RULE = {"paper": "max min(V_em, A_em)", "mirrored": "max min(V_em(−V), A_em(−A))"}
REFERENCE_LABELS = {"theta*": "θ* (eq. 15)", "-theta*": "−θ* (mirror image)", "zero": "zero block"}
STAND_IN = " (end of training for the seeds whose score is 0 throughout)"
SHOWS = {True: "shows", False: "does NOT show"}
BECOMES = {True: "becomes", False: "does NOT become"}
DIAGONAL_MEANING = {True: "negative: each token attends to the context states LEAST similar to it",
                    False: "positive, as in θ*"}

CHECKPOINT_HEADER = ["setting", "seed", "checkpoint", "step", "V_em", "A_em", "V_em_neg", "A_em_neg", "p_r",
                     "p_gamma_v", "p_v", "A_diag", "A_feat_diag_mean", "abs_td_error", "abs_value_error"]

AMBIGUITIES = summary_text(__package__, "report_ambiguities")


def tagged(base: str, *tags: str) -> str:
    """Claim id ``base[tag1,tag2]`` (empty tags dropped; no brackets without tags)."""
    tags = [t for t in tags if t]
    return f"{base}[{','.join(tags)}]" if tags else base


@dataclasses.dataclass(frozen=True)
class SettingNumbers:
    """The numbers behind the claims both experiments test on one setting: best_paper, best_mirrored the seed-mean
    best min score of each rule; A_diag the seed-mean diagonal share of the final A_feat (App. F.4.2) and
    A_feat_diag_mean its seed-mean diagonal entry."""

    best_paper: float
    best_mirrored: float
    A_diag: float
    A_feat_diag_mean: float

    def best(self, form: str) -> float:
        """The seed-mean best min score of score form "paper" or "mirrored"."""
        return self.best_paper if form == "paper" else self.best_mirrored


def _sign_counts(setting: Setting) -> tuple[np.ndarray, int, int]:
    """Final value rows (S, 3) and how many seeds end with (+, +, −) and with the mirrored (−, −, +)."""
    rows = value_row(setting.final.V)
    return (rows, int(np.sum(np.all(np.sign(rows) == [1, 1, -1], axis=1))),
            int(np.sum(np.all(np.sign(rows) == [-1, -1, 1], axis=1))))


def _final_a_feat(setting: Setting) -> tuple[np.ndarray, float]:
    """Diagonal share A_diag (S,) of the final A_feat and its seed-mean diagonal entry."""
    A, d = setting.final.A, setting.config.d
    return diagonal_share(A), float(np.mean([np.diag(a[:d, :d]) for a in A]))


def setting_claims(setting: Setting, tag: str = "") -> tuple[list[dict], SettingNumbers]:
    """The claims both experiments test on one setting (``Run.claim`` keyword dicts) and the numbers behind them."""
    S = setting.best.step.size
    claims = []
    for form in FORMS:
        score, step = setting.of_form(form).score, setting.of_form(form).step
        claims.append(dict(
            id=tagged("best-checkpoint-emergence", tag, form),
            claim=f"both emergence scores are high at the best checkpoint ({RULE[form]}); rule: seed-mean min score ≥ "
                  f"{HIGH}" + MIRRORED_NOTE[form],
            paper="Fig. 3(a) / §8: learned block 'closely matching (15)' (no number given)",
            ours=f"seed-mean {score.mean():.3f} (per seed {np.array2string(score, precision=3)}, steps "
                 f"{step.tolist()})", holds=bool(score.mean() >= HIGH)))
    best_row = value_row(setting.best.V).mean(0)
    _, k, k_mirror = _sign_counts(setting)
    claims.append(dict(
        id=tagged("v-sign-pattern", tag),
        claim="V0 shows the (+, +, −) sign pattern on (r, γv′, v); rule: the seed-mean value row at the paper-rule "
              "best checkpoint (end of training for seeds whose paper score is 0 throughout) has signs (+, +, −) AND "
              "a majority of seeds end training with (+, +, −)",
        paper="§8, Fig. 3(a): '(+, +, −) sign pattern ... closely matching (15)'",
        ours=f"best checkpoint (steps {setting.best.step.tolist()}): {sign_pattern(best_row)}; end of training: "
             f"{k}/{S} seeds (+, +, −), {k_mirror}/{S} seeds (−, −, +)",
        holds=bool(sign_pattern(best_row) == "(+, +, −)" and k > S / 2)))
    share, diag = _final_a_feat(setting)
    claims.append(dict(
        id=tagged("a-diagonal", tag),
        claim=f"the d×d feature block of A0 becomes (sharply) diagonal; rule: seed-mean diagonal share A_diag "
              f"(App. F.4.2, sign-agnostic) of the final A_feat ≥ {DIAGONAL}",
        paper="§8, Fig. 3(a): 'upper left d×d blocks of A0 becomes sharply diagonal'",
        ours=f"A_diag = {share.mean():.3f} (min over seeds {share.min():.3f}); mean diagonal entry {diag:+.3f}",
        holds=bool(share.mean() >= DIAGONAL)))
    mask = masks(setting.config.d, setting.config.a_mask)
    V_mask, A_mask = np.asarray(mask.V), np.asarray(mask.A)
    checkpoints = setting.checkpoints().values()
    stray = max(float(np.abs(ck.V[:, V_mask == 0]).max(initial=0.0)) for ck in checkpoints)
    stray = max(stray, *(float(np.abs(ck.A[:, A_mask == 0]).max(initial=0.0)) for ck in checkpoints))
    claims.append(dict(
        id=tagged("masked-entries-zero", tag),
        claim="entries outside V_mask (eq. 106) and A_mask stay exactly zero; rule: max |masked entry| over every "
              "saved checkpoint and seed == 0", paper="App. F.2: masks fixed throughout training",
        ours=f"max |masked entry| = {stray:g}", holds=bool(stray == 0.0)))
    numbers = SettingNumbers(float(setting.best.score.mean()), float(setting.mirror.score.mean()),
                             float(share.mean()), diag)
    return claims, numbers


def claims_markdown(claims: list[dict]) -> str:
    """Markdown table of the recorded claims: the paper's statement beside ours."""
    return markdown_table(["id", "claim and rule", "paper", "ours", "holds"],
                          [(c["id"], c["claim"], c["paper"], c["ours"], ("NO", "yes")[c["holds"]]) for c in claims])


def heldout_markdown(setting: Setting) -> str:
    """Held-out table: learned checkpoints (mean +- sd over seeds), theta*, -theta*, zero block."""
    stand_in = lambda ck: STAND_IN * bool(np.any(ck.score == 0))  # noqa: E731
    learned = [(setting.final, "learned, end of training"),
               (setting.mirror, "learned, mirrored-rule checkpoint" + stand_in(setting.mirror)),
               (setting.best, "learned, paper-rule checkpoint" + stand_in(setting.best))]
    rows = [(label, *(f"{x.mean():.4f} ± {x.std():.4f}" for x in (e.abs_td_error, e.abs_value_error)))
            for ck, label in learned for e in [ck.heldout]]
    rows += [(REFERENCE_LABELS[name], e.abs_td_error, e.abs_value_error) for name, e in setting.references.items()]
    return markdown_table(["parameters", "mean abs. TD error", "mean abs. value error"], rows, ".4f")


def sign_sentence(setting: Setting) -> str:
    """The plain statement a reader looks for first: (+, +, -) in V or not, A_feat diagonal or not."""
    rows, paper, mirror = _sign_counts(setting)
    S = rows.shape[0]
    share, diag = _final_a_feat(setting)
    top, count = majority_pattern(rows)  # a SignMajority
    return (f"**The learned V {SHOWS[paper > S / 2]} the paper's (+, +, −) sign pattern** on (r, γv′, v): at the end "
            f"of training {paper}/{S} seeds have (+, +, −) and {mirror}/{S} have the mirrored (−, −, +); the most "
            f"common pattern is {top} ({count}/{S} seeds; seed-mean row "
            f"{np.array2string(rows.mean(0), precision=3)}). **A_feat {BECOMES[bool(share.mean() >= DIAGONAL)]} "
            f"diagonal** (diagonal share A_diag = {share.mean():.3f}, sign-agnostic; rule A_diag ≥ {DIAGONAL}), with "
            f"mean diagonal entry {diag:+.3f} ({DIAGONAL_MEANING[bool(diag < 0)]}).")


def query_words(config: PretrainConfig) -> str:
    """Where the query sits: Algorithm 1's S_{t+n}, or ``query_offset`` steps past it."""
    if config.query_offset == 0:
        return "query S_{t+n}, the successor of the last context transition (Algorithm 1, line 7)"
    return (f"query S_{{t+n+{config.query_offset}}}, {config.query_offset} step(s) past the context (query_offset = "
            f"{config.query_offset}, as the linear-attention code of Wang et al. builds its prompts)")


def setup_line(config: PretrainConfig) -> str:
    """One line with every training setting of Algorithm 1 (and the rho schedule of eq. 104)."""
    rho = f"ρ_t {config.rho_start} → {config.rho_end} over {config.rho_anneal_steps} steps"
    rho = rho if config.rho_anneal_steps else f"ρ = {config.rho_end}"
    return (f"m = {config.m}, d = {config.d}, γ = {config.gamma}, n = {config.n}, τ = {config.tau}, {rho}, "
            f"L = {config.num_layers} looped, Adam {config.learning_rate:g}, batch {config.batch_size}, "
            f"{config.minibatches_per_epoch} mini-batches per MRP, {config.num_epochs} MRPs = {config.num_steps} "
            f"steps, {config.num_seeds} seeds, Xavier gain {config.init_gain}, {query_words(config)}")


NUM_CHAINS = 200  # Boyan chains whose statistics the summary reports (``boyan.chain_statistics``)


def task_layout(config: PretrainConfig, key) -> str:
    """The summary section on the query layout and the tasks, from NUM_CHAINS chains drawn from ``key``."""
    return layout_markdown(config, chain_statistics(key, NUM_CHAINS, config.m, config.d, config.gamma), NUM_CHAINS)


def layout_markdown(config: PretrainConfig, chains: dict[str, float], num_chains: int) -> str:
    """The summary section on the query layout and on the tasks (``boyan.chain_statistics`` of ``num_chains``)."""
    other = "`paper-query-past` (query one step past)" if config.query_offset == 0 else "`paper` (Algorithm 1)"
    return f"""## Query layout and the tasks

This run: {query_words(config)}. Profile {other} trains the other layout with the same keys.

On {num_chains} chains drawn as in training, min_s M_π(s, s) of eq. (27) is {chains['self_weight_mean']:.4f} on \
average (largest {chains['self_weight_max']:.4f}), while Assumption 5.1 asks for more than (1 + γ)/2 = \
{chains['margin_needed']:.2f}: it holds on {chains['assumption_holds']:.0%} of them, so the contraction behind \
Theorems 2 and 3 is not available on these tasks. Consecutive rewards are negatively correlated: the stationary \
corr(r(S_t), r(S_{{t+1}})) is {chains['reward_lag1_mean']:.2f} on average ({chains['reward_lag1_min']:.2f} to \
{chains['reward_lag1_max']:.2f}). With r = (I − γP) v*, the last context reward R_{{t+n}} = r(S_{{t+n−1}}) contains \
−γ p(S_{{t+n}} | S_{{t+n−1}}) v*(S_{{t+n}}) when the query is S_{{t+n}}: a negated reward weight reads the query's own \
value from it: a possible route to the mirror image (−V*, −A*) (compare −θ* with θ* in the held-out table). One \
step past the context, the query's value is no longer in that reward; the two layout profiles test the route.
"""


# --------------------------------------------------------------------------- tables and results.json


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


def checkpoint_title(rule: str, steps: np.ndarray, scores: np.ndarray) -> str:
    """Panel title of one checkpoint row: the rule, the steps per seed, the seed-mean score, the stand-in note."""
    stand_in = int(np.sum(scores == 0))
    note = f"\nscore 0 at every step for {stand_in}/{scores.size} seeds: their end of training is shown"
    note = note if stand_in else ""
    return f"{rule}\nsteps {steps.tolist()}, seed-mean score {scores.mean():.2f}{note}"


# --------------------------------------------------------------------------- figures (one function per kind)


def _block_labels(d: int) -> list[str]:
    return [f"$x_{{{i + 1}}}$" for i in range(d)] + ["$r$", r"$\gamma v'$", "$v$"]


def plot_blocks(rows: list[tuple[str, np.ndarray, np.ndarray]]):
    """Fig. 3(a) / 6(e,f): one row per checkpoint (title, V (S, D, D), A (S, D, D)); seed means, each matrix divided by
    its max |entry|, colormap over [-1, 1], entries printed."""
    fig = plt.figure(layout="constrained", figsize=(8.4, 3.9 * len(rows)))
    for (title, V, A), sub in zip(rows, np.atleast_1d(fig.subfigures(len(rows), 1))):
        sub.suptitle(title, fontsize=9)
        axes = sub.subplots(1, 2)
        for M, name, ax in ((V, "V_0", axes[0]), (A, "A_0", axes[1])):
            mean = np.mean(M, 0)
            scale = np.max(np.abs(mean))
            shown = mean / scale if scale > 0 else mean
            image = ax.imshow(shown, cmap="RdBu_r", vmin=-1, vmax=1)
            labels = _block_labels(M.shape[-1] - 3)
            ax.set_xticks(range(len(labels)), labels)
            ax.set_yticks(range(len(labels)), labels)
            ax.grid(False)
            for (i, j), x in np.ndenumerate(shown):
                if x != 0:
                    ax.text(j, i, f"{x:.2f}", ha="center", va="center", fontsize=6,
                            color="w" if abs(x) > 0.6 else "k")
            ax.set_title(f"${name}$ / max|entry|  (max|entry| = {scale:.3g})", fontsize=8)
        sub.colorbar(image, ax=axes.tolist(), shrink=0.8)
    return fig


def plot_trajectories(grid: list[list[View]], window: int):
    """Fig. 5 / 6(a,b): trailing average (``window``) per seed, mean +- s.e.m. over seeds. ``grid`` rows: score forms
    (paper, mirrored), columns: settings (masks); one panel of V_em and A_em per view, each seed truncated at its best
    step as App. F.3 does, and below each column one panel of d_t, which the score form does not change (every seed
    to the end of training). A grey step line gives the share of seeds still in the mean; where fewer than half of
    them are left, the curve is pale: a mean of the few seeds that trained longest is not comparable with the steps
    before (the paper run's Fig. 5 jumped there). One legend below the panels."""
    R, C = len(grid), len(grid[0])
    fig, axes = plots.figure(R + 1, C, width=max(5.2 * C, 8.0), height=2.4 * (R + 1) + 0.6, squeeze=False,
                             sharex="col")
    seeds = grid[0][0].stop.size
    for c in range(C):
        for r in range(R):
            view, ax = grid[r][c], axes[r, c]
            for data, color in ((view.V_em, "tab:blue"), (view.A_em, "tab:orange")):
                mean, sem, count = truncated_mean_sem(trailing_mean(data, window), view.stop)
                steps, enough = np.arange(mean.size), 2 * count >= seeds
                pale = ~enough | np.append(~enough[1:], False)  # from the last step with enough seeds: no gap
                ax.plot(np.where(enough, steps, np.nan), mean, color=color, lw=1.2)
                ax.fill_between(steps, mean - sem, mean + sem, where=enough, color=color, alpha=0.25, lw=0)
                ax.plot(np.where(pale, steps, np.nan), mean, color=color, lw=0.8, alpha=0.45)
            if count.min() < seeds:
                ax.plot(steps, count / seeds, color="0.5", lw=0.8, drawstyle="steps-post")
            truncated = np.sum(view.stop < view.V_em.shape[1] - 1)
            ax.set(ylim=(-0.03, 1.03), ylabel="score",
                   title=f"{view.title}\n({truncated}/{seeds} seeds truncated at their best step)")
        view, ax = grid[0][c], axes[R, c]
        every_step = np.full(view.stop.size, view.d_t.shape[1] - 1)
        mean, sem, _ = truncated_mean_sem(trailing_mean(view.d_t, window), every_step)
        steps = np.arange(mean.size)
        ax.plot(steps, mean, color="tab:green", lw=1.2)
        ax.fill_between(steps, mean - sem, mean + sem, color="tab:green", alpha=0.25, lw=0)
        ax.axhline(1 / view.n, color="0.4", ls=":", lw=1)
        ax.set(xlabel="training step", ylabel="$d_t$",
               title=f"{view.title.split(':')[0]}: $d_t$, every seed to the end")
    handles = [plots.key("$V_{em}$ (band ± s.e.m.)", color="tab:blue"),
               plots.key("$A_{em}$", color="tab:orange"),
               plots.key(f"pale: fewer than half of the {seeds} seeds left", lw=0.8, alpha=0.45),
               plots.key("share of seeds in the mean (the others stopped at their best step)", lw=0.8, color="0.5"),
               plots.key("$d_t$", color="tab:green"),
               plots.key(f"uniform attention 1/n = {1 / grid[0][0].n:.2g}", ls=":", lw=1, color="0.4")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=7)
    return fig


def plot_emergence_vs_dt(grid: list[list[View]], num_bins: int):
    """Fig. 3(b) / 6(c,d): V_em and A_em against d_t in ``num_bins`` equal-width bins (pooled mean, per-seed IQR)."""
    R, C = len(grid), len(grid[0])
    fig, axes = plots.figure(R, C, width=5.2 * C, height=3.4 * R, squeeze=False)
    for r, views in enumerate(grid):
        for c, view in enumerate(views):
            ax = axes[r, c]
            for name, score, color in (("V", view.V_em, "tab:blue"), ("A", view.A_em, "tab:orange")):
                b = binned_by_dt(view.d_t, score, num_bins)
                ax.plot(b.centers, b.mean, "o-", ms=3, color=color, label=f"${name}_{{em}}$ (mean)")
                ax.fill_between(b.centers, b.q25, b.q75, color=color, alpha=0.25, lw=0,
                                label="25–75 % of the per-seed bin means" if name == "V" else None)
            ax.axvline(1 / view.n, color="0.4", ls=":", lw=1, label="uniform attention 1/n")
            ax.set(xlabel="kernel diagonal mean $d_t$ (eq. 34)", ylabel="score", ylim=(-0.03, 1.03),
                   title=view.title)
            ax.legend(loc="best", fontsize=7)
    return fig

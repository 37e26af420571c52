"""What ``ictd.pretrain`` and ``ictd.mask-relaxation`` both report in words about a trained
:class:`~.setting.Setting`: the claims both test (with their rules), the sign-pattern sentence, the held-out table,
the setup and task-layout sections and the decisions where the paper is ambiguous. Pure functions of the numbers;
the experiments record the claims and write the files. The CSV tables are in ``setting_tables``, the figures in
``setting_figures``."""

from __future__ import annotations

import dataclasses

import numpy as np

from memlab.files import markdown_table, summary_text
from memlab.ictd.boyan import chain_statistics
from memlab.ictd.experiments.diagnostics import diagonal_share, majority_pattern, sign_pattern, value_row
from memlab.ictd.experiments.setting import FORMS, Setting
from memlab.ictd.pretrain import PretrainConfig, masks

__all__ = ["AMBIGUITIES", "DIAGONAL", "HIGH", "PRESERVED", "SettingNumbers", "claims_markdown", "heldout_markdown",
           "layout_markdown", "query_words", "setting_claims", "setup_line", "sign_sentence", "tagged", "task_layout"]

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

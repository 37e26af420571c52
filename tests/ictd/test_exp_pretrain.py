"""The ictd.pretrain and ictd.mask-relaxation experiments: diagnostics (pretrain_figures.py) against plain references,
and both tiny profiles end to end (contract and resume)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from memlab.ictd.emergence import a_emergence
from memlab.ictd.exp_pretrain import EXPERIMENTS, MaskRelaxationConfig, PretrainExperimentConfig, _emergence_along_dt
from memlab.ictd.pretrain import PretrainConfig, mask_relaxation_config
from memlab.ictd.pretrain_figures import (
    View,
    binned_by_dt,
    diagonal_share,
    plot_blocks,
    sign_pattern,
    trailing_mean,
    truncated_mean_sem,
)
from memlab.ictd.transformer import theta_star
from memlab.runner import Experiment, run_experiment

BY_NAME = {e.name: e for e in EXPERIMENTS}


# --------------------------------------------------------------------------- numbers behind the figures


def test_trailing_mean_matches_a_loop():
    x = np.random.default_rng(0).normal(size=(3, 23))
    for window in (1, 4, 50):
        ref = np.array([[x[s, max(0, t - window + 1) : t + 1].mean() for t in range(23)] for s in range(3)])
        np.testing.assert_allclose(trailing_mean(x, window), ref, atol=1e-12)


def test_truncated_mean_sem_counts_only_seeds_that_reach_the_step():
    x = np.array([[1.0, 2.0, 3.0, 4.0], [3.0, 4.0, 5.0, 6.0], [5.0, 9.0, 9.0, 9.0]])
    mean, sem, count = truncated_mean_sem(x, np.array([3, 1, 0]))
    np.testing.assert_array_equal(count, [3, 2, 1, 1])
    np.testing.assert_allclose(mean, [3.0, 3.0, 3.0, 4.0])
    np.testing.assert_allclose(sem, [np.std([1, 3, 5], ddof=1) / np.sqrt(3), np.std([2, 4], ddof=1) / np.sqrt(2), 0, 0])


def test_binned_by_dt_matches_a_loop_over_bins():
    rng = np.random.default_rng(1)
    d_t = rng.uniform(0.03, 0.11, size=(4, 200))
    V = rng.uniform(size=(4, 200))
    b = binned_by_dt(d_t, {"V": V}, 5)
    edges = np.linspace(d_t.min(), d_t.max(), 6)
    for i in range(5):
        inside = (d_t >= edges[i]) & ((d_t < edges[i + 1]) if i < 4 else (d_t <= edges[i + 1]))
        assert b["count"][i] == inside.sum()
        np.testing.assert_allclose(b["V_mean"][i], V[inside].mean())
        per_seed = [V[s][inside[s]].mean() for s in range(4)]
        np.testing.assert_allclose([b["V_q25"][i], b["V_q75"][i]], np.percentile(per_seed, [25, 75]))
    assert b["count"].sum() == d_t.size


def test_diagonal_share_is_the_a_emergence_diagonality_and_sign_agnostic():
    rng = np.random.default_rng(2)
    A = np.zeros((7, 7))
    A[:4, :4] = 0.1 * rng.normal(size=(4, 4))
    np.fill_diagonal(A[:4, :4], 0.9)  # equal positive diagonal: C_A = 1, so A_em = A_diag (eq. 111)
    np.testing.assert_allclose(diagonal_share(A), float(a_emergence(A)), rtol=1e-5)
    np.testing.assert_allclose(diagonal_share(-A), diagonal_share(A))
    B = A.copy()
    B[0, 0] = 1.0  # unequal diagonal: C_A of -B divides by eps (m_A < 0) and vanishes, A_diag does not care
    assert float(a_emergence(-B)) == 0.0 and diagonal_share(-B) == diagonal_share(B) > 0.5
    assert diagonal_share(np.asarray(theta_star(4)[1])) == 1.0
    assert diagonal_share(np.zeros((7, 7))) == 0.0
    np.testing.assert_allclose(diagonal_share(np.stack([A, -A, np.asarray(theta_star(4)[1])])),
                               [diagonal_share(A)] * 2 + [1.0])


def test_sign_pattern():
    assert sign_pattern(np.array([1.0, 2.0, -0.5])) == "(+, +, −)"
    assert sign_pattern(np.array([-1.0, 0.0, 3.0])) == "(−, 0, +)"


def _view(d_t, V, A, n=10):
    return View("synthetic", V, A, d_t, np.full(d_t.shape[0], d_t.shape[1] - 1), n)


def test_dt_claim_rule_follows_the_direction_of_training():
    """V rising late along the d_t path passes the 'V rises after intermediate d_t' rule; V high at once fails."""
    T = 300
    d_t = np.tile(np.linspace(0.1, 0.04, T), (3, 1))  # d_t falls during training (the mirrored solution)
    late = np.tile((np.arange(T) > 200).astype(float), (3, 1))
    ones = np.ones((3, T))
    a = _emergence_along_dt(_view(d_t, late, ones), 20, 0.1, 0.04)
    assert a["direction"] == -1 and a["A_high_fraction"] == 1.0
    assert a["V_first_third"] == 0.0 and a["V_last_third_max"] == 1.0
    b = _emergence_along_dt(_view(d_t, ones, 0 * ones), 20, 0.1, 0.04)
    assert b["V_first_third"] == 1.0 and b["A_high_fraction"] == 0.0
    early = late[:, ::-1]  # d_t rising 0.04 -> 0.1 and V high at the start (low d_t): V did not wait for d_t
    rising = _emergence_along_dt(_view(d_t[:, ::-1], early, ones), 20, 0.04, 0.1)
    assert rising["direction"] == 1 and rising["V_first_third"] == 1.0


def test_block_heatmap_is_the_seed_mean_scaled_by_its_max():
    V, A = (np.asarray(x) for x in theta_star(4))
    Vs = np.stack([2 * V, 4 * V])  # seed mean 3 V*, scaled back to V*
    fig = plot_blocks([("θ*", Vs, np.stack([A, A]))])
    images = [ax.images[0].get_array() for ax in fig.axes if ax.images]
    np.testing.assert_allclose(images[0], V)
    np.testing.assert_allclose(images[1], A)


# --------------------------------------------------------------------------- configs and registry


def test_profiles_paper_sizes_and_validation():
    assert set(BY_NAME) == {"ictd.pretrain", "ictd.mask-relaxation"}
    for exp in EXPERIMENTS:
        assert {"tiny", "quick", "paper"} <= set(exp.profiles) and exp.paper == "softmax-transformers-in-context-td"
        for config in exp.profiles.values():
            config.validate()
    paper = BY_NAME["ictd.pretrain"].profiles["paper"].train
    assert paper == PretrainConfig()  # Table 1 exactly
    table1 = dict(m=64, d=4, gamma=0.9, n=10, tau=1.2, rho_end=0.0, num_layers=3, num_epochs=3000, num_seeds=5,
                  batch_size=64, minibatches_per_epoch=5, learning_rate=1e-3, init_gain=0.1, a_mask="full")
    assert {k: getattr(paper, k) for k in table1} == table1
    f5 = BY_NAME["ictd.mask-relaxation"].profiles["paper"].train
    assert f5 == mask_relaxation_config("full") and f5.num_steps == 9000 and f5.num_seeds == 10
    with pytest.raises(ValueError, match="eval_tasks"):
        PretrainExperimentConfig(eval_tasks=0).validate()
    with pytest.raises(ValueError, match="num_bins"):
        PretrainExperimentConfig(num_bins=2.5).validate()
    with pytest.raises(ValueError, match="tau"):
        PretrainExperimentConfig(train=PretrainConfig(tau=0.0)).validate()
    with pytest.raises(ValueError, match="a_mask"):
        MaskRelaxationConfig(train=mask_relaxation_config("relaxed")).validate()


# --------------------------------------------------------------------------- end to end, tiny profiles


def _capturing(exp: Experiment, runs: list) -> Experiment:
    def run(config, r):
        runs.append(r)
        return exp.run(config, r)

    return dataclasses.replace(exp, run=run)


@pytest.mark.parametrize("name", ["ictd.pretrain", "ictd.mask-relaxation"])
def test_tiny_profile_writes_the_contract_and_resumes(name, tmp_path):
    runs = []
    exp = _capturing(BY_NAME[name], runs)
    out = run_experiment(exp, "tiny", out_dir=tmp_path, progress=False)
    results = json.loads((out / "results.json").read_text())
    claims = results["claims"]
    assert claims and all(set(c) == {"id", "claim", "paper", "ours", "holds"} for c in claims)
    assert all(isinstance(c["holds"], bool) for c in claims)
    ids = {c["id"] for c in claims}
    summary = (out / "summary.md").read_text()
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == 3 and all(f"]({p})" in summary for p in pngs), "every figure is embedded in summary.md"
    for csv in ("trace_mean.csv", "trace_per_seed.csv", "checkpoints.csv", "heldout.csv", "emergence_vs_dt.csv"):
        assert (out / csv).stat().st_size > 0
    config = BY_NAME[name].profiles["tiny"].train
    S, T = config.num_seeds, config.num_steps
    masks_run = ["full"] if name == "ictd.pretrain" else ["full", "relaxed"]
    assert len((out / "trace_mean.csv").read_text().splitlines()) == 1 + T * len(masks_run)
    assert runs[0].cells_computed == (S + 1) * len(masks_run) and runs[0].cells_skipped == 0
    if name == "ictd.pretrain":
        assert {"v-sign-pattern", "a-diagonal", "masked-entries-zero", "dt-increases", "td-error-below-theta-star",
                "theta-star-beats-mirror", "v-rises-after-dt[mirrored]", "a-high-across-dt[paper]"} <= ids
        assert "does NOT show" in summary or "shows" in summary
    else:
        assert {"relaxed-mask-preserves-emergence[paper]", "relaxed-mask-preserves-emergence[mirrored]",
                "masked-entries-zero[full]", "masked-entries-zero[relaxed]"} <= ids
        cells = {m: json.loads((out / "cells" / f"{m}-seed=0.json").read_text()) for m in masks_run}
        A_full, A_relaxed = (np.array(cells[m]["params"]["final"]["A"]) for m in masks_run)
        d = config.d
        assert np.all(A_full[:d, d:] == 0) and np.any(A_relaxed[:d, d:] != 0)  # eq. (108) vs eq. (112)
        assert np.all(A_relaxed[d:, d:] == 0)
    assert all(c["holds"] for c in claims if c["id"].startswith("masked-entries-zero"))

    cell_bytes = {p.name: p.read_bytes() for p in (out / "cells").glob("*.json")}
    run_experiment(exp, "tiny", out_dir=tmp_path, progress=False)
    assert runs[1].cells_skipped == (S + 1) * len(masks_run) and runs[1].cells_computed == 0
    assert {p.name: p.read_bytes() for p in (out / "cells").glob("*.json")} == cell_bytes
    again = json.loads((out / "results.json").read_text())
    assert again["results"] == results["results"] and again["claims"] == claims

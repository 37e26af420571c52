"""The ictd.pretrain and ictd.mask-relaxation experiments: configs, the shared reporting of a trained setting
(experiments/cells.py, experiments/report.py) on synthetic seed records, both tiny profiles end to end (contract,
resume)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from memlab.catalog import EXPERIMENTS
from memlab.files import read_cell
from memlab.ictd.experiments.cells import evaluate_references, setting_from_cells, train_seed
from memlab.ictd.experiments.mask import MaskRelaxationConfig
from memlab.ictd.experiments.mask import analyse as analyse_mask
from memlab.ictd.experiments.pretrain import PretrainExperimentConfig
from memlab.ictd.experiments.pretrain import analyse as analyse_pretrain
from memlab.ictd.experiments.report import SettingNumbers, setting_claims
from memlab.ictd.experiments.setting import TRACE_FIELDS, HeldOut
from memlab.ictd.experiments.setting_tables import setting_results, setting_tables
from memlab.ictd.pretrain import PretrainConfig, mask_relaxation_config
from memlab.ictd.transformer import theta_star
from memlab.store import typed_result

BY_NAME = {name: EXPERIMENTS[name] for name in ("ictd.pretrain", "ictd.mask-relaxation")}


# --------------------------------------------------------------------------- configs and registry


def test_profiles_paper_sizes_and_validation():
    for exp in BY_NAME.values():
        assert {"tiny", "quick", "paper"} <= set(exp.profiles) and exp.paper == "softmax-transformers-in-context-td"
        for config in exp.profiles.values():
            config.validate()
    paper = BY_NAME["ictd.pretrain"].profiles["paper"].train
    assert paper == PretrainConfig(num_seeds=10)  # Table 1 exactly, with 10 seeds instead of 5 (issue 14)
    table1 = dict(m=64, d=4, gamma=0.9, n=10, tau=1.2, rho_end=0.0, num_layers=3, num_epochs=3000, num_seeds=10,
                  batch_size=64, minibatches_per_epoch=5, learning_rate=1e-3, init_gain=0.1, a_mask="full",
                  query_offset=0)
    assert {k: getattr(paper, k) for k in table1} == table1
    past = BY_NAME["ictd.pretrain"].profiles["paper-query-past"].train
    assert past == dataclasses.replace(paper, query_offset=1)  # the other layout, nothing else changed
    f5 = BY_NAME["ictd.mask-relaxation"].profiles["paper"].train
    assert f5 == mask_relaxation_config("full") and f5.num_steps == 9000 and f5.num_seeds == 10
    assert BY_NAME["ictd.mask-relaxation"].profiles["paper-query-past"].train == dataclasses.replace(f5, query_offset=1)
    with pytest.raises(ValueError, match="eval_tasks"):
        PretrainExperimentConfig(eval_tasks=0).validate()
    with pytest.raises(ValueError, match="num_bins"):
        PretrainExperimentConfig(num_bins=2.5).validate()
    with pytest.raises(ValueError, match="tau"):
        PretrainExperimentConfig(train=PretrainConfig(tau=0.0)).validate()
    with pytest.raises(ValueError, match="a_mask"):
        MaskRelaxationConfig(train=mask_relaxation_config("relaxed")).validate()


# --------------------------------------------------------------------------- a trained setting, synthetic


def _record(sign: float, T: int, mirror_score: float, seed: int) -> dict:
    """A ``train_seed`` record (as a sweep returns it) whose every checkpoint is sign * theta*: paper scores 0
    throughout, mirrored scores rising, d_t falling from 0.3 to 0.1."""
    V, A = (sign * np.asarray(x) for x in theta_star(4))
    ramp = np.linspace(0.0, 1.0, T)
    trace = {f: np.zeros(T) for f in TRACE_FIELDS} | {"V_em_neg": ramp ** 2, "A_em_neg": ramp,
                                                      "d_t": np.linspace(0.3, 0.1, T) + 0.01 * seed}
    params = {"V": V.tolist(), "A": A.tolist()}
    errors = {"abs_td_error": 0.3 + 0.1 * seed, "abs_value_error": 1.0}
    return {"trace": {f: x.tolist() for f, x in trace.items()}, "best_step": T - 1, "best_score": 0.0,
            "scan_best_step": 0, "mirror_step": T - 2, "mirror_score": mirror_score,
            "params": {n: params for n in ("final", "best", "mirror")},
            "eval": {n: errors for n in ("final", "best", "mirror")}}


REFERENCES = {"theta*": {"abs_td_error": 0.5, "abs_value_error": 1.0},
              "-theta*": {"abs_td_error": 0.4, "abs_value_error": 1.1},
              "zero": {"abs_td_error": 0.6, "abs_value_error": 0.9}}


def sweep_cells(slug: str, config: PretrainConfig, sign: float = -1.0) -> dict:
    """The cells' results as a sweep gives them back (``store.typed_result`` of the stored dicts)."""
    cells = {f"{slug}-seed={s}": typed_result(train_seed, _record(sign, config.num_steps, 0.8 + 0.1 * s, s))
             for s in range(config.num_seeds)}
    return cells | {f"{slug}-references": typed_result(evaluate_references, REFERENCES)}


def test_setting_claims_of_the_mirror_image():
    config = BY_NAME["ictd.pretrain"].profiles["tiny"].train
    T = config.num_steps
    st = setting_from_cells("Table 1", config, "full", sweep_cells("full", config), {"full-seed=0": 2.0})
    np.testing.assert_allclose(st.seconds, [2.0, np.nan])
    assert st.mirror.step.tolist() == [T - 2] * 2 and st.final.step.tolist() == [T - 1] * 2 and st.final.score is None
    np.testing.assert_allclose(st.best.heldout.abs_td_error, [0.3, 0.4])
    assert st.references["-theta*"] == HeldOut(0.4, 1.1) and st.trace.d_t.shape == (2, T)
    claims, numbers = setting_claims(st, "full")
    holds = {c["id"]: c["holds"] for c in claims}
    assert holds == {"best-checkpoint-emergence[full,paper]": False, "best-checkpoint-emergence[full,mirrored]": True,
                     "v-sign-pattern[full]": False, "a-diagonal[full]": True, "masked-entries-zero[full]": True}
    assert numbers == SettingNumbers(best_paper=0.0, best_mirrored=pytest.approx(0.85), A_diag=1.0,
                                     A_feat_diag_mean=-1.0)
    assert numbers.best("mirrored") == numbers.best_mirrored
    results = setting_results(st)
    assert results["heldout_abs_td_error"]["theta*"] == 0.5 and results["best_step"].tolist() == [T - 1] * 2
    tables = setting_tables([st], [], 4)
    assert len(tables["trace_mean.csv"][1]) == config.num_steps and len(tables["checkpoints.csv"][1]) == 3 * 2
    assert [row[1] for row in tables["heldout.csv"][1]][-3:] == ["theta*", "-theta*", "zero"]


def test_analyse_pretrain_and_mask_on_synthetic_records():
    cfg = BY_NAME["ictd.pretrain"].profiles["tiny"]
    s = analyse_pretrain(cfg, sweep_cells("full", cfg.train))
    assert s.d_start > s.d_end and s.along["mirrored"].direction == -1.0
    assert s.along["paper"].A_high_fraction == 0.0 and s.along["mirrored"].V_last_third_max > 0.5
    assert [c["id"] for c in s.common_claims][0] == "best-checkpoint-emergence[paper]"
    assert list(s.views) == ["paper", "mirrored"] and s.numbers.A_diag == 1.0
    cfg = BY_NAME["ictd.mask-relaxation"].profiles["tiny"]
    m = analyse_mask(cfg, sweep_cells("full", cfg.train) | sweep_cells("relaxed", cfg.train))
    assert list(m.settings) == ["full", "relaxed"] and m.pattern["full"] == ("(−, −, +)", 2)
    assert m.pattern["relaxed"].seeds == 2
    assert len(m.common_claims) == 10 and len(m.grid) == 2 and len(m.grid[0]) == 2
    assert m.numbers["relaxed"].A_feat_diag_mean == -1.0


# --------------------------------------------------------------------------- end to end, tiny profiles


@pytest.mark.parametrize("name", ["ictd.pretrain", "ictd.mask-relaxation"])
def test_tiny_profile_writes_the_contract_and_resumes(name, tmp_path, check_tiny_run):
    run = check_tiny_run(name, tmp_path)  # through the CLI and resumed (conftest.check_tiny_run)
    out, results, again = run.out, run.first, run.again
    assert results["blank_panels"] == []  # no figure panel without data and a word of why
    claims = results["claims"]
    assert claims and all({"id", "claim", "paper", "ours", "holds", "status"} <= set(c) for c in claims)
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
    assert results["cells"]["computed"] == (S + 1) * len(masks_run) and results["cells"]["resumed"] == 0
    if name == "ictd.pretrain":
        assert {"v-sign-pattern", "a-diagonal", "masked-entries-zero", "dt-increases", "td-error-below-theta-star",
                "theta-star-beats-mirror", "v-rises-after-dt[mirrored]", "a-high-across-dt[paper]"} <= ids
        assert "does NOT show" in summary or "shows" in summary
    else:
        assert {"relaxed-mask-preserves-emergence[paper]", "relaxed-mask-preserves-emergence[mirrored]",
                "masked-entries-zero[full]", "masked-entries-zero[relaxed]"} <= ids
        cells = {m: read_cell((out / "cells" / f"{m}-seed=0.json").read_text())[0] for m in masks_run}
        A_full, A_relaxed = (np.array(cells[m]["params"]["final"]["A"]) for m in masks_run)
        d = config.d
        assert np.all(A_full[:d, d:] == 0) and np.any(A_relaxed[:d, d:] != 0)  # eq. (108) vs eq. (112)
        assert np.all(A_relaxed[d:, d:] == 0)
    assert all(c["holds"] for c in claims if c["id"].startswith("masked-entries-zero"))

    assert again["cells"]["resumed"] == (S + 1) * len(masks_run) and again["cells"]["computed"] == 0
    assert again["results"] == results["results"] and again["claims"] == claims

"""The pissm experiments are registered and run end to end (tiny profile), resumably; NCLT via --data-dir."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from memlab import catalog, cli
from memlab.catalog import EXPERIMENTS
from memlab.pissm import runs
from memlab.pissm.baselines import ObservationOnly
from memlab.pissm.data.nclt import NCLT_LAYOUT
from memlab.pissm.train import TrainConfig
from memlab.runner import SetupError, run_experiment

_spec = importlib.util.spec_from_file_location("pissm_nclt_files", Path(__file__).with_name("test_nclt.py"))
_nclt_files = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_nclt_files)
write_session = _nclt_files.write_session  # NCLT files in the real format (tests/pissm/test_nclt.py)

ISSUE_EXPERIMENTS = {"pissm.table1", "pissm.stability", "pissm.pong-modes", "pissm.imputation"}


def test_every_issue_experiment_is_registered_with_its_profiles():
    assert ISSUE_EXPERIMENTS <= set(EXPERIMENTS)
    for name in ISSUE_EXPERIMENTS:
        exp = EXPERIMENTS[name]
        assert {"quick", "paper", "tiny"} <= set(exp.profiles), name
        assert exp.paper == "pi-ssm-hybrid-state-space"
        assert exp.profiles["paper"].layout == "paper"


def test_paper_profiles_use_the_paper_grids():
    stability = EXPERIMENTS["pissm.stability"].profiles["paper"]
    assert stability.iss_eps == (0.1, 0.15, 0.2, 0.25) and stability.clip_norms == (5.0, 10.0, 15.0, 20.0)
    assert stability.models == ("pissm-gru-tracking", "pissm-lstm-tracking")  # eq. (7)'s gain, fitted start
    prior = EXPERIMENTS["pissm.stability"].profiles["paper-prior-init"]  # the first runs, kept as an ablation
    assert prior.models == ("pissm-gru", "pissm-lstm") and dataclasses.replace(prior, models=stability.models) == \
        stability
    table1 = EXPERIMENTS["pissm.table1"].profiles["paper"]
    assert set(table1.datasets) == {"pong", "pong-0.01", "lorenz", "navier-stokes", "nclt"}
    assert {"pissm-gru-tracking", "pissm-lstm-tracking", "pissm-lg", "lg", "gru", "lstm", "observation"} <= \
        set(table1.models)
    assert EXPERIMENTS["pissm.table1"].profiles["paper-mixture"].estimator == "mixture"
    for name in ("paper", "paper-mixture", "paper-core", "quick"):  # one part: numbers independent of the devices
        assert EXPERIMENTS["pissm.table1"].profiles[name].gradient_parts == 1
    assert {"paper", "paper-core", "paper-mixture"} <= set(EXPERIMENTS["pissm.table1"].pool_profiles)
    with pytest.raises(ValueError, match="gradient_parts"):
        dataclasses.replace(table1, gradient_parts=0).validate()
    for name in ("paper", "paper-0.01"):  # the paper's data size, >= 20 epochs, both estimators (issue 14)
        modes = EXPERIMENTS["pissm.pong-modes"].profiles[name]
        assert modes.layout == "paper" and modes.epochs >= 20 and set(modes.estimators) == {"reinforce", "mixture"}


@pytest.mark.parametrize("name", sorted(ISSUE_EXPERIMENTS))
def test_tiny_profile_runs_and_resumes(name, tmp_path, check_tiny_run):
    check_tiny_run(name, tmp_path)


def _with_tiny(monkeypatch, name: str, **changes):
    """Make the catalog's ``name`` run its tiny profile with ``changes``."""
    exp = EXPERIMENTS[name]
    tiny = dataclasses.replace(exp.profiles["tiny"], **changes)
    monkeypatch.setitem(catalog.EXPERIMENTS, name, dataclasses.replace(exp, profiles={**exp.profiles, "tiny": tiny}))
    return catalog.EXPERIMENTS[name]


def test_table1_asked_for_nclt_without_its_data_says_where_to_get_it_and_runs_nothing(tmp_path, monkeypatch):
    """Data sets that name NCLT without --data-dir are refused before anything runs (all of Table 1's data sets, the
    paper profile, skip NCLT with a note instead)."""
    exp = _with_tiny(monkeypatch, "pissm.table1", datasets=("nclt",))
    with pytest.raises(SetupError, match=r"pass --data-dir DIR holding .*gps.csv.*robots.engin.umich.edu/nclt"):
        run_experiment(exp, profile="tiny", out_dir=tmp_path / "n", progress=False)
    assert not (tmp_path / "n").exists()


def test_table1_reads_nclt_from_data_dir(tmp_path, monkeypatch):
    data = tmp_path / "nclt"
    write_session(data, duration=NCLT_LAYOUT.total_steps + 40, gps_noise=3.0)
    _with_tiny(monkeypatch, "pissm.table1", datasets=("nclt",), models=("observation",))
    out = tmp_path / "o"
    args = ["run", "pissm.table1", "--profile", "tiny", "--out", str(out), "--no-progress", "--data-dir", str(data)]
    assert cli.main(args) == 0
    table = json.loads((out / "results.json").read_text())["results"]["table"]
    assert {row["dataset"] for row in table} == {"nclt"}
    assert all(row["ll_mean"] == row["ll_mean"] for row in table)  # finite numbers, not NaN
    summary = (out / "summary.md").read_text()
    assert "NCLT skipped" not in summary
    for row in table:  # Table 7's unit: 10 log10 of the MSE
        assert abs(row["filtered_mse_db"] - 10 * np.log10(row["filtered_mse_mean"])) < 1e-4  # float32
        assert f"| {row['filtered_mse_db']:.2f} |" in summary


def test_training_masks_remove_the_asked_fraction_and_the_observation_model_fits_only_what_is_kept():
    data = runs.load_dataset("pong", runs.LAYOUTS["tiny"]["pong"])
    complete = runs.training_masks(data, 0.0, jax.random.key(0))
    assert all(bool(np.all(m)) for m in complete)
    train_mask, validation_mask = runs.training_masks(data, 0.5, jax.random.key(0))
    T = data.train.y.shape[1]
    for mask, split in ((train_mask, data.train), (validation_mask, data.validation)):
        mask = np.asarray(mask)
        assert mask.shape == split.y.shape[:2] and np.all(mask[:, 0])
        np.testing.assert_array_equal(mask.sum(1), T - round(0.5 * T))
    assert not np.array_equal(np.asarray(train_mask),
                              np.asarray(runs.training_masks(data, 0.5, jax.random.key(1))[0]))

    key = jax.random.key(7)
    model, _ = runs.fit("observation", "pong", data, TrainConfig(epochs=1), key, missing=0.5)
    fit_mask, _ = runs.training_masks(data, 0.5, jax.random.split(key, 3)[2])  # fit's third key draws the masks
    expected = ObservationOnly.fit(np.asarray(data.train.y, np.float64), np.asarray(fit_mask))
    np.testing.assert_allclose(np.asarray(model.step_cov_raw), np.asarray(expected.step_cov_raw), rtol=1e-6)
    unmasked = ObservationOnly.fit(np.asarray(data.train.y, np.float64))
    assert not np.allclose(np.asarray(model.step_cov_raw), np.asarray(unmasked.step_cov_raw), rtol=1e-3)

"""Theorem 1 / Lemma 1 checks (verify.py) and ictd.verify (experiments/verify.py): the trial machinery is float64
and sees a wrong transformer, the analysis on synthetic cells, and the tiny profile end to end (contract, claims,
resume)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.catalog import EXPERIMENTS
from memlab.ictd import softmax_td as st
from memlab.ictd import transformer as tf
from memlab.ictd.experiments.verify import VerifyConfig, analyse, verify_cell
from memlab.ictd.verify import ZERO_FLOOR, log_discrepancy, trial_prompts, verify_trials
from memlab.store import typed_result

EXP = EXPERIMENTS["ictd.verify"]
TINY = EXP.profiles["tiny"]  # the helpers run on the tiny profile's shapes: the end-to-end run reuses compilations


def test_log_discrepancy_floors_exact_zeros():
    np.testing.assert_allclose(log_discrepancy([0.0, 1e-12, 1.0]), [np.log10(ZERO_FLOOR), -12.0, 0.0])


def test_verify_trial_float64_and_sensitive(x64):
    cfg = TINY
    X, R = trial_prompts(jax.random.split(jax.random.key(6), cfg.num_trials), cfg.num_states, cfg.d, cfg.gamma, cfg.n)
    assert X.shape == (cfg.num_trials, cfg.n + 1, cfg.d) and R.shape == (cfg.num_trials, cfg.n)
    assert X.dtype == jnp.float64
    out = {k: np.asarray(v) for k, v in
           verify_trials(X, R, cfg.gamma, cfg.num_layers, "softmax", cfg.alpha, cfg.feature_scale).items()}
    assert out["abs_tsm"].shape == (cfg.num_trials, cfg.num_layers + 1)
    assert out["rel_tsm"].max() <= 1e-13 and out["lemma1_rel"].max() <= 1e-13
    assert np.all(out["abs_tsm"][:, 0] == 0)  # v_0 = y_0 = 0 exactly
    assert out["y_max"].min() > 1e-2  # the values move
    # the same comparison sees a wrong transformer: alpha = 0.5 in the transformer only
    V, A = tf.theta_star(cfg.d)
    L = cfg.num_layers
    Xs = X[0] * cfg.feature_scale
    v = tf.readout(tf.forward(tf.make_prompt(Xs, R[0]), V, A, cfg.gamma, L, alphas=jnp.full(L, 0.5)))
    y = st.weighted_softmax_td(Xs, R[0], cfg.gamma, L)[:, -1]
    assert np.abs(np.asarray(v - y)).max() > 1e-3


def test_analyse_takes_the_worst_trial_and_both_forms():
    cfg = VerifyConfig(num_trials=2, num_layers=2, kinds=("softmax", "relu"))
    zeros = np.zeros((2, 3))

    def cell(scale):
        abs_tsm = np.array([[0.0, 1e-16, 1e-15], [0.0, 1e-14, 1e-13]]) * scale
        return typed_result(verify_cell, {
            "abs_tsm": abs_tsm.tolist(), "abs_dual": (2 * abs_tsm).tolist(), "rel_tsm": abs_tsm.tolist(),
            "rel_dual": (3 * abs_tsm).tolist(), "row_tsm": abs_tsm.tolist(), "lemma1": zeros.tolist(),
            "lemma1_rel": zeros.tolist(), "y_max": [1.0, 2.0 * scale], "unscaled_rel": [0.0, 1e-20],
            "unscaled_y_max": [5.0, 6.0]})

    s = analyse(cfg, {"kernel=softmax": cell(1.0), "kernel=relu": cell(10.0)})
    assert s.kinds == ["softmax", "relu"]
    soft, relu = s.per_kernel["softmax"], s.per_kernel["relu"]
    assert soft.max_E_tsm == pytest.approx(-13.0) and soft.max_E_dual == pytest.approx(np.log10(2e-13))
    assert soft.median_E_L == pytest.approx(np.median(np.log10([1e-15, 1e-13])))
    assert soft.max_rel == pytest.approx(3e-13) and relu.max_rel == pytest.approx(3e-12)
    assert relu.max_abs_y == 20.0 and soft.lemma1_max_abs == 0.0 and soft.unscaled_max_abs_y == 6.0
    assert s.trials["relu"].abs_tsm.shape == (2, 3)


@pytest.mark.parametrize("config, message", [
    (VerifyConfig(kinds=("softmax", "cubic")), "kind"),
    (VerifyConfig(kinds=()), "kinds"),
    (VerifyConfig(gamma=1.0), "gamma"),
    (VerifyConfig(num_trials=0), "num_trials"),
    (VerifyConfig(alpha=0.0), "alpha"),
])
def test_config_validation_names_the_problem(config, message):
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_profiles():
    assert EXP.paper == "softmax-transformers-in-context-td" and {"tiny", "quick", "paper"} <= set(EXP.profiles)
    for config in EXP.profiles.values():
        config.validate()
    verify = EXP.profiles["paper"]
    sizes = (verify.d, verify.n, verify.num_layers, verify.gamma, verify.alpha, verify.num_trials)
    assert sizes == (8, 20, 10, 0.9, 1.0, 50)  # App. F.6
    assert EXP.profiles["quick"] == verify


def test_tiny_profile_end_to_end_and_resume(tmp_path, check_tiny_run):
    run = check_tiny_run(EXP.name, tmp_path)  # through the CLI, resumed, and finished elsewhere
    first, second = run.first, run.again
    assert first["blank_panels"] == []  # no figure panel without data and a word of why
    claims = first["claims"]
    assert all({"id", "claim", "paper", "ours", "holds", "status"} <= set(c) and isinstance(c["holds"], bool)
               for c in claims)
    holds = {c["id"]: c["holds"] for c in claims}
    assert set(holds) == {"theorem-1[softmax]", "theorem-1[relu]", "theorem-1[elu1]", "theorem-1[rbf]", "lemma-1"}
    assert all(holds.values()), claims  # exact identities: they hold at any size
    summary = (run.out / "summary.md").read_text()
    assert "](verify.png)" in summary and (run.out / "discrepancy.csv").exists()
    assert len(list((run.out / "cells").glob("*.json"))) == 4  # one cell per kernel
    assert first["cells"]["computed"] == 4 and second["cells"]["computed"] == 0 and second["cells"]["resumed"] == 4
    assert first["results"] == second["results"] and first["claims"] == second["claims"]

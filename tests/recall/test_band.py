"""The achievable band (memlab.recall.band) and the well-posed linear target, against independent references: the
task's own JAX sampler with its label noise, closed-form chi-square risks, the true coefficients behind each pmf,
and the exact risk of the plug-in estimator of a linear functional."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import stats

from memlab.recall.band import (
    _features,
    _reconstruct,
    achievable_band,
    excess_risk,
    fit_predictor,
    pmf_features,
    predictor_risk,
    recallable_value,
    seen_pmf,
)
from memlab.recall.task import RecallTask, baseline_mse, content_pmf, sample, sample_coeffs64, scale_floor_mse


def test_the_risk_decomposition_matches_the_task_sampler_with_its_noise():
    """floor + c E[(r - m)^2] against the mean of (Y - g k m(pmf))^2 over examples of ``sample`` (float32 JAX, label
    noise, R = |Z|^2 drawn, not integrated out), for the fitted pmf predictor."""
    task = RecallTask(alpha=1.0, context_length=1)
    m = fit_predictor(task, None, num_fit=20_000)
    b = sample(jax.random.key(11), 40_000, task)
    idx = np.arange(40_000), np.asarray(b.queried)
    pmf = content_pmf(np.asarray(b.coeffs, float)[idx], task)  # float64 pmf of the recalled measure
    direct = (np.asarray(b.y, float) - np.asarray(b.query[:, 0], float) * 15 * m(pmf)) ** 2
    risk, stderr = predictor_risk(task, None, num_fit=20_000, num_eval=40_000)
    assert abs(direct.mean() - risk) < 3 * np.hypot(direct.std() / np.sqrt(len(direct)), stderr)
    assert scale_floor_mse(task) < risk < 0.7 * baseline_mse(task)["tag_only"]


def test_predicting_the_mean_of_r_gives_the_tag_only_risk():
    """floor + c Var(r) is the closed-form tag-only risk E[g^2] 2 sum lambda^2 + sigma^2 (A.1) and the Monte-Carlo one
    (linear): the decomposition is the same for every predictor."""
    for target in ("a1", "linear"):
        task = RecallTask(alpha=0.75, target=target, context_length=1)
        r = recallable_value(sample_coeffs64(400_000, task, 3), task)
        assert scale_floor_mse(task) + excess_risk(task) * r.var() == pytest.approx(baseline_mse(task)["tag_only"],
                                                                                     rel=0.01)


def test_the_exact_pmf_determines_the_direction_where_it_has_k_support_points():
    """Where the pmf has >= k = 15 support points the system fixes Z up to scale; in float64 the reconstruction is
    exact wherever the system is well conditioned (the sines restricted to a short interval are nearly dependent)."""
    task = RecallTask(alpha=0.75, context_length=1)
    Z = sample_coeffs64(2000, task, 5)
    p = content_pmf(Z, task)
    group, svd = pmf_features(p, task)
    assert np.all(p[group == 1] == 1 / 32)  # end-point mass: the degenerate pmfs only
    full = (group == 2) & (svd[1][:, -1] > 1e-7 * svd[1][:, 0])
    assert full.mean() > 0.2
    z = _reconstruct(p, svd, 1e-12)[full]
    u2 = Z[full, 1:] ** 2 / (Z[full, 1:] ** 2).sum(1, keepdims=True)
    np.testing.assert_allclose(z**2 / (z**2).sum(1, keepdims=True), u2, atol=1e-6)
    assert np.all(np.sign(z * Z[full, 1:]) >= 0)  # the same direction, not its opposite
    assert _features(p, svd, 1e-12).shape == (2000, 2 + 32 + 15)


def test_band_is_ordered_and_the_context_predictor_improves_with_t():
    """The exact pmf's information sits partly in float64 details of p (directions with tiny lambda_j) that no finite
    context shows: even at T = 10^7 the context predictor stays above the measure one (0.21 against 0.17 at alpha = 1,
    measured), so only the order is asserted."""
    task = RecallTask(alpha=1.0, context_length=5000)
    band = achievable_band(task, num_fit=10_000, num_eval=10_000)
    se = band.context_stderr + band.measure_stderr
    assert band.floor < band.measure < band.context < band.tag_only
    one_token = predictor_risk(RecallTask(alpha=1.0, context_length=1), 1, 10_000, 10_000)[0]
    huge = predictor_risk(RecallTask(alpha=1.0, context_length=10**7), 10**7, 10_000, 10_000)[0]
    assert one_token > 0.95 * band.tag_only  # one token, half the time of the other tag: nearly nothing
    assert band.measure - 3 * se < huge < band.context - 3 * se


def test_empirical_pmf_counts_the_queried_tokens():
    task = RecallTask(alpha=1.0)
    Z = sample_coeffs64(3000, task, 8)
    p_hat = seen_pmf(Z, task, 400, np.random.default_rng(0))
    count = np.rint(p_hat.sum(1) * 0 + 1)  # every row sums to 1 unless no token of the tag was drawn (P = 2^-400)
    np.testing.assert_allclose(p_hat.sum(1), count)
    n_tokens = np.array([np.gcd.reduce(np.rint(row * 400 * 2).astype(int)) for row in p_hat[:5]])
    assert np.all(n_tokens >= 1)
    # pooled over draws, the cell frequencies follow the pmf: chi-square on one draw's 10^6-token version
    one = seen_pmf(Z[:1], task, 2_000_000, np.random.default_rng(1))[0]
    p = content_pmf(Z[:1], task)[0]
    keep = p > 0
    assert np.all(one[~keep] == 0)
    n = 1_000_000
    chi2 = (((one[keep] - p[keep]) * n) ** 2 / (p[keep] * n)).sum()
    assert chi2 < stats.chi2.ppf(0.999, keep.sum() - 1) * 1.5


def test_linear_target_oracle_is_the_noise_and_the_context_predictor_beats_the_plug_in():
    """Knowing mu, Y - xi is known: the measure predictor reaches sigma^2. With a context of T tokens, the plug-in
    estimate int h dp_hat has risk sigma^2 + E[g^2] (E_mu[Var_mu h] E[1/N; N > 0] + P(N = 0) Var L), N ~ Bin(T, 1/2):
    an independent reference that the fitted context predictor (which also uses the pmf's form) must not exceed."""
    T = 60
    task = RecallTask(alpha=1.0, target="linear", context_length=T)
    band = achievable_band(task, num_fit=10_000, num_eval=10_000)
    assert band.measure == pytest.approx(task.noise_std**2, rel=1e-4) and band.floor == task.noise_std**2
    Z = sample_coeffs64(200_000, task, 9)
    p, h = content_pmf(Z, task), task.eigenvalues[1:] @ task.basis[1:]
    var_h = (p * h**2).sum(1) - (p @ h) ** 2
    N = np.arange(1, T + 1)
    inv_n = (stats.binom.pmf(N, T, 0.5) / N).sum()
    plug_in = task.noise_std**2 + var_h.mean() * inv_n + 0.5**T * (p @ h).var()
    assert band.context < plug_in + 3 * band.context_stderr
    assert band.context > 2 * task.noise_std**2  # 30 tokens do not reveal mu (measured: 0.6 of the plug-in)
    assert band.context < 0.1 * band.tag_only


def test_linear_target_is_the_measure_functional_and_its_baselines_match_monte_carlo():
    task = RecallTask(alpha=0.75, target="linear", context_length=3)
    b = sample(jax.random.key(2), 20_000, task)
    idx = np.arange(20_000), np.asarray(b.queried)
    pmf = np.asarray(b.pmf, float)[idx]
    x = task.grid
    h = sum(np.exp(-j**0.75) * np.sqrt(2) * np.sin(np.pi * j * x) for j in range(1, 16))  # by hand, not the basis
    h[[0, -1]] = 0.0
    np.testing.assert_allclose(np.asarray(b.y_clean), np.asarray(b.query[:, 0]) * (pmf @ h), rtol=2e-5, atol=2e-6)
    y, q = np.asarray(b.y, float), np.asarray(b.query[:, 0], float)
    exact = baseline_mse(task)
    assert np.mean(y**2) == pytest.approx(exact["mean"], rel=0.03)
    assert np.mean((y - q * (pmf @ h).mean()) ** 2) == pytest.approx(exact["tag_only"], rel=0.04)
    with pytest.raises(ValueError, match="unknown target"):
        RecallTask(target="quadratic")

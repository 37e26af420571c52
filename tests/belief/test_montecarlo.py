"""Monte-Carlo decoding error p_k, eq. (19), section 6.1 and Appendix E.1.

Statistical checks use fixed seeds and binomial standard errors: sigma = sqrt(p (1 - p) / n); a difference of
two independent estimates is compared with Z_MAX standard errors of the difference.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.belief.alf import ALF, alf_filter, delta_schedule
from memlab.belief.filters import LOF, lof_reference
from memlab.belief.hmm import HMM, ControlledHMM, sample
from memlab.belief.montecarlo import cumulative_columns, decoding_error, draw, error_curves

Z_MAX = 4.5  # standard errors allowed between two estimates of the same p_k (K <= 20 comparisons per test)
D2 = np.array([[0.0, 1.0], [1.0, 0.0]])
E2 = np.array([[0.9, 0.1], [0.1, 0.9]])


def eq47(eps, pi0=(1.0, 0.0)):
    """The HMM of eq. (47) with pi0 of Appendix E.1, float32."""
    T = np.array([[eps, 1 - eps], [1 - eps, eps]])
    return HMM(jnp.asarray(T, jnp.float32), jnp.asarray(E2, jnp.float32), jnp.asarray(pi0, jnp.float32))


def sigma(p, n):
    return np.sqrt(np.clip(p * (1 - p), 1e-4, None) / n)  # floor: p near 0 still gets a tolerance


def expected_error(w, x):
    """NumPy: 1 - 1{x maximal} / #maximisers, w (..., N), x (...) int."""
    w = np.asarray(w)
    is_max = w == w.max(axis=-1, keepdims=True)
    hit = np.take_along_axis(is_max, np.asarray(x)[..., None], axis=-1)[..., 0]
    return 1.0 - hit / is_max.sum(axis=-1)


# ------------------------------------------------------------------ decoding_error, eq. (19)


def test_decoding_error_exact_values_with_uniform_tie_breaking():
    inf = jnp.inf
    w = jnp.array([
        [0.0, 1.0, -1.0],  # unique max at the true state 1
        [0.0, 1.0, -1.0],  # unique max, true state 0
        [2.0, 2.0, 0.0],  # tie of two, truth among them
        [2.0, 2.0, 0.0],  # tie of two, truth outside
        [1.0, 1.0, 1.0],  # tie of three
        [-inf, -inf, -inf],  # nothing known: a uniform guess
        [-inf, -inf, -3.0],  # -inf entries are never maximal
    ])
    x = np.array([1, 0, 1, 2, 0, 2, 2])
    expect = np.array([0.0, 1.0, 0.5, 1.0, 2 / 3, 2 / 3, 0.0])
    out = decoding_error(w, jnp.asarray(x[:, None] == np.arange(3)))
    np.testing.assert_allclose(out, expect, rtol=1e-6)
    np.testing.assert_allclose(expected_error(w, x), expect, rtol=1e-12)  # the reference agrees


def test_decoding_error_does_not_hide_nan_logits():
    out = decoding_error(jnp.array([[jnp.nan, 0.0]]), jnp.array([[True, False]]))
    assert np.isnan(np.asarray(out)).all()


# ------------------------------------------------------------------ against an independent estimate


def _independent_curves(model, w0s, key, n, K, alfs=(), controlled=False):
    """p_k from `sample` + `lof_reference` / `alf_filter` + NumPy decoding (another code path), (K, F)."""
    acts = np.random.default_rng(0).integers(0, model.num_actions, size=(n, K)) if controlled else None
    tr = sample(model, key, K, batch=n, actions=None if acts is None else jnp.asarray(acts))
    ys, x = tr.observations, np.asarray(tr.states[:, 1:])
    a_in = jnp.asarray(acts) if controlled else jnp.zeros((n, K), jnp.int32)
    curves = []
    for w0 in w0s:
        w = jax.vmap(lambda y, a, w0=w0: lof_reference(model, y, w0=w0, actions=a if controlled else None).logits)(
            ys, a_in)
        curves.append(expected_error(w, x).mean(axis=0))
    for alf in alfs:
        w = jax.vmap(lambda y, a, alf=alf: alf_filter(alf, y, actions=a if controlled else None).logits)(ys, a_in)
        curves.append(expected_error(w, x).mean(axis=0))
    return np.stack(curves, axis=1)


def _assert_same_p(p1, p2, n1, n2):
    pbar = (p1 * n1 + p2 * n2) / (n1 + n2)
    tol = Z_MAX * np.sqrt(np.clip(pbar * (1 - pbar), 1e-4, None) * (1 / n1 + 1 / n2))
    assert np.all(np.abs(p1 - p2) <= tol), (p1, p2, tol)


def test_lof_curve_equals_an_independent_estimate():
    """N = 3, a zero in pi0 (-inf initial logit) and in E; the LOF with w0 = log pi0 and with a wrong prior."""
    T = np.array([[0.8, 0.1, 0.3], [0.15, 0.7, 0.1], [0.05, 0.2, 0.6]])
    E = np.array([[0.7, 0.2, 0.0], [0.3, 0.8, 1.0]])
    model = HMM(jnp.asarray(T, jnp.float32), jnp.asarray(E, jnp.float32), jnp.array([0.7, 0.0, 0.3]))
    n, K = 4000, 15
    w0 = jnp.log(jnp.array([0.05, 0.9, 0.05]))  # a wrong prior: it favours x_0 = 1, which pi0 rules out
    filters = [LOF.of(model), LOF.of(model, w0=w0, normalize=False)]
    ours = error_curves(model, filters, jax.random.key(1), n, K).p
    ref = _independent_curves(model, [jnp.log(model.pi0), w0], jax.random.key(2), n, K)
    assert ours.shape == ref.shape == (K, 2)
    assert ref[:, 0].max() > 0.15 and ref[0, 1] > ref[0, 0] + 0.05  # non-trivial curves that differ
    _assert_same_p(ours, ref, n, n)


def test_controlled_curves_equal_an_independent_estimate():
    """error_curves draws actions uniformly at random: the LOF and the time-varying ALF, eq. (46)."""
    rng = np.random.default_rng(3)
    N, A = 3, 2
    P = np.stack([np.eye(N), np.eye(N)[:, [1, 2, 0]]])
    T = 0.9 * P + 0.1 * rng.dirichlet(np.ones(N), size=(A, N)).transpose(0, 2, 1)
    E = np.array([[0.6, 0.3, 0.1], [0.4, 0.7, 0.9]])
    model = ControlledHMM(jnp.asarray(T, jnp.float32), jnp.asarray(E, jnp.float32), jnp.ones(N) / N)
    alf = ALF.time_varying(P, jnp.asarray(E, jnp.float32), 0.2)
    n, K = 4000, 12
    ours = error_curves(model, [LOF.of(model), alf], jax.random.key(4), n, K).p
    ref = _independent_curves(model, [jnp.log(model.pi0)], jax.random.key(5), n, K, alfs=[alf], controlled=True)
    _assert_same_p(ours, ref, n, n)


# ------------------------------------------------------------------ Bayes optimality and Appendix E.1


def test_lof_error_is_below_every_alf_bayes_optimality():
    eps, n, K = 0.02, 4000, 40  # at eps = 0.1 the observation alone is already optimal (LOF = ALF with delta = 1)
    model = eq47(eps)
    alfs = [ALF.time_invariant(D2, E2, float(delta_schedule(s, eps))) for s in ("sqrt", "log", "eps2", "zero", "one")]
    p = error_curves(model, [LOF.of(model)] + alfs, jax.random.key(6), n, K).p
    s = sigma(p, n)
    for f in range(1, p.shape[1]):
        assert np.all(p[:, 0] <= p[:, f] + Z_MAX * np.sqrt(s[:, 0] ** 2 + s[:, f] ** 2)), f
        assert p[:, 0].mean() <= p[:, f].mean() + 3 * s[:, f].max()  # the time average, not more noisy
    best = p[10:, 1:].mean(axis=0).min()  # measured: LOF 0.037, best ALF 0.054 (log)
    assert p[10:, 0].mean() < best - 3 * sigma(best, n)  # strictly better here (sigma of a mean <= one step's)


def test_first_step_error_is_one_tenth_appendix_E1():
    """w0 = 0: w_1 = delta log(E^T y_1) (ALF) or log(T 1) + log(E^T y_1) = log(E^T y_1) (LOF): the decision is
    the observation, wrong with probability 0.1 for every eps; delta = 0 leaves a tie (error 1/2)."""
    eps, n = 0.005, 20_000
    model = eq47(eps)
    filters = [LOF.of(model, w0=jnp.zeros(2)), LOF.of(model, w0=jnp.zeros(2), normalize=False)]
    filters += [ALF.time_invariant(D2, E2, float(delta_schedule(s, eps)), w0=np.zeros(2))
                for s in ("sqrt", "log", "eps2", "one", "zero")]
    filters += [LOF.of(model)]  # w0 = log pi0 = [0, -inf]: decodes x_1 = x_2 ... = the D-path, error eps
    p1 = error_curves(model, filters, jax.random.key(7), n, 1).p[0]
    assert abs(p1[0] - 0.1) <= Z_MAX * sigma(0.1, n)
    np.testing.assert_array_equal(p1[1:6], p1[0])  # the same decisions on the same runs
    assert p1[6] == 0.5
    assert abs(p1[7] - eps) <= Z_MAX * sigma(eps, n)


# ------------------------------------------------------------------ determinism and chunking


def test_same_key_same_numbers_and_chunking_as_documented():
    """Docstring: chunk c uses key fold_in(key, c), so the numbers depend only on (key, num_runs, chunk).
    Hence chunk >= num_runs (one chunk, c = 0) gives identical numbers; a smaller chunk gives other
    random draws (not identical) of the same p_k, and p stays an average over runs, not over chunks."""
    model = eq47(0.1)
    filters = [LOF.of(model), ALF.time_invariant(D2, E2, 0.2, w0=np.zeros(2))]
    key, n, K = jax.random.key(8), 200, 6
    whole = error_curves(model, filters, key, n, K, chunk=200)
    assert whole.num_runs == n and whole.p.shape == (K, 2)
    np.testing.assert_array_equal(whole.p, error_curves(model, filters, key, n, K, chunk=10_000).p)
    m = 300  # chunks of 200 and 100: uneven, so a mean of chunk means would differ from the mean over runs
    chunked = error_curves(model, filters, key, m, K, chunk=200)
    np.testing.assert_array_equal(chunked.p, error_curves(model, filters, key, m, K, chunk=200).p)
    _assert_same_p(chunked.p, whole.p, m, n)
    for p, runs in ((whole.p, n), (chunked.p, m)):  # N = 2: each run contributes 0, 1/2 or 1
        np.testing.assert_allclose(2 * runs * p, np.round(2 * runs * p), atol=1e-6)
    other = error_curves(model, filters, jax.random.key(9), n, K, chunk=200)
    assert not np.array_equal(other.p, whole.p)
    np.testing.assert_allclose(whole.stderr(), np.sqrt(whole.p * (1 - whole.p) / n))


def test_bad_input_raises():
    model = eq47(0.1)
    f = [LOF.of(model)]
    key = jax.random.key(0)
    for bad in [dict(num_runs=0, num_steps=1), dict(num_runs=1, num_steps=0), dict(num_runs=1, num_steps=1, chunk=0)]:
        with pytest.raises(ValueError, match=">= 1"):
            error_curves(model, f, key, **bad)
    with pytest.raises(ValueError, match="at least one filter"):
        error_curves(model, [], key, 10, 10)
    with pytest.raises(ValueError, match="w0 of shape"):
        error_curves(model, [LOF.of(model, w0=jnp.zeros(3))], key, 10, 10)


def test_inverse_cdf_never_draws_a_zero_probability_state():
    cdf = cumulative_columns(jnp.array([[0.0, 0.5], [1.0, 0.5], [0.0, 0.0]]))  # columns p = [0, 1, 0], [.5, .5, 0]
    u = jnp.array([0.0, 0.5, 1.0 - 1e-7])
    assert draw(cdf[jnp.zeros(3, int)], u).tolist() == [1, 1, 1]
    assert draw(cdf[jnp.ones(3, int)], u).tolist() == [0, 1, 1]


# ------------------------------------------------------------------ section 6.1 / Fig. 1: valid vs invalid delta


def test_valid_delta_vanishes_invalid_eps2_does_not():
    """p_1000 at 1/eps = 30 and 250 (the ends of Fig. 1), 2,000 runs each, w0 = 0 and pi0 = [1, 0] (Appendix E.1).

    Measured with these seeds: delta = 0.7/log(1/eps): 0.066 -> 0.019 (sigma 0.006, 0.003);
    delta = eps^2: 0.44 -> 0.40 (sigma 0.011). The eps^2 curve does drop a little in 1,000 steps (at 1/eps = 250
    only ~4 irregular jumps happen, so some runs have not lost track yet), but it stays near 0.4 instead of
    vanishing. Asserted: the valid p_1000 decreases by more than Z_MAX standard errors of the difference; the
    eps^2 one stays above 0.3 and does not halve (both beyond Z_MAX standard errors)."""
    n, K, p = 2000, 1000, {}
    for inv_eps in (30, 250):
        eps = 1.0 / inv_eps
        filters = [ALF.time_invariant(D2, E2, float(delta_schedule(s, eps)), w0=np.zeros(2)) for s in ("log", "eps2")]
        p[inv_eps] = error_curves(eq47(eps), filters, jax.random.key(inv_eps), n, K).p[-1]
    s30, s250 = sigma(p[30], n), sigma(p[250], n)
    assert p[250][0] < p[30][0] - Z_MAX * np.hypot(s30[0], s250[0])  # valid: clearly smaller
    assert p[250][1] > 0.3 + Z_MAX * s250[1] and p[30][1] > 0.3 + Z_MAX * s30[1]  # eps^2: stays large
    assert p[250][1] > 0.5 * p[30][1] + Z_MAX * np.hypot(0.5 * s30[1], s250[1])  # eps^2: does not halve
    assert p[250][0] / p[30][0] < 0.5 < p[250][1] / p[30][1]

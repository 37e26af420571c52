"""The adaptive logit filter (ALF), eqs. (24), (26), (46), (48)-(49) and Lemma D.11.

The time-invariant reference runs eq. (24) literally: in the recurrent-first labels of eq. (22)-(23)
(relabelling from ``decompose_deterministic(..., form="recurrent-first")``), with the block matrix
blockdiag(P, I_r) as a matrix and the convention -inf * 0 = 0, then maps back to the original labels.
"""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import block_diag

from memlab.belief import random_models as cases
from memlab.belief.alf import (
    ALF,
    alf_backbone,
    alf_filter,
    alf_initial_logits,
    alf_step,
    delta_is_valid,
    delta_label,
    delta_schedule,
)
from memlab.belief.filters import bayes_decode
from memlab.belief.structure import decompose_deterministic

SCHEDULES = ["sqrt", "log", "eps2", "zero", "one"]
CASES = [(2, 0, 1), (4, 1, 1), (5, 2, 2), (7, 3, 3), (8, 4, 2)]  # (N, r, chain) of the backbone D




def _log(p):
    with np.errstate(divide="ignore"):
        return np.log(p)


def ext_scale(c, v):
    """c * v with 0 * (-inf) = 0."""
    with np.errstate(invalid="ignore"):
        return np.where(c == 0, 0.0, c * v)


def ext_matvec(B, v):
    """B @ v summing only over the nonzero entries of B (0 * (-inf) = 0)."""
    return np.array([np.sum(B[i, B[i] != 0] * v[B[i] != 0]) for i in range(len(B))])


def nearly_deterministic_system(rng, N, r, chain, eps=0.02, S=3):
    """T = D + eps Q (Def. 5.1, eq. 21) with r transient states; E > 0 on recurrent states (Assumption 5.6a),
    zeros allowed on transient ones; a random pi0 over all states."""
    D, transient = cases.random_deterministic(rng, N, r, chain)
    n = D.argmax(axis=0)
    Q = rng.random((N, N)) * (rng.random((N, N)) < 0.5)
    Q[n, np.arange(N)] = 0.0
    Q[n, np.arange(N)] = -Q.sum(axis=0)  # eq. (21)
    T = D + eps * Q
    E = cases.random_columns(rng, S, N)
    E[:, transient] = cases.random_columns(rng, S, int(transient.sum()), zero_frac=0.5)
    E[:, np.flatnonzero(transient)[:1]] = np.eye(S)[:, :1]  # at least one impossible observation (log 0 = -inf)
    return D, T, E, rng.dirichlet(np.ones(N)), transient




def reference_alf(D, E, delta, w0, ys):
    """eq. (24) in recurrent-first labels, returned in the original labels, (K, N)."""
    dec = decompose_deterministic(D, form="recurrent-first")
    n = len(D) - dec.r
    assert np.array_equal(dec.relabelled[:n, :n], dec.P) and not dec.relabelled[n:, :n].any()  # eq. (22)
    B = block_diag(dec.P, np.eye(dec.r))
    v, log_E, out = np.asarray(w0, float)[dec.order], _log(E[:, dec.order]), []
    for y in ys:
        v = ext_matvec(B, ext_scale(1 - delta, v)) + ext_scale(delta, log_E[y])  # eq. (24)
        w = np.empty(len(D))
        w[dec.order] = v
        out.append(w)
    return np.array(out)


def reference_alf_time_varying(P, E, delta, w0, ys, actions):
    """eq. (46): w_k = P(a_{k-1}) (1 - delta) w_{k-1} + delta log(E^T y_k), finite w0."""
    w, out = np.asarray(w0, float), []
    for y, a in zip(ys, actions):
        w = P[a] @ ((1 - delta) * w) + delta * np.log(E[y])  # eq. (46)
        out.append(w)
    return np.array(out)


def assert_logits_close(w, ref, rtol):
    w, ref = np.asarray(w, np.float64), np.asarray(ref, np.float64)
    assert not np.isnan(w).any() and not np.any(w == np.inf)
    np.testing.assert_array_equal(np.isneginf(w), np.isneginf(ref))
    fin = np.isfinite(ref)
    scale = max(1.0, np.abs(ref[fin]).max()) if fin.any() else 1.0
    np.testing.assert_allclose(w[fin], ref[fin], rtol=rtol, atol=rtol * scale)


# jitted once: the eager forms compile per call
alf_serial = jax.jit(lambda alf, ys: alf_filter(alf, ys).logits)
alf_parallel = jax.jit(lambda alf, ys: alf_filter(alf, ys, parallel=True).logits)
alf_serial_tv = jax.jit(lambda alf, ys, a: alf_filter(alf, ys, actions=a).logits)
alf_parallel_tv = jax.jit(lambda alf, ys, a: alf_filter(alf, ys, actions=a, parallel=True).logits)


# ------------------------------------------------------------------ schedules, eqs. (48)-(49)


def test_schedule_values():
    eps = np.array([1 / 30, 1 / 100, 1 / 250])
    np.testing.assert_allclose(delta_schedule("sqrt", eps), np.sqrt(eps), rtol=1e-15)
    np.testing.assert_allclose(delta_schedule("log", eps), 0.7 / np.log(1 / eps), rtol=1e-15)
    np.testing.assert_allclose(delta_schedule("log", eps, lam=0.3), 0.3 / np.log(1 / eps), rtol=1e-15)
    np.testing.assert_allclose(delta_schedule("eps2", eps), eps ** 2, rtol=1e-15)
    np.testing.assert_array_equal(delta_schedule("zero", eps), np.zeros(3))
    np.testing.assert_array_equal(delta_schedule("one", eps), np.ones(3))
    assert np.ndim(delta_schedule("log", 0.01)) == 0
    assert delta_label("log") == "δ = 0.7/log(1/ε)" and delta_label("eps2") == "δ = ε²"


@pytest.mark.parametrize("name", SCHEDULES)
def test_validity_flags_follow_conditions_31_32(name):
    """Read the limits of (31) delta -> 0 and (32) eps/delta -> 0 off the schedule at tiny eps."""
    eps = np.array([1e-50, 1e-100, 1e-200])
    delta = delta_schedule(name, eps)
    with np.errstate(divide="ignore"):
        ratio = eps / delta
    cond31 = np.all(np.diff(delta) <= 0) and delta[-1] < 1e-2
    cond32 = np.isfinite(ratio).all() and np.all(np.diff(ratio) <= 0) and ratio[-1] < 1e-2
    assert delta_is_valid(name) == (cond31 and cond32)
    assert delta_is_valid(name) == (name in ("sqrt", "log"))  # eq. (48) valid, eq. (49) invalid


def test_schedule_errors():
    with pytest.raises(ValueError, match="unknown delta schedule"):
        delta_schedule("half", 0.1)
    with pytest.raises(ValueError, match="unknown"):
        delta_is_valid("half")
    with pytest.raises(ValueError, match="unknown"):
        delta_label("half")
    for eps in (0.0, 1.0, -0.1, [0.1, 1.5]):
        with pytest.raises(ValueError, match=r"\(0, 1\)"):
            delta_schedule("sqrt", eps)


# ------------------------------------------------------------------ backbone and initial logits


@pytest.mark.parametrize("N, r, chain", CASES)
def test_backbone_is_blockdiag_P_I_in_original_labels(N, r, chain):
    rng = np.random.default_rng(N + 10 * r)
    D, transient = cases.random_deterministic(rng, N, r, chain)
    dec = decompose_deterministic(D, form="recurrent-first")
    Pm = np.eye(N)[:, dec.order]  # relabelled = Pm^T D Pm
    A = Pm @ block_diag(dec.P, np.eye(dec.r)) @ Pm.T  # eq. (24)'s matrix in original labels
    src = alf_backbone(D)
    w = rng.normal(size=N)
    np.testing.assert_array_equal(w[src], A @ w)
    np.testing.assert_array_equal(src[transient], np.flatnonzero(transient))  # I_r on the transient states


@pytest.mark.parametrize("N, r, chain", CASES)
def test_initial_logits_assumption_5_3(N, r, chain):
    rng = np.random.default_rng(N)
    D, transient = cases.random_deterministic(rng, N, r, chain)
    w0 = alf_initial_logits(D)
    assert np.isneginf(w0[transient]).all() and np.all(w0[~transient] == 0)
    w0_tilde = rng.normal(size=N - r)
    w0 = alf_initial_logits(D, w0_tilde)
    dec = decompose_deterministic(D, form="recurrent-first")
    np.testing.assert_array_equal(w0[dec.order], np.concatenate([w0_tilde, np.full(r, -np.inf)]))  # eq. (26)
    with pytest.raises(ValueError, match="w0_tilde"):
        alf_initial_logits(D, np.zeros(N - r + 1))
    with pytest.raises(ValueError, match="w0_tilde"):
        alf_initial_logits(D, np.full(N - r, np.inf))
    E = cases.random_columns(rng, 3, N)
    np.testing.assert_array_equal(ALF.time_invariant(D, E, 0.1).w0, alf_initial_logits(D))  # the default


# ------------------------------------------------------------------ eq. (24) against the reference


@pytest.mark.parametrize("N, r, chain", CASES)
def test_alf_filter_matches_eq24(x64, N, r, chain):
    rng = np.random.default_rng(1000 + N + r)
    D, T, E, pi0, transient = nearly_deterministic_system(rng, N, r, chain)
    ys = cases.simulate_observations(rng, T, E, pi0, 80)
    for delta, w0 in [(rng.uniform(0.05, 0.5), alf_initial_logits(D)),
                      (rng.uniform(0.05, 0.5), alf_initial_logits(D, rng.normal(size=N - r) * 2)),
                      (0.7 / np.log(1 / 0.02), rng.normal(size=N))]:  # also a finite w0 on transient states
        alf = ALF.time_invariant(D, E, delta, w0=w0)
        ref = reference_alf(D, E, delta, w0, ys)
        assert_logits_close(alf_serial(alf, ys), ref, 1e-12)
        if N == 7:  # the parallel form compiles slowly: one case here, more in test_parallel_equals_serial
            assert_logits_close(alf_parallel(alf, ys), ref, 1e-10)


@pytest.mark.parametrize("N, r, chain", [c for c in CASES if c[1] > 0])
def test_minus_inf_initialisation_keeps_decoding_on_recurrent_states(N, r, chain):
    """Assumption 5.3: for delta < 1 the transient logits stay -inf, so argmax is always recurrent."""
    rng = np.random.default_rng(2000 + N)
    D, T, E, pi0, transient = nearly_deterministic_system(rng, N, r, chain)
    ys = cases.simulate_observations(rng, T, E, pi0, 150)
    for delta in (0.0, 0.02, 0.3, 0.999):
        w = np.asarray(alf_serial(ALF.time_invariant(D, E, delta), ys))
        assert not np.isnan(w).any()
        assert np.isneginf(w[:, transient]).all()
        assert np.isfinite(w[:, ~transient]).all()  # E > 0 on recurrent states (Assumption 5.6a)
        assert not transient[np.asarray(bayes_decode(jnp.asarray(w)))].any()


@pytest.mark.parametrize("N, r, chain", CASES)
def test_delta_zero_and_one_follow_the_minus_inf_times_zero_convention(x64, N, r, chain):
    rng = np.random.default_rng(3000 + N)
    D, T, E, pi0, transient = nearly_deterministic_system(rng, N, r, chain)
    ys = cases.simulate_observations(rng, T, E, pi0, 80)
    src = alf_backbone(D)
    w0 = alf_initial_logits(D, rng.normal(size=N - r))
    for parallel in (False, True) if N == 7 else (False,):  # the parallel form compiles slowly: one case
        run = alf_parallel if parallel else alf_serial
        # delta = 0: w_k = blockdiag(P, I_r)^k w_0, the observations are ignored (0 * log 0 = 0)
        w, expect = np.asarray(run(ALF.time_invariant(D, E, 0.0, w0=w0), ys)), w0
        for k in range(len(ys)):
            expect = expect[src]
            np.testing.assert_array_equal(w[k], expect)
        # delta = 1: w_k = log(E^T y_k), the past is forgotten (0 * -inf = 0 on transient states)
        w = np.asarray(run(ALF.time_invariant(D, E, 1.0, w0=w0), ys))
        np.testing.assert_array_equal(w, _log(E[ys]))


# ------------------------------------------------------------------ serial vs parallel


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-10), ("float32", 1e-4)])
def test_parallel_equals_serial(x64, dtype, rtol):
    """K = 80 with delta <= 0.3: (1 - delta)^K stays above the float32 underflow threshold."""
    rng = np.random.default_rng(4000)
    D, T, E, pi0, transient = nearly_deterministic_system(rng, 7, 3, 3)
    ys = cases.simulate_observations(rng, T, E, pi0, 80)  # the shapes of the N = 7 case above: compiled once
    for delta in (0.05, 0.3):
        alf = ALF.time_invariant(D, jnp.asarray(E, dtype), delta)
        ser, par = alf_serial(alf, ys), alf_parallel(alf, ys)
        assert ser.dtype == par.dtype == jnp.dtype(dtype)
        assert_logits_close(par, ser, rtol)


def test_parallel_keeps_transient_logits_minus_inf_on_long_runs(x64):  # float32 data; x64 only to share a compile
    rng = np.random.default_rng(4001)
    D, transient = cases.random_deterministic(rng, 7, 3, 3)
    E = jnp.asarray(cases.random_columns(rng, 3, 7), jnp.float32)  # > 0: no -inf enters through log E
    ys = rng.integers(0, 3, size=80)  # float32: (1 - 0.9)^46 = 1e-46 underflows to 0
    alf = ALF.time_invariant(D, E, 0.9)
    assert np.isneginf(np.asarray(alf_serial(alf, ys))[:, transient]).all()
    w = np.asarray(alf_parallel(alf, ys))
    assert np.isneginf(w[:, transient]).all()


# ------------------------------------------------------------------ time-varying ALF, eq. (46)


@pytest.mark.parametrize("N, A", [(2, 2), (4, 3), (7, 4)])
def test_time_varying_alf_matches_eq46(x64, N, A):
    rng = np.random.default_rng(5000 + N)
    P = np.stack([cases.random_permutation(rng, N) for _ in range(A)])
    Q = rng.random((A, N, N))
    T = 0.97 * P + 0.03 * Q / Q.sum(axis=1, keepdims=True)  # T(a) = P(a) + eps Q(a), eq. (45)
    E = cases.random_columns(rng, 3, N)  # > 0 (Assumption 5.8.2)
    acts = rng.integers(0, A, size=120)
    ys = cases.simulate_observations(rng, T, E, rng.dirichlet(np.ones(N)), 120, actions=acts)
    w0 = rng.normal(size=N)
    for delta in (0.0, 0.1, 1.0):
        alf = ALF.time_varying(P, E, delta, w0=w0)
        ref = reference_alf_time_varying(P, E, delta, w0, ys, acts)
        assert_logits_close(alf_serial_tv(alf, ys, acts), ref, 1e-12)
        if N == 4:  # the parallel form compiles slowly: one case
            assert_logits_close(alf_parallel_tv(alf, ys, acts), ref, 1e-10)
    np.testing.assert_array_equal(ALF.time_varying(P, E, 0.1).w0, np.zeros(N))  # default w0 = 0


# ------------------------------------------------------------------ ALF.step (the Monte-Carlo interface)


@pytest.mark.parametrize("time_varying", [False, True])
def test_step_equals_filter_on_a_batch(x64, time_varying):
    rng = np.random.default_rng(6000 + time_varying)
    N, A, B, K = 5, 3, 4, 30
    D, _, E, _, _ = nearly_deterministic_system(rng, N, 2, 1)
    ys = rng.integers(0, 3, size=(B, K))
    if time_varying:
        P = np.stack([cases.random_permutation(rng, N) for _ in range(A)])
        alf = ALF.time_varying(P, E, 0.2, w0=rng.normal(size=N))
        acts = rng.integers(0, A, size=(B, K))
        ref = jax.vmap(lambda y, a: alf_filter(alf, y, actions=a).logits)(ys, acts)
    else:
        alf = ALF.time_invariant(D, E, 0.2)
        acts = np.zeros((B, K), int)
        ref = jax.vmap(lambda y: alf_filter(alf, y).logits)(ys)
    step, w = jax.jit(ALF.step), jnp.broadcast_to(alf.w0, (B, N))
    for k in range(K):
        w = step(alf, w, jnp.asarray(ys[:, k]), jnp.asarray(acts[:, k]))
        assert_logits_close(w, ref[:, k], 1e-12)


def test_alf_step_function_matches_eq24_by_hand():
    log_E = jnp.log(jnp.array([[0.9, 0.2, 0.5], [0.1, 0.8, 0.5]]))
    w = jnp.array([1.0, -2.0, -jnp.inf])
    src = jnp.array([1, 0, 2])  # swap states 0 and 1, state 2 transient
    out = np.asarray(alf_step(src, log_E, 0.25, w, jnp.array(1)))
    expect = [0.75 * -2.0 + 0.25 * np.log(0.1), 0.75 * 1.0 + 0.25 * np.log(0.8), -np.inf]
    np.testing.assert_allclose(out, expect, rtol=1e-6)


# ------------------------------------------------------------------ Lemma D.11


@pytest.mark.parametrize("N, r, chain", CASES)
def test_recurrent_logits_are_bounded_lemma_D11(x64, N, r, chain):
    rng = np.random.default_rng(7000 + N)
    D, T, E, pi0, transient = nearly_deterministic_system(rng, N, r, chain)
    ys = cases.simulate_observations(rng, T, E, pi0, 300)
    for scale in (0.1, 10.0):  # W set by A_E, then by w0_tilde
        w0_tilde = rng.normal(size=N - r) * scale
        W = max(np.abs(w0_tilde).max(), np.abs(np.log(E[:, ~transient])).max())  # eq. (190)
        for delta in (0.0, 0.01, 0.3, 1.0):
            w = np.asarray(alf_serial(ALF.time_invariant(D, E, delta, w0=alf_initial_logits(D, w0_tilde)), ys))
            assert np.abs(w[:, ~transient]).max() <= W * (1 + 1e-12)


# ------------------------------------------------------------------ 10^6 steps at eps = 1e-12


def test_every_schedule_runs_one_million_steps_without_nan():
    """eq. (47) at eps = 1e-12, float32: random observations and an all-zero run (worst case for drift)."""
    eps = 1e-12
    D = np.array([[0.0, 1.0], [1.0, 0.0]])
    E = jnp.array([[0.9, 0.1], [0.1, 0.9]], jnp.float32)
    ys = np.random.default_rng(0).integers(0, 2, size=10**6)
    ys[: 10**5] = 0
    ys = jnp.asarray(ys)
    for name in SCHEDULES:
        delta = float(delta_schedule(name, eps))
        for w0 in (None, np.zeros(2)):
            w = np.asarray(alf_serial(ALF.time_invariant(D, E, delta, w0=w0), ys))
            assert w.dtype == np.float32 and w.shape == (10**6, 2)
            assert np.isfinite(w).all(), name


@pytest.mark.slow  # permutation_scan_parallel compiles in O(K) time (~100-250 s here at K = 10^5), see test_scan.py
def test_parallel_runs_one_hundred_thousand_steps_without_nan():
    D = np.array([[0.0, 1.0], [1.0, 0.0]])
    E = jnp.array([[0.9, 0.1], [0.1, 0.9]], jnp.float32)
    ys = jnp.asarray(np.random.default_rng(1).integers(0, 2, size=10**5))
    for name in SCHEDULES:
        alf = ALF.time_invariant(D, E, float(delta_schedule(name, 1e-12)))
        ser, par = alf_serial(alf, ys), alf_parallel(alf, ys)
        assert np.isfinite(np.asarray(par)).all(), name
        assert_logits_close(par, ser, 1e-3)


# ------------------------------------------------------------------ bad input


def test_bad_input_raises():
    rng = np.random.default_rng(8000)
    D, _, E, _, _ = nearly_deterministic_system(rng, 4, 1, 1)
    P = np.stack([cases.random_permutation(rng, 4) for _ in range(2)])
    ti, tv = ALF.time_invariant(D, E, 0.1), ALF.time_varying(P, E, 0.1)
    ys = jnp.array([0, 1, 2])
    with pytest.raises(ValueError, match="time-varying"):
        alf_filter(ti, ys, actions=jnp.array([0, 1, 0]))
    with pytest.raises(ValueError, match="time-varying"):
        alf_filter(tv, ys)
    with pytest.raises(ValueError, match=r"shape \(K,\)"):
        alf_filter(ti, jnp.zeros((2, 3), int))
    with pytest.raises(ValueError):
        alf_filter(tv, ys, actions=jnp.array([0, 1]))
    with pytest.raises(ValueError, match="deterministic"):
        ALF.time_invariant(D * 0.5 + 0.5 / 4, E, 0.1)
    with pytest.raises(ValueError, match="permutation"):
        ALF.time_varying(np.stack([P[0], D]), E, 0.1)
    with pytest.raises(ValueError, match="finite"):
        ALF.time_varying(P, E, 0.1, w0=np.array([0.0, -np.inf, 0.0, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        ALF.time_varying(P, E, 0.1, w0=np.zeros(3))
    with pytest.raises(ValueError):  # E with too few states: caught at the latest when filtering
        alf_filter(ALF.time_invariant(D, E[:, :3], 0.1), ys)
    with pytest.raises(ValueError):  # w0 of the wrong length
        alf_filter(ALF.time_invariant(D, E, 0.1, w0=np.zeros(5)), ys)


def test_scalar_observation_raises_value_error():
    D = np.array([[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match=r"shape \(K,\)"):
        alf_filter(ALF.time_invariant(D, np.eye(2) * 0.8 + 0.1, 0.1), jnp.array(1))


@pytest.mark.parametrize("delta", [np.nan, -0.1, 1.5])
def test_delta_outside_unit_interval_raises(delta):
    D = np.array([[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="delta"):
        ALF.time_invariant(D, np.eye(2) * 0.8 + 0.1, delta)

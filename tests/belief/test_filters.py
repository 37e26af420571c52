"""The logit optimal filter (LOF), eqs. (6)-(8), against an independent NumPy float64 Bayes filter.

Reference: the normalised filter eq. (6) in probability space, alpha_k = diag(E^T y_k) T alpha_{k-1} / c_k,
with the unnormalised logits of eq. (7) recovered as w_k = log alpha_k + sum_j log c_j + log 1^T exp(w_0).
"""


import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.belief import fast_filters, filters
from memlab.belief import random_models as cases
from memlab.belief.filters import LOF, bayes_decode, lof_step
from memlab.belief.hmm import HMM, ControlledHMM

# Jitted once here: eager calls compile anew each time (a fresh scan body per call; an eager
# associative_scan compiles each level's ops one by one). Input checks are tested on the eager forms. These give
# the logits of the FilterResult; the marginal log-likelihood has its own tests below.
lof_result = jax.jit(fast_filters.lof, static_argnames="normalize")
log_belief_result = jax.jit(fast_filters.log_belief)
lof_parallel_result = jax.jit(fast_filters.lof_parallel, static_argnames=("final_only", "block"))


def lof(*args, **kwargs):
    return lof_result(*args, **kwargs).logits


def log_belief(*args, **kwargs):
    return log_belief_result(*args, **kwargs).logits


def lof_parallel(*args, **kwargs):
    return lof_parallel_result(*args, **kwargs).logits



def _log(p):
    with np.errstate(divide="ignore"):
        return np.log(p)


def reference_filter(T, E, w0, ys, actions=None):
    """eq. (6) in float64; T (N, N) or (A, N, N). Returns (log alpha (K, N), w^o (K, N) of eq. 7)."""
    w0 = np.asarray(w0, float)
    m = w0[np.isfinite(w0)].max()
    alpha, log_scale = np.exp(w0 - m), m
    log_scale += np.log(alpha.sum())
    alpha = alpha / alpha.sum()
    log_alpha, w = [], []
    for k, y in enumerate(ys):
        Tk = T if actions is None else T[actions[k]]
        v = E[y] * (Tk @ alpha)  # eq. (6) numerator
        c = v.sum()
        alpha, log_scale = (v / c, log_scale + np.log(c)) if c > 0 else (np.zeros_like(v), -np.inf)
        log_alpha.append(_log(alpha))
        w.append(_log(alpha) + log_scale)
    return np.array(log_alpha), np.array(w)


def assert_logits_close(w, ref, rtol):
    """Same -inf pattern, never NaN/+inf, finite entries within rtol (relative to the largest |entry|)."""
    w, ref = np.asarray(w, np.float64), np.asarray(ref, np.float64)
    assert not np.isnan(w).any() and not np.any(w == np.inf)
    np.testing.assert_array_equal(np.isneginf(w), np.isneginf(ref))
    fin = np.isfinite(ref)
    if fin.any():
        scale = max(1.0, np.abs(ref[fin]).max())
        np.testing.assert_allclose(w[fin], ref[fin], rtol=rtol, atol=rtol * scale)


def random_hmm(rng, N, S, zero_frac=0.0, pi0_zeros=0):
    T = cases.random_columns(rng, N, N, zero_frac)
    E = cases.random_columns(rng, S, N, zero_frac)
    pi0 = rng.dirichlet(np.ones(N))
    pi0[rng.permutation(N)[:pi0_zeros]] = 0.0
    return T, E, pi0 / pi0.sum()


def random_obs(rng, S, K):
    return rng.integers(0, S, size=K)


SIZES = [(2, 2), (3, 4), (5, 3), (6, 6)]


# ------------------------------------------------------------------ eq. (6)-(8) against the reference


@pytest.mark.parametrize("N, S", SIZES)
def test_lof_matches_reference_on_random_hmms(x64, N, S):
    rng = np.random.default_rng(N * 10 + S)
    T, E, pi0 = random_hmm(rng, N, S)
    m = HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    ys = random_obs(rng, S, 60)
    log_alpha, w_ref = reference_filter(T, E, np.log(pi0), ys)
    assert_logits_close(lof(m, ys), w_ref, 1e-10)  # w0 defaults to log pi0
    assert_logits_close(log_belief(m, ys), log_alpha, 1e-10)
    assert_logits_close(lof(m, ys, normalize=True), log_alpha, 1e-10)
    w0 = rng.normal(size=N) * 3  # any finite initial logit
    assert_logits_close(lof(m, ys, w0=w0), reference_filter(T, E, w0, ys)[1], 1e-10)


@pytest.mark.parametrize("N, S, A", [(2, 2, 2), (4, 3, 3), (6, 5, 2)])
def test_lof_matches_reference_on_controlled_hmms(x64, N, S, A):
    rng = np.random.default_rng(100 + N)
    T = np.stack([cases.random_columns(rng, N, N) for _ in range(A)])
    E, pi0 = cases.random_columns(rng, S, N), rng.dirichlet(np.ones(N))
    m = ControlledHMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    ys, acts = random_obs(rng, S, 50), rng.integers(0, A, size=50)
    log_alpha, w_ref = reference_filter(T, E, np.log(pi0), ys, acts)
    assert_logits_close(lof(m, ys, actions=acts), w_ref, 1e-10)
    assert_logits_close(log_belief(m, ys, actions=acts), log_alpha, 1e-10)
    # the actions matter: a different action sequence gives other logits
    other = (acts + 1) % A
    assert not np.allclose(lof(m, ys, actions=other), w_ref)


def test_lof_float32_is_close_to_the_float64_reference():
    rng = np.random.default_rng(7)
    T, E, pi0 = random_hmm(rng, 5, 4)
    m = HMM(jnp.asarray(T, jnp.float32), jnp.asarray(E, jnp.float32), jnp.asarray(pi0, jnp.float32))
    ys = random_obs(rng, 4, 100)
    log_alpha, w_ref = reference_filter(T, E, np.log(pi0), ys)
    assert lof(m, ys).dtype == jnp.float32
    assert_logits_close(lof(m, ys), w_ref, 1e-4)
    assert_logits_close(log_belief(m, ys), log_alpha, 1e-4)


def test_log_belief_is_a_distribution():
    rng = np.random.default_rng(8)
    T, E, pi0 = random_hmm(rng, 6, 3, zero_frac=0.3)
    m = HMM(jnp.asarray(T, jnp.float32), jnp.asarray(E, jnp.float32), jnp.asarray(pi0, jnp.float32))
    lb = np.asarray(log_belief(m, random_obs(rng, 3, 200)))
    possible = np.isfinite(lb).any(axis=1)  # rows after an impossible observation are all -inf
    np.testing.assert_allclose(np.exp(lb[possible]).sum(axis=1), 1.0, atol=1e-5)
    assert np.all(lb[possible].max(axis=1) <= 1e-6)


def test_unnormalised_logits_drift_but_decode_like_the_belief():
    """Section 6.2: the LOF logits drift to -inf; their argmax equals that of the belief."""
    rng = np.random.default_rng(9)
    T, E, pi0 = random_hmm(rng, 4, 3)
    m = HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    ys = random_obs(rng, 3, 300)
    w, lb = np.asarray(lof(m, ys)), np.asarray(log_belief(m, ys))
    assert w[-1].max() < w[0].max() - 50
    np.testing.assert_allclose(w - w.max(axis=1, keepdims=True), lb - lb.max(axis=1, keepdims=True), atol=1e-3)


# ------------------------------------------------------------------ serial vs parallel


@pytest.mark.parametrize("N", [5, 12])  # products as multiply-sums (below ELEMENTWISE_BELOW) and as matmuls
@pytest.mark.parametrize("dtype, rtol, controlled", [("float64", 1e-10, False), ("float32", 1e-4, True)])
def test_lof_parallel_equals_serial(x64, dtype, rtol, controlled, N):
    assert 5 < fast_filters.ELEMENTWISE_BELOW <= 12
    rng = np.random.default_rng(11 + controlled)
    S, K, A = 4, 100, 3  # K not a power of two
    E, pi0 = cases.random_columns(rng, S, N), rng.dirichlet(np.ones(N))
    if controlled:
        T = np.stack([cases.random_columns(rng, N, N) for _ in range(A)])
        m = ControlledHMM(jnp.asarray(T, dtype), jnp.asarray(E, dtype), jnp.asarray(pi0, dtype))
        acts = jnp.asarray(rng.integers(0, A, size=K))
    else:
        m = HMM(jnp.asarray(cases.random_columns(rng, N, N), dtype), jnp.asarray(E, dtype), jnp.asarray(pi0, dtype))
        acts = None
    ys = random_obs(rng, S, K)
    for w0 in (jnp.log(m.pi0), jnp.asarray(rng.normal(size=N), dtype)):  # arrays: one compile for both
        ser = lof(m, ys, w0=w0, actions=acts)
        par = lof_parallel(m, ys, w0=w0, actions=acts)
        assert ser.dtype == par.dtype == jnp.dtype(dtype)
        assert_logits_close(par, ser, rtol)
        assert_logits_close(lof_parallel(m, ys, w0=w0, actions=acts, final_only=True), ser[-1], rtol)


@pytest.mark.parametrize("block", [1, 2, 7, 99, 100, 101, 250])
def test_lof_parallel_blocks_equal_serial(x64, block):
    """Any block length gives the serial logits: one step per block (the plain parallel prefix), blocks that leave
    a short last block (padded with identity steps), one block holding every step, a block longer than K; and the
    final logits alone."""
    rng = np.random.default_rng(5)
    N, S, A, K = 4, 3, 2, 100
    T = np.stack([cases.random_columns(rng, N, N, 0.2) for _ in range(A)])
    m = ControlledHMM(jnp.asarray(T), jnp.asarray(cases.random_columns(rng, S, N, 0.2)), jnp.asarray(rng.dirichlet(
        np.ones(N))))
    ys, acts = jnp.asarray(random_obs(rng, S, K)), jnp.asarray(rng.integers(0, A, size=K))
    w_ref = reference_filter(T, np.asarray(m.E), _log(np.asarray(m.pi0)), np.asarray(ys), np.asarray(acts))[1]
    assert_logits_close(fast_filters.lof_parallel(m, ys, actions=acts, block=block).logits, w_ref, 1e-10)
    assert_logits_close(fast_filters.lof_parallel(m, ys, actions=acts, final_only=True, block=block).logits, w_ref[-1],
                        1e-10)


@pytest.mark.parametrize("controlled", [False, True])
def test_vmapped_lof_parallel_runs_in_chunks_and_equals_each_sequence(x64, monkeypatch, controlled):
    """Under vmap over sequences lof_parallel runs chunks of 3 sequences one after another (7 sequences: two chunks
    and one left over), each row equal to the serial filter in float64; vmapped over the initial logits alone
    (one shared sequence) and over models (the single-sequence form vmapped) too."""
    rng = np.random.default_rng(41 + controlled)
    N, S, A, B, K = 3, 4, 2, 7, 23
    block = fast_filters.default_block(K)  # 5: 5 blocks
    num_blocks = -(-K // block)  # results and block products, float64: chunks of 3
    monkeypatch.setattr(fast_filters, "PARALLEL_CHUNK_BYTES", 3 * (K * N + num_blocks * N * N) * 8)
    E, pi0 = cases.random_columns(rng, S, N, 0.2), rng.dirichlet(np.ones(N))
    T = np.stack([cases.random_columns(rng, N, N, 0.2) for _ in range(A)])
    m = ControlledHMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0)) if controlled else \
        HMM(jnp.asarray(T[0]), jnp.asarray(E), jnp.asarray(pi0))
    yss, acts = rng.integers(0, S, size=(B, K)), rng.integers(0, A, size=(B, K))
    w0s = rng.normal(size=(B, N))
    acts_or_none = (lambda a: a) if controlled else (lambda a: None)

    def batch(y, a, w):
        return fast_filters.lof_parallel(m, y, w0=w, actions=acts_or_none(a), block=block).logits

    vmapped = jax.vmap(batch)
    assert "length=2" in str(jax.make_jaxpr(vmapped)(yss, acts, w0s))  # the two whole chunks run in a loop
    got = jax.jit(vmapped)(yss, acts, w0s)
    over_w0 = jax.jit(jax.vmap(batch, in_axes=(None, None, 0)))(yss[0], acts[0], w0s)
    for b in range(B):
        assert_logits_close(got[b], lof(m, yss[b], w0=w0s[b], actions=acts_or_none(acts[b])), 1e-10)
        assert_logits_close(over_w0[b], lof(m, yss[0], w0=w0s[b], actions=acts_or_none(acts[0])), 1e-10)
    models = jax.tree.map(lambda x: jnp.stack([x, x]), m)
    over_models = jax.jit(jax.vmap(lambda model: fast_filters.lof_parallel(model, yss[1],
                                                                           actions=acts_or_none(acts[1])).logits))
    for row in over_models(models):
        assert_logits_close(row, lof(m, yss[1], actions=acts_or_none(acts[1])), 1e-10)


# ------------------------------------------------------------------ zero probabilities: -inf, never NaN


@pytest.mark.parametrize("seed", range(4))
def test_zero_probabilities_give_minus_inf_exactly_where_the_reference_is_zero(x64, seed):
    rng = np.random.default_rng(200 + seed)
    N, S = 6, 4
    T, _ = cases.random_deterministic(rng, N, r=2, chain=2)  # deterministic transitions with transient states
    T = 0.5 * T + 0.5 * cases.random_columns(rng, N, N, zero_frac=0.6) if seed % 2 else T
    E = cases.random_columns(rng, S, N, zero_frac=0.4)  # impossible observations for some states
    pi0 = random_hmm(rng, N, S, pi0_zeros=3)[2]
    m = HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    # observations from a run of the model itself, so the sequence stays possible
    x, ys = rng.choice(N, p=pi0), []
    for _ in range(40):
        x = rng.choice(N, p=T[:, x])
        ys.append(rng.choice(S, p=E[:, x]))
    ys = np.array(ys)
    log_alpha, w_ref = reference_filter(T, E, _log(pi0), ys)
    assert np.isneginf(w_ref).any() and np.isfinite(w_ref).all(axis=1).sum() < len(ys)  # the test has teeth
    assert_logits_close(lof(m, ys), w_ref, 1e-10)
    assert_logits_close(lof_parallel(m, ys), w_ref, 1e-10)
    assert_logits_close(log_belief(m, ys), log_alpha, 1e-10)


def test_impossible_observation_gives_all_minus_inf_rows_not_nan(x64):
    T = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    E = np.array([[0.5, 0.0, 0.2], [0.5, 0.6, 0.8], [0.0, 0.4, 0.0]])
    m = HMM(jnp.asarray(T), jnp.asarray(E), jnp.array([1.0, 0.0, 0.0]))
    ys = [1, 2, 0, 0, 1]  # x_0 = 0, x_1 = 1 emits 1 (p = 0.6); x_2 = 0 cannot emit 2
    ys = jnp.asarray(ys)
    for out in (lof(m, ys), lof_parallel(m, ys), log_belief(m, ys)):
        out = np.asarray(out)
        assert not np.isnan(out).any() and not np.any(out == np.inf)
        assert np.isfinite(out[0, 1]) and np.isneginf(out[0, [0, 2]]).all()
        assert np.isneginf(out[1:]).all()


def test_all_minus_inf_initial_logits_stay_minus_inf_without_nan():
    rng = np.random.default_rng(3)
    T, E, pi0 = random_hmm(rng, 3, 2)
    m = HMM(jnp.asarray(T, jnp.float32), jnp.asarray(E, jnp.float32), jnp.asarray(pi0, jnp.float32))
    w0 = jnp.full(3, -jnp.inf)
    for normalize in (False, True):
        out = np.asarray(lof(m, jnp.array([0, 1, 1]), w0=w0, normalize=normalize))
        assert np.isneginf(out).all()


def test_lof_keeps_logits_far_below_the_maximum_exact_in_float32():
    """A state whose every incoming term is exp(-200) (below float32's range) keeps its logit in `lof`."""
    m = HMM(jnp.eye(3), jnp.array([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]), jnp.ones(3) / 3)
    w0 = jnp.array([0.0, -200.0, -jnp.inf])
    w = np.asarray(lof(m, jnp.array([0, 1, 1]), w0=w0))
    expect = np.asarray(w0)[None] + np.log(0.5) * np.arange(1, 4)[:, None]
    np.testing.assert_allclose(w[:, :2], expect[:, :2], rtol=1e-6)
    assert np.isneginf(w[:, 2]).all()


def reference_log_filter(T, E, w0, ys):
    """eq. (7) in float64 log space (np.logaddexp per row): the LOF logits w_k (K, N), exact far below 1e-308."""
    log_T, log_E = _log(np.asarray(T, float)), _log(np.asarray(E, float))
    w, rows = np.asarray(w0, float), []
    for y in ys:
        w = np.logaddexp.reduce(log_T + w[None, :], axis=1) + log_E[y]
        rows.append(w)
    return np.array(rows)


def tiny_belief_case():
    """State 1 (never entered, left with probability 1e-20) starts at belief e^-120 (~1e-52, below float32's
    range), sinks to ~1e-83 while y = 0 is seen (likelihood ratio ~1e-6), then recovers under y = 1 (~10x a step)."""
    T = np.array([[1.0, 1e-20], [0.0, 1 - 1e-20]])
    E = np.array([[0.9, 1e-6], [0.1, 1 - 1e-6]])
    ys = np.array([0] * 5 + [1] * 100 + [0] * 3)
    return T, E, np.array([0.0, -120.0]), ys


def test_beliefs_below_float32_range_keep_exact_logits():
    """Against float64 log space: beliefs of 1e-52 .. 1e-83 stay finite and exact in float32 (the log-space
    fallback); the row recovers into float range and the probability-space steps resume."""
    T, E, w0, ys = tiny_belief_case()
    w_ref = reference_log_filter(T, E, w0, ys)
    lb_ref = w_ref - np.logaddexp.reduce(w_ref, axis=1, keepdims=True)
    assert lb_ref[:, 1].min() < np.log(1e-70) and lb_ref[-4, 1] > np.log(0.5)  # the test has teeth
    m = HMM(jnp.asarray(T, jnp.float32), jnp.asarray(E, jnp.float32), jnp.array([0.5, 0.5], jnp.float32))
    w = np.asarray(lof(m, ys, w0=jnp.asarray(w0, jnp.float32)))
    lb = np.asarray(lof(m, ys, w0=jnp.asarray(w0, jnp.float32), normalize=True))
    assert w.dtype == np.float32 and np.isfinite(w).all() and np.isfinite(lb).all()
    np.testing.assert_allclose(w, w_ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(lb, lb_ref, rtol=1e-5, atol=1e-4)


def test_vmapped_batch_mixes_tiny_and_ordinary_rows_exactly():
    """Under vmap the batch runs as one recursion: rows in the log-space fallback and rows in probability
    space side by side, each equal to its own float64 log-space reference."""
    T, E, w0, ys = tiny_belief_case()
    m = HMM(jnp.asarray(T, jnp.float32), jnp.asarray(E, jnp.float32), jnp.array([0.5, 0.5], jnp.float32))
    w0s = np.array([w0, [0.0, 0.0], [-3.0, 0.0], w0[::-1]])
    yss = np.stack([ys, ys[::-1], ys, 1 - ys])
    got = np.asarray(jax.jit(jax.vmap(lambda w, y: fast_filters.lof(m, y, w0=w).logits))(w0s.astype(np.float32), yss))
    last = np.asarray(jax.jit(jax.vmap(lambda w, y: fast_filters.lof(m, y, w0=w, normalize=True,
                                                                      final_only=True).logits))(w0s.astype(np.float32),
                                                                                                yss))
    for b in range(len(w0s)):
        ref = reference_log_filter(T, E, w0s[b], yss[b])
        np.testing.assert_allclose(got[b], ref, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(last[b], ref[-1] - np.logaddexp.reduce(ref[-1]), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("N", [3, fast_filters.STATE_MAJOR_BELOW + 8])  # both layouts of the fast pass
@pytest.mark.parametrize("zero_frac", [0.0, 0.4])  # 0.4: structural zeros and tiny beliefs, the log-space rerun
def test_vmapped_batches_of_controlled_hmms_match_the_reference(x64, N, zero_frac):
    rng = np.random.default_rng(N + int(10 * zero_frac))
    S, A, B, K = 5, 3, 6, 40
    T = np.stack([cases.random_columns(rng, N, N, zero_frac) for _ in range(A)])
    E, pi0 = cases.random_columns(rng, S, N, zero_frac), rng.dirichlet(np.ones(N))
    m = ControlledHMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    yss, acts = rng.integers(0, S, size=(B, K)), rng.integers(0, A, size=(B, K))
    refs = [reference_filter(T, E, np.log(pi0), yss[b], acts[b]) for b in range(B)]
    for normalize, which in ((False, 1), (True, 0)):
        got = jax.jit(jax.vmap(lambda y, a, n=normalize: fast_filters.lof(m, y, actions=a, normalize=n).logits))(
            yss, acts)
        last = jax.jit(jax.vmap(lambda y, a, n=normalize: fast_filters.lof(m, y, actions=a, normalize=n,
                                                                          final_only=True).logits))(yss, acts)
        for b in range(B):
            assert_logits_close(got[b], refs[b][which], 1e-10)
            assert_logits_close(last[b], refs[b][which][-1], 1e-10)


@pytest.mark.parametrize("normalize", [False, True])
def test_final_only_is_the_last_row(x64, normalize):
    rng = np.random.default_rng(31)
    T, E, pi0 = random_hmm(rng, 4, 3, zero_frac=0.3)
    m = HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    ys = jnp.asarray(random_obs(rng, 3, 40))
    full = lof(m, ys, normalize=normalize)
    last = fast_filters.lof(m, ys, normalize=normalize, final_only=True).logits
    assert last.shape == (4,)
    assert_logits_close(last, full[-1], 1e-12)


@pytest.mark.parametrize("K", [1, 2, 3, 5, 8])
def test_lof_parallel_short_sequences_equal_serial(x64, K):
    rng = np.random.default_rng(40 + K)
    T, E, pi0 = random_hmm(rng, 3, 2, zero_frac=0.2)
    m = HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    ys = jnp.asarray(random_obs(rng, 2, K))
    assert_logits_close(fast_filters.lof_parallel(m, ys).logits, reference_filter(T, E, _log(pi0), ys)[1], 1e-10)


# ------------------------------------------------------------------ 10^6 steps, eq. (47) at eps = 1e-12


def eq47_observations(num_steps, seed=0):
    """y_1..y_K of eq. (47) from x_0 = x_1 ... : at eps = 1e-12 an irregular jump in 10^6 steps has
    probability 1e-6, so the states alternate x_k = k mod 2 and y_k = x_k flipped with probability 0.1."""
    rng = np.random.default_rng(seed)
    x = np.arange(1, num_steps + 1) % 2
    return (x ^ (rng.random(num_steps) < 0.1)).astype(np.int32), x


def test_lof_one_million_steps_float32_no_nan():
    eps = 1e-12
    T = jnp.array([[eps, 1 - eps], [1 - eps, eps]], jnp.float32)
    E = jnp.array([[0.9, 0.1], [0.1, 0.9]], jnp.float32)
    m = HMM(T, E, jnp.array([1.0, 0.0], jnp.float32))
    ys, x = eq47_observations(10**6)
    decoded = {}
    for normalize in (False, True):
        w = np.asarray(lof(m, jnp.asarray(ys), normalize=normalize))
        assert w.dtype == np.float32 and w.shape == (10**6, 2)
        assert np.isfinite(w).all(), f"normalize={normalize}: non-finite logits"
        decoded[normalize] = w.argmax(axis=1)
    assert np.mean(decoded[True] == x) > 0.999  # the exact filter tracks the alternation
    assert np.mean(decoded[False] == decoded[True]) > 0.999  # drift (|w| ~ 3e5) costs float32 almost nothing


# ------------------------------------------------------------------ LOF module, lof_step, decoding


@pytest.mark.parametrize("controlled", [False, True])
@pytest.mark.parametrize("normalize", [False, True])
def test_lof_module_steps_equal_lof(x64, controlled, normalize):
    rng = np.random.default_rng(21)
    N, S, A, B, K = 4, 3, 2, 5, 30
    E, pi0 = cases.random_columns(rng, S, N, 0.2), random_hmm(rng, N, S, pi0_zeros=1)[2]
    ys = rng.integers(0, S, size=(B, K))
    if controlled:
        m = ControlledHMM(jnp.asarray(np.stack([cases.random_columns(rng, N, N) for _ in range(A)])),
                          jnp.asarray(E), jnp.asarray(pi0))
        acts = rng.integers(0, A, size=(B, K))
    else:
        m = HMM(jnp.asarray(cases.random_columns(rng, N, N)), jnp.asarray(E), jnp.asarray(pi0))
        acts = np.zeros((B, K), int)
    f = LOF.of(m, normalize=normalize)
    np.testing.assert_array_equal(f.w0, np.asarray(jnp.log(m.pi0)))
    w, rows, step = jnp.broadcast_to(f.w0, (B, N)), [], jax.jit(type(f).step)
    for k in range(K):
        w = step(f, w, jnp.asarray(ys[:, k]), jnp.asarray(acts[:, k]))
        rows.append(np.asarray(w))
    got = np.stack(rows, axis=1)  # (B, K, N)
    ref = jax.vmap(lambda y, a: lof(m, y, actions=a if controlled else None, normalize=normalize))(ys, acts)
    for b in range(B):
        assert_logits_close(got[b], ref[b], 1e-12)


def test_lof_module_defaults():
    m = HMM(jnp.eye(2), jnp.ones((2, 2)) / 2, jnp.array([0.25, 0.75]))
    f = LOF.of(m)
    assert f.normalize is True and f.T.shape == (1, 2, 2)
    np.testing.assert_allclose(f.w0, np.log([0.25, 0.75]), rtol=1e-6)
    np.testing.assert_array_equal(LOF.of(m, w0=jnp.zeros(2)).w0, [0.0, 0.0])


def test_lof_step_batched_matches_single():
    rng = np.random.default_rng(22)
    T, E, _ = random_hmm(rng, 3, 2)
    log_E = jnp.log(jnp.asarray(E))
    w, y = jnp.asarray(rng.normal(size=(4, 3))), jnp.array([0, 1, 1, 0])
    batched = lof_step(jnp.asarray(T), log_E, w, y)
    np.testing.assert_allclose(batched[2], lof_step(jnp.asarray(T), log_E, w[2], y[2]), rtol=1e-6)
    for b in range(4):
        ref = np.log(T @ np.exp(np.asarray(w[b], float))) + np.log(E[int(y[b])])  # eq. (7)
        np.testing.assert_allclose(batched[b], ref, rtol=1e-5)


def test_bayes_decode_is_argmax_with_ties_to_lowest_index():
    w = jnp.array([[0.0, 1.0, -1.0], [2.0, 2.0, 0.0], [-jnp.inf, -jnp.inf, -3.0], [-jnp.inf] * 3])
    np.testing.assert_array_equal(bayes_decode(w), [1, 0, 2, 0])


def test_bayes_decode_is_the_map_of_the_reference_belief(x64):
    rng = np.random.default_rng(23)
    T, E, pi0 = random_hmm(rng, 5, 3)
    m = HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    ys = random_obs(rng, 3, 80)
    log_alpha, _ = reference_filter(T, E, np.log(pi0), ys)
    np.testing.assert_array_equal(bayes_decode(lof(m, ys)), log_alpha.argmax(axis=1))


# ------------------------------------------------------------------ bad input


def test_lof_rejects_bad_input():
    rng = np.random.default_rng(24)
    T, E, pi0 = random_hmm(rng, 3, 2)
    m = HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    cm = ControlledHMM(jnp.asarray(np.stack([T, T])), jnp.asarray(E), jnp.asarray(pi0))
    for fn in (fast_filters.lof, fast_filters.lof_parallel):
        with pytest.raises(ValueError, match=r"shape \(K,\)"):
            fn(m, jnp.zeros((2, 3), int))
        with pytest.raises(ValueError, match="fixed transitions"):
            fn(m, jnp.zeros(3, int), actions=jnp.zeros(3, int))
        with pytest.raises(ValueError, match="actions"):
            fn(cm, jnp.zeros(3, int))
        with pytest.raises(ValueError, match="shape of ys"):
            fn(cm, jnp.zeros(3, int), actions=jnp.zeros(4, int))
    with pytest.raises(ValueError, match="actions"):
        fast_filters.log_belief(cm, jnp.zeros(3, int))
    for block in (0, 2.5):
        with pytest.raises(ValueError, match="block must be an int >= 1"):
            fast_filters.lof_parallel(m, jnp.zeros(3, int), block=block)


@pytest.mark.parametrize("bad", [2, -1])
def test_lof_rejects_out_of_range_observations(bad):
    """JAX indexing would clamp or wrap y silently and filter another symbol."""
    T = np.array([[0.9, 0.2], [0.1, 0.8]])
    m = HMM(jnp.asarray(T), jnp.asarray(T), jnp.array([0.5, 0.5]))  # S = 2
    for fn in (fast_filters.lof, fast_filters.lof_parallel):
        with pytest.raises(ValueError, match=r"observations.*\[0, 2\)"):
            fn(m, jnp.array([0, bad, 1]))


def test_lof_rejects_out_of_range_actions():
    T = np.array([[0.9, 0.2], [0.1, 0.8]])
    cm = ControlledHMM(jnp.asarray(np.stack([T, np.eye(2)])), jnp.asarray(T), jnp.array([0.5, 0.5]))
    for fn in (fast_filters.lof, fast_filters.lof_parallel):
        with pytest.raises(ValueError, match=r"actions.*\[0, 2\)"):
            fn(cm, jnp.array([0, 1, 1]), actions=jnp.array([0, 2, 1]))


@pytest.mark.parametrize("controlled", [False, True])
def test_the_plain_reference_equals_numpy_and_the_fast_engines_equal_the_plain_reference(controlled, x64):
    """``lof_reference`` (one scan of ``lof_step``, what the docs show) against the float64 NumPy filter, and every
    fast engine of ``fast_filters`` against it: serial and parallel, logits and beliefs, final only, vmapped; the
    marginal log-likelihoods too."""
    rng = np.random.default_rng(11)
    N, S, K, A, B = 5, 4, 60, 3, 6
    T = rng.dirichlet(np.ones(N), size=(A, N)).transpose(0, 2, 1) if controlled else \
        rng.dirichlet(np.ones(N), size=N).T
    E = rng.dirichlet(np.ones(S), size=N).T
    pi0 = rng.dirichlet(np.ones(N))
    m = ControlledHMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0)) if controlled else \
        HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    yss, acts = rng.integers(0, S, size=(B, K)), rng.integers(0, A, size=(B, K))
    args = (lambda i: {"actions": acts[i]}) if controlled else (lambda i: {})
    for i in range(B):
        plain = filters.lof_reference(m, yss[i], **args(i))
        _, w_ref = reference_filter(T, E, _log(pi0), yss[i], acts[i] if controlled else None)
        np.testing.assert_allclose(plain.logits, w_ref, rtol=1e-10, atol=1e-10)
        for fast, tol in ((fast_filters.lof(m, yss[i], **args(i)), 1e-10),
                          (fast_filters.lof_parallel(m, yss[i], **args(i)), 1e-9)):
            np.testing.assert_allclose(fast.logits, plain.logits, rtol=tol, atol=tol)
            np.testing.assert_allclose(fast.marginal_loglik, plain.marginal_loglik, rtol=tol, atol=tol)
        last = fast_filters.log_belief(m, yss[i], final_only=True, **args(i))
        plain_last = filters.log_belief_reference(m, yss[i], final_only=True, **args(i))
        np.testing.assert_allclose(last.logits, plain_last.logits, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(last.marginal_loglik, plain_last.marginal_loglik, rtol=1e-10, atol=1e-10)
    batched = jax.vmap(lambda y, a: fast_filters.lof(m, y, actions=a if controlled else None, normalize=True))
    plain = jax.vmap(lambda y, a: filters.lof_reference(m, y, actions=a if controlled else None, normalize=True))
    for got, want in zip(batched(yss, acts), plain(yss, acts), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------ the marginal log-likelihood, by enumeration


def brute_force_loglik(T, E, prior, ys, actions=None):
    """log p(y_1..y_K) = log sum over every hidden path x_0..x_K of prior(x_0) prod_k T(a_{k-1})[x_k, x_{k-1}]
    E[y_k, x_k], in float64: N^(K+1) paths, no recursion shared with any filter."""
    N, K = len(prior), len(ys)
    total = 0.0
    for path in itertools.product(range(N), repeat=K + 1):
        p = prior[path[0]]
        for k in range(1, K + 1):
            Tk = T if actions is None else T[actions[k - 1]]
            p *= Tk[path[k], path[k - 1]] * E[ys[k - 1], path[k]]
        total += p
    return np.log(total) if total > 0 else -np.inf


def every_filter(m, ys, w0=None, actions=None):
    """(name, FilterResult) of every exact filter: reference and fast, logits and beliefs, all steps and the last."""
    for final_only in (False, True):
        for normalize in (False, True):
            options = {"w0": w0, "actions": actions, "normalize": normalize, "final_only": final_only}
            yield f"lof_reference {options}", filters.lof_reference(m, ys, **options)
            yield f"lof {options}", fast_filters.lof(m, ys, **options)
        yield f"lof_parallel {final_only}", fast_filters.lof_parallel(m, ys, w0=w0, actions=actions,
                                                                       final_only=final_only)
        if w0 is None:  # the belief from pi0
            yield f"log_belief {final_only}", fast_filters.log_belief(m, ys, actions=actions, final_only=final_only)
            yield f"log_belief_reference {final_only}", filters.log_belief_reference(m, ys, actions=actions,
                                                                                      final_only=final_only)


@pytest.mark.parametrize("controlled", [False, True])
def test_marginal_loglik_equals_enumeration_over_hidden_paths(x64, controlled):
    """Every exact filter's marginal log-likelihood is log p(y_1..y_K) summed over all 3^8 hidden paths (float64,
    1e-10), with the default prior pi0 and with the prior softmax(w0) of given initial logits."""
    rng = np.random.default_rng(60 + controlled)
    N, S, A, K = 3, 3, 2, 7
    T = np.stack([cases.random_columns(rng, N, N, 0.2) for _ in range(A)]) if controlled else \
        cases.random_columns(rng, N, N, 0.2)
    E, pi0 = cases.random_columns(rng, S, N), rng.dirichlet(np.ones(N))
    m = ControlledHMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0)) if controlled else \
        HMM(jnp.asarray(T), jnp.asarray(E), jnp.asarray(pi0))
    ys, acts = random_obs(rng, S, K), (rng.integers(0, A, size=K) if controlled else None)
    w0 = rng.normal(size=N) * 2
    for prior, start in ((pi0, None), (np.exp(w0) / np.exp(w0).sum(), jnp.asarray(w0))):
        expected = brute_force_loglik(T, E, prior, ys, acts)
        assert -30 < expected < -1  # a real sequence, not a trivial certainty
        for name, result in every_filter(m, jnp.asarray(ys), start, None if acts is None else jnp.asarray(acts)):
            assert result.marginal_loglik.shape == (), name
            np.testing.assert_allclose(float(result.marginal_loglik), expected, rtol=1e-10, atol=1e-10,
                                       err_msg=name)


def test_marginal_loglik_is_minus_inf_after_an_impossible_observation(x64):
    T = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    E = np.array([[0.5, 0.0, 0.2], [0.5, 0.6, 0.8], [0.0, 0.4, 0.0]])
    m = HMM(jnp.asarray(T), jnp.asarray(E), jnp.array([1.0, 0.0, 0.0]))
    ys = jnp.asarray([1, 2, 0, 0, 1])  # x_2 = 0 cannot emit 2
    assert brute_force_loglik(T, E, np.array([1.0, 0.0, 0.0]), np.asarray(ys)) == -np.inf
    for name, result in every_filter(m, ys):
        assert float(result.marginal_loglik) == -np.inf, name
    possible = jnp.asarray([1, 1, 0])  # x_1 = 1 emits 1, x_2 = 0 emits 1, x_3 = 1 emits 0 with probability 0
    assert float(fast_filters.lof(m, possible).marginal_loglik) == -np.inf
    np.testing.assert_allclose(float(fast_filters.lof(m, possible[:2]).marginal_loglik), np.log(0.6 * 0.5))


def test_marginal_loglik_of_the_log_space_rerun_and_of_a_vmapped_batch():
    """Beliefs below float32's range send the fast engine to its log-space rerun: its marginal log-likelihood is the
    float64 log-space reference's logsumexp(w_K) - logsumexp(w_0), in a vmapped batch beside ordinary rows."""
    T, E, w0, ys = tiny_belief_case()
    m = HMM(jnp.asarray(T, jnp.float32), jnp.asarray(E, jnp.float32), jnp.array([0.5, 0.5], jnp.float32))
    w0s = np.array([w0, [0.0, 0.0], [-3.0, 0.0]], np.float32)
    yss = np.stack([ys, ys[::-1], 1 - ys])
    for normalize in (False, True):
        got = jax.jit(jax.vmap(lambda w, y, n=normalize: fast_filters.lof(m, y, w0=w, normalize=n)))(w0s, yss)
        for b in range(len(w0s)):
            ref = reference_log_filter(T, E, w0s[b], yss[b])
            expected = np.logaddexp.reduce(ref[-1]) - np.logaddexp.reduce(np.asarray(w0s[b], float))
            np.testing.assert_allclose(float(got.marginal_loglik[b]), expected, rtol=1e-5)


def test_the_alf_has_no_marginal_loglik():
    from memlab.belief.alf import ALF, alf_filter

    alf = ALF.time_invariant(np.array([[0, 1], [1, 0]]), np.array([[0.9, 0.1], [0.1, 0.9]]), 0.1)
    result = alf_filter(alf, jnp.array([0, 1, 1]))
    assert result.marginal_loglik is None and result.logits.shape == (3, 2)

"""S5 layer and S5 memory (section 6.2, App. E.2.1): HiPPO-N diagonalisation, ZOH against scipy.linalg.expm, the
conjugate-symmetric readout against the full complex system and against the real system it diagonalises, the
parallel scan against scanning ``step`` with resets, initialisation, the paper's encoder weight counts, jit/vmap/grad.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from memlab.layers.s5 import (
    S5Layer,
    discretize_zoh,
    hippo_diagonal,
    hippo_legs,
    hippo_legs_normal,
)
from memlab.rl.memory import Memory
from memlab.rl.s5_memory import S5Memory, encoder_weight_count

# Compiled once per configuration: eager dispatch of the scans compiles every small op separately.
ssm_jit = eqx.filter_jit(S5Layer.ssm)
layer_jit = eqx.filter_jit(S5Layer.__call__)
step_jit = eqx.filter_jit(S5Memory.step)
sequence_jit = eqx.filter_jit(S5Memory.sequence)
scan_of_steps_jit = eqx.filter_jit(Memory.sequence)
H, P = 4, 12  # the small layer every layer test shares (one compiled initialisation)


def close(out, ref, tol):
    """|out - ref| <= tol * max(1, max |ref|) elementwise (complex allowed)."""
    out, ref = np.asarray(out, np.complex128), np.asarray(ref, np.complex128)
    assert out.shape == ref.shape
    scale = max(1.0, np.abs(ref).max())
    err = np.abs(out - ref).max()
    assert err <= tol * scale, f"max error {err:.3g} > {tol:.1g} * {scale:.3g}"


def flags(L, where):
    r = np.zeros(L, bool)
    r[list(where)] = True
    return r


def episode_data(L, obs_size, num_actions, seed):
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 2, size=(L, obs_size)).astype(float) + 0.1 * rng.normal(size=(L, obs_size))
    return obs, rng.integers(0, num_actions, size=L)


def numpy_ssm(Lambda, B_tilde, C_tilde, D, delta, u, h0, reset):
    """The diagonal complex system, plain NumPy loop, float64: h = Lambda_bar h + B_bar u, y = C h + D u."""
    Lambda_bar = np.exp(Lambda * delta)
    B_bar = ((Lambda_bar - 1) / Lambda)[:, None] * B_tilde
    h, ys = np.asarray(h0, complex), []
    for u_t, r_t in zip(u, reset):
        h = Lambda_bar * (0 * h if r_t else h) + B_bar @ u_t
        ys.append(C_tilde @ h + D * u_t)
    return np.array(ys), h


def layer_arrays(layer):
    return tuple(np.asarray(v) for v in (layer.Lambda, layer.B_tilde, layer.C_tilde, layer.D, layer.delta))


# ---------------------------------------------------------------------------------------------- HiPPO-N


def test_hippo_legs_matches_its_definition_and_has_eigenvalues_minus_one_to_minus_n():
    N = 7
    ref = np.array([[-np.sqrt((2 * n + 1) * (2 * k + 1)) if n > k else (-(n + 1) if n == k else 0.0)
                     for k in range(N)] for n in range(N)])
    np.testing.assert_allclose(hippo_legs(N), ref, rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(np.sort(np.linalg.eigvals(ref).real), -np.arange(N, 0, -1), rtol=1e-9)


@pytest.mark.parametrize("P", [2, 12, 64, 256])
def test_hippo_diagonal_reproduces_the_normal_hippo_matrix(P):
    S = hippo_legs_normal(P)
    np.testing.assert_allclose(S + S.T, -np.eye(P), atol=1e-12)  # -I/2 + skew-symmetric
    Lambda, V = hippo_diagonal(P)
    assert Lambda.shape == (P // 2,) and V.shape == (P, P // 2)
    assert np.all(Lambda.real < 0) and np.all(Lambda.imag < 0)  # stable; the omega < 0 half of each pair
    np.testing.assert_allclose(V.conj().T @ V, np.eye(P // 2), atol=1e-10)  # orthonormal columns
    np.testing.assert_allclose(V.T @ V, 0, atol=1e-10)  # orthogonal to their conjugates: a basis with them
    V_full, Lambda_full = np.hstack([V, V.conj()]), np.concatenate([Lambda, Lambda.conj()])
    scale = np.abs(S).max()
    np.testing.assert_allclose(V_full @ np.diag(Lambda_full) @ np.linalg.inv(V_full), S, atol=1e-10 * scale)
    np.testing.assert_allclose(2 * (V @ np.diag(Lambda) @ V.conj().T).real, S, atol=1e-10 * scale)
    # the stored eigenvalues and their conjugates are the eigenvalues of S (independent solver: general eigvals)
    eig = np.linalg.eigvals(S)
    np.testing.assert_allclose(eig.real, -0.5, atol=1e-8 * scale)
    np.testing.assert_allclose(np.sort(np.concatenate([Lambda.imag, -Lambda.imag])), np.sort(eig.imag),
                               atol=1e-8 * scale)


# ---------------------------------------------------------------------------------------------- ZOH


def test_zoh_matches_expm_of_each_continuous_mode(x64):
    rng = np.random.default_rng(0)
    M, H = 6, 3
    Lambda = -rng.uniform(0.01, 2.0, M) + 1j * rng.normal(scale=20.0, size=M)
    B = rng.normal(size=(M, H)) + 1j * rng.normal(size=(M, H))
    delta = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), M))
    Lambda_bar, B_bar = discretize_zoh(jnp.asarray(Lambda), jnp.asarray(B), jnp.asarray(delta))
    for m in range(M):  # expm(delta [[lambda, 1], [0, 0]]) = [[exp(delta lambda), int_0^delta exp(s lambda)], [0, 1]]
        E = scipy.linalg.expm(delta[m] * np.array([[Lambda[m], 1.0], [0.0, 0.0]]))
        close(Lambda_bar[m], E[0, 0], 1e-14)
        close(B_bar[m], E[0, 1] * B[m], 1e-14)


def test_s5_with_a_common_step_is_the_zoh_discretised_real_hippo_system(x64):
    """Real P-dim system x' = S x + B u, y = C x + D u with one Delta, discretised by scipy.linalg.expm, equals the
    S5 layer whose B_tilde = V_h^H B, C_tilde = C V_h (real C) and log_step = log Delta: HiPPO diagonalisation,
    conjugate symmetry, ZOH and the readout together."""
    rng = np.random.default_rng(1)
    L, delta = 30, 0.05
    S = hippo_legs_normal(P)
    Lambda, V = hippo_diagonal(P)
    B, C, u = rng.normal(size=(P, H)), rng.normal(size=(H, P)), rng.normal(size=(L, H))
    layer = S5Layer(H, P, key=jax.random.key(1))
    close(layer.Lambda, Lambda, 1e-15)  # HiPPO-N initialisation
    B_t, C_t = V.conj().T @ B, C @ V
    new = (B_t.real, B_t.imag, C_t.real, C_t.imag, np.full(P // 2, np.log(delta)))
    layer = eqx.tree_at(lambda m: (m.B_re, m.B_im, m.C_re, m.C_im, m.log_step), layer, tuple(map(jnp.asarray, new)))
    aug = np.zeros((P + H, P + H))
    aug[:P, :P], aug[:P, P:] = S, B
    E = scipy.linalg.expm(delta * aug)
    x, ys = np.zeros(P), []
    for u_t in u:
        x = E[:P, :P] @ x + E[:P, P:] @ u_t
        ys.append(C @ x + np.asarray(layer.D) * u_t)
    _, y = ssm_jit(layer, jnp.asarray(u))
    close(y, np.array(ys), 1e-11)


# ---------------------------------------------------------------------------------------------- conjugate symmetry


def test_conjugate_symmetric_readout_equals_the_full_complex_system(x64):
    L = 40
    layer = S5Layer(H, P, key=jax.random.key(2))
    Lambda, B_t, C_t, D, delta = layer_arrays(layer)
    rng = np.random.default_rng(2)
    u, h0 = rng.normal(size=(L, H)), rng.normal(size=P // 2) + 1j * rng.normal(size=P // 2)
    reset = flags(L, [9, 10, 31])
    full = (np.concatenate([Lambda, Lambda.conj()]), np.vstack([B_t, B_t.conj()]), np.hstack([C_t, C_t.conj()]), D,
            np.concatenate([delta, delta]))
    y_full, h_full = numpy_ssm(*full, u, np.concatenate([h0, h0.conj()]), reset)
    assert np.abs(y_full.imag).max() < 1e-12 * np.abs(y_full).max()  # the full system's output is real
    for method in ("sequential", "parallel"):
        states, y = ssm_jit(layer, jnp.asarray(u), jnp.asarray(h0), jnp.asarray(reset), method)
        assert y.dtype == jnp.float64 and states.shape == (L, P // 2)
        close(y, y_full.real, 1e-12)
        close(states[-1], h_full[: P // 2], 1e-12)
        close(states[-1].conj(), h_full[P // 2:], 1e-12)


# ---------------------------------------------------------------------------------------------- scans and resets


@pytest.mark.parametrize("use_x64, tol", [(False, 1e-5), (True, 1e-10)])
def test_parallel_sequence_equals_scanning_step_with_resets(use_x64, tol):
    L, obs_size, num_actions = 57, 4, 3
    obs, actions = episode_data(L, obs_size, num_actions, seed=3)
    with jax.enable_x64(use_x64):
        dtype = jnp.float64 if use_x64 else jnp.float32
        for options in ({}, {"num_actions": num_actions}, {"num_actions": num_actions, "start_input": True}):
            memory = S5Memory(obs_size, 12, key=jax.random.key(3), **options)
            sequential = S5Memory(obs_size, 12, key=jax.random.key(3), method="sequential", **options)
            h0 = jnp.asarray(np.linspace(-1, 1, 6) * (1 + 1j), memory.init_state().dtype)
            for starts in (flags(L, [0, 13, 14, 40]), flags(L, [13, 14, 40, L - 1])):  # with and without a start at 0
                args = (h0, jnp.asarray(obs, dtype), jnp.asarray(actions, jnp.int32), jnp.asarray(starts))
                h_ref, f_ref = scan_of_steps_jit(memory, *args)
                h_par, f_par = sequence_jit(memory, *args)
                assert f_par.dtype == dtype and f_par.shape == (L, 12) and h_par.shape == (6,)
                close(f_par, f_ref, tol)
                close(h_par, h_ref, tol)
                close(sequence_jit(sequential, *args)[1], f_ref, tol)


def test_a_start_forgets_the_past_and_drives_the_update_from_zero(x64):
    L, t0 = 57, 11
    obs, actions = episode_data(L, 4, 2, seed=4)
    memory = S5Memory(4, 12, key=jax.random.key(4))
    starts = flags(L, [0, t0])
    rng = np.random.default_rng(4)
    h0 = jnp.asarray(rng.normal(size=6) + 1j * rng.normal(size=6))
    _, f = sequence_jit(memory, h0, jnp.asarray(obs), jnp.asarray(actions), jnp.asarray(starts))
    rolled = (np.roll(obs, -t0, 0), np.roll(actions, -t0), np.roll(starts, -t0))  # same length: no new compile
    _, f_fresh = sequence_jit(memory, memory.init_state(), *map(jnp.asarray, rolled))
    close(f[t0:], f_fresh[: L - t0], 1e-12)
    # the first step of an episode is the update from h = 0, whatever h was
    o, a = jnp.asarray(obs[0]), jnp.asarray(actions[0])
    h_a, f_a = step_jit(memory, h0, o, a, jnp.asarray(True))
    h_b, f_b = step_jit(memory, memory.init_state(), o, a, jnp.asarray(False))
    close(f_a, f_b, 1e-15)
    close(h_a, h_b, 1e-15)
    assert np.abs(np.asarray(h_a)).min() > 0  # the observation moved the state off zero


def test_layer_step_matches_the_numpy_system_and_the_full_glu_formula(x64):
    L = 8
    layer = S5Layer(H, P, key=jax.random.key(5))
    rng = np.random.default_rng(5)
    u = rng.normal(size=(L, H))
    y_ref, _ = numpy_ssm(*layer_arrays(layer), u, np.zeros(P // 2), np.zeros(L, bool))
    y_ref = 2 * y_ref.real - np.asarray(layer.D) * u  # the halved system: 2 Re(C h), D u added once
    W1, b1, W2, b2 = (np.asarray(v) for v in (layer.glu_out1.weight, layer.glu_out1.bias, layer.glu_out2.weight,
                                               layer.glu_out2.bias))
    z = np.asarray(jax.nn.gelu(jnp.asarray(y_ref)))
    out_ref = u + (z @ W1.T + b1) / (1 + np.exp(-(z @ W2.T + b2)))
    step = eqx.filter_jit(S5Layer.step)
    h, outs = layer.init_state(), []
    for u_t in u:
        h, out = step(layer, h, jnp.asarray(u_t))
        outs.append(out)
    close(np.array(outs), out_ref, 1e-12)
    h_last, out_seq = layer_jit(layer, jnp.asarray(u))
    close(out_seq, out_ref, 1e-12)
    close(h_last, h, 1e-12)


# ---------------------------------------------------------------------------------------------- initialisation


@pytest.fixture(scope="module")
def memory256():
    """The paper's large S5 memory (hidden 256), float32, built once."""
    return S5Memory(4, 256, key=jax.random.key(6))


def test_log_steps_lie_in_the_table_2_range_and_spread_over_it(memory256):
    log_step = np.asarray(memory256.layer.log_step)
    assert log_step.shape == (128,)
    lo, hi = np.log(np.float32(1e-3)), np.log(np.float32(1e-1))
    assert np.all(log_step >= lo) and np.all(log_step <= hi)
    assert log_step.min() < lo + 0.1 * (hi - lo) and log_step.max() > hi - 0.1 * (hi - lo)
    custom = np.asarray(S5Layer(H, P, key=jax.random.key(6), dt_min=0.01, dt_max=0.02).delta)
    assert np.all((custom >= 0.01 * (1 - 1e-6)) & (custom <= 0.02 * (1 + 1e-6)))


def test_input_and_output_matrix_scales_follow_the_lecun_normal_fan_ins(memory256):
    layer, N = memory256.layer, 256  # H = P = 256
    _, V = hippo_diagonal(N)
    B = 2 * (V @ np.asarray(layer.B_tilde, np.complex128)).real  # the real lecun-normal draw (P, H)
    assert abs(B.std() * np.sqrt(N) - 1) < 0.02  # variance 1/P
    assert np.abs(B).max() <= 2 / 0.87962566103423978 / np.sqrt(N) * (1 + 1e-5)  # truncated at 2 sigma
    # E |C V_h|^2 = 2 Var(C) per entry (unit columns of V_h; real and imaginary parts)
    assert abs(np.mean(np.abs(np.asarray(layer.C_tilde)) ** 2) / (2 / (N * N)) - 1) < 0.03
    per_row = S5Layer(N, N, key=jax.random.key(7), C_init="trunc_standard_normal")
    assert abs(np.mean(np.abs(np.asarray(per_row.C_tilde)) ** 2) / (2 / N) - 1) < 0.03


def test_diagnostics_report_the_slowest_mode_and_the_step_range(memory256):
    d = {name: float(v) for name, v in memory256.diagnostics().items()}
    delta = np.exp(np.asarray(memory256.layer.log_step, np.float64))
    np.testing.assert_allclose(d["max_abs_lambda_bar"], np.exp(-0.5 * delta.min()), rtol=1e-6)  # Re(Lambda) = -1/2
    np.testing.assert_allclose([d["min_delta"], d["max_delta"]], [delta.min(), delta.max()], rtol=1e-6)


def test_encoder_weight_counts_are_the_papers(memory256):
    assert encoder_weight_count(4, 12) == 2048 == 4 * 128 + 128 * 12
    assert encoder_weight_count(4, 256) == 33280 == 4 * 128 + 128 * 256
    for hidden, count, memory in ((12, 2048, S5Memory(4, 12, key=jax.random.key(8))), (256, 33280, memory256)):
        assert memory.num_encoder_weights == count and memory.num_features == hidden
        assert memory.init_state().shape == (hidden // 2,) and jnp.iscomplexobj(memory.init_state())
        assert memory.encoder_in.bias.shape == (128,) and memory.encoder_out.bias.shape == (hidden,)
    with_actions = S5Memory(4, 12, key=jax.random.key(8), num_actions=3)
    assert with_actions.num_encoder_weights == encoder_weight_count(7, 12) == 7 * 128 + 128 * 12
    assert S5Memory.trainable


def test_previous_action_is_one_hot_and_absent_at_an_episode_start():
    memory = S5Memory(4, 12, key=jax.random.key(9), num_actions=3)
    encode = eqx.filter_jit(S5Memory.encode)
    obs, yes, no = jnp.ones(4), jnp.asarray(True), jnp.asarray(False)
    e = [encode(memory, obs, jnp.asarray(a), no) for a in range(3)]
    assert float(jnp.abs(e[1] - e[2]).max()) > 1e-3
    close(encode(memory, obs, jnp.asarray(2), yes), encode(memory, obs, jnp.asarray(0), yes), 0.0)
    plain = S5Memory(4, 12, key=jax.random.key(9))
    close(encode(plain, obs, jnp.asarray(1), no), encode(plain, obs, jnp.asarray(2), no), 0.0)


def test_the_start_flag_is_one_more_input():
    """'s5-12-prev-action' (Lu et al.'s runner): previous action one-hot and the start flag, O' = 4 + 3 + 1."""
    memory = S5Memory(4, 12, key=jax.random.key(9), num_actions=3, start_input=True)
    assert memory.input_size == 8 and memory.encoder_in.weight.shape == (128, 8)
    x = jnp.concatenate([jnp.ones(4), jnp.zeros(3), jnp.ones(1)])  # an episode's first step: no action, flag 1
    expected = jax.nn.leaky_relu(memory.encoder_out(jax.nn.leaky_relu(memory.encoder_in(x))))
    close(eqx.filter_jit(S5Memory.encode)(memory, jnp.ones(4), jnp.asarray(2), jnp.asarray(True)), expected, 1e-6)
    with pytest.raises(ValueError, match="start_input must be a bool"):
        S5Memory(4, 12, key=jax.random.key(9), start_input=1)


@pytest.mark.parametrize("activation", ["full_glu", "half_glu1", "half_glu2", "gelu"])
def test_every_activation_has_its_gate_layers_and_formula(activation):
    layer = S5Layer(H, P, key=jax.random.key(10), activation=activation)
    assert (layer.glu_out1 is not None) == (activation == "full_glu")
    assert (layer.glu_out2 is not None) == (activation != "gelu")
    rng = np.random.default_rng(10)
    y, u = (jnp.asarray(rng.normal(size=(5, H)), jnp.float32) for _ in range(2))
    z = jax.nn.gelu(y)
    gate = None if layer.glu_out2 is None else jax.nn.sigmoid(jax.vmap(layer.glu_out2)(z))
    ref = {"full_glu": lambda: jax.vmap(layer.glu_out1)(z) * gate,
           "half_glu1": lambda: z * gate, "half_glu2": lambda: y * gate, "gelu": lambda: z}[activation]()
    close(layer.mix(y, u), u + ref, 1e-6)


# ---------------------------------------------------------------------------------------------- transformations


def test_jit_vmap_and_grad_through_the_memory():
    E, L = 3, 57
    memory = S5Memory(4, 12, key=jax.random.key(3))
    rng = np.random.default_rng(11)
    obs = jnp.asarray(rng.normal(size=(E, L, 4)), jnp.float32)
    actions = jnp.zeros((E, L), jnp.int32)
    starts = jnp.asarray(np.stack([flags(L, [0, 7]), flags(L, [0]), flags(L, [3, 15])]))
    h0 = jnp.stack([memory.init_state()] * E)

    @eqx.filter_jit
    def loss(m):
        _, f = jax.vmap(m.sequence)(h0, obs, actions, starts)
        return jnp.mean(f ** 2)

    value, grads = eqx.filter_value_and_grad(loss)(memory)
    leaves = jax.tree_util.tree_leaves(grads)
    assert np.isfinite(float(value)) and len(leaves) == 16
    for leaf in leaves:
        assert np.all(np.isfinite(np.asarray(leaf))) and float(jnp.abs(leaf).max()) > 0
    h, f = eqx.filter_jit(jax.vmap(S5Memory.step, in_axes=(None, 0, 0, 0, 0)))(memory, h0, obs[:, 0], actions[:, 0],
                                                                                  starts[:, 0])
    assert h.shape == (E, 6) and f.shape == (E, 12)


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, match", [
    ({"obs_size": 4, "hidden": 13}, "hidden must be even"),
    ({"obs_size": 4, "hidden": 0}, "hidden must be an int"),
    ({"obs_size": 0}, "obs_size"),
    ({"obs_size": 4.0}, "obs_size"),
    ({"obs_size": 4, "num_actions": 0}, "num_actions"),
    ({"obs_size": 4, "method": "fast"}, "unknown method"),
    ({"obs_size": 4, "activation": "relu"}, "unknown activation"),
    ({"obs_size": 4, "C_init": "zeros"}, "unknown C_init"),
    ({"obs_size": 4, "dt_min": 0.1, "dt_max": 0.01}, "dt_max"),
    ({"obs_size": 4, "dt_min": 0.0}, "dt_min"),
])
def test_bad_construction_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        S5Memory(**kwargs, key=jax.random.key(0))


def test_bad_shapes_raise():
    memory = S5Memory(4, 12, key=jax.random.key(0))
    h = memory.init_state()
    with pytest.raises(ValueError, match=r"obs must have shape \(4,\)"):
        memory.step(h, jnp.ones(5), jnp.asarray(0), jnp.asarray(False))
    with pytest.raises(ValueError, match="h must have shape"):
        memory.step(jnp.zeros(12, jnp.complex64), jnp.ones(4), jnp.asarray(0), jnp.asarray(False))
    with pytest.raises(ValueError, match="expected obs"):
        memory.sequence(h, jnp.ones((6, 3)), jnp.zeros(6, jnp.int32), jnp.zeros(6, bool))
    with pytest.raises(ValueError, match="expected obs"):
        memory.sequence(h, jnp.ones((6, 4)), jnp.zeros(5, jnp.int32), jnp.zeros(6, bool))
    with pytest.raises(ValueError, match="u must be"):
        memory.layer(jnp.ones((6, 5)))
    with pytest.raises(ValueError, match="state size P must be even"):
        hippo_diagonal(7)

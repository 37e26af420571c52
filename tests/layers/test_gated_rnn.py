"""GRU / LSTM cells against NumPy float64 references of App. A.3-A.4; ISS margins against their definitions;
after project_iss the inequalities of Theorem 2 / eq. (68) / eq. (79) hold and trajectories obey the ISS
bounds (67) and (172); projected cells forget their initial state where an unprojected one is bistable."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memlab.layers.gated_rnn import (
    BoundedInput,
    GRUCell,
    LSTMCell,
    iss_margin,
    project_iss,
    project_model_iss,
)

N_U, N_H = 3, 6


def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def params(cell) -> dict:
    return {k: np.asarray(v, dtype=np.float64) for k, v in vars(cell).items()}


def gru_reference(p, h, u):
    g = sig(p["W_g"] @ u + p["U_g"] @ h + p["b_g"])
    f = sig(p["W_f"] @ u + p["U_f"] @ h + p["b_f"])
    return g * h + (1 - g) * np.tanh(p["W_r"] @ u + p["U_r"] @ (f * h) + p["b_r"])


def lstm_reference(p, h, c, u):
    f, i, o = (sig(p[f"W_{x}"] @ u + p[f"U_{x}"] @ h + p[f"b_{x}"]) for x in "fio")
    c_next = f * c + i * np.tanh(p["W_c"] @ u + p["U_c"] @ h + p["b_c"])
    return o * np.tanh(c_next), c_next


def gate_bound_reference(p, x, u_max):
    """sigma(max(u_max, 1) * max_i (sum_j |W_ij| + sum_j |U_ij| + |b_i|)), written out row by row."""
    rows = [np.abs(p[f"W_{x}"][i]).sum() + np.abs(p[f"U_{x}"][i]).sum() + abs(p[f"b_{x}"][i])
            for i in range(p[f"b_{x}"].shape[0])]
    return sig(max(u_max, 1.0) * max(rows))


def random_cell(cls, key, scale=3.0, zero=()):
    """A cell whose weights are N(0, scale^2) (far outside the ISS region); the named fields set to zero."""
    cell = cls(N_U, N_H, key=key)
    leaves, tree = jax.tree_util.tree_flatten(cell)
    keys = jax.random.split(jax.random.fold_in(key, 1), len(leaves))
    cell = jax.tree_util.tree_unflatten(tree, [scale * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])
    for name in zero:
        cell = eqx.tree_at(lambda c, name=name: getattr(c, name), cell, jnp.zeros_like(getattr(cell, name)))
    return cell


def run(cell, state0, inputs):
    """States after each input, (T, ...) (a pair of arrays for the LSTM)."""
    return jax.lax.scan(lambda s, u: (cell(s, u),) * 2, state0, inputs)[1]


def inputs(key, T, u_max):
    return jax.random.uniform(key, (T, N_U), minval=-u_max, maxval=u_max)


def inf_norms(x):
    return jnp.max(jnp.abs(x), axis=-1)


# ---------------------------------------------------------------- cells


def test_cells_match_float64_references_of_appendix_a(x64):
    rng = np.random.default_rng(0)
    gru, lstm = random_cell(GRUCell, jax.random.key(0), 1.0), random_cell(LSTMCell, jax.random.key(1), 1.0)
    for _ in range(3):
        h, c, u = rng.standard_normal(N_H), rng.standard_normal(N_H), rng.standard_normal(N_U)
        np.testing.assert_allclose(gru(jnp.asarray(h), jnp.asarray(u)), gru_reference(params(gru), h, u),
                                   rtol=1e-13, atol=1e-14)
        h1, c1 = lstm((jnp.asarray(h), jnp.asarray(c)), jnp.asarray(u))
        h1_ref, c1_ref = lstm_reference(params(lstm), h, c, u)
        np.testing.assert_allclose(h1, h1_ref, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(c1, c1_ref, rtol=1e-13, atol=1e-14)


def test_update_gate_keeps_the_old_state_in_the_papers_gru_convention():
    """A.3 eq. (32): h+ = g h + (1 - g) h_hat, so g -> 1 keeps h (PyTorch's z has the same role; some texts swap)."""
    cell = eqx.tree_at(lambda c: c.b_g, GRUCell(N_U, N_H, key=jax.random.key(0)), jnp.full(N_H, 50.0))
    h = jnp.linspace(-0.9, 0.9, N_H)
    np.testing.assert_allclose(cell(h, jnp.ones(N_U)), h, atol=1e-6)


def test_cells_scan_vmap_and_have_zero_initial_states():
    key = jax.random.key(0)
    for cls in (GRUCell, LSTMCell):
        cell = cls(N_U, N_H, key=key)
        batch = jax.vmap(lambda u, cell=cell: run(cell, cell.init_state(), u))(jax.random.normal(key, (4, 10, N_U)))
        first = jax.tree_util.tree_leaves(batch)[0]
        assert first.shape == (4, 10, N_H) and np.all(np.isfinite(first))
        assert all(np.all(x == 0) for x in jax.tree_util.tree_leaves(cell.init_state()))


@pytest.mark.parametrize("cls", [GRUCell, LSTMCell])
def test_gradient_flows_to_every_parameter_and_matches_finite_differences(x64, cls):
    key = jax.random.key(3)
    cell = random_cell(cls, key, 0.5)
    us = inputs(key, 15, 1.0)

    def loss(c):
        last = jax.tree_util.tree_map(lambda x: x[-1], run(c, c.init_state(), us))
        return sum(jnp.sum(x ** 2) for x in jax.tree_util.tree_leaves(last))

    grads = jax.grad(loss)(cell)
    for name, g in vars(grads).items():
        assert np.all(np.isfinite(g)) and np.any(g != 0), name
    direction = jax.tree_util.tree_map(lambda x: jax.random.normal(jax.random.key(9), x.shape), cell)
    step = 1e-6
    shifted = [jax.tree_util.tree_map(lambda p, d, s=s: p + s * step * d, cell, direction) for s in (1, -1)]
    fd = (loss(shifted[0]) - loss(shifted[1])) / (2 * step)
    ad = sum(jnp.sum(g * d) for g, d in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(direction)))
    np.testing.assert_allclose(ad, fd, rtol=1e-6)


# ---------------------------------------------------------------- margins


@pytest.mark.parametrize("u_max", [1.0, 0.5, 2.5])
def test_margins_follow_the_papers_definitions(x64, u_max):
    gru, lstm = random_cell(GRUCell, jax.random.key(0), 0.3), random_cell(LSTMCell, jax.random.key(1), 0.3)
    p = params(gru)
    psi, g_bar = gate_bound_reference(p, "f", u_max), gate_bound_reference(p, "g", u_max)
    c = np.abs(p["U_r"]).sum(axis=1).max() * psi  # eq. (68)
    delta = (1 - g_bar) * (1 - c)  # eq. (66)
    m = iss_margin(gru, u_max=u_max)
    expected = dict(sigma_f_hat=psi, g_bar=g_bar, gain=c, margin=1 - c, decay=delta, radius=1 / psi,
                    input_gain=g_bar * np.abs(p["W_r"]).sum(axis=1).max() / delta, bias_gain=g_bar / delta)
    for name, value in expected.items():
        np.testing.assert_allclose(getattr(m, name), value, rtol=1e-12, err_msg=name)

    p = params(lstm)
    s_f, s_i, s_o = (gate_bound_reference(p, x, u_max) for x in "fio")
    norm = np.abs(p["U_c"]).sum(axis=1).max()
    alpha = max((1 + s_o) * s_f, (1 + s_o) * s_i * norm)  # eq. (169)
    m = iss_margin(lstm, u_max=u_max)
    expected = dict(forget_term=(1 + s_o) * s_f, gain=(1 + s_o) * s_i * norm, margin=1 - alpha,
                    radius=1 / ((1 + s_o) * s_i),
                    input_gain=(1 + s_o) * s_i * np.abs(p["W_c"]).sum(axis=1).max() / (1 - alpha))
    for name, value in expected.items():
        np.testing.assert_allclose(getattr(m, name), value, rtol=1e-12, err_msg=name)
    assert bool(m.certified) == (alpha < 1)


# ---------------------------------------------------------------- projections


@pytest.mark.parametrize("u_max", [1.0, 2.0])
@pytest.mark.parametrize("eps", [0.1, 0.6])
def test_gru_projection_enforces_the_margin_and_touches_only_u_r(eps, u_max):
    for seed in range(3):
        cell = random_cell(GRUCell, jax.random.key(seed))
        assert iss_margin(cell, u_max).margin < 0
        projected = project_iss(cell, eps, u_max=u_max)
        m = iss_margin(projected, u_max)
        assert m.margin >= eps - 1e-6 and m.margin <= eps + 1e-5  # the radius puts c on 1 - eps, not below
        for name, value in vars(cell).items():
            if name != "U_r":
                assert np.array_equal(getattr(projected, name), value), name
        again = project_iss(projected, eps, u_max=u_max)
        np.testing.assert_allclose(again.U_r, projected.U_r, rtol=2e-6)  # inside the ball: (nearly) a fixed point


def test_certified_cells_are_left_exactly_as_they_are():
    for cls in (GRUCell, LSTMCell):
        cell = random_cell(cls, jax.random.key(0), 0.01)
        assert iss_margin(cell).margin > 0.1  # the LSTM forget term is >= 3/4 whatever the weights
        projected = project_iss(cell, 0.1, forget_eps=0.1)
        assert all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(cell),
                                                        jax.tree_util.tree_leaves(projected)))


def lstm_with_gate_sizes(key, f_row_sum, o_row_sum):
    """Random LSTM whose f and o blocks have the given largest row l1 norm; big U_c and i block."""
    cell = random_cell(LSTMCell, key)
    for x, target in (("f", f_row_sum), ("o", o_row_sum)):
        block = [getattr(cell, f"{p}_{x}") for p in "WUb"]
        norm = jnp.max(sum(jnp.sum(jnp.abs(b.reshape(N_H, -1)), axis=1) for b in block))
        cell = eqx.tree_at(lambda c, x=x: [getattr(c, f"{p}_{x}") for p in "WUb"], cell,
                           [b * target / norm for b in block])
    return cell


@pytest.mark.parametrize("eps, forget_eps, f_row_sum, o_row_sum, moved", [
    # sigma_f = sigma(row sum), sigma_o likewise; which gate moves follows from target_f = (1 - forget_eps) /
    # (1 + sigma_o) and target_o = (1 - forget_eps) / sigma_f - 1 (module docstring), worked out by hand:
    (0.1, 0.1, 4.0, 0.3, "f"),  # target_f = 0.572 > 1/2: the forget gate alone (Remark 4 (i))
    (0.1, 0.1, 0.2, 6.0, "o"),  # target_f = 0.451, target_o = 0.637: the output gate alone
    (0.1, 0.1, 4.0, 6.0, "fo"),  # target_f = 0.451, target_o < 0: both to the symmetric point
    (0.25, 1e-3, 4.0, 6.0, "f"),  # target_f = 0.50013: the forget gate alone, to a nearly zero block
    (0.5, 0.2, 0.2, 6.0, "fo"),  # target_f = 0.400, target_o = 0.455: both
])
def test_lstm_projection_enforces_both_inequalities(eps, forget_eps, f_row_sum, o_row_sum, moved):
    cell = lstm_with_gate_sizes(jax.random.key(0), f_row_sum, o_row_sum)
    before = iss_margin(cell)
    assert before.forget_term > 1 - forget_eps and before.gain > 1
    projected = project_iss(cell, eps, forget_eps=forget_eps)
    m = iss_margin(projected)
    assert m.forget_term <= 1 - forget_eps + 1e-6 and m.forget_term >= 1 - forget_eps - 1e-5  # eq. (79), buffered
    assert m.gain <= 1 - eps + 1e-6 and m.gain >= 1 - eps - 1e-5
    assert m.margin >= min(eps, forget_eps) - 1e-6
    for x in "fo":
        same = all(np.array_equal(getattr(cell, f"{p}_{x}"), getattr(projected, f"{p}_{x}")) for p in "WUb")
        assert same == (x not in moved), x
    for name in ("W_i", "U_i", "b_i", "W_c", "b_c"):
        assert np.array_equal(getattr(cell, name), getattr(projected, name)), name


def test_projections_jit_and_apply_to_every_cell_of_a_model():
    key = jax.random.key(0)
    model = {"gru": random_cell(GRUCell, key), "lstm": random_cell(LSTMCell, key), "head": jnp.full((2, 2), 7.0),
             "layers": [random_cell(GRUCell, jax.random.key(5))]}
    projected = eqx.filter_jit(project_model_iss)(model, 0.15, forget_eps=0.05)
    assert np.array_equal(projected["head"], model["head"])
    for path in (("gru",), ("lstm",), ("layers", 0)):
        cell, new = model, projected
        for p in path:
            cell, new = cell[p], new[p]
        direct = project_iss(cell, 0.15, forget_eps=0.05)
        for a, b in zip(jax.tree_util.tree_leaves(direct), jax.tree_util.tree_leaves(new)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        assert iss_margin(new).margin >= 0.05 - 1e-6


# ---------------------------------------------------------------- dynamics


@pytest.mark.parametrize("u_max", [1.0, 2.0])
def test_projected_cells_obey_the_iss_bounds_along_trajectories(u_max):
    """eq. (67) for the GRU and eq. (172) for the LSTM, every step, with all gates depending on h."""
    T = 300
    for seed in range(3):
        key = jax.random.key(seed)
        us = inputs(jax.random.fold_in(key, 7), T, u_max)
        h0 = jnp.sign(jax.random.normal(jax.random.fold_in(key, 8), (N_H,)))  # a corner of the cube
        t = jnp.arange(1, T + 1)

        gru = project_iss(random_cell(GRUCell, key, 2.0), 0.2, u_max=u_max)
        m = iss_margin(gru, u_max)
        hs = run(gru, h0, us)
        bound = (1 - m.decay) ** t * 1.0 + m.input_gain * u_max + m.bias_gain * jnp.max(jnp.abs(gru.b_r))
        assert np.all(inf_norms(hs) <= bound + 1e-6)

        lstm = project_iss(random_cell(LSTMCell, key, 2.0), 0.2, u_max=u_max, forget_eps=0.1)
        m = iss_margin(lstm, u_max)
        c0 = 20.0 * jax.random.normal(jax.random.fold_in(key, 9), (N_H,))
        hs, cs = run(lstm, (h0, c0), us)
        V = inf_norms(hs) + inf_norms(cs)
        V0 = 1.0 + jnp.max(jnp.abs(c0))
        bound = (1 - m.decay) ** t * V0 + m.input_gain * u_max + m.bias_gain * jnp.max(jnp.abs(lstm.b_c))
        assert np.all(V <= bound + 1e-5)


def test_bounded_input_lets_the_unit_certificate_cover_unbounded_features(x64):
    """Raw features of size ~100 through BoundedInput: the u_max = 1 margin's bound (67) holds along the path,
    while the same cell fed the raw features leaves it (so the test can fail)."""
    T, key = 200, jax.random.key(3)
    raw = 100.0 * jax.random.normal(key, (T, N_U), jnp.float64)
    shift, scale = np.array([1.0, -2.0, 0.5]), np.array([0.5, 2.0, 4.0])
    bounded = BoundedInput(shift, scale)
    us = jax.vmap(bounded)(raw)
    np.testing.assert_allclose(us, np.tanh((np.asarray(raw) - shift) / scale), rtol=1e-12, atol=0)
    assert float(jnp.max(jnp.abs(us))) <= 1.0
    gru = project_iss(random_cell(GRUCell, key, 0.05), 0.2)  # small weights: a bound (67) below 1, not vacuous
    m = iss_margin(gru)
    h0 = jnp.ones(N_H, jnp.float64)
    bound = (1 - m.decay) ** jnp.arange(1, T + 1) + m.input_gain + m.bias_gain * jnp.max(jnp.abs(gru.b_r))
    assert float(bound[-1]) < 1.0
    assert np.all(inf_norms(run(gru, h0, us)) <= bound + 1e-9)
    assert np.mean(inf_norms(run(gru, h0, raw)) > bound) > 0.5  # raw features break Assumption 4 and the bound
    with pytest.raises(ValueError, match="scale"):
        BoundedInput(np.zeros(2), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="one shape"):
        BoundedInput(np.zeros(2), np.ones(3))
    with pytest.raises(ValueError, match="f must have shape"):
        bounded(jnp.zeros(N_U + 1))


def test_without_input_and_bias_the_iss_bound_is_exponential_decay_to_zero():
    """u = 0, b_r = 0 (b_c = 0): (67) / (172) reduce to ||state_t|| <= (1 - delta)^t ||state_0||."""
    T = 60
    t = jnp.arange(1, T + 1)
    zeros = jnp.zeros((T, N_U))
    for seed in range(3):
        key = jax.random.key(seed)
        gru = project_iss(random_cell(GRUCell, key, 2.0, zero=("b_r",)), 0.3)
        hs = run(gru, jnp.ones(N_H), zeros)
        assert np.all(inf_norms(hs) <= (1 - iss_margin(gru).decay) ** t + 1e-6)
        lstm = project_iss(random_cell(LSTMCell, key, 2.0, zero=("b_c",)), 0.3, forget_eps=0.1)
        hs, cs = run(lstm, (jnp.ones(N_H), 5.0 * jnp.ones(N_H)), zeros)
        assert np.all(inf_norms(hs) + inf_norms(cs) <= (1 - iss_margin(lstm).decay) ** t * 6.0 + 1e-6)


def bistable(cls):
    """A cell with U = 3 I whose candidate has two stable fixed points near +-1 (GRU h, LSTM c); gates are
    input-driven only, so once the margin is positive the ISS argument also contracts differences."""
    cell = cls(N_U, N_H, key=jax.random.key(0))
    recurrent = "U_r" if cls is GRUCell else "U_c"
    biases = {"b_g": -2.0, "b_f": 5.0} if cls is GRUCell else {"b_f": 0.0, "b_i": 5.0, "b_o": 5.0}
    for name, value in vars(cell).items():
        if name.startswith("U_"):
            new = 3.0 * jnp.eye(N_H) if name == recurrent else jnp.zeros_like(value)
        elif name.startswith("W_"):
            new = 0.05 * value
        else:
            new = jnp.full(N_H, biases.get(name, 0.0))
        cell = eqx.tree_at(lambda c, name=name: getattr(c, name), cell, new)
    return cell


@pytest.mark.parametrize("cls", [GRUCell, LSTMCell])
def test_projected_cell_forgets_its_initial_state_where_the_unprojected_one_is_bistable(cls):
    T = 200
    us = inputs(jax.random.key(1), T, 1.0)
    h0 = 0.5 * jnp.ones(N_H)

    def start(sign):
        return sign * h0 if cls is GRUCell else (sign * h0, sign * h0)

    def state_gap(cell):
        """||difference|| of GRU h, or ||dh|| + ||dc|| of the LSTM, at every step, from +-h0 with common inputs."""
        a, b = run(cell, start(1.0), us), run(cell, start(-1.0), us)
        return sum(inf_norms(x - y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))

    cell = bistable(cls)
    assert iss_margin(cell).margin < 0
    assert np.all(state_gap(cell)[-20:] > 1.0)  # two attractors: the initial state is never forgotten

    projected = project_iss(cell, 0.1, forget_eps=0.1)
    m = iss_margin(projected)
    gap = state_gap(projected)
    gap0 = 1.0 if cls is GRUCell else 2.0
    assert np.all(gap <= (1 - m.decay) ** jnp.arange(1, T + 1) * gap0 + 1e-6)
    assert gap[-1] < 1e-5


# ---------------------------------------------------------------- bad input


def test_bad_inputs_raise():
    key = jax.random.key(0)
    gru, lstm = GRUCell(N_U, N_H, key=key), LSTMCell(N_U, N_H, key=key)
    with pytest.raises(ValueError, match="h must have shape"):
        gru(jnp.zeros(N_H + 1), jnp.zeros(N_U))
    with pytest.raises(ValueError, match="u must have shape"):
        gru(jnp.zeros(N_H), jnp.zeros((2, N_U)))
    with pytest.raises(ValueError, match="pair"):
        lstm(jnp.zeros(N_H), jnp.zeros(N_U))
    with pytest.raises(ValueError, match="c must have shape"):
        lstm((jnp.zeros(N_H), jnp.zeros(2)), jnp.zeros(N_U))
    for size in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            GRUCell(size, N_H, key=key)
    for eps in (0.0, 1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="eps"):
            project_iss(gru, eps)
    for forget_eps in (0.25, 0.3, 0.0):
        with pytest.raises(ValueError, match="forget_eps"):
            project_iss(lstm, 0.1, forget_eps=forget_eps)
    with pytest.raises(ValueError, match="u_max"):
        iss_margin(gru, u_max=-1.0)
    with pytest.raises(ValueError, match="GRUCell or LSTMCell"):
        iss_margin({"W": jnp.zeros(3)})
    with pytest.raises(ValueError, match="no GRUCell or LSTMCell"):
        project_model_iss({"W": jnp.zeros(3)}, 0.1)


"""GRU and LSTM cells in the gated, saturating form (GSRNN) of pi-SSM eq. (10), their ISS margins and the
projections that enforce them (pi-SSM Theorem 2, App. C.6-C.9, Remarks 3-4).

    GSRNN, eq. (10):  h+ = g(h, u) * h + (1 - g(h, u)) * phi(W u + U Psi(h, u) + b),   phi = tanh, L_phi = 1

``GRUCell`` (App. A.3, eq. 29-32, reset gate before U_r), ``LSTMCell`` (App. A.4, eq. 34-39, no peepholes), the
gate bounds of eq. (127) / (161), ``iss_margin`` (GRU eq. (68), LSTM eq. (79)) and ``project_iss`` /
``project_model_iss``. Choices where the paper's recipe does not deliver its own margin:

- GRU: rows of U_r go onto the l1 ball of radius (1 - eps) / sigma_hat_f, which gives the margin eps (Remark 3's
  radius gives a smaller one);
- LSTM: Remark 4's "elementwise clipping" bounds an entry, not the induced norm; we project rows onto the l1 ball,
  shrink the output gate too when the forget gate alone cannot meet its condition, and give the forget condition
  its own buffer ``forget_eps`` (App. E.2).

The cells, the bounds and both projections in full: docs/studies/pissm.md, "Gated cells and their ISS margins".
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.layers.l1_ball import project_rows_l1

L_PHI = 1.0  # tanh is 1-Lipschitz, eq. (82)
DEFAULT_FORGET_EPS = 1e-3  # App. E.2: delta_f = 1e-3


def _uniform(key, shape, scale):
    return jax.random.uniform(key, shape, minval=-scale, maxval=scale)


def _init_gates(key, names: str, input_size: int, hidden_size: int) -> dict:
    """W_x (n_h, n_u), U_x (n_h, n_h), b_x (n_h,) ~ U(-1/sqrt(n_h), 1/sqrt(n_h)) for each gate letter x."""
    for name, size in (("input_size", input_size), ("hidden_size", hidden_size)):
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
            raise ValueError(f"{name} must be a positive integer, got {size!r}")
    scale = 1.0 / np.sqrt(hidden_size)
    params = {}
    for x, k in zip(names, jax.random.split(key, len(names))):
        kw, ku, kb = jax.random.split(k, 3)
        params[f"W_{x}"] = _uniform(kw, (hidden_size, input_size), scale)
        params[f"U_{x}"] = _uniform(ku, (hidden_size, hidden_size), scale)
        params[f"b_{x}"] = _uniform(kb, (hidden_size,), scale)
    return params


def _check_vector(name: str, x, size: int) -> None:
    if jnp.shape(x) != (size,):
        raise ValueError(f"{name} must have shape ({size},) (one unbatched example; vmap outside), got {jnp.shape(x)}")


class BoundedInput(eqx.Module):
    """u = tanh((f - shift) / exp(log_scale)), elementwise: any feature vector f (n_u,) -> u with ||u||_inf < 1.

    Theorem 2 assumes bounded inputs, "enforced by normalization" (App. C.7 (A1)), and the margins below are
    computed for ||u||_inf <= u_max (Assumption 4: u_max = 1). Feeding a gated cell through this layer makes the
    certificate of ``iss_margin(cell)`` (u_max = 1) cover every input the cell can see. shift and log_scale are
    learned (a feature-wise affine normalisation, as LayerNorm's); the tanh keeps the bound whatever they learn.
    """

    shift: Array
    log_scale: Array

    def __init__(self, shift, scale):
        """shift (n_u,), scale (n_u,) > 0: the initial centre and width of each feature's near-linear range."""
        shift = jnp.asarray(shift, jnp.result_type(float))
        scale = jnp.asarray(scale, shift.dtype)
        if shift.ndim != 1 or scale.shape != shift.shape:
            raise ValueError(f"shift and scale must be 1-D of one shape, got {shift.shape} and {scale.shape}")
        if not bool(jnp.all(jnp.isfinite(shift))) or not bool(jnp.all(jnp.isfinite(scale) & (scale > 0))):
            raise ValueError("shift must be finite and scale finite and > 0")
        self.shift, self.log_scale = shift, jnp.log(scale)

    def __call__(self, f: Array) -> Array:
        _check_vector("f", f, self.shift.shape[0])
        return jnp.tanh((f - self.shift) * jnp.exp(-self.log_scale))


class GRUCell(eqx.Module):
    """One unbatched GRU step in the GSRNN form of eq. (10): ``h_next = cell(h, u)``, h (n_h,), u (n_u,).

    Gates g (update/keep), f (reset), r (candidate); W_x (n_h, n_u), U_x (n_h, n_h), b_x (n_h,).
    """

    W_g: Array
    U_g: Array
    b_g: Array
    W_f: Array
    U_f: Array
    b_f: Array
    W_r: Array
    U_r: Array
    b_r: Array

    def __init__(self, input_size: int, hidden_size: int, *, key: Array):
        for name, value in _init_gates(key, "gfr", input_size, hidden_size).items():
            setattr(self, name, value)

    @property
    def input_size(self) -> int:
        return self.W_g.shape[1]

    @property
    def hidden_size(self) -> int:
        return self.W_g.shape[0]

    def init_state(self) -> Array:
        """Zero hidden state (n_h,)."""
        return jnp.zeros(self.hidden_size, self.U_r.dtype)

    def __call__(self, h: Array, u: Array) -> Array:
        _check_vector("h", h, self.hidden_size)
        _check_vector("u", u, self.input_size)
        g = jax.nn.sigmoid(self.W_g @ u + self.U_g @ h + self.b_g)  # eq. (29)
        f = jax.nn.sigmoid(self.W_f @ u + self.U_f @ h + self.b_f)  # eq. (30)
        h_hat = jnp.tanh(self.W_r @ u + self.U_r @ (f * h) + self.b_r)  # eq. (31)
        return g * h + (1.0 - g) * h_hat  # eq. (32) = eq. (10) with Psi = f * h


class LSTMCell(eqx.Module):
    """One unbatched LSTM step: ``(h_next, c_next) = cell((h, c), u)``, h, c (n_h,), u (n_u,).

    Gates f (forget), i (input), o (output), c (candidate); W_x (n_h, n_u), U_x (n_h, n_h), b_x (n_h,).
    """

    W_f: Array
    U_f: Array
    b_f: Array
    W_i: Array
    U_i: Array
    b_i: Array
    W_o: Array
    U_o: Array
    b_o: Array
    W_c: Array
    U_c: Array
    b_c: Array

    def __init__(self, input_size: int, hidden_size: int, *, key: Array):
        for name, value in _init_gates(key, "fioc", input_size, hidden_size).items():
            setattr(self, name, value)

    @property
    def input_size(self) -> int:
        return self.W_f.shape[1]

    @property
    def hidden_size(self) -> int:
        return self.W_f.shape[0]

    def init_state(self) -> tuple[Array, Array]:
        """Zero state (h, c), each (n_h,)."""
        zeros = jnp.zeros(self.hidden_size, self.U_c.dtype)
        return zeros, zeros

    def __call__(self, state: tuple[Array, Array], u: Array) -> tuple[Array, Array]:
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise ValueError("LSTM state must be a pair (h, c)")
        h, c = state
        _check_vector("h", h, self.hidden_size)
        _check_vector("c", c, self.hidden_size)
        _check_vector("u", u, self.input_size)
        f = jax.nn.sigmoid(self.W_f @ u + self.U_f @ h + self.b_f)  # eq. (34)
        i = jax.nn.sigmoid(self.W_i @ u + self.U_i @ h + self.b_i)  # eq. (35)
        o = jax.nn.sigmoid(self.W_o @ u + self.U_o @ h + self.b_o)  # eq. (36)
        c_tilde = jnp.tanh(self.W_c @ u + self.U_c @ h + self.b_c)  # eq. (37)
        c_next = f * c + i * c_tilde  # eq. (38)
        return o * jnp.tanh(c_next), c_next  # eq. (39)


GATED_CELLS = (GRUCell, LSTMCell)


class GRUMargin(NamedTuple):
    """ISS quantities of a GRU cell (Theorem 2 / eq. 64-68, 140-153); scalars. Gains valid when margin > 0.

    ||h_t||_inf <= (1 - decay)^t ||h_0||_inf + input_gain ||u||_{inf,1:t} + bias_gain ||b_r||_inf  (eq. 67)
    for ||h_0||_inf <= 1 and inputs bounded by the u_max the margin was computed for.
    """

    sigma_f_hat: Array  # psi_hat = sigma(m ||[W_f U_f b_f]||_inf), eq. (127)
    g_bar: Array  # upper bound of the update gate, eq. (140)
    g_under: Array  # lower bound of the update gate, = 1 - g_bar
    recurrent_norm: Array  # ||U_r||_inf
    radius: Array  # ||U_r||_inf at which c = 1: 1 / (L_phi psi_hat)
    gain: Array  # c = L_phi ||U_r||_inf psi_hat, eq. (64)
    margin: Array  # 1 - c; > 0 certifies ISS
    decay: Array  # delta = (1 - g_bar)(1 - c), eq. (66)
    input_gain: Array  # (1 - g_under) L_phi ||W_r||_inf / delta, gamma_u slope of eq. (67)
    bias_gain: Array  # (1 - g_under) L_phi / delta, gamma_b slope of eq. (67)

    @property
    def certified(self) -> Array:
        return self.margin > 0


class LSTMMargin(NamedTuple):
    """ISS quantities of an LSTM cell (eq. 79, 161-173); scalars. Gains valid when margin > 0.

    V_t = ||c_t||_inf + ||h_t||_inf <= (1 - decay)^t V_0 + input_gain ||u||_{inf,1:t} + bias_gain ||b_c||_inf
    (eq. 172) for ||h_0||_inf <= 1 and inputs bounded by the u_max the margin was computed for.
    """

    sigma_f_bar: Array  # eq. (161)
    sigma_i_bar: Array
    sigma_o_bar: Array
    recurrent_norm: Array  # ||U_c||_inf
    radius: Array  # ||U_c||_inf at which the candidate term is 1: 1 / ((1 + sigma_o_bar) sigma_i_bar)
    forget_term: Array  # (1 + sigma_o_bar) sigma_f_bar
    gain: Array  # (1 + sigma_o_bar) sigma_i_bar ||U_c||_inf
    margin: Array  # 1 - alpha, alpha = max(forget_term, gain), eq. (169); > 0 certifies ISS
    decay: Array  # delta = 1 - alpha
    input_gain: Array  # K_u / delta, K_u = (1 + sigma_o_bar) sigma_i_bar ||W_c||_inf, eq. (183)
    bias_gain: Array  # K_b / delta, K_b = (1 + sigma_o_bar) sigma_i_bar

    @property
    def certified(self) -> Array:
        return self.margin > 0


def inf_norm(*blocks: Array) -> Array:
    """||[B_1 B_2 ...]||_inf: largest row l1 norm of the block-row concatenation (vectors are columns)."""
    return jnp.max(sum(jnp.sum(jnp.abs(jnp.reshape(b, (b.shape[0], -1))), axis=1) for b in blocks))


def _check_u_max(u_max):
    if isinstance(u_max, jax.core.Tracer):
        return jnp.maximum(u_max, 1.0)
    if not np.isfinite(u_max) or u_max < 0:
        raise ValueError(f"u_max (bound on ||u_t||_inf) must be finite and >= 0, got {u_max!r}")
    return max(float(u_max), 1.0)


def _gate_bound(cell, x: str, scale) -> Array:
    """sigma_bar_x = sigma(max(u_max, 1) ||[W_x U_x b_x]||_inf) (C.6 example, eq. 127, 161)."""
    return jax.nn.sigmoid(scale * inf_norm(getattr(cell, f"W_{x}"), getattr(cell, f"U_{x}"), getattr(cell, f"b_{x}")))


def _check_cell(cell) -> None:
    if not isinstance(cell, GATED_CELLS):
        raise ValueError(f"expected a GRUCell or LSTMCell, got {type(cell).__name__}")


def iss_margin(cell: GRUCell | LSTMCell, u_max: float = 1.0) -> GRUMargin | LSTMMargin:
    """The ISS quantities of Theorem 2 for a GRU (Remark 3, eq. 68) or LSTM (Remark 4, eq. 79) cell,
    for inputs with ||u_t||_inf <= u_max. ``margin > 0`` certifies ISS. Jittable."""
    _check_cell(cell)
    m = _check_u_max(u_max)
    if isinstance(cell, GRUCell):
        psi_hat = _gate_bound(cell, "f", m)
        g_bar = _gate_bound(cell, "g", m)
        norm = inf_norm(cell.U_r)
        c = L_PHI * norm * psi_hat  # eq. (64), (68)
        delta = (1.0 - g_bar) * (1.0 - c)  # eq. (66)
        g_under = 1.0 - g_bar  # sigma(-M) = 1 - sigma(M)
        slope = (1.0 - g_under) * L_PHI / delta
        return GRUMargin(psi_hat, g_bar, g_under, norm, 1.0 / (L_PHI * psi_hat), c, 1.0 - c, delta,
                         slope * inf_norm(cell.W_r), slope)
    s_f, s_i, s_o = (_gate_bound(cell, x, m) for x in "fio")
    norm = inf_norm(cell.U_c)
    forget_term = (1.0 + s_o) * s_f  # eq. (79), first
    gain = (1.0 + s_o) * s_i * L_PHI * norm  # eq. (79), second
    delta = 1.0 - jnp.maximum(forget_term, gain)  # eq. (169)
    K_b = (1.0 + s_o) * s_i * L_PHI
    return LSTMMargin(s_f, s_i, s_o, norm, 1.0 / ((1.0 + s_o) * s_i * L_PHI), forget_term, gain, delta, delta,
                      K_b * inf_norm(cell.W_c) / delta, K_b / delta)


def _check_buffer(name: str, eps, upper: float) -> None:
    if isinstance(eps, jax.core.Tracer):
        return
    if not np.isfinite(eps) or not 0 < eps < upper:
        raise ValueError(f"{name} must lie in (0, {upper}), got {eps!r}")


def _logit(p):
    return jnp.log(p) - jnp.log1p(-p)


def _shrink_gate(cell, x: str, target, shrink, scale):
    """Gate block [W_x U_x b_x] projected row-wise onto the l1 ball that makes sigma_bar_x <= target, where shrink."""
    W, U, b = (getattr(cell, f"{p}_{x}") for p in "WUb")
    block = jnp.concatenate([W, U, b[:, None]], axis=1)
    radius = jnp.where(shrink, _logit(target) / scale, 1.0)  # target > 1/2 wherever shrink, so radius > 0
    block = jnp.where(shrink, project_rows_l1(block, radius), block)
    n_u = W.shape[1]
    return eqx.tree_at(lambda cl: (getattr(cl, f"W_{x}"), getattr(cl, f"U_{x}"), getattr(cl, f"b_{x}")), cell,
                       (block[:, :n_u], block[:, n_u:-1], block[:, -1]))


def project_iss(cell: GRUCell | LSTMCell, eps: float, *, u_max: float = 1.0,
                forget_eps: float = DEFAULT_FORGET_EPS) -> GRUCell | LSTMCell:
    """The cell with the ISS condition of Theorem 2 enforced with buffer eps (C.9, Remarks 3-4; see module doc).

    GRU: margin >= eps after. LSTM: (1 + sigma_bar_o) sigma_bar_i ||U_c||_inf <= 1 - eps and
    (1 + sigma_bar_o) sigma_bar_f <= 1 - forget_eps, so margin >= min(eps, forget_eps). Parameters already
    satisfying a condition are untouched. Apply after each optimiser step; jittable.
    """
    _check_cell(cell)
    _check_buffer("eps", eps, 1.0)
    m = _check_u_max(u_max)
    if isinstance(cell, GRUCell):
        rho = (1.0 - eps) / (L_PHI * _gate_bound(cell, "f", m))  # eq. (189)
        return eqx.tree_at(lambda cl: cl.U_r, cell, project_rows_l1(cell.U_r, rho))
    _check_buffer("forget_eps", forget_eps, 0.25)
    s_f, s_o = _gate_bound(cell, "f", m), _gate_bound(cell, "o", m)
    budget = 1.0 - forget_eps
    violated = (1.0 + s_o) * s_f > budget
    target_f = budget / (1.0 + s_o)  # Remark 4 (i): forget gate alone, eq. (196)
    target_o = budget / s_f - 1.0  # output gate alone (Remark 4's tau_o)
    s_sym = 0.5 * (jnp.sqrt(1.0 + 4.0 * budget) - 1.0)  # (1 + s) s = budget, > 1/2 as forget_eps < 1/4
    f_alone, o_alone = target_f > 0.5, (target_f <= 0.5) & (target_o > 0.5)
    new_f = jnp.where(f_alone, target_f, s_sym)
    new_o = jnp.where(o_alone, target_o, s_sym)
    cell = _shrink_gate(cell, "f", new_f, violated & ~o_alone, m)
    cell = _shrink_gate(cell, "o", new_o, violated & ~f_alone, m)
    s_i, s_o = _gate_bound(cell, "i", m), _gate_bound(cell, "o", m)
    rho_c = (1.0 - eps) / ((1.0 + s_o) * s_i * L_PHI)  # Remark 4 (ii)
    return eqx.tree_at(lambda cl: cl.U_c, cell, project_rows_l1(cell.U_c, rho_c))


def project_model_iss(model, eps: float, **kwargs):
    """project_iss applied to every GRUCell / LSTMCell inside a pytree (e.g. a whole model after an optimiser step).

    kwargs (u_max, forget_eps) go to project_iss. ValueError if the pytree holds no gated cell.
    """
    found = []

    def project(x):
        if isinstance(x, GATED_CELLS):
            found.append(x)
            return project_iss(x, eps, **kwargs)
        return x

    projected = jax.tree_util.tree_map(project, model, is_leaf=lambda x: isinstance(x, GATED_CELLS))
    if not found:
        raise ValueError(f"no GRUCell or LSTMCell found in {type(model).__name__}")
    return projected

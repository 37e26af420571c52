"""The S5 layer (Smith et al. 2022), as the S5 memory of the RingWorld PPO agents uses it (section 6.2, App. E.2.1;
the memory with its encoder is ``memlab.rl.s5_memory.S5Memory``).

The time-invariant linear memory of eq. (1) with A diagonalised in complex coordinates, following Lu et al. (2023)
(github:luchris429/s5rl, which App. E.2.1 says the paper follows): an MLP encoder then ONE S5 layer of width H and
state size P = H, h_k = Lambda_bar h_{k-1} + B_bar x_k, y_k = 2 Re(C_tilde h_k) + D x_k, out_k = x_k + GLU(GELU(y_k)).
Each choice as in that public code: HiPPO-N initialisation (``hippo_diagonal``), conjugate symmetry (P/2 complex
modes), lecun-normal B and C, log-uniform steps, ZOH, the "full_glu" activation with the residual and no norm; a
start flag zeroes h before the step. ``S5Layer.ssm`` is the parallel scan of ``memlab.scan.linear_scan``.

Every choice in full: docs/studies/belief.md, "The S5 layer".
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_choice, check_int, check_real
from memlab.layers.dense import apply_linear
from memlab.layers.s6 import discretize_diagonal
from memlab.scan import METHODS, linear_scan

DT_MIN, DT_MAX = 1e-3, 1e-1  # Table 2
S5_STEP_RANGE = (DT_MIN, DT_MAX)  # the initial steps' range, for other layers started like S5
ACTIVATIONS = ("full_glu", "half_glu1", "half_glu2", "gelu")
C_INITS = ("lecun_normal", "trunc_standard_normal")

# ------------------------------------------------------------------------------------------ HiPPO initialisation


def hippo_legs(N: int) -> np.ndarray:
    """The HiPPO-LegS state matrix (N, N), float64: A_nk = -sqrt((2n+1)(2k+1)) for n > k, -(n+1) for n = k, else 0."""
    N = check_int("N", N)
    q = np.sqrt(1.0 + 2.0 * np.arange(N))
    return -(np.tril(np.outer(q, q)) - np.diag(np.arange(N)))


def hippo_legs_normal(N: int) -> np.ndarray:
    """The normal part of HiPPO-LegS, S = A_LegS + p p^T with p_n = sqrt(n + 1/2) (N, N): -I/2 + skew-symmetric."""
    p = np.sqrt(np.arange(N) + 0.5)
    return hippo_legs(N) + np.outer(p, p)


def hippo_diagonal(P: int) -> tuple[np.ndarray, np.ndarray]:
    """HiPPO-N diagonalised with conjugate symmetry: Lambda (P/2,) complex and V_h (P, P/2) complex, float64.

    S = hippo_legs_normal(P) = V diag(Lambda_full) V^H exactly (V unitary); the stored half holds the modes with
    negative imaginary part, and S = 2 Re(V_h diag(Lambda) V_h^H) because the other half are their conjugates.
    """
    P = check_int("state size P", P, low=2)
    if P % 2:
        raise ValueError(f"state size P must be even (P/2 conjugate-symmetric complex modes), got {P}")
    S = hippo_legs_normal(P)
    re = float(np.mean(np.diag(S)))  # = -1/2 on every diagonal entry
    omega, V = np.linalg.eigh(-1j * (S - re * np.eye(P)))  # Hermitian: i omega are the skew part's eigenvalues
    return re + 1j * omega[: P // 2], V[:, : P // 2]


# -------------------------------------------------------------------------------------------- discretisation


def discretize_zoh(Lambda: Array, B_tilde: Array, delta: Array) -> tuple[Array, Array]:
    """ZOH for a diagonal SSM: Lambda_bar = exp(Lambda delta) (M,), B_bar = (Lambda_bar - 1) / Lambda B_tilde (M, H).

    Lambda (M,) complex, B_tilde (M, H) complex, delta (M,) positive steps.
    """
    Lambda_bar, bscale = discretize_diagonal(Lambda, delta, "zoh")
    return Lambda_bar, bscale[:, None] * B_tilde


def dense_linear(key: Array, n_in: int, n_out: int, init) -> eqx.nn.Linear:
    """Linear(n_in, n_out) with Flax-Dense initialisation: ``init`` on the (n_in, n_out) kernel, zero bias."""
    layer = eqx.nn.Linear(n_in, n_out, key=key)
    weight = init(key, (n_in, n_out), layer.weight.dtype).T  # equinox stores (out, in)
    return eqx.tree_at(lambda lin: (lin.weight, lin.bias), layer, (weight, jnp.zeros_like(layer.bias)))


def real_times_complex(u: Array, M: Array) -> Array:
    """u M^T for u (..., H) real and M (K, H) complex, as two real products (promoting u to complex does twice
    the real work): u (Re M)^T + i u (Im M)^T."""
    return jax.lax.complex(u @ jnp.real(M).T, u @ jnp.imag(M).T)


def real_of_product(h: Array, M_re: Array, M_im: Array) -> Array:
    """Re(h M^T) for h (..., K) complex and M = M_re + i M_im (H, K), as two real products instead of four."""
    return jnp.real(h) @ M_re.T - jnp.imag(h) @ M_im.T


def _draw_C(key: Array, H: int, P: int, C_init: str) -> Array:
    """C (H, P) complex, drawn as ``C_init`` says (docs/studies/belief.md, "The S5 layer")."""
    batch_axis = () if C_init == "lecun_normal" else (0,)
    C = jax.nn.initializers.lecun_normal(batch_axis=batch_axis)(key, (H, P, 2))
    return C[..., 0] + 1j * C[..., 1]


@eqx.filter_jit  # one compiled draw instead of dozens of eagerly compiled small ops
def _init_layer(key: Array, H: int, P: int, dt_min: float, dt_max: float, activation: str, C_init: str) -> dict:
    """The S5Layer's parameters (docs/studies/belief.md): HiPPO-N Lambda, V_h^H B, C V_h, D, log steps, GLU layers."""
    Lambda, V = hippo_diagonal(P)
    V = jnp.asarray(V)
    k_B, k_C, k_D, k_step, k_1, k_2 = jax.random.split(key, 6)
    B_tilde = V.conj().T @ jax.nn.initializers.lecun_normal()(k_B, (P, H))  # V_h^{-1} B, (P/2, H)
    C_tilde = _draw_C(k_C, H, P, C_init) @ V  # C V_h, (H, P/2)
    dense = jax.nn.initializers.lecun_normal()
    return dict(Lambda_re=jnp.asarray(Lambda.real), Lambda_im=jnp.asarray(Lambda.imag),
                B_re=B_tilde.real, B_im=B_tilde.imag, C_re=C_tilde.real, C_im=C_tilde.imag,
                D=jax.random.normal(k_D, (H,)),
                log_step=jax.random.uniform(k_step, (P // 2,), minval=math.log(dt_min), maxval=math.log(dt_max)),
                glu_out1=dense_linear(k_1, H, H, dense) if activation == "full_glu" else None,
                glu_out2=dense_linear(k_2, H, H, dense) if activation != "gelu" else None)


# ------------------------------------------------------------------------------------------------ the layer


class S5Layer(eqx.Module):
    """One S5 layer: the diagonal SSM with conjugate symmetry, then GELU, gating and the residual (module docstring).

    Fields: ``Lambda_re``, ``Lambda_im``, ``log_step`` (P/2,); ``B_re``, ``B_im`` (P/2, H); ``C_re``, ``C_im``
    (H, P/2); ``D`` (H,); ``glu_out1`` ("full_glu" only), ``glu_out2`` (not for "gelu") Linear(H, H). Complex
    parameters are stored as real and imaginary parts, so optimisers and gradients see only real arrays.
    """

    Lambda_re: Array
    Lambda_im: Array
    B_re: Array
    B_im: Array
    C_re: Array
    C_im: Array
    D: Array
    log_step: Array
    glu_out1: eqx.nn.Linear | None
    glu_out2: eqx.nn.Linear | None
    activation: str = eqx.field(static=True)

    def __init__(self, width: int, latent_size: int, *, key: Array, dt_min: float = DT_MIN, dt_max: float = DT_MAX,
                 activation: str = "full_glu", C_init: str = "lecun_normal"):
        """width H, latent_size P (even: P/2 complex modes); log steps ~ U[log dt_min, log dt_max]."""
        H = check_int("width", width)
        hippo_diagonal(latent_size)  # checks P
        dt_min = check_real("dt_min", dt_min, 0.0, open_low=True)
        dt_max = check_real("dt_max", dt_max, dt_min, open_low=True)
        check_choice("activation", activation, ACTIVATIONS)
        check_choice("C_init", C_init, C_INITS)
        params = _init_layer(key, H, latent_size, dt_min, dt_max, activation, C_init)
        self.Lambda_re, self.Lambda_im = params["Lambda_re"], params["Lambda_im"]
        self.B_re, self.B_im, self.C_re, self.C_im = params["B_re"], params["B_im"], params["C_re"], params["C_im"]
        self.D, self.log_step = params["D"], params["log_step"]
        self.glu_out1, self.glu_out2 = params["glu_out1"], params["glu_out2"]
        self.activation = activation

    # -- parameters -------------------------------------------------------------------------------------------

    @property
    def width(self) -> int:
        """H, the number of input and output channels."""
        return self.D.shape[0]

    @property
    def num_modes(self) -> int:
        """P/2, the number of stored complex modes (the state size P counts the conjugate modes too)."""
        return self.Lambda_re.shape[0]

    @property
    def Lambda(self) -> Array:
        return self.Lambda_re + 1j * self.Lambda_im

    @property
    def B_tilde(self) -> Array:
        return self.B_re + 1j * self.B_im

    @property
    def C_tilde(self) -> Array:
        return self.C_re + 1j * self.C_im

    @property
    def delta(self) -> Array:
        return jnp.exp(self.log_step)

    def discretize(self) -> tuple[Array, Array]:
        """Lambda_bar (P/2,) and B_bar (P/2, H), ZOH."""
        return discretize_zoh(self.Lambda, self.B_tilde, self.delta)

    def init_state(self) -> Array:
        """The zero state (P/2,) complex."""
        return jnp.zeros(self.num_modes, jnp.result_type(self.Lambda_re.dtype, jnp.complex64))

    # -- the linear SSM ---------------------------------------------------------------------------------------

    def _check(self, name: str, x: Array, shape: tuple) -> None:
        if jnp.shape(x) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {jnp.shape(x)}")

    def readout(self, h: Array, u: Array) -> Array:
        """y = 2 Re(C_tilde h) + D * u (H,) for a state h (P/2,) and the input u (H,); broadcasts over leading axes."""
        return 2.0 * real_of_product(h, self.C_re, self.C_im) + self.D * u

    def ssm_step(self, h: Array, u: Array, reset: Array | bool = False) -> tuple[Array, Array]:
        """One step of the linear SSM: (h (P/2,), u (H,), reset ()) -> (h_new, y (H,)); reset zeroes h first."""
        self._check("h", h, (self.num_modes,))
        self._check("u", u, (self.width,))
        Lambda_bar, B_bar = self.discretize()
        h = Lambda_bar * jnp.where(reset, jnp.zeros_like(h), h) + real_times_complex(u, B_bar)
        return h, self.readout(h, u)

    def ssm(self, u: Array, h: Array | None = None, reset: Array | None = None,
            method: str = "parallel") -> tuple[Array, Array]:
        """The linear SSM over u (L, H) from the state h (P/2,) (default zero) -> (states (L, P/2), y (L, H)).

        reset (L,) bool: where reset[t], the state before step t is zero. ``method``: "parallel" (associative scan)
        or "sequential" (``lax.scan``), both through ``linear_scan``.
        """
        check_choice("method", method, METHODS)
        u = jnp.asarray(u)
        if u.ndim != 2 or u.shape[1] != self.width:
            raise ValueError(f"u must be (L, H) with H = {self.width}, got shape {u.shape}")
        L = u.shape[0]
        h = self.init_state() if h is None else jnp.asarray(h)
        self._check("h", h, (self.num_modes,))
        reset = jnp.zeros(L, bool) if reset is None else jnp.asarray(reset)
        self._check("reset", reset, (L,))
        Lambda_bar, B_bar = self.discretize()
        a = jnp.broadcast_to(Lambda_bar, (L, self.num_modes))
        b = real_times_complex(u, B_bar)  # (L, P/2)
        # the scan restarts from zero at resets, so the incoming state h enters as an input at t = 0
        b = b.at[0].add(jnp.where(reset[0], 0.0, Lambda_bar * h))
        states = linear_scan(a, b, jnp.zeros_like(h), reset.astype(bool), method=method)
        return states, self.readout(states, u)

    # -- the layer --------------------------------------------------------------------------------------------

    def mix(self, y: Array, u: Array) -> Array:
        """The layer's output from the SSM output y and the input u (both (H,) or (L, H)): u + GLU(GELU(y))."""
        z = jax.nn.gelu(y)
        if self.activation == "full_glu":
            z = apply_linear(self.glu_out1, z) * jax.nn.sigmoid(apply_linear(self.glu_out2, z))
        elif self.activation == "half_glu1":
            z = z * jax.nn.sigmoid(apply_linear(self.glu_out2, z))
        elif self.activation == "half_glu2":  # GELU only on the gate's input
            z = y * jax.nn.sigmoid(apply_linear(self.glu_out2, z))
        return u + z

    def step(self, h: Array, u: Array, reset: Array | bool = False) -> tuple[Array, Array]:
        """One step of the layer: (h (P/2,), u (H,), reset ()) -> (h_new (P/2,), out (H,))."""
        h, y = self.ssm_step(h, u, reset)
        return h, self.mix(y, u)

    def __call__(self, u: Array, h: Array | None = None, reset: Array | None = None,
                 method: str = "parallel") -> tuple[Array, Array]:
        """The layer over a sequence u (L, H) -> (h_last (P/2,), out (L, H)); h, reset, method as in ``ssm``."""
        states, y = self.ssm(u, h, reset, method)
        return states[-1], self.mix(y, u)

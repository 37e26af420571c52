"""The Linear Recurrent Unit (Orvieto et al. 2023, "Resurrecting recurrent neural networks for long sequences").

A diagonal complex linear RNN with an exponential parametrisation of the eigenvalues and a normalisation of the
input:

    lambda = exp(-exp(nu_log) + i exp(theta_log))                    (P,) on the unit disc's inside
    h_t = lambda * h_{t-1} + gamma * (B u_t),  gamma = exp(gamma_log) = sqrt(1 - |lambda|^2) at init
    y_t = Re(C h_t) + D * u_t

Initialisation as the paper's: |lambda| uniform on the ring [r_min, r_max] (uniform in the ring's area), phases
uniform on [0, max_phase], B and C complex Gaussian with variance 1/(2H) and 1/P.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.checks import check_int, check_real
from memlab.scan import linear_scan

__all__ = ["LRU"]


class LRU(eqx.Module):
    """LRU for one sequence u (L, H) -> y (L, H) with P complex modes; fields as in the module docstring."""

    nu_log: Array
    theta_log: Array
    gamma_log: Array
    B_re: Array
    B_im: Array
    C_re: Array
    C_im: Array
    D: Array

    def __init__(self, width: int, latent_size: int, *, key: Array, r_min: float = 0.0, r_max: float = 0.99,
                 max_phase: float = 2 * math.pi):
        H, P = check_int("width", width), check_int("latent_size", latent_size)
        check_real("r_min", r_min, 0.0, 1.0, open_high=True)
        check_real("r_max", r_max, r_min, 1.0, open_low=True, open_high=True)
        k_u1, k_u2, k_b, k_c, k_d = jax.random.split(key, 5)
        u1, u2 = jax.random.uniform(k_u1, (P,)), jax.random.uniform(k_u2, (P,))
        self.nu_log = jnp.log(-0.5 * jnp.log(u1 * (r_max**2 - r_min**2) + r_min**2))
        self.theta_log = jnp.log(max_phase * u2)
        modulus = jnp.exp(-jnp.exp(self.nu_log))
        self.gamma_log = jnp.log(jnp.sqrt(1.0 - modulus**2))
        self.B_re, self.B_im = jax.random.normal(k_b, (2, P, H)) / math.sqrt(2 * H)
        self.C_re, self.C_im = jax.random.normal(k_c, (2, H, P)) / math.sqrt(P)
        self.D = jax.random.normal(k_d, (H,))

    @property
    def eigenvalues(self) -> Array:
        """lambda (P,) complex."""
        return jnp.exp(-jnp.exp(self.nu_log) + 1j * jnp.exp(self.theta_log))

    def state_size(self, length: int | None = None) -> int:
        """Real numbers carried from step to step (any length): 2P, P complex modes."""
        return 2 * self.nu_log.shape[0]

    def _input(self, u: Array) -> Array:
        """gamma * (B u) for u (..., H) -> (..., P) complex."""
        return jnp.exp(self.gamma_log) * (u @ (self.B_re + 1j * self.B_im).T)

    def _output(self, h: Array, u: Array) -> Array:
        """Re(C h) + D * u for h (..., P) and u (..., H)."""
        return (h @ (self.C_re + 1j * self.C_im).T).real + self.D * u

    def init_state(self) -> Array:
        """h_0 = 0 (P,) complex."""
        return jnp.zeros(self.nu_log.shape, jnp.result_type(self.nu_log.dtype, jnp.complex64))

    def step(self, h: Array, u: Array) -> tuple[Array, Array]:
        """One step: (h (P,), u (H,)) -> (h_t, y_t (H,))."""
        h = self.eigenvalues * h + self._input(u)
        return h, self._output(h, u)

    def __call__(self, u: Array, method: str = "sequential") -> Array:
        Bu = self._input(u)  # (L, P)
        h = linear_scan(jnp.broadcast_to(self.eigenvalues, Bu.shape), Bu, method=method)  # h_t = lambda h + gamma B u
        return self._output(h, u)

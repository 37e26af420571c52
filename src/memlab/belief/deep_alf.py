"""Deep ALF: the time-varying ALF in the complex diagonal basis with learnable parameters, App. E.2.2.

For circulant permutations P(a) = V Lambda(a) V^{-1} (eq. 197, V the inverse DFT matrix), the ALF of eq. (46) in the
coordinates h = V^{-1} w (eq. 201) is the diagonal linear recurrence of eq. (202):

    h_k = Lambda(a_{k-1}) (1 - delta) h_{k-1} + delta V^{-1} log(E^T y_k),      features w_k = Re(V h_k)

Deep ALF learns Lambda(a) (A, N) complex, delta, E (through column-softmax logits kappa, eq. 203) and V (N, N)
complex; V^{-1} is recomputed from V (an N x N solve per sequence). Two choices the paper leaves open, made here:
delta = sigmoid(delta_logit) stays in (0, 1) while it learns, and the readout is the real part of V h, which equals w
exactly when V and Lambda are the true ones (the imaginary part vanishes by conjugate symmetry).

Initialisations (App. E.2.2): 'informed' (true Lambda, V, E; delta = 0.1: the features equal the ALF's exactly),
'random-e' (kappa ~ N(0, 1), eq. 203), 'random-delta' (delta ~ U(0, 0.5)), 'random-lambda' (unit-circle eigenvalues
with uniform phases), 'all-random' (all of these and V with independent N(0, 1) real and imaginary parts).
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.belief.memories import ALF_DELTA, observation_index
from memlab.checks import check_choice, check_column_stochastic, check_real
from memlab.rl import Memory
from memlab.scan import linear_scan

INITIALISATIONS = ("informed", "random-e", "random-delta", "random-lambda", "all-random")


def circulant_eigensystem(P) -> tuple[np.ndarray, np.ndarray]:
    """V (N, N) complex and the diagonals Lambda (A, N) with P[a] = V diag(Lambda[a]) V^{-1}, eq. (197).

    V is the inverse DFT matrix, V[j, m] = exp(2 pi i j m / N) / sqrt(N) (unitary, so V^{-1} = V^H). Raises
    ValueError if some P[a] (A, N, N) is not diagonalised by it (i.e. is not circulant).
    """
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 3 or P.shape[1] != P.shape[2]:
        raise ValueError(f"P must have shape (A, N, N), got {P.shape}")
    N = P.shape[-1]
    j = np.arange(N)
    V = np.exp(2j * np.pi * np.outer(j, j) / N) / np.sqrt(N)
    D = V.conj().T @ P @ V
    Lam = np.diagonal(D, axis1=-2, axis2=-1).copy()
    off = D - Lam[..., None] * np.eye(N)
    if np.max(np.abs(off)) > 1e-9:
        raise ValueError("P is not circulant: the DFT does not diagonalise it")
    return V, Lam


def _logit(p: float) -> float:
    return float(np.log(p) - np.log1p(-p))


class DeepALF(Memory):
    """Deep ALF memory, eq. (202). Fields: ``lam_re``/``lam_im`` (A, N), ``delta_logit`` (), ``kappa`` (S, N)
    with E = softmax(kappa, axis=0), ``v_re``/``v_im`` (N, N). Complex parameters are stored as real pairs
    (what optax and gradient clipping expect). Build with ``DeepALF.init``."""

    lam_re: Array
    lam_im: Array
    delta_logit: Array
    kappa: Array
    v_re: Array
    v_im: Array
    trainable: ClassVar[bool] = True

    @classmethod
    def init(cls, key: Array, P, E, initialisation: str = "informed", delta: float = ALF_DELTA,
             dtype=jnp.float32) -> DeepALF:
        """Deep ALF for permutation backbones ``P`` (A, N, N) (circulant) and emission ``E`` (S, N)."""
        check_choice("initialisation", initialisation, INITIALISATIONS)
        check_real("delta", delta, 0.0, 1.0, open_low=True, open_high=True)
        check_column_stochastic("E", np.asarray(E))
        V, Lam = circulant_eigensystem(P)
        E = np.asarray(E, dtype=np.float64)
        if E.ndim != 2 or E.shape[1] != V.shape[0]:
            raise ValueError(f"E must have shape (S, {V.shape[0]}), got {E.shape}")
        k_e, k_delta, k_lam, k_v = jax.random.split(key, 4)  # traceable: PPO builds its memory inside jit
        everything = initialisation == "all-random"
        kappa = jnp.log(jnp.asarray(E, dtype))
        if initialisation == "random-e" or everything:
            kappa = jax.random.normal(k_e, E.shape, dtype)  # eq. (203)
        delta_logit = jnp.asarray(_logit(delta), dtype)
        if initialisation == "random-delta" or everything:
            delta_logit = jax.scipy.special.logit(jax.random.uniform(k_delta, (), dtype, minval=0.0, maxval=0.5))
        lam_re, lam_im = jnp.asarray(Lam.real, dtype), jnp.asarray(Lam.imag, dtype)
        if initialisation == "random-lambda" or everything:
            phase = jax.random.uniform(k_lam, Lam.shape, dtype, maxval=2 * np.pi)
            lam_re, lam_im = jnp.cos(phase), jnp.sin(phase)
        v_re, v_im = jnp.asarray(V.real, dtype), jnp.asarray(V.imag, dtype)
        if everything:
            v_re, v_im = jax.random.normal(k_v, (2, *V.shape), dtype)
        return cls(lam_re, lam_im, delta_logit, kappa, v_re, v_im)

    @property
    def num_features(self) -> int:
        return self.v_re.shape[0]

    @property
    def delta(self) -> Array:
        return jax.nn.sigmoid(self.delta_logit)

    def _complex(self):
        """(Lambda (A, N), V (N, N), V^{-1} (N, N), log E (S, N)) as the recurrence uses them."""
        lam = jax.lax.complex(self.lam_re, self.lam_im)
        V = jax.lax.complex(self.v_re, self.v_im)
        return lam, V, jnp.linalg.inv(V), jax.nn.log_softmax(self.kappa, axis=0)

    def init_state(self) -> Array:
        n = self.num_features
        return jnp.zeros(n, jax.lax.complex(self.v_re[0], self.v_im[0]).dtype)  # h_0 = V^{-1} w_0, w_0 = 0

    def _recurrence(self, obs, prev_actions):
        """Per step: the factor Lambda(a_{k-1})(1 - delta) (L, N) and the input delta V^{-1} log(E^T y_k) (L, N)."""
        lam, V, V_inv, log_E = self._complex()
        delta = self.delta
        ys = jax.vmap(observation_index)(obs)
        a = lam[prev_actions] * (1.0 - delta)
        b = delta * (log_E[ys].astype(V.dtype) @ V_inv.T)  # eq. (202)
        return a, b, V

    def step(self, h: Array, obs: Array, prev_action: Array, start: Array) -> tuple[Array, Array]:
        a, b, V = self._recurrence(obs[None], jnp.asarray(prev_action)[None])
        h = jnp.where(start, self.init_state(), a[0] * h + b[0])
        return h, jnp.real(V @ h)

    def sequence(self, h: Array, obs: Array, prev_actions: Array, starts: Array) -> tuple[Array, Array]:
        """All steps at once (a diagonal linear scan; a start maps h to h_0 = 0): equals scanning ``step``."""
        a, b, V = self._recurrence(obs, jnp.asarray(prev_actions, jnp.int32))
        starts = jnp.asarray(starts, bool)
        zero = self.init_state()
        a = jnp.where(starts[:, None], 0.0, a)  # a start is the constant map h -> 0
        b = jnp.where(starts[:, None], zero, b)
        hs = linear_scan(a, b, h0=h)
        return hs[-1], jnp.real(hs @ V.T)

    def diagnostics(self) -> dict[str, Array]:
        """max |lambda| (1 - delta): the largest contraction factor of the recurrence (logged during training)."""
        lam = jnp.hypot(self.lam_re, self.lam_im)
        return {"max_abs_lambda_times_1_minus_delta": jnp.max(lam) * (1.0 - self.delta)}

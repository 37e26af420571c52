"""The pi-SSM (sections 4-5): a switching state-space model whose mode is chosen from the previous continuous
state, filtered by nested message passing with a Kalman-style update whose gain comes from a gated RNN.

Generative model, eq. (1), with K modes, latent x in R^M, observations y in R^N:
    z_t ~ q(z_t | x_{t-1}) = softmax(MLP(x_{t-1}))             10 ReLU units (App. F.2)
    x_t = A_{z_t} x_{t-1} + b_{z_t} [+ g(x_{t-1})] + q_t,  q_t ~ N(0, Q)    (b_z: the input term of section 3)
    y_t = C_{z_t} x_t + r_t,  r_t ~ N(0, R)
g is an optional shared MLP for data sets whose transition is nonlinear (Lorenz, Navier-Stokes: App. G.2/G.4
write A_z(x) as a function); its covariance is propagated with the Jacobian (first order, as App. G.2 linearises).

Inference, Algorithm "Inference in pi-SSM" (App. E.1), one step from q(x_{t-1} | y_{1:t-1}) = N(mu, Sigma):
    4  x_{t-1} = mu + chol(Sigma) eps                     (reparameterised sample)
    5  z_t ~ q(z_t | x_{t-1})
    6  mu_{t|t-1} = A_z mu + b_z,  Sigma_{t|t-1} = A_z Sigma A_z^T + Q        eq. (18)
    7  L_t = RNN([Sigma_{t|t-1}, r_t])
    8  K_t = Sigma_{t|t-1} C_z^T L_t L_t^T
    9  mu_{t|t} = mu_{t|t-1} + K_t r_t,  r_t = y_t - C_z mu_{t|t-1}            eq. (7)
A model is built as ``PiSSM(PiSSMConfig(M, N, K, ...), R=R, key=key)``: the config holds the sizes, the variants
and the initial values; steps 7-8 are a gain module chosen by the config (gain.py: ``ExactGain``, ``PaperGain``,
``WhitenedGain``). The choices the paper leaves open or gets wrong (moments vs the sample in step 6, the Joseph form
instead of eq. (7)'s covariance, full covariances, the bounded gain factor, missing steps, the first observation,
the exact gain, eq. (7)'s gain as printed and the unbounded ablation, mode sampling and symmetry breaking), each
with the reason the mathematics or a measurement gives, are on the study's documentation page
(docs/studies/pissm.md, "The π-SSM model").

Returned per step (``Predictions``): ``log_likelihoods`` = log q(y_t | y_{1:t-1}) = log sum_k q(k | x_{t-1})
N(y_t; C_k mu_k, S_k), the normaliser of eq. (6): the predictive density of section 6 with z_t summed out exactly
(for the sampled x_{t-1}), valid whichever way z_t is sampled; ``sampled_log_likelihoods`` = log N(y_t; C_z mu_z,
S_z) of the sampled z_t (App. E.2's reward of eq. 9); ``score_log_probs`` = the log-probability of the sampled z_t
under the distribution it was drawn from, differentiable in the mode network only (x_{t-1} and, for the posterior,
the likelihoods detached: the score term trains theta, as App. E.2's separate optimiser does); ``mode_probs`` the
eq. (6) posterior.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from memlab.checks import check_choice, check_covariance, check_int, check_matrix, check_real
from memlab.kalman import check_observations, symmetrise
from memlab.layers import GRUCell, LSTMCell
from memlab.pissm.gain import ExactGain, PaperGain, WhitenedGain
from memlab.pissm.metrics import gaussian_log_density_from_cholesky
from memlab.pissm.predictions import Predictions
from memlab.small_matmul import fused_matmul, fused_matvec

__all__ = ["COVARIANCES", "GAINS", "GAIN_FORMS", "MODE_SAMPLING", "PiSSM", "PiSSMConfig", "path_noise",
           "roundoff_floor"]

Gain = Literal["gru", "lstm", "exact"]  # the gain RNN's cell, or the exact Kalman gain (gain.py)
# how a GRU / LSTM gives the gain: gain.py's variants
GainForm = Literal["bounded", "paper", "paper-normalised", "unbounded"]
ModeSampling = Literal["prior", "posterior"]  # z_t ~ q(z_t | x_{t-1}) (App. E.1's box) or eq. (6) (section 5's text)
Covariance = Literal["full", "diagonal"]
GAINS, GAIN_FORMS, MODE_SAMPLING, COVARIANCES = (typing.get_args(t) for t in (Gain, GainForm, ModeSampling, Covariance))
CELL_TYPES = {"gru": GRUCell, "lstm": LSTMCell}
JITTER = 1e-6  # added to Sigma before its Cholesky factor (the sample only; the filter keeps Sigma as is)
ROUNDOFF_ULPS = 100.0  # ``roundoff_floor``: covariances are lifted by 100 ulps of their mean variance
MODE_SPREAD = 0.1  # std of each A_z's initial deviation from I (module doc: symmetry breaking)
MODE_NET_GAIN = 4.0  # scale of q(z | x)'s initial output layer: a random partition of the state space, not uniform


@dataclasses.dataclass(frozen=True)
class PiSSMConfig:
    """The sizes, variants and initial values of a pi-SSM; the arrays it starts from (R, C, the prior mean, the
    mode network's input scaling) are ``PiSSM``'s own arguments.

    ``gain`` and ``gain_form`` choose the gain module (gain.py): "exact" -> ``ExactGain``; "gru" / "lstm" with
    "paper" -> ``PaperGain`` (inputs normalised: "paper-normalised"), with "bounded" / "unbounded" -> ``WhitenedGain``
    (bounded or not).
    ``covariance="diagonal"`` keeps only the covariances' diagonals (the paper's choice; module doc).
    A starts at I + N(0, mode_spread^2) per mode, Q at process_var I, P_0 at initial_var I; q(z | x)'s output
    layer at mode_net_gain x its default initialisation (module doc: symmetry breaking).
    """

    latent_size: int  # M
    observation_size: int  # N
    num_modes: int  # K
    gain: Gain = "gru"
    gain_form: GainForm = "bounded"  # ignored by gain="exact"
    mode_sampling: ModeSampling = "prior"
    covariance: Covariance = "full"
    hidden_size: int = 64  # the gain RNN's units
    mode_hidden: int = 10  # q(z | x)'s ReLU units (App. F.2)
    transition_hidden: int = 0  # the shared transition MLP g's tanh units (0: linear modes only)
    process_var: float = 1e-3
    initial_var: float = 1.0
    mode_spread: float = MODE_SPREAD
    mode_net_gain: float = MODE_NET_GAIN
    learn_noise: bool = False  # train R too (else R keeps its given value)

    def __post_init__(self):
        for name in ("latent_size", "observation_size", "num_modes", "hidden_size", "mode_hidden"):
            check_int(name, getattr(self, name))
        check_int("transition_hidden", self.transition_hidden, low=0)
        for name, allowed in (("gain", GAINS), ("gain_form", GAIN_FORMS), ("mode_sampling", MODE_SAMPLING),
                              ("covariance", COVARIANCES)):
            check_choice(name, getattr(self, name), allowed)
        for name in ("process_var", "initial_var", "mode_net_gain"):
            check_real(name, getattr(self, name), 0, open_low=True)
        check_real("mode_spread", self.mode_spread, 0)
        if not isinstance(self.learn_noise, (bool, np.bool_)):
            raise ValueError(f"learn_noise must be a bool, got {self.learn_noise!r}")


class PiSSM(eqx.Module):
    """pi-SSM with K linear(-plus-MLP) modes and a learned or exact gain. ``__call__(y (T, N), mask, key)``.

    Parameters: A (K, M, M), b (K, M), C (K, N, M); ``mode_net`` x (M,) -> logits (K,); log_q (M,) with
    Q = diag(exp(log_q)); R (N, N) square root ``R_sqrt`` (trained only if ``learn_noise``); prior m_0 (M,),
    P_0 = diag(exp(initial_log_var)); ``gain`` (gain.py: ``ExactGain``, ``PaperGain`` or ``WhitenedGain``);
    ``transition_mlp`` (M -> M) when ``transition_hidden > 0``. The switches the filter reads are kept from the
    config (``mode_sampling``, ``covariance``, ``learn_noise``); its initial values are not, so that models that
    differ only in them share one compiled program.
    """

    A: Array
    b: Array
    C: Array
    mode_net: eqx.nn.MLP
    log_q: Array
    R_sqrt: Array
    initial_mean: Array
    initial_log_var: Array
    gain: ExactGain | PaperGain | WhitenedGain
    transition_mlp: eqx.nn.MLP | None
    mode_sampling: ModeSampling = eqx.field(static=True)
    covariance: Covariance = eqx.field(static=True)
    learn_noise: bool = eqx.field(static=True)

    def __init__(self, config: PiSSMConfig, *, R, key: Array, C=None, initial_mean=None, mode_input_mean=None,
                 mode_input_std=None):
        """R (N, N) observation noise covariance, positive definite. b starts at 0, C at C_0 + N(0, 0.01^2) with one
        C_0 ~ N(0, 1/M) shared by the modes unless given ((N, M) shared by every mode, or (K, N, M)); m_0 at
        ``initial_mean`` (default 0). q(z | x) reads (x - mode_input_mean) / mode_input_std (defaults 0 and 1)."""
        if not isinstance(config, PiSSMConfig):
            raise ValueError(f"config must be a PiSSMConfig, got {type(config).__name__}")
        M, N, K = config.latent_size, config.observation_size, config.num_modes
        check_matrix("R", R, (N, N))
        check_covariance("R", R)
        if np.min(np.linalg.eigvalsh(np.asarray(R, np.float64))) <= 0:
            raise ValueError("R must be positive definite (the predictive density of y_t needs it)")
        dtype = jnp.result_type(float)
        kA, kC, kmode, kcell, kread, kmlp = jax.random.split(key, 6)
        self.A = jnp.eye(M, dtype=dtype) + config.mode_spread * jax.random.normal(kA, (K, M, M), dtype)
        self.b = jnp.zeros((K, M), dtype)
        if C is None:  # one shared emission, each mode a small perturbation of it (the modes start alike)
            kC0, kC1 = jax.random.split(kC)
            C = jax.random.normal(kC0, (N, M), dtype) / np.sqrt(M) + 0.01 * jax.random.normal(kC1, (K, N, M), dtype)
        C = jnp.asarray(C, dtype)
        if C.shape == (N, M):
            C = jnp.broadcast_to(C, (K, N, M))
        check_matrix("C", C, (K, N, M))
        self.C = C
        self.mode_net = _mode_net(M, K, config.mode_hidden, config.mode_net_gain, mode_input_mean, mode_input_std,
                                  kmode, dtype)
        self.log_q = jnp.full((M,), math.log(config.process_var), dtype)
        self.R_sqrt = jnp.linalg.cholesky(jnp.asarray(R, dtype))
        self.initial_mean = jnp.zeros(M, dtype) if initial_mean is None else jnp.asarray(initial_mean, dtype)
        check_matrix("initial_mean", self.initial_mean, (M,))
        self.initial_log_var = jnp.full((M,), math.log(config.initial_var), dtype)
        self.gain = _make_gain(config, R, C, kcell, kread, dtype)
        self.transition_mlp = None
        if config.transition_hidden:
            self.transition_mlp = _transition_mlp(M, config.transition_hidden, kmlp, dtype)
        self.mode_sampling, self.covariance, self.learn_noise = config.mode_sampling, config.covariance, \
            bool(config.learn_noise)

    @property
    def latent_size(self) -> int:
        return self.A.shape[-1]

    @property
    def num_modes(self) -> int:
        return self.A.shape[0]

    def noise(self) -> tuple[Array, Array, Array]:
        """(Q (M, M), R (N, N), P_0 (M, M)); R without gradient unless ``learn_noise``."""
        R = self.R_sqrt @ self.R_sqrt.T
        if not self.learn_noise:
            R = jax.lax.stop_gradient(R)
        return jnp.diag(jnp.exp(self.log_q)), R, jnp.diag(jnp.exp(self.initial_log_var))

    def mode_logits(self, x: Array) -> Array:
        """Logits (K,) of q(z_t | x_{t-1} = x), x (M,)."""
        return self.mode_net(x)

    def predict(self, mean: Array, cov: Array, Q: Array) -> tuple[Array, Array]:
        """Step 6 / eq. (18) under every mode z: the moments (K, M), (K, M, M) of q(x_t | y_{1:t-1}, z_t = k) from
        those of x_{t-1}, mean (M,) and cov (M, M): A_k mean + b_k (+ g(mean)) and J_k cov J_k^T + Q with the
        Jacobian J_k = A_k (+ dg/dx at the mean)."""
        means = fused_matvec(self.A, mean) + self.b
        J = self.A
        if self.transition_mlp is not None:
            g, jacobian = _tanh_mlp_with_jacobian(self.transition_mlp, mean)
            means, J = means + g, J + jacobian
        return means, self._shape_cov(fused_matmul(fused_matmul(J, cov), jnp.swapaxes(J, -1, -2)) + Q)

    def _shape_cov(self, P: Array) -> Array:
        """P (..., M, M) symmetrised and floored (``roundoff_floor``), or its diagonal part for
        ``covariance="diagonal"``."""
        if self.covariance == "diagonal":
            return jnp.where(jnp.eye(P.shape[-1], dtype=bool), P, 0.0)
        return roundoff_floor(symmetrise(P))

    def init_rnn_state(self):
        """The gain's initial RNN state (None for the exact gain)."""
        return self.gain.init_state()

    def __call__(self, y: Array, mask: Array | None = None, *, key: Array) -> Predictions:
        """Filter one sequence y (T, N) (mask (T,) bool, True where observed) with one sampled path of
        (x_{t-1}, z_t). Returns ``Predictions`` with modes, mode_probs (eq. 6), means, covariances and the sampled
        mode's log-likelihoods (module doc)."""
        y, mask = check_observations(y, mask)
        T, N = y.shape
        if N != self.C.shape[1]:
            raise ValueError(f"y must have shape (T, {self.C.shape[1]}), got {y.shape}")
        y = jnp.where(mask[:, None], y, 0.0).astype(self.A.dtype)  # a NaN at a missing step must not propagate
        Q, R, P0 = self.noise()
        M = self.latent_size
        eye = jnp.eye(M, dtype=self.A.dtype)
        first = jnp.zeros(T, bool).at[0].set(True)
        C_T = jnp.swapaxes(self.C, -1, -2)

        def step(carry, inputs):
            mean, cov, rnn_state = carry
            y_t, observed, is_first, normal, gumbel = inputs
            chol = jnp.linalg.cholesky(cov + JITTER * eye)
            x_prev = mean + fused_matvec(chol, normal)  # step 4
            # log q(z_t | x_{t-1}): through the reparameterised x_{t-1} for the evidence below (eq. 60's pathwise
            # gradient), with x_{t-1} detached for the sampling distribution and its score
            log_prior = jax.nn.log_softmax(self.mode_logits(x_prev))
            log_prior_detached = jax.nn.log_softmax(self.mode_logits(jax.lax.stop_gradient(x_prev)))
            # step 6 for every mode (the mode posterior of eq. 6 needs them); the sampled one drives the filter
            means_k, covs_k = self.predict(mean, cov, Q)
            means_k = jnp.where(is_first, self.initial_mean, means_k)  # step 1 updates the prior itself
            covs_k = jnp.where(is_first, P0, covs_k)
            S_k = symmetrise(fused_matmul(fused_matmul(self.C, covs_k), C_T) + R)
            obs_k = fused_matvec(self.C, means_k)
            S_chol_k = jnp.linalg.cholesky(S_k)
            ll_k = jnp.where(observed, gaussian_log_density_from_cholesky(y_t, obs_k, S_chol_k), 0.0)
            log_joint = log_prior + ll_k
            log_evidence = jax.nn.logsumexp(log_joint)  # log q(y_t | y_{1:t-1}): the normaliser of eq. (6)
            log_post = log_joint - log_evidence  # eq. (6)
            # step 5 (Gumbel-max, as jax.random.categorical) from the prior or from eq. (6); the score's log-probability
            # reaches the mode network only (x_{t-1} detached above, the likelihoods detached here)
            log_sampling = log_prior_detached if self.mode_sampling == "prior" else \
                jax.nn.log_softmax(log_prior_detached + jax.lax.stop_gradient(ll_k))
            mode = jnp.argmax(gumbel + jax.lax.stop_gradient(log_sampling))
            pred_mean, pred_cov, C, S, obs_mean = means_k[mode], covs_k[mode], self.C[mode], S_k[mode], obs_k[mode]
            residual = y_t - obs_mean
            LLt, rnn_state = self.gain(S_chol_k[mode], pred_cov, residual, rnn_state, observed)  # step 7 (gain.py)
            K = fused_matmul(fused_matmul(pred_cov, C_T[mode]), LLt)  # step 8
            I_KC = eye - fused_matmul(K, C)
            new_mean = pred_mean + fused_matvec(K, residual)  # eq. (7)
            joseph = fused_matmul(fused_matmul(I_KC, pred_cov), I_KC.T) + fused_matmul(fused_matmul(K, R), K.T)
            new_cov = self._shape_cov(joseph)  # Joseph form (module doc)
            new_mean = jnp.where(observed, new_mean, pred_mean)
            new_cov = jnp.where(observed, new_cov, pred_cov)
            out = (jnp.where(observed, log_evidence, 0.0), obs_mean, S, fused_matvec(C, new_mean), log_sampling[mode],
                   mode, jnp.exp(log_post), new_mean, new_cov, ll_k[mode])
            return (new_mean, new_cov, rnn_state), out

        carry = (self.initial_mean, P0, self.init_rnn_state())
        _, out = jax.lax.scan(step, carry, (y, mask, first, *path_noise(key, T, M, self.num_modes, self.A.dtype)))
        return Predictions(*out)


def roundoff_floor(P: Array) -> Array:
    """P (..., M, M) + ROUNDOFF_ULPS * eps * (trace(P) / M) I: the covariance lifted by the size of its own round-off.

    Why (without it pi-SSM-GRU went NaN in its first epoch on Pong at noise 0.01): a model whose A_z has drifted
    unstable carries covariances whose condition number is beyond float32's 1 / eps, and the Joseph product,
    exact in real arithmetic, then rounds to a matrix with a negative eigenvalue larger than R (1e-4 at noise
    0.01), so S = C Sigma C^T + R and Sigma + JITTER I lose their Cholesky factors and everything after is
    NaN. Round-off of a product of this size is a few eps * lambda_max; lambda_max <= trace, so a floor of
    ROUNDOFF_ULPS = 100 ulps of trace / M (M <= 5 here) covers it with margin. It is relative: ~1e-11 at Pong's
    usual trace 4e-4 in float32, and 100 * 2.2e-16 of the trace in float64, where the exact-gain filter stays
    the Kalman filter to 1e-10.
    """
    M = P.shape[-1]
    level = ROUNDOFF_ULPS * jnp.finfo(P.dtype).eps * jnp.trace(P, axis1=-2, axis2=-1) / M
    return P + level[..., None, None] * jnp.eye(M, dtype=P.dtype)


def path_noise(key: Array, T: int, M: int, K: int, dtype) -> tuple[Array, Array]:
    """The randomness of one sampled path, drawn before the filter's scan: standard normals (T, M) for step 4 and
    Gumbel noise (T, K) for step 5's Gumbel-max. Step t's key is ``split(key, T)[t]``, split in two (normal,
    mode), so the draws equal those of step-wise ``jax.random.normal`` and ``jax.random.categorical`` calls; drawn
    together, XLA runs one vectorised generator instead of three small loops per step."""
    pairs = jax.vmap(jax.random.split)(jax.random.split(key, T))
    normal = jax.vmap(lambda k: jax.random.normal(k, (M,), dtype))(pairs[:, 0])
    gumbel = jax.vmap(lambda k: jax.random.gumbel(k, (K,), dtype))(pairs[:, 1])
    return normal, gumbel


def _tanh_mlp_with_jacobian(mlp: eqx.nn.MLP, x: Array) -> tuple[Array, Array]:
    """g(x) (M,) and its Jacobian dg/dx (M, M) for the one-hidden-layer tanh MLP g = W2 tanh(W1 x + b1) + b2 of
    ``_transition_mlp``: dg/dx = W2 diag(1 - h^2) W1 with h = tanh(W1 x + b1), in one pass (no forward-mode
    sweep over M tangents)."""
    hidden_layer, output_layer = mlp.layers
    h = jnp.tanh(hidden_layer(x))
    slope = (1.0 + h) * (1.0 - h)  # tanh' = 1 - h^2, factored as jax's derivative of tanh
    return output_layer(h), fused_matmul(output_layer.weight * slope, hidden_layer.weight)


def _mode_net(M: int, K: int, hidden: int, gain: float, input_mean, input_std, key: Array, dtype) -> eqx.nn.MLP:
    """q(z | x) of App. F.2: x (M,) -> ReLU(hidden) -> logits (K,). Its first layer is reparameterised to read
    (x - input_mean) / input_std and its output layer is scaled by ``gain`` (module doc: symmetry breaking)."""
    mlp = eqx.nn.MLP(M, K, hidden, depth=1, activation=jax.nn.relu, key=key, dtype=dtype)
    mean = jnp.zeros(M, dtype) if input_mean is None else jnp.asarray(input_mean, dtype)
    std = jnp.ones(M, dtype) if input_std is None else jnp.asarray(input_std, dtype)
    check_matrix("mode_input_mean", mean, (M,))
    check_matrix("mode_input_std", std, (M,))
    if not bool(jnp.all(std > 0)):
        raise ValueError("mode_input_std must be > 0")
    first, last = mlp.layers
    weight = first.weight / std
    return eqx.tree_at(lambda m: (m.layers[0].weight, m.layers[0].bias, m.layers[1].weight, m.layers[1].bias), mlp,
                       (weight, first.bias - weight @ mean, gain * last.weight, gain * last.bias))


def _make_gain(config: PiSSMConfig, R, C: Array, key_cell: Array, key_readout: Array, dtype):
    """The gain module of ``config.gain`` / ``config.gain_form`` (gain.py); ``PaperGain`` starts at the exact gain
    of the first step, S_0 = C_1 P_0 C_1^T + R."""
    if config.gain == "exact":
        return ExactGain()
    M, N, cell_type = config.latent_size, config.observation_size, CELL_TYPES[config.gain]
    keys = {"key_cell": key_cell, "key_readout": key_readout, "dtype": dtype}
    if config.gain_form in ("paper", "paper-normalised"):
        S_0 = C[0] @ (config.initial_var * jnp.eye(M, dtype=dtype)) @ C[0].T + jnp.asarray(R, dtype)
        return PaperGain(M, N, S_0, cell_type, config.hidden_size,
                         normalise_inputs=config.gain_form == "paper-normalised", **keys)
    return WhitenedGain(M, N, R, cell_type, config.hidden_size, bounded=config.gain_form == "bounded", **keys)


def _transition_mlp(M: int, hidden: int, key: Array, dtype) -> eqx.nn.MLP:
    """The shared transition MLP g (M -> M, tanh), starting at g = 0 so the initial dynamics are the linear modes."""
    mlp = eqx.nn.MLP(M, M, hidden, depth=1, activation=jnp.tanh, key=key, dtype=dtype)
    return eqx.tree_at(lambda m: m.layers[-1].weight, mlp, jnp.zeros_like(mlp.layers[-1].weight))

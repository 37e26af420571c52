"""Compiled solutions: memory layers whose weights are set by theory to carry out a task's reference algorithm.

Scored with the same harness as trained models (``train.score``), a compiled model shows what a layer of that kind
can reach, and a trained model's distance to it shows whether training found that algorithm.

* lgssm -- the steady-state Kalman predictor as a diagonal linear RNN (an LRU with set weights). With P the
  stabilising solution of the Riccati equation and K = P C^T (C P C^T + R)^{-1} its gain, the prediction
  z_t = x_{t+1|t} obeys z_t = (A - A K C) z_{t-1} + A K y_t and y_{t+1|t} = C z_t; diagonalising F = A - A K C =
  V diag(lambda) V^{-1} gives the LRU with eigenvalues lambda, B = V^{-1} A K and C_out = C V. It differs from the
  Kalman filter only while the filter's own gain has not yet converged to K (the transient, ``kalman_transient``).
* hmm with a permutation T -- the exact linear filter of Theorem 4.4 (paper 1), a linear recurrence in the logits;
  exact.
* hmm (a near-deterministic T = (1 - eps) D + eps Q) -- the time-invariant Adaptive Logit Filter (paper 1, eq. 24),
  a linear recurrence in the logits with delta = sqrt(eps) (eq. 48), read out as log(E T softmax(w / delta)). It is
  an approximation: the paper bounds its decoding error (Theorem 5.5), not its predictive loss; its gap is not zero.
* hmm with actions (an input-output HMM, e.g. RingWorld) -- the exact filter itself, the LOF (eq. 7) with the
  action's T(a), run over the task's inputs [a_t, y_t]: a recurrence in the logits, not a linear one (T(a) is no
  permutation), that reads the one-hot inputs linearly. Exact: an independent path to the reference's numbers.
* policy-eval -- paper 2's theta* (eq. 15): L layers of the dual-head softmax transformer on the prompt (13) of every
  prefix of the context, i.e. L iterations of weighted softmax TD (Theorem 1), read at the query. An approximation of
  the task's reference, for two reasons: weighted softmax TD is TD in the kernel space of exp(<x, x'>) normalised over
  the context, whose fixed point is not the linear TD fixed point of the features; and on the Boyan features
  (U(-1, 1)^4) the kernel is far from diagonal, Assumption 5.1 (min_s M_pi(s, s) >= (1 + gamma) / 2) fails and the
  iteration is no contraction: its gap to the reference, already about half the trivial predictor's at Table 1's
  L = 3, grows with depth (Fig. 1's L = 15 and beyond).
* mqar -- one softmax-attention head as exact lookup (``lookup_attention``): position j offers the key x_{j-1} (the
  previous token, the shift a first "previous-token" attention head or a short convolution makes) and the value
  x_j; the query at step t is x_t, so the score beta [x_{j-1} = x_t] puts the weight on the one earlier position
  that follows the queried key. With n <= L positions in view the weight off it is at most
  delta = (L - 1) e^(-beta), so beta >= log((L - 1) / delta) keeps the lookup within delta of a hard one; the
  logits gamma (attended value) then cost at most (V/2 - 1) e^(-gamma (1 - 2 delta)) nats per query. beta = 20,
  gamma = 30: delta < 3e-6 up to L = 1024 and a loss below 6e-12 nats (gap ~ 1e-12).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jax import Array

from memlab.arena.hmm import HMMTask, predictive_logits
from memlab.arena.lgssm import LGSSMTask
from memlab.arena.mqar import MQARTask
from memlab.arena.policy import PolicyEvalTask
from memlab.belief import alf_backbone, is_permutation
from memlab.ictd import feature_scores, kernel_weights, td_with_weights
from memlab.layers import LRU, CausalSoftmaxAttention
from memlab.logspace import log_matvec, normalize_logits

# theta* is scored on sequences up to this long: it reads every prefix (L^3 time, L^2 memory a sequence), and a quick
# batch at L = 1024 does not fit in a 24 GB machine
THETA_STAR_MAX_LENGTH = 256

__all__ = ["THETA_STAR_MAX_LENGTH", "Compiled", "LookupAttention", "action_filter", "compiled_model",
           "kalman_predictor", "kalman_transient", "logit_filter", "lookup_attention", "lookup_loss_bound",
           "softmax_ictd"]


@dataclasses.dataclass(frozen=True)
class Compiled:
    """A compiled model: ``model`` maps one input sequence (L, input_size) to outputs (L, output_size); ``exact``
    says whether it computes the reference after ``transient`` steps (else it is a stated approximation);
    ``max_length``: the longest sequence it is scored on (None: any), for a model whose cost grows faster than the
    sequence (theta* reads every prefix: L^3 time, L^2 memory per sequence)."""

    model: Callable[[Array], Array]
    description: str
    exact: bool
    transient: int = 0
    max_length: int | None = None


def _steady_state(task: LGSSMTask) -> tuple[np.ndarray, np.ndarray]:
    """P (the stationary prediction covariance, the Riccati equation's stabilising solution) and K, in float64."""
    A, C, Q, R = (np.asarray(x, np.float64) for x in (task.A, task.C, task.Q, task.R))
    P = scipy.linalg.solve_discrete_are(A.T, C.T, Q, R)  # P = A P A^T + Q - A P C^T (C P C^T + R)^-1 C P A^T
    K = P @ C.T @ np.linalg.inv(C @ P @ C.T + R)
    return P, K


def kalman_predictor(task: LGSSMTask) -> LRU:
    """The steady-state Kalman predictor of y_{t+1} as an LRU (module docstring); needs m0 = 0 (the LRU starts at
    state 0) and a model with as many outputs as inputs."""
    if np.any(np.asarray(task.m0) != 0):
        raise ValueError("the compiled Kalman predictor starts at x_{1|0} = 0: the task's m0 must be 0")
    A, C = np.asarray(task.A, np.float64), np.asarray(task.C, np.float64)
    _, K = _steady_state(task)
    lam, V = np.linalg.eig(A - A @ K @ C)  # F = V diag(lam) V^-1
    B = np.linalg.solve(V, A @ K)  # (M, D)
    C_out = C @ V  # (D, M)
    # the LRU's lambda = exp(-exp(nu_log) + i exp(theta_log)): a phase in (0, 2 pi]; 0 (a real positive
    # eigenvalue) is written as 2 pi
    phase = np.mod(np.angle(lam), 2 * math.pi)
    phase = np.where(phase == 0.0, 2 * math.pi, phase)
    lru = LRU(C.shape[0], len(lam), key=jax.random.PRNGKey(0))
    values = (np.log(-np.log(np.abs(lam))), np.log(phase), np.zeros(len(lam)), B.real, B.imag, C_out.real,
              C_out.imag, np.zeros(C.shape[0]))
    names = ("nu_log", "theta_log", "gamma_log", "B_re", "B_im", "C_re", "C_im", "D")
    return eqx.tree_at(lambda m: [getattr(m, n) for n in names], lru,
                       [jnp.asarray(v, jnp.float32) for v in values])


def kalman_transient(task: LGSSMTask, tol: float = 1e-4) -> int:
    """Steps t after which the Kalman filter's gain K_t is within ``tol`` (max abs entry) of the steady-state K:
    from there on the compiled predictor and the filter differ only by the (decaying) effect of the early steps."""
    A, C, Q, R, P0 = (np.asarray(x, np.float64) for x in (task.A, task.C, task.Q, task.R, task.P0))
    _, K_inf = _steady_state(task)
    P = A @ P0 @ A.T + Q  # P_{1|0}
    for t in range(1, 100_000):
        K = P @ C.T @ np.linalg.inv(C @ P @ C.T + R)
        if np.max(np.abs(K - K_inf)) < tol:
            return t
        P = A @ (P - K @ C @ P) @ A.T + Q
    raise ValueError("the Kalman gain did not converge in 100,000 steps")


def logit_filter(task: HMMTask) -> tuple[Callable[[Array], Array], bool]:
    """A linear recurrence in the logits for an HMM whose T is within eps < 0.5 of a deterministic map D (the
    argmax of each column of T), read out as the predictive logits; returns (predict, exact).

    * eps = 0 (D = T must then be a permutation): the exact linear filter of Theorem 4.4,
      w_t = D' w_{t-1} + log E^T y_t from w_0 = log pi0 (for a permutation log(T exp w) = w permuted, so this is
      the exact filter's eq. (7)); exact.
    * otherwise: the time-invariant ALF with delta = sqrt(eps) (eq. 24, 48) from w_0 = 0, read out as
      log(E T softmax(w_t / delta)) (see ``arena.compiled``'s summary for the 1/delta); an approximation.

    Inputs are one-hot observations, read linearly (so input gradients exist). ValueError if T is not that close to
    a deterministic map or an emission has probability 0.
    """
    T = np.asarray(task.hmm.T, np.float64)
    D = (T == T.max(axis=0, keepdims=True)).astype(np.float64)
    if np.any(D.sum(axis=0) != 1):
        raise ValueError("a logit filter needs a transition matrix with one most likely successor per state")
    eps = float(np.max(1.0 - (T * D).sum(axis=0)))
    if eps >= 0.5:
        raise ValueError(f"a logit filter needs T close to a deterministic map (largest off-backbone mass {eps:.3f})")
    E = np.asarray(task.hmm.E, np.float64)
    if np.any(E <= 0):
        raise ValueError("the compiled filter reads log E through its one-hot inputs: every emission must be possible")
    exact = eps == 0.0
    if exact and not is_permutation(D):
        raise ValueError("a deterministic T with transient states needs Theorem 4.4's correction terms, which memlab "
                         "compiles only in memlab.belief.exact_linear (not as a linear recurrence here)")
    src = jnp.asarray(alf_backbone(D))
    delta = 1.0 if exact else math.sqrt(eps)  # eq. (48)
    keep = 1.0 if exact else 1.0 - delta
    log_E = jnp.asarray(np.log(E), jnp.float32)  # (S, N)
    w0 = jnp.log(task.hmm.pi0) if exact else jnp.zeros(T.shape[0], jnp.float32)

    def predict(inputs: Array) -> Array:
        def step(w, x):
            w = keep * w[src] + delta * (x @ log_E)  # eq. (24) (eq. (14) when exact); x @ log E = log E^T y
            return w, w

        _, ws = jax.lax.scan(step, w0, inputs)
        # eq. (24) averages log-likelihoods with weight delta: w / delta is the discounted sum of log-likelihoods
        # that the exact filter's logits are, so it is the calibrated belief to read out
        return predictive_logits(task.hmm, jax.nn.log_softmax(ws / delta))

    return predict, exact


def action_filter(task: HMMTask) -> Callable[[Array], Array]:
    """The exact filter of a controlled hmm task over its inputs [a_t, y_t] (L, A + S) -> predictive logits (L, S):
    w_t = log(T(a_{t-1}) exp(w_{t-1})) + log E^T y_t (eq. 7, normalised: eq. 8) from w_0 = log pi0, read out as
    log(E T(a_t) exp(w_t)). The first step's T(a_0) is the mean over actions (the task makes T(a) pi0 the same for
    every a). The one-hot action selects T(a) by a sum and log E^T y is read as y @ log E, so input gradients exist;
    ValueError if an emission has probability 0."""
    if not task.controlled:
        raise ValueError("action_filter needs a task whose hmm is a ControlledHMM")
    if np.any(np.asarray(task.hmm.E) <= 0):
        raise ValueError("the compiled filter reads log E through its one-hot inputs: every emission must be possible")
    A, T, E = task.num_actions, task.hmm.T, task.hmm.E
    log_E = jnp.log(E)  # (S, N)

    def predict(inputs: Array) -> Array:
        def step(carry, x):
            w, T_before = carry  # w_{t-1}, T(a_{t-1})
            T_after = jnp.tensordot(x[:A], T, axes=1)  # T(a_t): the one-hot a_t picks it
            w = normalize_logits(log_matvec(T_before, w) + x[A:] @ log_E)  # eq. (7), (8)
            return (w, T_after), log_matvec(E, log_matvec(T_after, w))  # log E T(a_t) alpha_t

        return jax.lax.scan(step, (jnp.log(task.hmm.pi0), T.mean(0)), inputs)[1]

    return predict


def softmax_ictd(task: PolicyEvalTask, num_layers: int = 3) -> Callable[[Array], Array]:
    """theta* of paper 2 (eq. 15) with ``num_layers`` layers on every prefix of a policy-eval sequence: (L, 2d + 2)
    -> (L, 1), at both steps of pair k the value of the query S_k from transitions 1..k.

    For prefix k the prompt (13) has columns x(S_0), ..., x(S_{k-1}) with rewards R_1..R_k and the query x(S_k); by
    Theorem 1 the L-layer forward's readout is v_L(S_k) of weighted softmax TD (``ictd.softmax_td``), computed here on
    the whole trajectory with the sources after k given score -inf (weight 0), so all prefixes share one program.
    """
    d = task.feature_dim

    def predict(inputs: Array) -> Array:
        transitions = inputs[0::2]  # (n, 2d + 2): [x(S_{k-1}), R_k, x(S_k), 0]
        n = transitions.shape[0]
        X = jnp.concatenate([transitions[:, :d], transitions[-1:, d + 1:2 * d + 1]])  # (n + 1, d): x(S_0..S_n)
        scores = feature_scores(X)  # <x(S_i), x(S_j)>: A = diag(I_d, 0) of eq. (15)
        rows = jnp.arange(n + 1)[:, None]

        def prefix(k):  # v_L(S_k) from the prompt of transitions 1..k
            K = kernel_weights(jnp.where(rows < k, scores, -jnp.inf), "softmax")  # eq. (4), (12)
            return td_with_weights(K, transitions[:, d], task.gamma, num_layers)[-1, k]  # eq. (20)

        values = jax.vmap(prefix)(jnp.arange(1, n + 1))
        return jnp.repeat(values, 2)[:inputs.shape[0], None]

    return predict


class LookupAttention(eqx.Module):
    """One softmax-attention head over [x_t, x_{t-1}] (one-hot tokens, width 2V) read out as ``gamma`` times the
    attended value's value-vocabulary part: (L, V) -> (L, V/2) logits (module docstring)."""

    attention: CausalSoftmaxAttention
    gamma: float

    def __call__(self, x: Array) -> Array:
        previous = jnp.concatenate([jnp.zeros_like(x[:1]), x[:-1]])  # x_{t-1}, 0 before the first token
        attended = self.attention(jnp.concatenate([x, previous], axis=-1))[:, : x.shape[-1]]  # sum_j a_tj x_j
        return self.gamma * attended[:, x.shape[-1] // 2 :]


def lookup_attention(task: MQARTask, beta: float = 20.0, gamma: float = 30.0) -> LookupAttention:
    """MQAR's exact lookup as one attention head with set weights: q_t = beta sqrt(2V) x_t (the scale cancels the
    layer's 1 / sqrt(d_h)), k_j = x_{j-1}, v_j = x_j, identity output projection (module docstring)."""
    V = task.vocab_size
    eye, zero = jnp.eye(V), jnp.zeros((V, V))
    w_q = jnp.block([[beta * math.sqrt(2 * V) * eye, zero], [zero, zero]])  # rows: outputs, columns: [x, previous]
    w_k = jnp.block([[zero, eye], [zero, zero]])
    w_v = jnp.block([[eye, zero], [zero, zero]])
    attention = CausalSoftmaxAttention(2 * V, 1, key=jax.random.PRNGKey(0), positions=False)
    attention = eqx.tree_at(lambda a: (a.proj.qkv.weight, a.proj.out.weight), attention,
                            (jnp.concatenate([w_q, w_k, w_v]), jnp.eye(2 * V)))
    return LookupAttention(attention, gamma)


def lookup_loss_bound(task: MQARTask, length: int, beta: float, gamma: float) -> float:
    """The most ``lookup_attention`` loses per query on sequences of ``length``: (V/2 - 1) e^(-gamma (1 - 2 delta)),
    delta = (length - 1) e^(-beta) (module docstring); meaningful for delta < 1/2."""
    delta = (length - 1) * math.exp(-beta)
    return (task.vocab_size // 2 - 1) * math.exp(-gamma * (1.0 - 2.0 * delta))


def compiled_model(task) -> Compiled | None:
    """The compiled solution of ``task``, or None where memlab has none."""
    if isinstance(task, LGSSMTask):
        return Compiled(kalman_predictor(task), "steady-state Kalman predictor as an LRU", exact=True,
                        transient=kalman_transient(task))
    if isinstance(task, HMMTask) and task.controlled:
        return Compiled(action_filter(task), "exact filter (LOF, eq. 7) with the action's T(a)", exact=True)
    if isinstance(task, HMMTask):
        try:
            predict, exact = logit_filter(task)
        except ValueError:
            return None
        return Compiled(predict, "exact linear filter, paper 1 Thm 4.4" if exact else
                        "ALF (delta = sqrt(eps)), paper 1 eq. (24)", exact=exact)
    if isinstance(task, PolicyEvalTask):
        return Compiled(softmax_ictd(task), "theta* (paper 2, eq. 15), 3 layers: weighted softmax TD", exact=False,
                        max_length=THETA_STAR_MAX_LENGTH)
    if isinstance(task, MQARTask):
        return Compiled(lookup_attention(task), "softmax attention as exact lookup (beta = 20, gamma = 30)",
                        exact=True)
    return None

"""Multi-task semi-gradient TD pretraining of a looped softmax ICTD block (Algorithm 1, App. F.1-F.3, F.5).

The single-head + TSM block of section 4, looped L times with one shared (V, A) (section 8), read out at eq. (5);
softmax kernel mixed with rho_t I (eq. 104); the sparse masks of eq. (106) and (108), or the relaxed eq. (112);
semi-gradient TD (Algorithm 1, lines 11-12) with Adam; emergence scores eq. (109)-(111) and d_t eq. (34) per step.
``make_train(config)`` returns one pure ``train(key)``, a ``lax.scan`` over epochs; ``train_seeds`` vmaps it;
``make_chunked_train`` is the same run in parts, its epochs in chunks of one compiled program, so that a cell
reports its epochs between them (``train_in_chunks``, ``memlab.progress``): the same numbers.

Choices the paper leaves open:

- rollout: one fresh Boyan task and one trajectory per epoch, long enough for all its overlapping windows (Table 1's
  H = n + 1 read as the segment one window covers; F.3's and F.5's budgets are otherwise inconsistent);
- Xavier-normal start with gain 0.1, masked entries exactly 0 (forward, gradients and Adam updates masked);
- two best checkpoints carried in the scan: the paper's rule and the mirrored block's (-V, -A).

The rollout reading, the checkpoints and what training converges to: docs/studies/ictd.md, "Pretraining".
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from memlab.checks import check_gamma, check_int, check_real
from memlab.ictd.boyan import boyan_chain
from memlab.ictd.mrp import sample_trajectory
from memlab.ictd.transformer import forward, make_prompt, readout

A_MASKS = ("full", "relaxed")

__all__ = [
    "A_MASKS",
    "Checkpoint",
    "Evaluation",
    "Params",
    "PretrainConfig",
    "Trace",
    "TrainResult",
    "Windows",
    "evaluate",
    "init_params",
    "mask_relaxation_config",
    "apply_mask",
    "masks",
    "rho_schedule",
    "sample_windows",
    "td_errors",
    "td_loss",
    "value",
    "window_values",
]


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """Hyperparameters of Table 1 (defaults) plus the F.5 options (relaxed A mask, linear rho anneal)."""

    m: int = 64  # Boyan chain states
    d: int = 4  # feature dimension
    gamma: float = 0.9
    n: int = 10  # context length
    num_layers: int = 3  # L, looped (shared V, A)
    tau: float = 1.2  # softmax temperature
    learning_rate: float = 1e-3  # Adam, weight decay 0
    batch_size: int = 64  # contexts per mini-batch
    minibatches_per_epoch: int = 5  # Adam steps per sampled MRP
    num_epochs: int = 3000  # sampled MRPs
    num_seeds: int = 5
    init_gain: float = 0.1  # Xavier-normal gain of the trainable entries
    a_mask: str = "full"  # "full": eq. (108); "relaxed": eq. (112)
    rho_start: float = 0.0  # rho_t rises linearly from rho_start to rho_end over rho_anneal_steps steps, then stays
    rho_end: float = 0.0
    rho_anneal_steps: int = 0
    stationary_start: bool = False  # S_0 ~ p0 (Algorithm 1) or ~ mu_pi (section 6)
    # query state S_{t+n+query_offset}: 0 = Algorithm 1 line 7 (the state after the last context transition); 1 = one
    # step past it, as the linear-attention code of Wang et al. (2025a) builds its prompts (see ``sample_windows``)
    query_offset: int = 0

    @property
    def num_windows(self) -> int:
        """Windows (context pairs) per epoch: N = batch_size * minibatches_per_epoch."""
        return self.batch_size * self.minibatches_per_epoch

    @property
    def rollout_length(self) -> int:
        """Transitions rolled out per epoch: H = N + n + query_offset."""
        return self.num_windows + self.n + self.query_offset

    @property
    def num_steps(self) -> int:
        """Adam steps in a run: num_epochs * minibatches_per_epoch."""
        return self.num_epochs * self.minibatches_per_epoch

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        for name in ("d", "n", "num_layers", "batch_size", "minibatches_per_epoch", "num_epochs", "num_seeds"):
            check_int(name, getattr(self, name))
        check_int("m", self.m, 3)  # Boyan chain, Algorithm 2
        check_gamma(self.gamma)
        check_real("tau", self.tau, 0.0, open_low=True)  # softmax temperature
        check_real("learning_rate", self.learning_rate, 0.0, open_low=True)
        check_real("init_gain", self.init_gain, 0.0)
        if self.a_mask not in A_MASKS:
            raise ValueError(f"a_mask must be one of {A_MASKS} (eq. (108) / eq. (112)), got {self.a_mask!r}")
        for name in ("rho_start", "rho_end"):
            check_real(name, getattr(self, name), 0.0, 1.0)  # eq. (104)
        check_int("rho_anneal_steps", self.rho_anneal_steps, 0)
        check_int("query_offset", self.query_offset, 0)


def mask_relaxation_config(a_mask: str = "relaxed", **overrides) -> PretrainConfig:
    """The F.5 setup: rho 0.68 -> 0.80 over 8000 steps, 9000 steps = 900 MRPs x 10 mini-batches, 10 seeds."""
    base = {"rho_start": 0.68, "rho_end": 0.80, "rho_anneal_steps": 8000, "num_epochs": 900,
            "minibatches_per_epoch": 10, "num_seeds": 10, "a_mask": a_mask}
    config = PretrainConfig(**{**base, **overrides})
    config.validate()
    return config


class Params(eqx.Module):
    """Shared block parameters (looped over L layers). V, A: (d+3, d+3), already masked."""

    V: Array
    A: Array


class Windows(eqx.Module):
    """N consecutive overlapping windows of one trajectory (Algorithm 1, lines 8-9).

    prompts: (N+1, d+3, n+1), prompts[t] = Z0 of window t (context S_t..S_{t+n-1} with R_{t+1}..R_{t+n}, query
    S_{t+n+k}, k = ``query_offset``; eq. (13)), so prompts[t+1] is its Z0'; reward: (N,) R_{t+n+k+1}, the reward of
    the transition out of the query state; v_query: (N,) v*(S_{t+n+k}), the true value at the query state of window t
    (for evaluation only).
    """

    prompts: Array
    reward: Array
    v_query: Array

    @property
    def Z0(self) -> Array:
        """(N, d+3, n+1) the prompts of the N windows."""
        return self.prompts[:-1]

    def minibatch(self, start, size: int) -> Windows:
        """Windows start..start+size-1 (``start`` may be traced, ``size`` static)."""
        return Windows(jax.lax.dynamic_slice_in_dim(self.prompts, start, size + 1),
                       jax.lax.dynamic_slice_in_dim(self.reward, start, size),
                       jax.lax.dynamic_slice_in_dim(self.v_query, start, size))


class Trace(eqx.Module):
    """Per-step records, each (num_steps,) (or (num_seeds, num_steps) from ``train_seeds``), after the step's update
    except ``loss``/``abs_delta``/``rho``, which belong to the mini-batch the step was computed on."""

    V_em: Array
    A_em: Array
    V_em_neg: Array  # V_em(-V): the TD sign pattern mirrored, (-, -, +) on (r, gamma v', v)
    A_em_neg: Array  # A_em(-A): a common NEGATIVE diagonal of A_feat (anti-similarity attention)
    d_t: Array
    loss: Array  # 0.5 mean delta^2
    abs_delta: Array  # mean |delta|
    rho: Array


class Checkpoint(eqx.Module):
    """The parameters at the first step that maximises a score so far: params, step () int32 (-1 before any step),
    score ()."""

    params: Params
    step: Array
    score: Array

    @classmethod
    def start(cls, params: Params) -> Checkpoint:
        return cls(params, jnp.asarray(-1, jnp.int32), jnp.asarray(-jnp.inf))

    def keep_better(self, params: Params, score: Array, step: Array) -> Checkpoint:
        """This checkpoint, or (params, step, score) if ``score`` is strictly higher (so ties keep the first)."""
        better = score > self.score
        pick = lambda new, old: jnp.where(better, new, old)  # noqa: E731
        return Checkpoint(jax.tree.map(pick, params, self.params), pick(step, self.step).astype(jnp.int32),
                          pick(score, self.score))


class TrainResult(eqx.Module):
    """What ``train`` returns: final parameters, the two best checkpoints and the trace.

    ``best``: by the paper's rule max min(V_em, A_em) (Fig. 3(a)); ``best_mirrored``: by max min(V_em(-V), A_em(-A)).
    Steps index the trace.
    """

    params: Params
    best: Checkpoint
    best_mirrored: Checkpoint
    trace: Trace


def masks(d: int, a_mask: str = "full") -> Params:
    """V_mask of eq. (106) and A_mask of eq. (108) ("full") or eq. (112) ("relaxed"), each (d+3, d+3) of 0/1."""
    if a_mask not in A_MASKS:
        raise ValueError(f"a_mask must be one of {A_MASKS}, got {a_mask!r}")
    V_mask = jnp.zeros((d + 3, d + 3)).at[d + 1 :, :].set(1.0)  # eq. (106): last two rows
    A_mask = jnp.zeros((d + 3, d + 3)).at[:d, :d].set(1.0)  # eq. (108): feature block
    if a_mask == "relaxed":
        A_mask = jnp.ones((d + 3, d + 3)).at[d:, d:].set(0.0)  # eq. (112): all but the scalar block
    return Params(V_mask, A_mask)


def apply_mask(tree: Params, mask: Params) -> Params:
    """Entries where the mask is 0 become exactly +0.0 (``where``, not a product: no -0.0, no NaN leaks)."""
    return jax.tree.map(lambda x, keep: jnp.where(keep != 0, x, jnp.zeros_like(x)), tree, mask)


def init_params(key: Array, config: PretrainConfig) -> Params:
    """Xavier-normal (gain ``init_gain``) trainable entries, zeros elsewhere (App. F.2). Each of V, A: (d+3, d+3)."""
    size = config.d + 3
    std = config.init_gain * math.sqrt(2.0 / (size + size))
    kv, ka = jax.random.split(key)
    raw = Params(std * jax.random.normal(kv, (size, size)), std * jax.random.normal(ka, (size, size)))
    return apply_mask(raw, masks(config.d, config.a_mask))


def rho_schedule(config: PretrainConfig, step: Array) -> Array:
    """rho_t at 0-based step t: linear from rho_start to rho_end over rho_anneal_steps, then rho_end (App. F.5)."""
    if config.rho_anneal_steps == 0:
        return jnp.asarray(config.rho_end, jnp.float32)
    frac = jnp.minimum(jnp.asarray(step, jnp.float32) / config.rho_anneal_steps, 1.0)
    return config.rho_start + (config.rho_end - config.rho_start) * frac


def value(params: Params, Z0: Array, config: PretrainConfig, rho: Array | float = 0.0) -> Array:
    """TF_L(Z0) of eq. (5) for the looped masked block: Z0 (d+3, n+1) -> () array."""
    p = apply_mask(params, masks(config.d, config.a_mask))
    Zs = forward(Z0, p.V, p.A, config.gamma, num_layers=config.num_layers, form="tsm", kind="softmax",
                 tau=config.tau, rho=rho)
    return readout(Zs[-1])


def window_values(params: Params, windows: Windows, config: PretrainConfig, rho: Array | float = 0.0) -> Array:
    """TF_L of every prompt of ``windows``: (N+1,), entry t is TF_L(Z0) of window t and TF_L(Z0') of window t-1."""
    return jax.vmap(lambda Z: value(params, Z, config, rho))(windows.prompts)


def _bootstrap_delta(v: Array, reward: Array, gamma: float, semi_gradient: bool) -> Array:
    """delta_t = R_{t+n+1} + gamma v[t+1] - v[t] from the (N+1,) prompt values; (N,)."""
    v_next = jax.lax.stop_gradient(v[1:]) if semi_gradient else v[1:]
    return reward + gamma * v_next - v[:-1]


def td_errors(params: Params, windows: Windows, config: PretrainConfig, rho: Array | float = 0.0,
              semi_gradient: bool = True) -> Array:
    """delta_t = R_{t+n+1} + gamma TF_L(Z0') - TF_L(Z0) for every window (Algorithm 1, line 11); (N,).

    One forward pass per prompt: the Z0' of window t is the Z0 of window t+1. With ``semi_gradient`` the bootstrap
    term is wrapped in ``stop_gradient`` (App. F.1).
    """
    return _bootstrap_delta(window_values(params, windows, config, rho), windows.reward, config.gamma, semi_gradient)


def td_loss(params: Params, windows: Windows, config: PretrainConfig, rho: Array | float = 0.0):
    """0.5 mean delta^2 with a fixed bootstrap target; grad = -mean(delta grad TF_L(Z0)). Returns (loss, delta (N,))."""
    delta = td_errors(params, windows, config, rho)
    return 0.5 * jnp.mean(delta**2), delta


def sample_windows(key: Array, config: PretrainConfig, num_windows: int | None = None) -> Windows:
    """Sample one Boyan task (Algorithm 2), roll out num_windows + n + k transitions, cut num_windows window pairs.

    Returns ``Windows`` with N = num_windows (default ``config.num_windows``) windows, in trajectory order. Window t:
    context S_t..S_{t+n-1} with rewards R_{t+1}..R_{t+n}, query S_{t+n+k}, k = ``config.query_offset``. With k = 0
    (Algorithm 1) the query is the successor of the last context transition. With k = 1 (the prompts of the
    linear-attention code, whose context columns carry their successors explicitly) the query is one step further;
    in eq. (13)'s layout a context state's successor is read from the next column (the shift of eq. (16)), so the
    last context state S_{t+n-1} is then paired with the query S_{t+n+1} instead of its successor S_{t+n}, which the
    prompt does not show.
    """
    N = config.num_windows if num_windows is None else num_windows
    n, k = config.n, config.query_offset
    k_task, k_traj = jax.random.split(key)
    task = boyan_chain(k_task, config.m, config.d, config.gamma)
    states, rewards = sample_trajectory(task.mrp, k_traj, N + n + k, stationary=config.stationary_start)
    feats = task.features[states]  # (N+n+k+1, d), row j = x(S_j)

    def prompt(t):  # eq. (13): context S_t..S_{t+n-1}, R_{t+1}..R_{t+n}; query S_{t+n+k}
        context, query = jax.lax.dynamic_slice_in_dim(feats, t, n), jax.lax.dynamic_slice_in_dim(feats, t + n + k, 1)
        X = jnp.concatenate([context, query])
        R = jax.lax.dynamic_slice_in_dim(rewards, t, n)
        return make_prompt(X, R)

    prompts = jax.vmap(prompt)(jnp.arange(N + 1))  # (N+1, d+3, n+1); window t+1 is the Z0' of window t
    return Windows(prompts, rewards[n + k : N + n + k], task.v_star[states[n + k : N + n + k]])


class Evaluation(eqx.Module):
    """Held-out diagnostics, each a () array: mean |delta| and mean |TF_L(Z0) - v*(S_n)| over all windows and tasks."""

    abs_td_error: Array
    abs_value_error: Array


def evaluate(params: Params, config: PretrainConfig, key: Array, num_tasks: int, num_windows: int | None = None,
             rho: float = 0.0) -> Evaluation:
    """Mean |delta| and mean value error on ``num_tasks`` fresh Boyan tasks (num_windows windows each)."""
    if num_tasks < 1:
        raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")

    def one(k):
        w = sample_windows(k, config, num_windows)
        v = window_values(params, w, config, rho)  # (N+1,)
        delta = _bootstrap_delta(v, w.reward, config.gamma, semi_gradient=False)
        return jnp.mean(jnp.abs(delta)), jnp.mean(jnp.abs(v[:-1] - w.v_query))

    td, ve = jax.vmap(one)(jax.random.split(key, num_tasks))
    return Evaluation(jnp.mean(td), jnp.mean(ve))

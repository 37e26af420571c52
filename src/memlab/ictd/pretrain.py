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
import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array

from memlab.checks import check_gamma, check_int, check_real
from memlab.ictd.boyan import boyan_chain
from memlab.ictd.emergence import a_emergence, kernel_diagonal_mean, v_emergence
from memlab.ictd.mrp import sample_trajectory
from memlab.ictd.transformer import forward, make_prompt, readout
from memlab.progress import training_chunks, training_step

A_MASKS = ("full", "relaxed")

__all__ = [
    "A_MASKS",
    "Checkpoint",
    "ChunkedTrain",
    "Evaluation",
    "Params",
    "PretrainConfig",
    "Trace",
    "TrainResult",
    "Windows",
    "evaluate",
    "init_params",
    "make_chunked_train",
    "make_train",
    "mask_relaxation_config",
    "masks",
    "rho_schedule",
    "sample_windows",
    "td_errors",
    "td_loss",
    "train_in_chunks",
    "train_seeds",
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


def _apply_mask(tree: Params, mask: Params) -> Params:
    """Entries where the mask is 0 become exactly +0.0 (``where``, not a product: no -0.0, no NaN leaks)."""
    return jax.tree.map(lambda x, keep: jnp.where(keep != 0, x, jnp.zeros_like(x)), tree, mask)


def init_params(key: Array, config: PretrainConfig) -> Params:
    """Xavier-normal (gain ``init_gain``) trainable entries, zeros elsewhere (App. F.2). Each of V, A: (d+3, d+3)."""
    size = config.d + 3
    std = config.init_gain * math.sqrt(2.0 / (size + size))
    kv, ka = jax.random.split(key)
    raw = Params(std * jax.random.normal(kv, (size, size)), std * jax.random.normal(ka, (size, size)))
    return _apply_mask(raw, masks(config.d, config.a_mask))


def rho_schedule(config: PretrainConfig, step: Array) -> Array:
    """rho_t at 0-based step t: linear from rho_start to rho_end over rho_anneal_steps, then rho_end (App. F.5)."""
    if config.rho_anneal_steps == 0:
        return jnp.asarray(config.rho_end, jnp.float32)
    frac = jnp.minimum(jnp.asarray(step, jnp.float32) / config.rho_anneal_steps, 1.0)
    return config.rho_start + (config.rho_end - config.rho_start) * frac


def value(params: Params, Z0: Array, config: PretrainConfig, rho: Array | float = 0.0) -> Array:
    """TF_L(Z0) of eq. (5) for the looped masked block: Z0 (d+3, n+1) -> () array."""
    p = _apply_mask(params, masks(config.d, config.a_mask))
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


def make_train(config: PretrainConfig, callback=None, *, optimizer: optax.GradientTransformation | None = None):
    """Return ``train(key) -> TrainResult``, pure and jit-able; one run of Algorithm 1 with ``config``.

    ``callback(epoch, {"loss", "V_em", "A_em"})``: on the host after every epoch, with its last step's values
    (``jax.debug.callback``: see ``memlab.progress`` for what a callback costs). Default None: silent, and the
    program is the one compiled without it. ``optimizer``: the update of every step, default Algorithm 1's Adam at
    ``config.learning_rate`` (its gradients and updates masked either way).
    """
    config.validate()
    optimizer = optax.adam(config.learning_rate) if optimizer is None else optimizer
    epoch = _epoch(config, optimizer, callback)

    def train(key: Array) -> TrainResult:
        carry, xs = _start(config, optimizer, key)
        (params, _, best, best_mirrored), trace = jax.lax.scan(epoch, carry, xs)
        return _result(config, params, best, best_mirrored, trace)

    return train


def _start(config: PretrainConfig, optimizer, key: Array):
    """(carry, xs) of ``make_train``'s scan over epochs: (params, Adam state, the two checkpoints) and (epoch key,
    epoch index) per epoch."""
    k_init, k_epochs = jax.random.split(key)
    params = init_params(k_init, config)
    carry = (params, optimizer.init(params), Checkpoint.start(params), Checkpoint.start(params))
    return carry, (jax.random.split(k_epochs, config.num_epochs), jnp.arange(config.num_epochs))


def _result(config: PretrainConfig, params, best, best_mirrored, trace) -> TrainResult:
    return TrainResult(params, best, best_mirrored, jax.tree.map(lambda a: a.reshape(config.num_steps), trace))


def _epoch(config: PretrainConfig, optimizer, callback):
    """``epoch(carry, (key, index)) -> (carry, Trace of its steps)``: one sampled MRP, ``minibatches_per_epoch``
    Adam steps on its windows (Algorithm 1)."""
    mask = masks(config.d, config.a_mask)
    M, B = config.minibatches_per_epoch, config.batch_size
    grad_fn = jax.value_and_grad(td_loss, has_aux=True)
    d_t_fn = jax.vmap(kernel_diagonal_mean, in_axes=(0, None, None))

    def epoch(carry, xs):
        k, epoch_index = xs
        windows = sample_windows(k, config)

        def step(carry, j):
            params, opt_state, best, best_mirrored = carry
            mb = windows.minibatch(j * B, B)  # windows jB .. jB+B-1, consecutive
            t = epoch_index * M + j
            rho = rho_schedule(config, t)
            (loss, delta), grads = grad_fn(params, mb, config, rho)
            updates, opt_state = optimizer.update(_apply_mask(grads, mask), opt_state, params)
            params = optax.apply_updates(params, _apply_mask(updates, mask))
            v_em, a_em = v_emergence(params.V), a_emergence(params.A)
            d_t = jnp.mean(d_t_fn(windows.Z0, params.A, config.tau))  # eq. (34), this epoch's contexts
            mirrored = (v_emergence(-params.V), a_emergence(-params.A))
            record = Trace(v_em, a_em, *mirrored, d_t, loss, jnp.mean(jnp.abs(delta)), rho)
            best = best.keep_better(params, jnp.minimum(v_em, a_em), t)
            best_mirrored = best_mirrored.keep_better(params, jnp.minimum(*mirrored), t)
            return (params, opt_state, best, best_mirrored), record

        carry, records = jax.lax.scan(step, carry, jnp.arange(M))
        if callback is not None:
            jax.debug.callback(callback, epoch_index + 1,
                               {"loss": records.loss[-1], "V_em": records.V_em[-1], "A_em": records.A_em[-1]})
        return carry, records

    return epoch


class EpochLoop(NamedTuple):
    """The epoch loop between chunks (``make_chunked_train``): ``index`` () epochs run, the loop's ``carry`` (params,
    Adam state, the two checkpoints), the ``trace`` so far (a Trace of (num_epochs, minibatches_per_epoch) arrays,
    zero where no epoch ran yet) and ``xs`` (epoch keys, epoch indices) of every epoch."""

    index: Array
    carry: tuple
    trace: Trace
    xs: tuple


class ChunkedTrain(NamedTuple):
    """``make_train``'s run in three parts, so that its epochs run in chunks of one compiled program."""

    start: Callable  # (key) -> EpochLoop before the first epoch
    run: Callable  # (loop, stop) -> EpochLoop: its epochs up to ``stop`` (an int array)
    result: Callable  # (loop) -> TrainResult


def make_chunked_train(config: PretrainConfig, *, optimizer: optax.GradientTransformation | None = None
                       ) -> ChunkedTrain:
    """The parts of ``make_train(config, optimizer=optimizer)``'s ``train``: the same epochs, the same numbers
    (tests/test_training_chunks.py holds them equal), and a caller that sees the run between chunks without a host
    callback in the program (``memlab.progress``)."""
    config.validate()
    optimizer = optax.adam(config.learning_rate) if optimizer is None else optimizer
    epoch = _epoch(config, optimizer, None)

    def start(key: Array) -> EpochLoop:
        carry, xs = _start(config, optimizer, key)
        index = xs[1][0]
        shapes = jax.eval_shape(epoch, carry, (xs[0][0], index))[1]
        return EpochLoop(jnp.zeros_like(index), carry,
                         jax.tree.map(lambda s: jnp.zeros((config.num_epochs, *s.shape), s.dtype), shapes), xs)

    def run(loop: EpochLoop, stop) -> EpochLoop:
        keys, indices = loop.xs

        def next_epoch(state):
            index, carry, trace = state
            carry, records = epoch(carry, (keys[index], indices[index]))
            return index + 1, carry, jax.tree.map(lambda h, r: h.at[index].set(r), trace, records)

        return EpochLoop(*jax.lax.while_loop(lambda state: state[0] < stop, next_epoch, tuple(loop[:3])), loop.xs)

    def result(loop: EpochLoop) -> TrainResult:
        params, _, best, best_mirrored = loop.carry
        return _result(config, params, best, best_mirrored, loop.trace)

    return ChunkedTrain(start, run, result)


def train_in_chunks(training: ChunkedTrain, num_epochs: int, key: Array) -> TrainResult:
    """``training`` (``make_chunked_train``'s parts, jitted) run in chunks of epochs (``progress.training_chunks``),
    reporting the epochs done and the last step's loss, V_em and A_em between them (``progress.training_step``: only
    where a run shows its cells' progress)."""
    loop = training.start(key)
    for _, stop in training_chunks(0, num_epochs):
        loop = training.run(loop, jnp.asarray(stop))
        last = {name: np.asarray(getattr(loop.trace, field)[stop - 1, -1])
                for name, field in (("loss", "loss"), ("V_em", "V_em"), ("A_em", "A_em"))}
        training_step(stop, num_epochs, last, "epoch")
    return training.result(loop)


def train_seeds(config: PretrainConfig, key: Array) -> TrainResult:
    """``config.num_seeds`` independent runs (keys ``jax.random.split(key, num_seeds)``), vmapped and jitted.

    Every leaf of the result gains a leading (num_seeds,) axis. The jitted function is cached per config.
    """
    config.validate()
    return _vmapped_train(config)(jax.random.split(key, config.num_seeds))


@functools.lru_cache(maxsize=8)
def _vmapped_train(config: PretrainConfig):
    return jax.jit(jax.vmap(make_train(config)))

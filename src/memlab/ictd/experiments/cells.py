"""Runs of Algorithm 1 as ``ictd.pretrain`` and ``ictd.mask-relaxation`` both use them: the sweep cells and the
:class:`~.setting.Setting` stacked from them.

``train_seed`` is one run of ``train.make_train`` plus its two checkpoints and held-out errors (a sweep cell,
:class:`SeedRun`); ``evaluate_references`` the held-out errors of theta*, -theta* and the zero block
(:class:`References`).
``setting_cells`` names the cells of one training config and ``setting_from_cells`` stacks their records into a
``Setting`` (arrays with a leading seed axis).

Checkpoints: both are tracked exactly inside ``make_train``'s scan -- "best" by the paper's rule max min(V_em, A_em),
"mirror" by the mirrored rule max min(V_em(-V), A_em(-A)), first step on ties. A rule whose best score is 0 at every
step selects nothing (the paper's "first step on ties" would return the initial noise), so the end of training then
stands in for its checkpoint. Held-out errors use ``pretrain.evaluate`` on ``eval_tasks`` fresh tasks (the same tasks
for every parameter set) at the rho the training ends with.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from memlab.ictd.experiments.setting import TRACE_FIELDS, HeldOut, Setting, Traces, stack_setting
from memlab.ictd.pretrain import Params, PretrainConfig, evaluate, rho_schedule
from memlab.ictd.train import ChunkedTrain, make_chunked_train, train_in_chunks
from memlab.ictd.transformer import theta_star
from memlab.store import cell

__all__ = ["TINY_TRAIN", "Block", "Blocks", "HeldOuts", "References", "SeedRun", "evaluate_references",
           "setting_cells", "setting_from_cells", "train_seed"]

TINY_TRAIN = dict(m=16, n=5, batch_size=16, minibatches_per_epoch=2, num_epochs=30, num_seeds=2)  # tiny profiles


@functools.lru_cache(maxsize=32)
def _jitted_train(config: PretrainConfig) -> ChunkedTrain:
    """``make_train(config)`` in jitted parts, trained in chunks of epochs (``ictd.train.train_in_chunks``)."""
    return ChunkedTrain(*map(jax.jit, make_chunked_train(config)))


@functools.lru_cache(maxsize=8)
def _jitted_evaluate(config: PretrainConfig, num_tasks: int):
    return jax.jit(lambda params, key, rho: evaluate(params, config, key, num_tasks, rho=rho))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Block:
    """One parameter set of the block: V, A (d+3, d+3) (arrays; nested lists from a stored record)."""

    V: np.ndarray
    A: np.ndarray


@dataclasses.dataclass(frozen=True, kw_only=True)
class Blocks:
    """The block at the end of training (final) and at the two checkpoints (best: the paper's rule; mirror)."""

    final: Block
    best: Block
    mirror: Block


@dataclasses.dataclass(frozen=True, kw_only=True)
class HeldOuts:
    """The held-out errors (``setting.HeldOut``, floats) of the three parameter sets of :class:`Blocks`."""

    final: HeldOut
    best: HeldOut
    mirror: HeldOut


@dataclasses.dataclass(frozen=True, kw_only=True)
class SeedRun:
    """One run of Algorithm 1 (``train_seed``): trace (``setting.Traces``, (T,) each); best_step / best_score and
    mirror_step / mirror_score after the stand-in of the module docstring; scan_best_step (make_train's own pick);
    params: :class:`Blocks`; eval: :class:`HeldOuts` at the rho training ends with."""

    trace: Traces
    best_step: int
    best_score: float
    scan_best_step: int
    mirror_step: int
    mirror_score: float
    params: Blocks
    eval: HeldOuts


@dataclasses.dataclass(frozen=True, kw_only=True)
class References:
    """Held-out errors (``setting.HeldOut``) of theta* (eq. 15), its mirror -theta* and the zero block, stored under
    "theta*", "-theta*" and "zero"."""

    theta_star: HeldOut = dataclasses.field(metadata={"stored_as": "theta*"})
    minus_theta_star: HeldOut = dataclasses.field(metadata={"stored_as": "-theta*"})
    zero: HeldOut

    def by_name(self) -> dict[str, HeldOut]:
        """{"theta*", "-theta*", "zero"} -> its held-out errors."""
        return {"theta*": self.theta_star, "-theta*": self.minus_theta_star, "zero": self.zero}


def _errors(config: PretrainConfig, params: Params, eval_key, eval_tasks: int) -> HeldOut:
    e = _jitted_evaluate(config, eval_tasks)(params, eval_key, rho_schedule(config, config.num_steps - 1))
    return HeldOut(float(e.abs_td_error), float(e.abs_value_error))


@cell("ictd.pretrain-seed", result=SeedRun)
def train_seed(config: PretrainConfig, key, eval_key, eval_tasks: int) -> SeedRun:
    """One run of Algorithm 1 (``make_train``, in chunks of epochs that report their progress) with its two
    checkpoints and held-out errors (:class:`SeedRun`)."""
    result = jax.block_until_ready(train_in_chunks(_jitted_train(config), config.num_epochs, key))
    last = config.num_steps - 1

    def pick(ckpt):  # a rule whose best score is 0 selects nothing: the end of training stands in
        score = float(ckpt.score)
        return (int(ckpt.step), score, ckpt.params) if score > 0 else (last, score, result.params)

    best_step, best_score, best = pick(result.best)
    mirror_step, mirror_score, mirror = pick(result.best_mirrored)
    params = {"final": result.params, "best": best, "mirror": mirror}
    return SeedRun(
        trace=Traces(**{name: np.asarray(getattr(result.trace, name)) for name in TRACE_FIELDS}),
        best_step=best_step, best_score=best_score, scan_best_step=int(result.best.step),
        mirror_step=mirror_step, mirror_score=mirror_score,
        params=Blocks(**{name: Block(V=np.asarray(p.V), A=np.asarray(p.A)) for name, p in params.items()}),
        eval=HeldOuts(**{name: _errors(config, p, eval_key, eval_tasks) for name, p in params.items()}),
    )


@cell("ictd.pretrain-references", result=References)
def evaluate_references(config: PretrainConfig, eval_key, eval_tasks: int) -> References:
    """Held-out errors of theta* (eq. 15), its mirror -theta* and the zero block, on the learned runs' tasks."""
    V, A = theta_star(config.d)
    return References(theta_star=_errors(config, Params(V, A), eval_key, eval_tasks),
                      minus_theta_star=_errors(config, Params(-V, -A), eval_key, eval_tasks),
                      zero=_errors(config, Params(jnp.zeros_like(V), jnp.zeros_like(A)), eval_key, eval_tasks))


def setting_cells(config: PretrainConfig, slug: str, seed_keys, eval_key, eval_tasks: int) -> dict:
    """Sweep cells of one training config: ``<slug>-seed=<s>`` (``train_seed`` with ``seed_keys[s]``) for every seed
    and ``<slug>-references`` (``evaluate_references``); every cell evaluates on the tasks of ``eval_key``."""
    cells = {f"{slug}-seed={s}": functools.partial(train_seed, config, seed_keys[s], eval_key, eval_tasks)
             for s in range(config.num_seeds)}
    cells[f"{slug}-references"] = functools.partial(evaluate_references, config, eval_key, eval_tasks)
    return cells


def setting_from_cells(label: str, config: PretrainConfig, slug: str, results: Mapping,
                       seconds: Mapping | None = None) -> Setting:
    """The Setting of the cells of ``setting_cells(config, slug, ...)`` from a sweep's results (``seconds``: the
    compute time of each cell by name, e.g. ``Run.cells.seconds``; missing ones count as NaN)."""
    names = [f"{slug}-seed={s}" for s in range(config.num_seeds)]
    times = [(seconds or {}).get(name) for name in names]
    return stack_setting(label, config, [results[name] for name in names], results[f"{slug}-references"].by_name(),
                         [np.nan if t is None else t for t in times])

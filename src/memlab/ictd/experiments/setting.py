"""The seeds of one Algorithm 1 training config, stacked: :class:`Setting` (traces and checkpoints with a leading seed
axis, from the records of ``cells.train_seed``) and :class:`View`, the paper's or the mirrored emergence scores of a
setting as the figures use them (training converges to the mirror image of theta*, see ``pretrain``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from memlab.ictd.pretrain import PretrainConfig

__all__ = ["FORMS", "TRACE_FIELDS", "Checkpoint", "HeldOut", "Setting", "Traces", "View", "first_last_dt", "make_view",
           "stack_setting"]

TRACE_FIELDS = ("V_em", "A_em", "V_em_neg", "A_em_neg", "d_t", "abs_delta", "loss")
FORMS = {"paper": ("V_em", "A_em"), "mirrored": ("V_em_neg", "A_em_neg")}  # score form -> trace fields


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """Held-out errors (``pretrain.evaluate``): mean |TD error| and mean |value error|, (S,) per seed for a learned
    checkpoint, floats for a reference parameter set."""

    abs_td_error: np.ndarray | float
    abs_value_error: np.ndarray | float


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of every seed: step (S,) the training step; score (S,) the value of its rule (None for the end
    of training, which no rule picks); V, A (S, d+3, d+3) the block; heldout: ``HeldOut`` (S,)."""

    step: np.ndarray
    score: np.ndarray | None
    V: np.ndarray
    A: np.ndarray
    heldout: HeldOut


@dataclasses.dataclass(frozen=True)
class Traces:
    """Per seed and training step (S, T), as ``make_train`` records them: the paper's emergence scores V_em, A_em
    (eq. 109-111), the mirrored V_em(-V), A_em(-A), the kernel diagonal mean d_t (eq. 34, at rho = 0), the mini-batch's
    mean |delta| and loss."""

    V_em: np.ndarray
    A_em: np.ndarray
    V_em_neg: np.ndarray
    A_em_neg: np.ndarray
    d_t: np.ndarray
    abs_delta: np.ndarray
    loss: np.ndarray


@dataclasses.dataclass(frozen=True)
class Setting:
    """All S seeds of one training config, stacked: trace ``Traces``; final, best (paper rule), mirror (mirrored
    rule): ``Checkpoint``; scan_best_step (S,) make_train's own paper-rule pick (first step on ties, also when the
    score is 0); references name -> ``HeldOut`` of theta*, -theta*, the zero block; seconds (S,) compute time per seed
    cell (NaN if unknown)."""

    label: str
    config: PretrainConfig
    trace: Traces
    final: Checkpoint
    best: Checkpoint
    mirror: Checkpoint
    scan_best_step: np.ndarray
    references: dict[str, HeldOut]
    seconds: np.ndarray

    def checkpoints(self) -> dict[str, Checkpoint]:
        """name -> checkpoint, in the order of the tables: final, best, mirror."""
        return {"final": self.final, "best": self.best, "mirror": self.mirror}

    def of_form(self, form: str) -> Checkpoint:
        """The checkpoint chosen by the rule of score form "paper" (best) or "mirrored" (mirror)."""
        return self.best if form == "paper" else self.mirror


def _checkpoint(records: list, name: str, step, score) -> Checkpoint:
    """Checkpoint ``name`` of every seed's ``cells.SeedRun``."""
    blocks, errors = [getattr(r.params, name) for r in records], [getattr(r.eval, name) for r in records]
    return Checkpoint(step, score, np.array([b.V for b in blocks]), np.array([b.A for b in blocks]),
                      HeldOut(np.array([e.abs_td_error for e in errors]),
                              np.array([e.abs_value_error for e in errors])))


def stack_setting(label: str, config: PretrainConfig, records: list, references: dict[str, HeldOut], seconds
                  ) -> Setting:
    """A Setting from the ``cells.SeedRun`` of every seed (in seed order) and the references' held-out errors by
    name (``cells.References.by_name``)."""
    stack = lambda key: np.array([getattr(r, key) for r in records])  # noqa: E731
    return Setting(
        label=label, config=config,
        trace=Traces(**{f: np.array([getattr(r.trace, f) for r in records]) for f in TRACE_FIELDS}),
        final=_checkpoint(records, "final", np.full(len(records), config.num_steps - 1), None),
        best=_checkpoint(records, "best", stack("best_step"), stack("best_score")),
        mirror=_checkpoint(records, "mirror", stack("mirror_step"), stack("mirror_score")),
        scan_best_step=stack("scan_best_step"), references=references, seconds=np.asarray(seconds, float))


@dataclasses.dataclass(frozen=True)
class View:
    """One score form of one setting, as the figures use it. Arrays (S, T); stop (S,) = last plotted step per seed."""

    title: str
    V_em: np.ndarray
    A_em: np.ndarray
    d_t: np.ndarray
    stop: np.ndarray
    n: int  # context length (uniform attention has d_t = 1/n)



def make_view(setting: Setting, form: str) -> View:
    """The paper's or the mirrored scores of ``setting``; Fig. 5 truncation at that form's checkpoint (the end of
    training for a seed whose best score is 0, see ``train_seed``)."""
    v_name, a_name = FORMS[form]
    what = "paper scores V_em, A_em" if form == "paper" else "mirrored scores V_em(−V), A_em(−A)"
    return View(f"{setting.label}: {what}", getattr(setting.trace, v_name), getattr(setting.trace, a_name),
                setting.trace.d_t, setting.of_form(form).step, setting.config.n)


def first_last_dt(setting: Setting, window: int) -> tuple[float, float]:
    """Seed-mean d_t over the first ``window`` steps and over the last 10 % of steps."""
    d_t = setting.trace.d_t
    return float(d_t[:, :window].mean()), float(d_t[:, -max(1, d_t.shape[1] // 10):].mean())

"""``arena.mqar-zoology`` -- MQAR at the configuration Zoology publishes, memlab's accuracies beside the published
ones: the arena's layers trained on Zoology's smallest figure-2 setting (vocabulary 8,192, sequence length 64, 4
key-value pairs, model width 64, two blocks) with Zoology's recipe (``experiments.mqar_train``), each at Zoology's
four learning rates, the best reported, as Zoology's figure 2 reports the best of four.

What the arena's model keeps of its own (the differences a reader must weigh against the published numbers): each
block is the arena's pre-norm mixer + MLP (Zoology's figure-2 blocks have no MLP, ``state_mixer`` Identity);
attention has rotary positions (Zoology: learned absolute positions, dropout 0.1 on the embedding); every layer is
memlab's own implementation (Zoology's later sweeps put a short BaseConv in front of every mixer; none here), and
gated DeltaNet runs twice, without and with the short convolution of its authors' code, which Zoology's runs keep
(``gated-deltanet-conv``, the ablation; the summary lists how else memlab's layer differs from upstream's); the head is
untied, over the values only (Zoology ties it to the embedding, over all tokens); one training run
per learning rate and seed; fresh sequences every step. The paper profile runs Zoology's budget (64 epochs of 100,000
sequences at batch 512: 12,500 steps), more than a 2-core CPU affords; ``paper-restricted`` runs 2,000 of them (its
budget curves show whether the accuracy has levelled off).
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import numpy as np

from memlab import plots
from memlab.arena.experiments.mqar_levels import Levels, band, levels, span
from memlab.arena.experiments.mqar_published import PUBLISHED
from memlab.arena.experiments.mqar_train import MQARAccuracy, ZoologyTraining, mqar_accuracy
from memlab.arena.layers import LAYERS
from memlab.checks import check_choices, check_int
from memlab.files import summary_text
from memlab.runner import Experiment, Run
from memlab.store import CHECKPOINT

SUMMARY = summary_text(__package__, "mqar_zoology")

ZOOLOGY_LRS = (1e-4, 4.6416e-4, 2.1544e-3, 1e-2)  # np.logspace(-4, -2, 4), Zoology's figure-2 sweep


@dataclasses.dataclass(frozen=True)
class MQARZoologyConfig:
    """The task (``vocab_size``, ``num_pairs``; the length is ``train.length``), the model (``width``, ``depth``),
    the ``layers``, the ``learning_rates`` each is trained at, ``seeds`` per rate and the held-out batch."""

    seed: int = 0
    vocab_size: int = 8192
    num_pairs: int = 4
    # gated DeltaNet twice: as the arena runs it, and with the short convolution Zoology's runs give it
    layers: tuple[str, ...] = ("attention", "mamba", "gated-deltanet", "gru", "lru", "s5", "gated-deltanet-conv")
    width: int = 64
    depth: int = 2
    learning_rates: tuple[float, ...] = ZOOLOGY_LRS
    seeds: int = 1
    train: ZoologyTraining = ZoologyTraining()
    test_batch: int = 3000

    def validate(self) -> None:
        check_choices("layers", self.layers, LAYERS)
        for name in ("vocab_size", "num_pairs", "width", "depth", "seeds", "test_batch"):
            check_int(name, getattr(self, name))
        if not self.learning_rates:
            raise ValueError("learning_rates must hold at least one rate")
        self.train.validate()


def _name(layer: str, lr: float) -> str:
    return f"{layer}.lr={lr:g}"


def sweep_cells(cfg: MQARZoologyConfig, run: Run) -> dict[str, partial]:
    """Cell '<layer>.lr=<rate>': the layer's seeds at one learning rate (keys from ('train', layer): every rate
    starts from the same initialisations and sees the same batches); every cell is scored on one held-out batch."""
    def cell(m, lr):
        return partial(mqar_accuracy, m, cfg.vocab_size, cfg.num_pairs, cfg.width, cfg.depth,
                       dataclasses.replace(cfg.train, learning_rate=lr),
                       jax.random.split(run.key_for("train", m), cfg.seeds), run.key_for("test"), cfg.test_batch,
                       checkpoint=CHECKPOINT)

    return {_name(m, lr): cell(m, lr) for m in cfg.layers for lr in cfg.learning_rates}


@dataclasses.dataclass(frozen=True)
class LayerAccuracy:
    """One layer: ``accuracy`` (rates,) mean over seeds at each learning rate; ``best`` the rate with the highest;
    ``curve`` (evaluations,) its held-out accuracy during training (mean over seeds; NaN after it stopped);
    ``steps`` the mean steps it trained; ``parameters``, ``state`` as in :class:`MQARAccuracy`."""

    accuracy: list[float]
    best: float
    curve: list[float]
    steps: float
    parameters: int
    state: int


def _mean_over_seeds(curves) -> np.ndarray:
    """(seeds, evaluations) -> the mean of the seeds that were still training at each evaluation (NaN after all
    stopped), without numpy's warning about empty slices."""
    curves = np.asarray(curves, float)
    running = np.isfinite(curves).sum(0)
    return np.where(running > 0, np.nansum(curves, 0) / np.maximum(running, 1), np.nan)


def analyse(cfg: MQARZoologyConfig, cells: dict[str, MQARAccuracy]) -> dict[str, LayerAccuracy]:
    out = {}
    for m in cfg.layers:
        runs = [cells[_name(m, lr)] for lr in cfg.learning_rates]
        accuracy = [float(np.mean(r.accuracy)) for r in runs]
        i = int(np.argmax(accuracy))
        out[m] = LayerAccuracy(accuracy, cfg.learning_rates[i], _mean_over_seeds(runs[i].eval_accuracy).tolist(),
                               float(np.mean(runs[i].steps)), runs[i].parameters, runs[i].state)
    return out


def _figure(cfg: MQARZoologyConfig, result: dict[str, LayerAccuracy], run: Run) -> None:
    fig, (left, middle, right) = plots.figure(1, 3, width=13.5, height=3.6)
    steps = cfg.train.eval_every * (1 + np.arange(cfg.train.steps // cfg.train.eval_every))
    for m, r in result.items():
        left.plot(steps, r.curve, marker="o", ms=3, label=f"{m} (lr {r.best:g})")
        middle.plot(cfg.learning_rates, r.accuracy, marker="o", ms=3, label=m)
    left.set(xlabel="training steps", ylabel="held-out accuracy", title="budget curve at each layer's best rate",
             ylim=(-0.02, 1.02))
    middle.set(xscale="log", xlabel="peak learning rate", ylabel="held-out accuracy when training ended",
               title="accuracy against learning rate", ylim=(-0.02, 1.02))
    plots.legend_outside(left, fontsize=7)
    _beside_published(right, result, cfg.train.length, cfg.width)
    run.save_figure(fig, "mqar_zoology.png")


def _beside_published(ax, result: dict[str, LayerAccuracy], length: int, width: int) -> None:
    """memlab's best accuracy per layer as bars, the published accuracy (a range where it is read off a curve over
    state sizes) as a black mark: filled where it is this setting (Zoology's Fig. 2), hollow where another."""
    names = list(result)
    y = np.arange(len(names))
    ax.barh(y, [max(result[m].accuracy) for m in names], height=0.6, color="tab:blue", alpha=0.6,
            label="memlab (best rate)")
    drawn = set()  # which kinds of published mark the panel shows: this setting (True), another (False)
    for i, m in enumerate(names):
        p = PUBLISHED.get(m)
        if p is None or p.low is None:
            continue
        style = {"color": "black", "mfc": "black" if p.this_setting else "white", "marker": "D", "ms": 5}
        ax.plot([p.low, p.high], [i, i], lw=2, **style)
        drawn.add(p.this_setting)
    if True in drawn:
        ax.plot([], [], "kD", ms=5, label="published, Zoology Fig. 2 (this setting)")
    if False in drawn:
        ax.plot([], [], "kD", mfc="white", ms=5, label="published, a mixed test set (other setting)")
    ax.set(yticks=y, yticklabels=names, xlim=(0, 1.02), xlabel="held-out accuracy", ylim=(len(names) - 0.5, -0.5),
           title=f"beside the published (L {length}, width {width})")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.4, -0.18))


def _claims(cfg: MQARZoologyConfig, result: dict[str, LayerAccuracy], run: Run) -> None:
    if "attention" in result:
        r, published = result["attention"], PUBLISHED["attention"]
        run.claim("attention-solves-mqar", f"two blocks of softmax attention at width {cfg.width} solve MQAR "
                  f"(V {cfg.vocab_size}, L {cfg.train.length}, K {cfg.num_pairs}): held-out accuracy at least the "
                  f"{published.low:.2f} read off Zoology's figure", "Zoology (Arora et al. 2023), Fig. 2: attention "
                  f"{published.text()} at L = 64, d_model = 64 (read off)",
                  f"{max(r.accuracy):.3f} (lr {r.best:g}, {r.steps:.0f} steps)", bool(max(r.accuracy) >= published.low))
    if {"gated-deltanet", "gated-deltanet-conv"} <= set(result):
        plain, conv = (max(result[m].accuracy) for m in ("gated-deltanet", "gated-deltanet-conv"))
        run.claim("gated-deltanet-solves-without-short-conv", f"gated DeltaNet passes {cfg.train.stop_at:g} held-out "
                  "accuracy at its best rate without the short convolution (and its silu) Zoology's runs give it, as "
                  "it does with them", "memlab's ablation",
                  f"without: {_how_well(result['gated-deltanet'], cfg)}; with: "
                  f"{_how_well(result['gated-deltanet-conv'], cfg)}", bool(min(plain, conv) > cfg.train.stop_at),
                  by="memlab")
    lv = levels(result, cfg.train.eval_every, cfg.train.stop_at)
    waited = ("no layer rose out of a level stretch" if lv.broke is None else
              f"the longest level stretch a layer rose out of: {lv.broke[0]}, steps {span(lv.broke[1])}")
    run.claim("accuracy-levelled-off", f"the budget of {cfg.train.steps} steps suffices: at its best rate every "
              f"layer passed {cfg.train.stop_at:g} accuracy, or ended level (its evaluations within a band 0.02 wide) "
              "for longer than any layer stayed level before it rose out of the level",
              "memlab (a restricted budget must show it has levelled off)",
              "; ".join(f"{m} level over steps {span(s)}" for m, s in lv.unsolved.items()) + f"; {waited}",
              all(lv.outlasted.values()), by="memlab")


def _how_well(r: LayerAccuracy, cfg: MQARZoologyConfig) -> str:
    """A layer's best accuracy, its rate and steps, and at how many rates it passed ``stop_at``."""
    solved = sum(a > cfg.train.stop_at for a in r.accuracy)
    return (f"{max(r.accuracy):.3f} (lr {r.best:g}, {r.steps:.0f} steps; past {cfg.train.stop_at:g} at {solved} of "
            f"{len(r.accuracy)} rates)")


def _comparison(cfg: MQARZoologyConfig, result: dict[str, LayerAccuracy]) -> str:
    """What the run says about the published numbers, in sentences made from its results."""
    said = []
    if {"gated-deltanet", "gated-deltanet-conv"} <= set(result):
        said.append(f"Without the convolution gated DeltaNet's best held-out accuracy is "
                    f"{_how_well(result['gated-deltanet'], cfg)}, with it "
                    f"{_how_well(result['gated-deltanet-conv'], cfg)}.")
    if "attention" in result:
        said.append(f"Attention, with every difference of the block and the recipe listed below, reaches "
                    f"{_how_well(result['attention'], cfg)} against Zoology's {PUBLISHED['attention'].text()}.")
    if "mamba" in result:
        said.append(f"Mamba's {_how_well(result['mamba'], cfg)} cannot be held against the published "
                    f"{PUBLISHED['mamba'].text()}: that figure averages test sets of up to 256 pairs in 1,024 tokens "
                    f"after training on a mixture of lengths, and no Mamba number is published at this setting.")
    return " ".join(said) or "(The layers compared with a published number did not run.)"


def _shorter(lv: Levels) -> str:
    return f": shorter than {lv.broke[0]}'s level stretch, so more steps may still help"


def _levels_text(cfg: MQARZoologyConfig, result: dict[str, LayerAccuracy]) -> str:
    """How long each layer stayed level against the level stretch one layer broke out of, in sentences."""
    lv, every = levels(result, cfg.train.eval_every, cfg.train.stop_at), cfg.train.eval_every
    if not lv.unsolved:
        return f"Every layer passed {cfg.train.stop_at:g}."
    said = []
    if lv.broke is not None:
        m, stretch = lv.broke
        curve = [a for a in result[m].curve if np.isfinite(a)]
        said.append(f"A level curve is not a finished one: {m} stayed within a band 0.02 wide over steps "
                    f"{span(stretch)} (accuracy {band(curve, stretch, every)}), then rose out of it and reached "
                    f"{curve[-1]:.3f} at step {every * len(curve):,}.")
    said.append("The layers that did not pass " + f"{cfg.train.stop_at:g} ended level over steps " + "; ".join(
        f"{span(s)} ({m}, {max(result[m].accuracy):.3f}{_shorter(lv) if not lv.outlasted[m] else ''})"
        for m, s in lv.unsolved.items()) + f". One in K = {cfg.num_pairs} is {1 / cfg.num_pairs:.2f}: what naming "
        "one of the sequence's values at random scores.")
    return " ".join(said)


def _table(cfg: MQARZoologyConfig, result: dict[str, LayerAccuracy], run: Run) -> str:
    rates = [f"lr {lr:g}" for lr in cfg.learning_rates]
    rows = [(m, max(r.accuracy), r.best, r.steps, *r.accuracy, r.parameters, r.state,
             *((PUBLISHED[m].text(), PUBLISHED[m].source) if m in PUBLISHED else ("", "")))
            for m, r in result.items()]
    return run.save_table("mqar_zoology.csv", ["layer", "memlab accuracy (best rate)", "best rate", "steps trained",
                                               *rates, "parameters", "state", "published accuracy", "source"],
                          rows, {"memlab accuracy (best rate)": ".3f", "best rate": "g", "steps trained": ".0f",
                                 **dict.fromkeys(rates, ".3f")})


def run_mqar_zoology(cfg: MQARZoologyConfig, run: Run) -> dict[str, LayerAccuracy]:
    result = analyse(cfg, run.sweep(sweep_cells(cfg, run), "train layers at each learning rate"))
    _figure(cfg, result, run)
    _claims(cfg, result, run)
    tc = cfg.train
    run.write_summary(SUMMARY.format(vocab=cfg.vocab_size, length=tc.length, pairs=cfg.num_pairs, width=cfg.width,
                                     depth=cfg.depth, steps=tc.steps, batch=tc.batch, eval_every=tc.eval_every,
                                     rates=", ".join(f"{lr:g}" for lr in cfg.learning_rates), seeds=cfg.seeds,
                                     test_batch=cfg.test_batch, stop_at=tc.stop_at, wd=tc.weight_decay,
                                     comparison=_comparison(cfg, result), levels=_levels_text(cfg, result),
                                     table=_table(cfg, result, run)))
    return result


# seconds: a vocabulary of 32, 2 pairs in 16 tokens, one layer at width 8, 20 steps
TINY = MQARZoologyConfig(vocab_size=32, num_pairs=2, layers=("gru",), width=8, learning_rates=(3e-3,),
                         train=ZoologyTraining(steps=20, batch=8, length=16, eval_every=10), test_batch=32)

# Zoology's figure-2 setting at its smallest (L 64, K 4, d_model 64, 2 layers) and its whole budget: 64 epochs of
# 100,000 sequences at batch 512 (12,500 steps), four learning rates, stopped past 0.99 held-out accuracy
PAPER = MQARZoologyConfig()

# Zoology's setting with 2,000 of its 12,500 steps (an Adam step of batch 512 costs 0.5-3 s on one core here)
PAPER_RESTRICTED = dataclasses.replace(PAPER, train=dataclasses.replace(PAPER.train, steps=2000, eval_every=200))

# Zoology's whole budget for GRU at 1e-2 only: whether GRU's plateau at ≈ 0.25 (the accuracy of naming one of the 4
# values the sequence holds) lasts, where gated DeltaNet's broke after 1,000 steps at this rate (the paper profile's
# cell: a later paper run adopts it)
PAPER_PLATEAU = dataclasses.replace(PAPER, layers=("gru",), learning_rates=(1e-2,))

EXPERIMENTS = [
    Experiment(
        "arena.mqar-zoology", "Zoology Fig. 2", "arena", "MQAR at Zoology's configuration, accuracy beside the "
        "published numbers",
        # quick is tiny: `make reproduce` runs every quick profile, and this experiment's numbers are the paper
        # profiles' (hours of one core)
        {"tiny": TINY, "quick": TINY, "paper": PAPER, "paper-restricted": PAPER_RESTRICTED,
         "paper-plateau": PAPER_PLATEAU},
        run_mqar_zoology),
]

"""``recall.context-limit``: Proposition 4.2 made visible on a trained two-layer S6 student.

For a few fixed test pairs (nu, q) the finite-context regression function

    F^(T)(nu, q) = E[ M^(T)(iota_in(q), iota_ctx(X_1), ..., iota_ctx(X_T), iota_out(q)) ],  X_t ~ nu i.i.d.

is estimated by Monte Carlo for growing T; Proposition 4.2 says it converges (|F^(T) - F| <= 2 R L_G r^T)
when the context-processing map Psi is an r-contraction (Assumption 4.1). Two measurements of r:

* ``per-step bound``: the largest one-step decay exp(Delta_t,d A_d,n) of each S6 layer's state over the
  context tokens the student actually sees — the Lipschitz constant of that layer's state map h -> M(u) h + N u
  (M is diagonal). The stacked map of Assumption 4.1 also carries the depthwise-conv buffers (a shift register,
  exactly forgotten after d_conv - 1 tokens) and the cross-layer coupling, which is block-triangular, so its
  asymptotic contraction rate is set by these diagonal blocks;
* ``coupling rate``: two copies of the chain started from different states (different context prefixes) and
  driven by the same tokens; the distance of the last block's outputs decays like r_eff^t, and r_eff is read
  off a least-squares fit of log distance on t (the coupling argument of the proof, App. B).
"""

from __future__ import annotations

import dataclasses
import io

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from memlab import plots
from memlab.recall.encoding import encode
from memlab.recall.runs import STUDENTS, make_student, train_cell, validation_set
from memlab.recall.task import RecallTask, sample, sample_context
from memlab.recall.train import TrainConfig
from memlab.runner import Experiment, Run, atomic_write_bytes


@dataclasses.dataclass(frozen=True)
class ContextLimitConfig:
    seed: int = 0
    alpha: float = 1.0
    train_context_length: int = 5000
    num_train: int = 64
    num_val: int = 500
    epochs: int = 30
    student: str = "mamba-2"
    eval_lengths: tuple[int, ...] = (10, 30, 100, 300, 1000, 3000, 10000, 30000)
    num_pairs: int = 6  # test pairs (nu, q)
    num_mc: int = 64  # context samples per pair and T
    coupling_length: int = 3000
    num_couplings: int = 16


def _student(cfg: ContextLimitConfig, task: RecallTask, run: Run):
    """Train (or load) the student; returns (model, training record)."""
    template = make_student(cfg.student, task.tag_array.shape[1], jax.random.key(0))
    path = run.out_dir / "student.eqx"
    trained = {}

    def compute():
        record, models = train_cell(task, cfg.num_train, cfg.student, TrainConfig(epochs=cfg.epochs),
                                    validation_set(task, cfg.num_val, cfg.seed), 1, cfg.seed)
        trained["model"] = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, models)
        buf = io.BytesIO()
        eqx.tree_serialise_leaves(buf, trained["model"])
        atomic_write_bytes(path, buf.getvalue())
        return record

    if not path.exists() and (run.out_dir / "cells" / "train.json").exists():
        (run.out_dir / "cells" / "train.json").unlink()  # the model file is gone: retrain
    record = run.cell("train", compute)
    model = trained["model"] if "model" in trained else eqx.tree_deserialise_leaves(path, template)
    return model, record


def _finite_context_values(model, pairs, task: RecallTask, length: int, num_mc: int, key) -> tuple[np.ndarray, np.ndarray]:
    """Monte-Carlo F^(T) for each pair: (mean (P,), standard error (P,)) over ``num_mc`` contexts of length T."""
    tags = jnp.asarray(task.tag_array, jnp.float32)

    @eqx.filter_jit
    def one_pair(model, pmf, query, key):
        def one_context(k):
            ctx_tags, content = sample_context(k, pmf, tags, length, task)
            return model(encode(query, ctx_tags, content))

        return jax.lax.map(one_context, jax.random.split(key, num_mc), batch_size=min(num_mc, 16))

    outs = np.stack([np.asarray(one_pair(model, pairs.pmf[p], pairs.query[p], jax.random.fold_in(key, p)))
                     for p in range(pairs.y.shape[0])])
    return outs.mean(1), outs.std(1, ddof=1) / np.sqrt(num_mc)


def _coupling(model, pairs, task: RecallTask, length: int, num: int, key) -> np.ndarray:
    """Mean distance (t,) of the last block's output between chains started from different states, same tokens.

    Chain 1 reads a prefix from pair 0's measure, chain 2 a prefix from pair 1's measure (so their states differ),
    then both read the same ``length`` tokens from pair 0's measure; the distance is taken at every shared step.
    """
    tags = jnp.asarray(task.tag_array, jnp.float32)
    prefix = min(length, 500)

    @eqx.filter_jit
    def one(model, k):
        k1, k2, k3 = jax.random.split(k, 3)
        shared = sample_context(k3, pairs.pmf[0], tags, length, task)
        seqs = []
        for kp, p in ((k1, 0), (k2, 1)):
            pre = sample_context(kp, pairs.pmf[p], tags, prefix, task)
            seq_tags = jnp.concatenate([pre[0], shared[0]])
            seq_content = jnp.concatenate([pre[1], shared[1]])
            seqs.append(model.features(encode(pairs.query[0], seq_tags, seq_content))[1 + prefix: 1 + prefix + length])
        return jnp.linalg.norm(seqs[0] - seqs[1], axis=-1)

    return np.mean([np.asarray(one(model, k)) for k in jax.random.split(key, num)], axis=0)


def _per_step_bound(model, pairs, task: RecallTask, key, length: int = 1000) -> list[float]:
    """Largest exp(Delta A) of each block's state over the context tokens of one sampled context per pair."""
    tags = jnp.asarray(task.tag_array, jnp.float32)

    @eqx.filter_jit
    def largest_decay(model, pmf, query, k):
        _, mixer_inputs = model.trace(encode(query, *sample_context(k, pmf, tags, length, task)))
        return jnp.stack([
            # context tokens only; A < 0, so max_n A_dn is each channel's slowest mode
            jnp.exp(jnp.max(block.ssm_inputs(x)["delta"][1:-1] * jnp.max(block.A, axis=1)[None, :]))
            for block, x in zip(model.blocks, mixer_inputs)])

    per_pair = [largest_decay(model, pairs.pmf[p], pairs.query[p], jax.random.fold_in(key, p))
                for p in range(pairs.y.shape[0])]
    return np.max(np.stack(per_pair), axis=0).tolist()


def run_context_limit(cfg: ContextLimitConfig, run: Run) -> dict:
    if cfg.student not in ("mamba-1", "mamba-2"):
        raise ValueError(f"context-limit needs an S6 student ('mamba-1' or 'mamba-2'); got {cfg.student!r}")
    lengths = sorted(cfg.eval_lengths)
    if len(lengths) < 3:
        raise ValueError(f"need at least three eval_lengths; got {lengths}")
    task = RecallTask(alpha=cfg.alpha, context_length=cfg.train_context_length)
    model, record = _student(cfg, task, run)
    pairs = sample(jax.random.fold_in(jax.random.key(cfg.seed), 777), cfg.num_pairs, task)
    key = jax.random.fold_in(jax.random.key(cfg.seed), 778)

    values = {}
    with run.progress(len(lengths), "F^(T) by Monte Carlo") as advance:
        for T in lengths:
            values[T] = run.cell(f"T={T}", lambda T=T: dict(zip(("mean", "stderr"), map(
                np.ndarray.tolist, _finite_context_values(model, pairs, task, T, cfg.num_mc, jax.random.fold_in(key, T))))))
            advance()
    mean = np.array([values[T]["mean"] for T in lengths])  # (len, P)
    stderr = np.array([values[T]["stderr"] for T in lengths])
    coupling = np.array(run.cell("coupling", lambda: {"distance": _coupling(
        model, pairs, task, cfg.coupling_length, cfg.num_couplings, jax.random.fold_in(key, 1))})["distance"])
    bounds = run.cell("per-step-bound", lambda: {"r": _per_step_bound(model, pairs, task, jax.random.fold_in(key, 2))})["r"]

    # coupling rate: least squares of log distance on t over the range where it is above float32 noise
    t = np.arange(1, len(coupling) + 1)
    usable = coupling > 1e-5 * coupling[0]
    if usable.sum() >= 10:
        slope, intercept = np.polyfit(t[usable], np.log(coupling[usable]), 1)
        r_eff = float(np.exp(slope))
    else:
        r_eff = intercept = float("nan")

    dev = np.abs(mean - mean[-1])  # |F^(T) - F^(T_max)|
    run.save_csv("finite_context.csv", ["T", "pair", "F_T", "stderr", "target_F_star", "query_tag"],
                 [(T, p, mean[i, p], stderr[i, p], float(pairs.y_clean[p]), float(pairs.query[p, 0]))
                  for i, T in enumerate(lengths) for p in range(cfg.num_pairs)])
    run.save_csv("coupling.csv", ["t", "mean_distance"], zip(t.tolist(), coupling.tolist()))

    fig, axes = plots.figure(1, 3, width=13.0, height=3.6)
    for p in range(cfg.num_pairs):
        axes[0].errorbar(lengths, mean[:, p], yerr=2 * stderr[:, p], marker="o", ms=3, color=f"C{p}", capsize=2)
        axes[0].axhline(float(pairs.y_clean[p]), color=f"C{p}", ls=":", lw=0.8)
    axes[0].set(xscale="log", xlabel="context length T", ylabel="F^(T)(ν, q)",
                title="Monte-Carlo F^(T) per test pair (± 2 s.e.);\ndotted: target F*(ν, q)")
    scale = np.maximum(2 * stderr[:-1].mean(1), 1e-12)
    axes[1].plot(lengths[:-1], dev[:-1].mean(1), "o-", label="mean over pairs")
    axes[1].plot(lengths[:-1], scale, "k:", label="2 × MC s.e.")
    axes[1].axvline(cfg.train_context_length, color="0.5", ls="--", lw=0.8, label="training T")
    axes[1].set(xscale="log", yscale="log", xlabel="context length T", ylabel=f"|F^(T) − F^(T={lengths[-1]})|",
                title="convergence in T (Prop. 4.2)")
    axes[1].legend()
    axes[2].plot(t, coupling, label="mean distance")
    if np.isfinite(r_eff):
        axes[2].plot(t, np.exp(intercept) * r_eff**t, "k--", lw=0.8, label=f"least-squares fit, r_eff = {r_eff:.4f}")
    axes[2].set(yscale="log", xlabel="shared tokens t", ylabel="‖features − features′‖",
                title=f"coupling of two chains; per-step bound\nr ≤ {', '.join(f'{b:.4f}' for b in bounds)} (per layer)")
    axes[2].legend()
    run.save_figure(fig, "context_limit.png")

    # claims, each with its rule
    run.claim("assumption-4.1", "the trained student's context-processing state map is a contraction "
              "(Assumption 4.1); rule: per-step bound max exp(ΔA) < 1 in every S6 layer",
              "Assumption 4.1", f"r ≤ {max(bounds):.6f} (1/(1−r) = {1 / max(1e-12, 1 - max(bounds)):.0f} tokens)",
              bool(max(bounds) < 1))
    run.claim("coupling-contracts", "two chains driven by the same tokens forget their initial states; rule: mean "
              "distance after all shared tokens < 1% of the first", "Prop. 4.2 proof (App. B)",
              f"{coupling[0]:.3g} → {coupling[-1]:.3g}, r_eff = {r_eff:.4f}", bool(coupling[-1] < 0.01 * coupling[0]))
    converged = dev[-2] <= 2 * np.sqrt(stderr[-2] ** 2 + stderr[-1] ** 2)
    run.claim("finite-context-converges", f"F^(T)(ν, q) converges as T grows; rule: |F^(T) − F^(T_max)| at "
              f"T = {lengths[-2]} within 2 combined MC standard errors for every test pair", "Prop. 4.2",
              f"{int(converged.sum())}/{len(converged)} pairs; mean deviation {dev[0].mean():.3g} (T={lengths[0]}) → "
              f"{dev[-2].mean():.3g} (T={lengths[-2]})", bool(converged.all()))
    run.write_summary(
        f"# recall.context-limit — Proposition 4.2\n\n"
        f"{STUDENTS[cfg.student]} student trained on n = {cfg.num_train} contexts of length "
        f"T = {cfg.train_context_length} (α = {cfg.alpha:g}, {cfg.epochs} epochs; best validation MSE "
        f"{record['mse']:.3g}, tag-only risk {record['baseline_tag_only']:.3g}), then evaluated on "
        f"{cfg.num_pairs} fixed test pairs (ν, q) with {cfg.num_mc} Monte-Carlo contexts per T.\n\n"
        f"![context limit](context_limit.png)\n\n"
        f"| T | " + " | ".join(str(T) for T in lengths) + " |\n|---|" + "---|" * len(lengths) + "\n"
        "| mean over pairs of \\|F^(T) − F^(T_max)\\| | " + " | ".join(f"{d:.3g}" for d in dev.mean(1)) + " |\n"
        "| mean MC standard error | " + " | ".join(f"{s:.2g}" for s in stderr.mean(1)) + " |\n\n"
        f"Contraction: per-step bound r ≤ {', '.join(f'{b:.6f}' for b in bounds)} (S6 layers 1..k: the largest "
        f"exp(Δ_t,d A_d,n) over context tokens); coupling rate r_eff = {r_eff:.4f} (fit of the log distance between "
        f"two chains driven by the same tokens). The paper proves convergence at rate r^T but gives no numbers; "
        f"the per-step bound is a worst case over channels, the coupling rate is what the trained network shows.\n\n"
        f"Note: the stacked state of Assumption 4.1 also includes each block's depthwise-conv buffer (the last "
        f"d_conv − 1 inputs), which the chain forgets exactly after d_conv − 1 tokens; it does not change the rate.\n")
    return {"train": record, "lengths": lengths, "F_T_mean": mean.tolist(), "F_T_stderr": stderr.tolist(),
            "per_step_bound": bounds, "coupling_rate": r_eff}


EXPERIMENTS = [
    Experiment(
        "recall.context-limit", "Prop. 4.2, Assumption 4.1", "mamba-measure-valued-recall",
        "F^(T)(ν, q) of a trained two-layer S6 student as T grows, and its measured contraction factor r",
        {"quick": ContextLimitConfig(train_context_length=200, num_val=200, eval_lengths=(10, 30, 100, 300, 1000, 3000),
                                     num_pairs=4, num_mc=32, coupling_length=1000, num_couplings=8),
         "paper": ContextLimitConfig(),
         "tiny": ContextLimitConfig(train_context_length=16, num_train=8, num_val=16, epochs=2,
                                    eval_lengths=(4, 8, 16), num_pairs=2, num_mc=4, coupling_length=50,
                                    num_couplings=2)},
        run_context_limit),
]

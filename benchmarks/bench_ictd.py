"""ictd study throughput on the CPU.

* forward pass of the constructed transformer (theta* of eq. 15) in both forms, dual-head (eq. 14-18) and
  single-head + TSM (eq. 21-23): L = 15 layers (the Fig. 1 depth), d = 8, batches of prompts, float32, beside
  weighted softmax TD run directly on the same trajectories (no peer library runs in-context TD; the algorithm
  itself is the reference, and max_abs_diff is Theorem 1's float32 discrepancy);
* one pretraining epoch of Algorithm 1 at Table 1 size (one sampled Boyan task, 5 Adam steps on 64 windows,
  L = 3 looped), per seed, for 1 seed and for 5 seeds vmapped; the paper run is 3000 epochs.

The forward's useful work per layer and prompt is ~ 2 (n+1)^2 (d+3) flops for the scores Z^T A Z and the same
again for V Z K~, so "GFLOP/s" below measures how far the small-matrix forward is from the machine's matmul rate
(~100 GFLOP/s at 128-wide, DESIGN.md).
"""

from __future__ import annotations

import jax
from timing import side_by_side, timed  # benchmarks/timing.py (run.py puts benchmarks/ on sys.path)

from memlab.ictd.pretrain import PretrainConfig
from memlab.ictd.softmax_td import weighted_softmax_td
from memlab.ictd.train import make_train
from memlab.ictd.transformer import forward, make_prompt, readout, theta_star


def forward_rows(d: int = 8, num_layers: int = 15, gamma: float = 0.9) -> list[dict]:
    """theta*'s forward in both forms beside weighted softmax TD run directly (the algorithm it implements,
    Theorem 1): same prompts, the query's value after L layers / L TD iterations; max_abs_diff is Theorem 1's
    discrepancy in float32."""
    rows = []
    V, A = theta_star(d)
    for n, batch in ((20, 4096), (200, 256), (1000, 16)):
        k1, k2 = jax.random.split(jax.random.key(n))
        X = jax.random.uniform(k1, (batch, n + 1, d), minval=-1.0, maxval=1.0)
        R = jax.random.uniform(k2, (batch, n), minval=-1.0, maxval=1.0)
        Z0 = jax.vmap(make_prompt)(X, R)
        implementations = []
        for form in ("dual", "tsm"):
            run = jax.jit(jax.vmap(lambda Z, form=form: readout(forward(Z, V, A, gamma, num_layers, form=form)[-1])))
            implementations.append((f"theta* forward ({form})", lambda run=run, Z0=Z0: run(Z0)))
        td = jax.jit(jax.vmap(lambda X, R: weighted_softmax_td(X, R, gamma, num_layers)[-1, -1]))
        implementations.append(("weighted softmax TD (direct)", lambda td=td, X=X, R=R: td(X, R)))
        flops = 4.0 * (n + 1) ** 2 * (d + 3) * num_layers * batch
        for row in side_by_side(f"theta* vs TD, n={n} L={num_layers} d={d}", implementations,
                                extra={"batch": batch}):
            rows.append({**row, "prompts_per_s": batch / row["seconds"], "GFLOP_per_s": flops / row["seconds"] / 1e9})
    return rows


def epoch_rows(num_epochs: int = 100) -> list[dict]:
    rows = []
    for seeds in (1, 5):
        config = PretrainConfig(num_epochs=num_epochs, num_seeds=seeds)
        train = jax.jit(jax.vmap(make_train(config)))
        keys = jax.random.split(jax.random.key(0), seeds)
        seconds = timed(lambda train=train, keys=keys: train(keys), repeats=1)
        per_epoch = seconds / num_epochs
        rows.append({"case": f"pretrain epoch, {seeds} seed(s) vmapped", "n": config.n, "batch": config.batch_size,
                     "layers": config.num_layers, "seconds": seconds, "ms_per_epoch_per_seed": 1e3 * per_epoch / seeds,
                     "paper_run_s (3000 epochs, 5 seeds)": per_epoch * 3000 * 5 / seeds})
    return rows


def run() -> list[dict]:
    return forward_rows() + epoch_rows()


if __name__ == "__main__":
    for row in run():
        print(row)

"""pi-SSM training and inference speed on the CPU at the paper's Pong size (Table 5: ~56 s per epoch on a GTX
1050 Ti, ~18k parameters; our target: <= 30 s per epoch on the 2-core machine).

* one training epoch = a shuffled pass over 4000 sequences x 80 steps in minibatches of 32 (125 Adam steps with
  BPTT + REINFORCE and the ISS projection after each), the whole epoch one jitted ``lax.scan``
  (``make_train`` with epochs=1, validation on 500 sequences included), for pi-SSM-GRU, pi-SSM-LSTM and
  pi-SSM(LG); parameter counts beside;
* inference: filtered steps per second of one sampled path over the 500 x 80 test split (vmapped sequences).
"""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np
from timing import timed  # benchmarks/timing.py (run.py puts benchmarks/ on sys.path)

from memlab.pissm.data import PONG_LAYOUT
from memlab.pissm.runs import full_mask, load_dataset, make_model, predict_jit
from memlab.pissm.train import TrainConfig, make_train

MODELS = ("pissm-gru", "pissm-lstm", "pissm-lg")


def parameter_count(model) -> int:
    return int(sum(x.size for x in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))))


def run() -> list[dict]:
    data = load_dataset("pong", PONG_LAYOUT, key=jax.random.key(0))
    test = data.test
    rows = []
    for name in MODELS:
        model = make_model(name, "pong", data, jax.random.key(0))
        config = TrainConfig(epochs=1, batch_size=32, stability="iss" if name != "pissm-lg" else "none")
        train = eqx.filter_jit(make_train(config))
        args = (jax.random.key(1), model, data.train.y, full_mask(data.train), data.validation.y,
                full_mask(data.validation))
        epoch = timed(lambda train=train, args=args: train(*args).best_val)
        infer = timed(lambda model=model: predict_jit(model, test.y, full_mask(test), jax.random.key(2),
                                                      1).log_likelihoods, repeats=3)
        rows.append({"model": name, "parameters": parameter_count(model), "sequences": int(data.train.y.shape[0]),
                     "steps": int(data.train.y.shape[1]), "batch": 32, "seconds_per_epoch": epoch,
                     "paper_seconds_per_epoch": {"pissm-gru": 56.0, "pissm-lstm": 57.0}.get(name, np.nan),
                     "inference_steps_per_s": test.y.shape[0] * test.y.shape[1] / infer})
    return rows

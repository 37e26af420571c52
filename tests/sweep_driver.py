"""A stand-alone driver for tests/test_executors.py: a fake experiment whose cells sleep, run through the
executor named on the command line, so that a test can kill the driver mid-sweep and run it again.

    python sweep_driver.py EXECUTOR OUT_DIR NUM_CELLS SLEEP_SECONDS [RAY_ADDRESS]
"""

import dataclasses
import sys
import time
from functools import partial

import jax
import jax.numpy as jnp

from memlab.executors import make_executor
from memlab.runner import Experiment, run_experiment


@dataclasses.dataclass(frozen=True)
class SleepyConfig:
    seed: int = 0
    num_cells: int = 8


SLEEP = {"seconds": 0.0}  # not an argument: a resumed run sleeps less, and its cells stay the same cells


def sleepy_cell(key) -> dict:
    time.sleep(SLEEP["seconds"])
    x = jax.random.normal(key, (200, 30))
    return {"trace": jnp.trace(x @ x.T)}


def main(executor: str, out_dir: str, num_cells: int, seconds: float, address: str | None = None) -> None:
    def run(cfg, run):
        SLEEP["seconds"] = seconds
        cells = run.sweep({f"cell-{i}": partial(sleepy_cell, run.key_for("cell", i))
                           for i in range(cfg.num_cells)}, "sleepy cells")
        run.write_summary("# sleepy\n")
        return {"traces": [c["trace"] for c in cells.values()]}

    config = SleepyConfig(num_cells=num_cells)
    exp = Experiment("test.sleepy", "Fig. 0", "none", "cells that sleep", {"quick": config, "paper": config}, run)
    with make_executor(executor, address=address) as ex:
        run_experiment(exp, "quick", out_dir=out_dir, progress=False, executor=ex)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), *sys.argv[5:])

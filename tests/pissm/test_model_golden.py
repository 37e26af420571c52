"""A PiSSM built from a key computes what it computed before its 20 arguments became a ``PiSSMConfig`` and its gain
a module chosen by type (issue 30): its parameters, its outputs along a sampled path with missing steps and the
gradient of the training surrogate (eq. 8-9), for eight configurations covering every gain variant and switch,
against ``GOLDEN``.

How ``GOLDEN`` was made: with the pi-SSM of commit ac63888 (``git show ac63888:src/memlab/pissm/model.py``), whose
keyword arguments are exactly today's ``PiSSMConfig`` fields, under the tests' XLA flags (conftest.py: LLVM -O0,
the older fusion emitters, one device), jax/jaxlib 0.10.1, float32:
``arrays = {f"{name}/{k}": v for name, case in CASES.items() for k, v in golden_arrays(old.PiSSM(M, N, K, R=R,
key=jax.random.key(case["seed"]), **case["config"], **case["arrays"])).items()}`` saved by ``np.savez_compressed``
with ``jaxlib`` and ``cpu`` (``cpu_name()``) beside them.

Bit for bit where it was made (the same jaxlib on the same CPU model); elsewhere the compiler and LAPACK may round
differently (conftest.py), so there to float32 round-off (rtol 1e-5: still far below what a changed formula, key
split or initial value moves).
"""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
import pytest

from memlab.pissm.model import PiSSM, PiSSMConfig

GOLDEN = Path(__file__).parent / "data" / "pissm_golden.npz"
M, N, K, T = 3, 2, 3, 8
R = np.array([[0.3, 0.1], [0.1, 0.2]])
MASK = np.array([1, 1, 0, 1, 1, 0, 0, 1], bool)
Y = 0.5 * np.sin(np.arange(T * N, dtype=np.float32)).reshape(T, N)
SHARED_C = np.cos(np.arange(N * M)).reshape(N, M)
PRIORS = {"initial_mean": np.array([0.3, -0.2, 0.1]), "mode_input_mean": np.array([0.1, 0.0, -0.1]),
          "mode_input_std": np.array([0.5, 1.0, 2.0])}
CASES = {
    "gru-bounded": {"seed": 0, "config": {"gain": "gru", "hidden_size": 8}, "arrays": {}},
    "lstm-bounded": {"seed": 1, "config": {"gain": "lstm", "hidden_size": 8}, "arrays": {"C": SHARED_C}},
    "gru-paper": {"seed": 2, "config": {"gain": "gru", "gain_form": "paper", "hidden_size": 8}, "arrays": PRIORS},
    "lstm-paper": {"seed": 3, "config": {"gain": "lstm", "gain_form": "paper", "hidden_size": 8, "initial_var": 0.4},
                   "arrays": {"C": np.sin(np.arange(K * N * M)).reshape(K, N, M)}},
    "gru-unbounded-diagonal": {"seed": 4, "config": {"gain": "gru", "gain_form": "unbounded", "hidden_size": 8,
                                                     "covariance": "diagonal"}, "arrays": {}},
    "exact-posterior": {"seed": 5, "config": {"gain": "exact", "mode_sampling": "posterior", "process_var": 0.02,
                                              "mode_spread": 0.3, "mode_net_gain": 1.5, "mode_hidden": 7},
                        "arrays": {**PRIORS, "C": SHARED_C}},
    "gru-mlp-learn-noise": {"seed": 6, "config": {"gain": "gru", "hidden_size": 8, "transition_hidden": 5,
                                                  "learn_noise": True}, "arrays": PRIORS},
    "lstm-unbounded-posterior-mlp": {"seed": 7, "config": {"gain": "lstm", "gain_form": "unbounded", "hidden_size": 8,
                                                           "mode_sampling": "posterior", "transition_hidden": 4},
                                     "arrays": {}},
}


def cpu_name() -> str:
    """The CPU's model name (the compiler targets the host CPU), or '' where /proc/cpuinfo does not say."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")


def parameters(model) -> list:
    return jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))


@eqx.filter_jit
def outputs(model, key):
    return model(jnp.asarray(Y), jnp.asarray(MASK), key=key)


@eqx.filter_jit
@eqx.filter_grad
def surrogate_gradient(model, key):
    """The gradient of eq. (8)-(9)'s surrogate plus the z-summed log-likelihood (what the two objectives train)."""
    p = model(jnp.asarray(Y), jnp.asarray(MASK), key=key)
    return jnp.sum(p.log_likelihoods) + jnp.sum(p.rewards + jax.lax.stop_gradient(p.rewards) * p.score_log_probs)


def golden_arrays(model) -> dict[str, np.ndarray]:
    """Every parameter, every output field and every gradient leaf, by name (the file's layout)."""
    out = {f"leaf{i}": np.asarray(x) for i, x in enumerate(parameters(model))}
    out |= {field: np.asarray(x) for field, x in outputs(model, jax.random.key(3))._asdict().items()}
    out |= {f"grad{i}": np.asarray(x) for i, x in enumerate(parameters(surrogate_gradient(model, jax.random.key(3))))}
    return out


def build(case: dict) -> PiSSM:
    return PiSSM(PiSSMConfig(M, N, K, **case["config"]), R=R, key=jax.random.key(case["seed"]), **case["arrays"])


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as saved:
        return dict(saved)


@pytest.mark.parametrize("name", list(CASES))
def test_model_from_a_key_computes_what_it_computed_before_the_config(golden, name):
    bitwise = str(golden["jaxlib"]) == jaxlib.__version__ and str(golden["cpu"]) == cpu_name()
    got = golden_arrays(build(CASES[name]))
    want = {k.split("/", 1)[1]: v for k, v in golden.items() if k.startswith(f"{name}/")}
    assert sorted(got) == sorted(want)  # the same parameters in the same order (model_from_bytes relies on it)
    for key, value in got.items():
        assert value.dtype == want[key].dtype and value.shape == want[key].shape, key
        if bitwise:
            np.testing.assert_array_equal(value, want[key], err_msg=f"{name}: {key}")
        else:
            scale = float(np.max(np.abs(want[key]))) if want[key].size else 0.0
            np.testing.assert_allclose(value, want[key], rtol=1e-5, atol=1e-5 * scale, err_msg=f"{name}: {key}")

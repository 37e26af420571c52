"""Several CPU devices per process (memlab.devices): the count is set before JAX starts, passes split their examples
over the devices and gradients computed in parts give the same numbers as on one device. Each case runs in a fresh
Python process, since the device count is fixed when JAX's backend starts (this test process has one device, see
conftest.py)."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from memlab.devices import FLAG, host_devices_flags, over_devices, use_host_devices, value_and_grad_in_parts


def on_devices(count: int) -> str:
    """This process's XLA_FLAGS (the tests' compile flags, conftest.py) with ``count`` CPU devices."""
    return host_devices_flags(count, override=True)


def python(code: str, xla_flags: str = "") -> str:
    """Run ``code`` in a fresh interpreter with XLA_FLAGS = ``xla_flags``; its stdout."""
    env = {**os.environ, "XLA_FLAGS": xla_flags}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_device_count_is_set_before_the_backend_starts_and_a_late_request_warns():
    out = python("""
        import json, os, warnings
        from memlab.devices import use_host_devices
        import jax
        counts = [use_host_devices(3)]                  # before the first array: takes effect
        counts.append(jax.local_device_count())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            counts.append(use_host_devices(2, override=False))  # default request after the start: no warning
            counts.append(use_host_devices(2))                  # explicit one: warns, keeps 3
        print(json.dumps([counts, [str(w.message) for w in caught], os.environ["XLA_FLAGS"]]))
    """, xla_flags="--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=5")
    counts, warned, flags = json.loads(out)
    assert counts == [3, 3, 3, 3]
    assert len(warned) == 1 and "already started with 3 device(s)" in warned[0]
    assert flags == f"--xla_cpu_enable_fast_math=false {FLAG}=3"  # the other flags kept, the count replaced once


def test_a_count_already_in_xla_flags_is_kept_unless_overridden(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", f"--foo {FLAG}=4")
    assert host_devices_flags(2) == f"--foo {FLAG}=4"
    assert host_devices_flags(2, override=True) == f"--foo {FLAG}=2"
    monkeypatch.setenv("XLA_FLAGS", "")
    assert host_devices_flags(2) == f"{FLAG}=2"
    with pytest.raises(ValueError, match="devices"):
        host_devices_flags(0)


def test_on_one_device_over_devices_is_the_function_itself():
    assert jax.local_device_count() == 1
    x = np.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(over_devices(lambda a: a * 2, x), x * 2)
    assert use_host_devices(1, override=False) == 1


def test_recall_predictions_are_the_same_numbers_on_two_devices():
    """The recall validation pass split over 2 devices (inside jit, as training runs it) against one device, for
    7 examples (6 split evenly, the one left over on one device) and 1 (fewer examples than devices)."""
    code = """
        import json, equinox as eqx, jax, numpy as np
        from memlab.recall.runs import make_student
        from memlab.recall.task import RecallTask, sample
        from memlab.recall.train import mse, predictions
        task = RecallTask(alpha=0.75, context_length=40)
        model = make_student("mamba-1", 1, jax.random.key(0))
        out = {}
        for n in (7, 1):
            data = sample(jax.random.key(n), n, task)
            out[n] = [np.asarray(eqx.filter_jit(predictions)(model, data, 3)).tolist(),
                      float(eqx.filter_jit(mse)(model, data))]
        print(json.dumps([jax.local_device_count(), out]))
    """
    (ones, one), (twos, two) = (json.loads(python(code, on_devices(k))) for k in (1, 2))
    assert (ones, twos) == (1, 2)
    for n in ("7", "1"):
        assert len(two[n][0]) == int(n)
        np.testing.assert_allclose(two[n][0], one[n][0], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(two[n][1], one[n][1], rtol=1e-6)


GRADIENT_PARTS_CODE = """
    import jax, jax.numpy as jnp, numpy as np
    from memlab.devices import value_and_grad_in_parts

    def loss(params, examples, scale):  # a sum over examples, per-example aux
        x, y = examples
        residual = jnp.tanh(x @ params["w"]) + params["b"] - y
        return jnp.sum(residual**2) / scale, residual[:, 0]

    x = jax.random.normal(jax.random.key(0), (12, 5))
    y = jax.random.normal(jax.random.key(1), (12, 3))
    params = {"w": jax.random.normal(jax.random.key(2), (5, 3)), "b": jnp.arange(3.0)}

    def run(parts):
        (value, aux), grads = jax.jit(value_and_grad_in_parts(loss, parts))(params, (x, y), 12.0)
        return [float(value), np.asarray(aux).tolist(), np.asarray(grads["w"]).tolist(),
                np.asarray(grads["b"]).tolist()]
"""


def _same_numbers(a, b, rtol=1e-6):
    """Value, per-example aux and gradients agree to rtol of each array's largest entry (float32: a sum in another
    order differs by ~1e-7 of its terms, not of its total: a gradient entry of 0.011 summed from terms of order 1
    moved by 2.2e-7, 2e-5 of itself, on one CPU and not on another)."""
    for u, v in zip(a, b, strict=True):
        np.testing.assert_allclose(u, v, rtol=rtol, atol=max(1e-7, rtol * float(np.max(np.abs(v)))))


def test_a_gradient_in_parts_is_the_whole_batch_gradient():
    """On this process's one device the parts run in turn: 2, 3, 4 and 12 parts give the plain gradient."""
    scope = {}
    exec(textwrap.dedent(GRADIENT_PARTS_CODE), scope)
    whole = scope["run"](1)
    for parts in (2, 3, 4, 12):
        _same_numbers(scope["run"](parts), whole, rtol=1e-5)
    with pytest.raises(ValueError, match="5 gradient parts do not divide the batch of 12"):
        scope["run"](5)
    with pytest.raises(ValueError, match="parts"):
        value_and_grad_in_parts(scope["loss"], 0)


def test_a_gradient_in_parts_over_two_devices_is_the_one_device_gradient():
    """2 parts on 2 devices (one each, summed across them) and 4 (two each) against the same parts on one device."""
    code = GRADIENT_PARTS_CODE + """
    import json
    print(json.dumps([jax.local_device_count(), run(1), run(2), run(4)]))
    """
    (ones, *one), (twos, *two) = (json.loads(python(code, on_devices(k))) for k in (1, 2))
    assert (ones, twos) == (1, 2)
    for a, b in zip(one, two, strict=True):
        _same_numbers(b, a)  # the same parts
        _same_numbers(b, one[0], rtol=1e-5)  # the whole batch


@pytest.mark.first
def test_pissm_training_with_its_minibatch_gradient_over_two_devices():
    """``TrainConfig(gradient_parts=None)``: one part per device inside the jitted training scan. One optimiser step
    on 2 devices (2 parts) against the same 2 parts in turn on one device: the same loss and parameters."""
    code = """
        import json, equinox as eqx, jax, numpy as np
        from memlab.pissm.data.pong import NOISE_STD, OBSERVATION_MATRIX, simulate_pong
        from memlab.pissm.model import PiSSM, PiSSMConfig
        from memlab.pissm.train import TrainConfig, make_train
        y = simulate_pong(jax.random.key(0), 24, 12).y
        mask = np.ones(y.shape[:2], bool)
        model = PiSSM(PiSSMConfig(4, 2, 3, gain="gru", hidden_size=8), R=NOISE_STD**2 * np.eye(2),
                      C=OBSERVATION_MATRIX, key=jax.random.key(1))
        config = TrainConfig(epochs=1, batch_size=16, stability="iss", warmup_epochs=0,
                             gradient_parts=None if jax.local_device_count() == 2 else 2)
        result = eqx.filter_jit(make_train(config))(jax.random.key(3), model, y[:16], mask[:16], y[16:], mask[16:])
        params = [np.asarray(x).ravel().tolist() for x in jax.tree.leaves(eqx.filter(result.model,
                                                                                     eqx.is_inexact_array))]
        print(json.dumps([jax.local_device_count(), float(result.train_loss[0]), params]))
    """
    (ones, one_loss, one), (twos, two_loss, two) = (json.loads(python(code, on_devices(k))) for k in (1, 2))
    assert (ones, twos) == (1, 2)
    np.testing.assert_allclose(two_loss, one_loss, rtol=1e-6)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_memlab_run_gives_each_cell_the_devices_asked_for(tmp_path):
    """``memlab run --devices 2`` records 2 CPU devices; without the flag a count already in XLA_FLAGS is kept."""
    code = """
        import json, sys
        from memlab import cli
        sys.exit(cli.main(["run", "belief.logit-trace", "--profile", "tiny", "--out", sys.argv[1], "--no-progress"]
                          + sys.argv[2:]))
    """
    for args, flags, expected in [(["--devices", "2"], on_devices(1), 2), ([], on_devices(3), 3)]:
        out = tmp_path / str(expected)
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(out), *args], capture_output=True,
                              text=True, env={**os.environ, "XLA_FLAGS": flags}, timeout=600)
        assert done.returncode == 0, done.stderr
        assert json.loads((out / "results.json").read_text())["cpu_devices"] == expected


def test_vmapped_exact_filter_is_the_same_on_two_devices():
    """log_belief, lof and lof_parallel under vmap split the sequences over 2 devices; the log-space rerun (a
    belief near underflow) happens on the share that needs it. 9 sequences (one left over), one driving a belief far
    below float's range, one impossible observation (-inf), against one device."""
    code = """
        import json, jax, jax.numpy as jnp, numpy as np
        from memlab.belief.fast_filters import log_belief, lof, lof_parallel
        from memlab.belief.hmm import HMM
        T = jnp.array([[0.9, 0.0, 0.2], [0.0, 1.0, 0.0], [0.1, 0.0, 0.8]])  # column j: P(. | j); 1 keeps itself
        E = jnp.array([[0.7, 1e-6, 0.2], [0.3, 0.0, 0.8], [0.0, 1 - 1e-6, 0.0]])
        hmm = HMM(T, E, jnp.array([0.5, 0.25, 0.25]))
        ys = jax.random.randint(jax.random.key(0), (9, 60), 0, 3)
        ys = ys.at[3].set(0)  # state 1 emits 0 with probability 1e-6: its belief falls far below 1e-38
        out = [jax.local_device_count()]
        for f in (log_belief, lof, lof_parallel):
            w = np.asarray(jax.jit(jax.vmap(lambda y: f(hmm, y).logits))(ys))
            out.append(np.where(np.isfinite(w), w, -1e300).tolist())
        print(json.dumps(out))
    """
    (ones, *one), (twos, *two) = (json.loads(python(code, on_devices(k))) for k in (1, 2))
    assert (ones, twos) == (1, 2)
    for beliefs in (one[0], two[0]):  # state 1 of sequence 3 ends near log(1e-6 / 0.7) * 60: only the log-space
        assert -900 < beliefs[3][-1][1] < -700  # rerun reaches it (the fast pass alone would give -inf)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)


def test_each_executor_gives_a_cell_the_cores_it_has_to_itself(monkeypatch):
    from memlab.executors import LocalExecutor, ProcessExecutor, RayExecutor

    monkeypatch.setattr("memlab.devices.available_cpus", lambda: 8)
    monkeypatch.setattr("os.cpu_count", lambda: 8)  # a machine where 3.5 CPUs per Ray cell can start
    if (ray := sys.modules.get("ray")) is not None:  # not a cluster another test of this process joined
        monkeypatch.setattr(ray, "is_initialized", lambda: False)
    assert LocalExecutor().devices_per_cell() == 8
    assert ProcessExecutor(workers=3).devices_per_cell() == 2
    assert ProcessExecutor(workers=16).devices_per_cell() == 1
    assert RayExecutor(cpus_per_cell=3.5).devices_per_cell() == 3
    assert RayExecutor(cpus_per_cell=0.5).devices_per_cell() == 1

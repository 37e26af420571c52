"""memlab run --set FIELD=VALUE and --plugin: config overrides by the field's type, and a user's layer registered
from a file, run by name in the arena."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from memlab import cli
from memlab.overrides import apply_overrides


@dataclasses.dataclass(frozen=True)
class Inner:
    steps: int = 10
    rate: float = 0.1
    warmup: int | None = None


@dataclasses.dataclass(frozen=True)
class Outer:
    seed: int = 0
    names: tuple[str, ...] = ("a", "b")
    sizes: tuple[int, ...] = (1, 2)
    multiples: tuple[int, ...] = ()
    flag: bool = False
    inner: Inner = Inner()


def test_values_are_read_by_the_fields_type():
    cfg = apply_overrides(Outer(), ["names=x,y,z", "sizes=3", "flag=true", "inner.steps=7", "inner.rate=1e-3"])
    assert cfg == Outer(names=("x", "y", "z"), sizes=(3,), flag=True, inner=Inner(steps=7, rate=1e-3))
    assert apply_overrides(Outer(), ["multiples=2,4"]).multiples == (2, 4)  # an empty tuple: by its annotation
    assert apply_overrides(Outer(), ["inner.warmup=5"]).inner.warmup == 5  # None: by its annotation, int | None
    assert apply_overrides(Outer(inner=Inner(warmup=5)), ["inner.warmup=none"]).inner.warmup is None


@pytest.mark.parametrize("assignment, match", [
    ("nope=1", "Outer has no field 'nope'; fields: flag, inner, multiples, names, seed, sizes"),
    ("seed=x", "expected int, got 'x'"),
    ("inner.warmup=x", "expected int, got 'x'"),
    ("flag=yes", "expected true or false"),
    ("inner=3", "'inner' is a nested config"),
    ("seed.x=3", "'seed' is not a nested config"),
    ("names", "expects FIELD=VALUE"),
])
def test_bad_assignments_are_one_clear_error(assignment, match):
    with pytest.raises(ValueError, match=match):
        apply_overrides(Outer(), [assignment])


# the example README shows, run as a user would
PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "running_mean_layer.py"


def test_a_plugin_layer_runs_in_the_leaderboard(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEMLAB_PLUGINS", "")
    plugin = PLUGIN
    out = tmp_path / "out"
    code = cli.main(["run", "arena.leaderboard", "--profile", "tiny", "--plugin", str(plugin), "--set",
                     "layers=running-mean,gru", "--set", "tasks=lgssm", "--out", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["layers"] == ["running-mean", "gru"] and set(doc["results"]["stats"]["lgssm"]) == {
        "running-mean", "gru"}
    assert doc["overrides"] == ["layers=running-mean,gru", "tasks=lgssm"]  # a restricted run says how
    assert str(plugin) in os.environ["MEMLAB_PLUGINS"]


def test_bad_set_and_missing_plugin_exit_2(tmp_path, capsys):
    assert cli.main(["run", "arena.leaderboard", "--profile", "tiny", "--set", "layers=nope",
                     "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "invalid config for arena.leaderboard (tiny): unknown layer 'nope'" in err and len(
        err.strip().splitlines()) == 1
    assert cli.main(["run", "arena.leaderboard", "--plugin", str(tmp_path / "missing.py")]) == 2
    assert "plugin file" in capsys.readouterr().err


def test_editing_a_plugin_layer_changes_its_cells_keys(tmp_path, monkeypatch):
    """A user who edits their layer's file gets new cells, not the stored numbers of the old code; memlab's own
    layers keep their keys."""
    import importlib.util

    from memlab import catalog
    from memlab.arena.experiments.leaderboard import sweep_cells
    from memlab.arena.layers import LAYERS
    from memlab.runner import Run
    from memlab.store import cell_digest

    def digests(text):
        path = tmp_path / "edited_layer.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location("memlab_test_edited_layer", path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "memlab_test_edited_layer", module)
        monkeypatch.delitem(LAYERS, "edited", raising=False)
        spec.loader.exec_module(module)
        cfg = dataclasses.replace(catalog.get("arena.leaderboard").profiles["tiny"], layers=("edited", "gru"))
        return {n: cell_digest(c) for n, c in sweep_cells(cfg, Run(tmp_path, cfg, "tiny", 0)).items()}

    plugin = PLUGIN.read_text().replace('"running-mean"', '"edited"')
    before, after = digests(plugin), digests(plugin.replace("jnp.cumsum(", "0.5 * jnp.cumsum("))
    assert before["lgssm.edited"] != after["lgssm.edited"] and before["lgssm.gru"] == after["lgssm.gru"]
    assert LAYERS["gru"].source == ""


def test_layers_is_set_layers_in_the_order_given():
    args = cli.parser().parse_args(["run", "arena.leaderboard", "--set", "tasks=lgssm", "--layers", "gru,lru",
                                     "--set", "seeds=1"])
    assert args.overrides == ["tasks=lgssm", "layers=gru,lru", "seeds=1"]
    via_set = cli.parser().parse_args(["run", "arena.leaderboard", "--set", "layers=gru,lru"])
    assert via_set.overrides == cli.parser().parse_args(["run", "arena.leaderboard", "--layers", "gru,lru"]).overrides


def test_layers_names_an_unknown_layer_in_one_line(tmp_path, capsys):
    assert cli.main(["run", "arena.leaderboard", "--profile", "tiny", "--layers", "gru,nope",
                     "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown layer 'nope'" in err[0]


# a plugin layer with a recurrent form: the running mean carries (count, sum), width + 1 numbers
RECURRENT_PLUGIN = '''
import equinox as eqx
import jax
import jax.numpy as jnp

from memlab.arena import register_layer


class RunningMean(eqx.Module):
    proj: eqx.nn.Linear

    def init_state(self):
        return jnp.zeros(()), jnp.zeros(self.proj.out_features)

    def step(self, state, x):
        count, total = state[0] + 1, state[1] + self.proj(x)
        return (count, total), total / count

    def __call__(self, x):
        return jax.lax.scan(lambda state, x_t: self.step(state, x_t), self.init_state(), x)[1]


register_layer("NAME", lambda width, key: RunningMean(eqx.nn.Linear(width, width, key=key)),
               state_size=lambda width, length: SIZE)
'''


def _recurrent_plugin(tmp_path, monkeypatch, name: str, size: str) -> Path:
    from memlab.arena.layers import LAYERS

    monkeypatch.setenv("MEMLAB_PLUGINS", "")
    monkeypatch.delitem(LAYERS, name, raising=False)
    path = tmp_path / f"{name.replace('-', '_')}.py"
    path.write_text(RECURRENT_PLUGIN.replace("NAME", name).replace("SIZE", size))
    return path


def test_a_plugin_layers_state_size_is_checked_against_its_init_state(tmp_path, monkeypatch, capsys):
    """The declared state size of a layer with init_state / step must be what init_state holds: width + 1 here.
    A wrong one (width) is one line at the command line, exit 2, before any cell; the right one passes."""
    import jax

    from memlab.arena.layers import LAYERS, check_state_sizes, make_layer
    from memlab.plugins import add_plugins

    wrong = _recurrent_plugin(tmp_path, monkeypatch, "mean-wrong-state", "width")
    code = cli.main(["run", "arena.leaderboard", "--profile", "tiny", "--plugin", str(wrong), "--layers",
                     "mean-wrong-state,gru", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    from memlab import catalog

    width = catalog.get("arena.leaderboard").profiles["tiny"].width
    assert f"layer 'mean-wrong-state': its state_size(width={width}, length=1) is {width}, but its init_state() " \
           f"holds {width + 1} numbers" in err[0]
    assert not (tmp_path / "o" / "results.json").exists()
    with pytest.raises(ValueError, match="init_state\\(\\) holds 5 numbers"):
        make_layer("mean-wrong-state", 4, jax.random.PRNGKey(0))
    add_plugins([str(_recurrent_plugin(tmp_path, monkeypatch, "mean-right-state", "width + 1"))])
    check_state_sizes(["mean-right-state", "gru"], 4)
    layer = make_layer("mean-right-state", 4, jax.random.PRNGKey(0))
    assert layer(jax.numpy.ones((3, 4))).shape == (3, 4) and "mean-right-state" in LAYERS

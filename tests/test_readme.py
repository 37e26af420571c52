"""README stays true to the code: its Python example runs and its experiment table matches the catalog."""

import re
from pathlib import Path

import numpy as np

from memlab.catalog import EXPERIMENTS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_opens_with_the_two_setup_commands():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make reproduce", "make test"]


def _run_python_block(index: int) -> dict:
    code = re.findall(r"```python\n(.*?)```", README, re.S)[index]
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    return namespace


def test_readme_python_example_runs():
    namespace = _run_python_block(0)
    assert namespace["w_opt"].shape == namespace["w_alf"].shape == (100, 2)


def test_readme_ictd_example_runs_and_theorem_1_holds():
    namespace = _run_python_block(1)
    v_tf, v_td = np.asarray(namespace["v_tf"]), np.asarray(namespace["v_td"])
    assert v_tf.shape == v_td.shape == (16,)
    np.testing.assert_allclose(v_tf, v_td, rtol=1e-4, atol=1e-5)
    assert np.abs(v_tf).max() > 0


def test_readme_experiment_table_matches_the_catalog():
    listed = set(re.findall(r"^\| `([a-z]+\.[a-z0-9-]+)` \|", README, re.M))
    assert listed == set(EXPERIMENTS)


def test_readme_ringworld_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example writes its checkpoint under ./checkpoints
    namespace = _run_python_block(3)
    assert namespace["metrics"]["episode_return"].shape == (20,)
    assert (tmp_path / "checkpoints" / "deep-alf.eqx").exists()

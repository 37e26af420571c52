"""README stays true to the code: its Python example runs and its experiment table matches the catalog."""

import re
from pathlib import Path

from memlab.catalog import EXPERIMENTS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_opens_with_the_two_setup_commands():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make reproduce", "make test"]


def test_readme_python_example_runs():
    code = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["w_opt"].shape == namespace["w_alf"].shape == (100, 2)


def test_readme_experiment_table_matches_the_catalog():
    listed = set(re.findall(r"^\| `([a-z]+\.[a-z0-9-]+)` \|", README, re.M))
    assert listed == set(EXPERIMENTS)

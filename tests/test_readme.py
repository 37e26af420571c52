"""README and the documentation stay true to the code: their Python examples run, the experiment table matches the
catalog, README stays short, and the documentation site builds with mkdocs --strict (broken links fail)."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memlab.catalog import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
LIBRARY = (ROOT / "docs" / "library.md").read_text()


def test_readme_opens_with_the_two_setup_commands_and_stays_short():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make reproduce", "make test"]
    assert len(README.splitlines()) <= 150


def _run_python_block(text: str, index: int) -> dict:
    code = re.findall(r"```python\n(.*?)```", text, re.S)[index]
    namespace: dict = {}
    exec(compile(code, "example", "exec"), namespace)
    return namespace


def test_readme_python_example_runs():
    namespace = _run_python_block(README, 0)
    assert namespace["w_opt"].shape == namespace["w_alf"].shape == (100, 2)


def test_library_page_belief_example_runs():
    namespace = _run_python_block(LIBRARY, 0)
    assert namespace["w_opt"].shape == namespace["w_alf"].shape == (100, 2)


def test_library_page_ictd_example_runs_and_theorem_1_holds():
    namespace = _run_python_block(LIBRARY, 1)
    v_tf, v_td = np.asarray(namespace["v_tf"]), np.asarray(namespace["v_td"])
    assert v_tf.shape == v_td.shape == (16,)
    np.testing.assert_allclose(v_tf, v_td, rtol=1e-4, atol=1e-5)
    assert np.abs(v_tf).max() > 0


def test_experiment_table_matches_the_catalog():
    table = (ROOT / "docs" / "experiments.md").read_text()
    listed = set(re.findall(r"^\| `([a-z]+\.[a-z0-9-]+)` \|", table, re.M))
    assert listed == set(EXPERIMENTS)


def test_library_page_ringworld_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example writes its checkpoint under ./checkpoints
    namespace = _run_python_block(LIBRARY, 3)
    assert namespace["metrics"]["episode_return"].shape == (20,)
    assert (tmp_path / "checkpoints" / "deep-alf.eqx").exists()


def test_documentation_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason='the docs extra: pip install -e ".[docs]"')
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site"),
                             "-f", str(ROOT / "mkdocs.yml")], capture_output=True, text=True,
                            env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"}, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    site = tmp_path / "site"
    assert (site / "reference" / "belief" / "index.html").exists()
    benchmarks = (site / "benchmarks" / "index.html").read_text()
    assert "benchmark tables" not in benchmarks and benchmarks.count("<table") >= len(
        list((ROOT / "benchmarks" / "results").glob("*.json")))
    assert re.search(r"Measured \d{4}-\d{2}-\d{2}", benchmarks)
    cluster = (site / "cluster" / "index.html").read_text()  # one row per run and cell function in paper-results
    assert "measured cells" not in cluster and "<code>pissm.stability-run</code>" in cluster
    home = (site / "index.html").read_text()
    for name in EXPERIMENTS:  # in the navigation; our figure right after the paper's claim, then the claims: those
        # of a paper-scale run or, where none is committed, of the quick run (docs/quick-runs/), never a stub
        assert f'href="experiments/{name}/"' in home, name
        page = (site / "experiments" / name / "index.html").read_text()
        assert "No paper-scale run is committed yet" not in page, name
        assert page.index("The paper:") < page.index("<img") < page.index('id="claims') < page.index(
            'id="summary'), name
    # offline: no stylesheet, script or font is fetched from another site (mkdocs.yml: theme.font false)
    fetched = re.compile(r"<(?:link|script)\b[^>]*\b(?:href|src)=\"(?:https?:)?//|url\([\"']?(?:https?:)?//")
    for path in [*site.rglob("*.html"), *site.rglob("*.css")]:
        assert not fetched.search(path.read_text(encoding="utf-8")), path.relative_to(site)

"""README and the documentation stay true to the code: every Python example runs and prints its result, every code
excerpt is in the source as printed, the experiment table matches the catalog, README stays short, and the
documentation site builds with mkdocs --strict (broken links fail)."""

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memlab.catalog import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_opens_with_the_two_setup_commands_and_stays_short():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make reproduce", "make test"]
    assert len(README.splitlines()) <= 150


# the pages whose Python blocks are checked: README and every documentation page
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), re.S)


def kind(code: str) -> str:
    """'include' (a file pulled in by the docs build: the arena's plugin, run by test_overrides.py), 'excerpt' (a
    piece of a module, indented or a bare definition: it must be in the source as printed), else 'example' (a
    program: it must run and print its result)."""
    if code.lstrip().startswith("--8<--"):
        return "include"
    return "excerpt" if code.startswith((" ", "def ", "class ")) else "example"


BLOCKS = [(page, i, kind(code)) for page in PAGES for i, code in enumerate(python_blocks(page))]


@pytest.fixture(scope="module")
def run_example(tmp_path_factory):
    """``run_example(page, index)`` -> (namespace, what it printed, its working folder): the index-th Python block
    of ``page`` run once per module in a fresh folder (an example may write files, e.g. a checkpoint)."""
    done = {}

    def run(page: str, index: int):
        if (page, index) not in done:
            folder = tmp_path_factory.mktemp("example")
            namespace, printed, cwd = {}, io.StringIO(), os.getcwd()
            os.chdir(folder)
            try:
                with contextlib.redirect_stdout(printed):
                    exec(compile(python_blocks(page)[index], f"{page}, example {index}", "exec"), namespace)
            finally:
                os.chdir(cwd)
            done[page, index] = namespace, printed.getvalue(), folder
        return done[page, index]

    return run


def test_the_documentation_has_examples_excerpts_and_includes():
    kinds = [k for _, _, k in BLOCKS]
    assert kinds.count("example") >= 6 and "excerpt" in kinds and "include" in kinds


@pytest.mark.parametrize("page, index", [(page, i) for page, i, k in BLOCKS if k == "example"])
def test_every_documentation_example_runs_and_prints_its_result(run_example, page, index):
    printed = run_example(page, index)[1]
    assert printed.strip(), f"{page}, example {index} prints nothing"


@pytest.mark.parametrize("page, index", [(page, i) for page, i, k in BLOCKS if k == "excerpt"])
def test_every_code_excerpt_in_the_documentation_is_in_the_source(page, index):
    sources = "\n".join(p.read_text() for p in (ROOT / "src" / "memlab").rglob("*.py"))
    assert python_blocks(page)[index] in sources, f"{page}, excerpt {index} is not in src/memlab as printed"


def test_readme_python_example_runs(run_example):
    namespace, printed, _ = run_example("README.md", 0)
    assert namespace["exact"].logits.shape == namespace["approx"].logits.shape == (100, 2)
    assert namespace["approx"].marginal_loglik is None
    loglik = float(namespace["exact"].marginal_loglik)
    assert -100 * np.log(2) < loglik < 0 and f"{loglik}" in printed


def test_library_page_belief_example_runs(run_example):
    namespace, printed, _ = run_example("docs/library.md", 0)
    exact, plain, parallel = namespace["exact"], namespace["plain"], namespace["parallel"]
    assert exact.logits.shape == namespace["approx"].logits.shape == (100, 2)
    np.testing.assert_allclose(plain.logits, exact.logits, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose([plain.marginal_loglik, parallel.marginal_loglik], exact.marginal_loglik, rtol=1e-5)


def test_library_page_ictd_example_runs_and_theorem_1_holds(run_example):
    namespace = run_example("docs/library.md", 1)[0]
    v_tf, v_td = np.asarray(namespace["v_tf"]), np.asarray(namespace["v_td"])
    assert v_tf.shape == v_td.shape == (16,)
    np.testing.assert_allclose(v_tf, v_td, rtol=1e-4, atol=1e-5)
    assert np.abs(v_tf).max() > 0


def test_experiment_table_matches_the_catalog():
    table = (ROOT / "docs" / "experiments.md").read_text()
    listed = set(re.findall(r"^\| `([a-z]+\.[a-z0-9-]+)` \|", table, re.M))
    assert listed == set(EXPERIMENTS)


def test_library_page_optimizer_example_runs(run_example):
    namespace, printed, _ = run_example("docs/library.md", 4)
    assert namespace["result"].val_loss.shape == (2,) and printed.count("held-out loss") == 2


def test_library_page_ringworld_example_runs(run_example):
    namespace, _, folder = run_example("docs/library.md", 3)  # the example writes its checkpoint under ./checkpoints
    assert namespace["result"].metrics["episode_return"].shape == (20,)
    assert (folder / "checkpoints" / "deep-alf.eqx").exists()


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

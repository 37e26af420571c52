"""The package layout's rules, read from the import statements: layers know no study and no RL (a memory adapter
for the PPO agents lives in memlab.rl), rl knows no study, no study imports another, nothing below the arena
imports it (the arena uses the studies' public references, not the other way round). Also: every summary template
an experiment reads ships in the wheel."""

import ast
import fnmatch
import tomllib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "memlab"
STUDIES = ("belief", "ictd", "pissm", "recall")


def _imports(package: str) -> dict[str, set[str]]:
    found = {}
    for path in sorted((SRC / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        found[path.relative_to(SRC).as_posix()] = {n for n in names if n.startswith("memlab.")}
    return found


ABOVE = ("memlab.arena", *(f"memlab.{s}" for s in STUDIES))  # what layers and rl must not import


@pytest.mark.parametrize("package, forbidden", [("layers", ("memlab.rl", *ABOVE)), ("rl", ABOVE)]
                         + [(s, ("memlab.arena", *(f"memlab.{t}" for t in STUDIES if t != s))) for s in STUDIES])
def test_imports_follow_the_layout(package, forbidden):
    bad = {f: sorted(n for n in names if n.startswith(forbidden)) for f, names in _imports(package).items()}
    assert not {f: n for f, n in bad.items() if n}


@pytest.mark.parametrize("study", STUDIES)
def test_no_library_module_imports_the_experiments(study):
    """Within a study, only the experiments package (and the catalog, outside) import the experiments."""
    experiments = f"memlab.{study}.experiments"
    bad = {f: sorted(n for n in names if n.startswith(experiments)) for f, names in _imports(study).items()
           if not f.startswith(f"{study}/experiments/")}
    assert not {f: n for f, n in bad.items() if n}


def test_summary_templates_are_package_data():
    """Each ``summary_text(__package__, name)`` names a file ``summaries/<name>.md`` beside its module, every such
    file is read by one, and pyproject.toml's package data ships them all."""
    read = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "summary_text":
                read.add((path.parent / "summaries" / f"{node.args[1].value}.md").relative_to(SRC).as_posix())
    files = {p.relative_to(SRC).as_posix() for p in SRC.rglob("summaries/*")}
    assert read == files
    pyproject = tomllib.loads((SRC.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["memlab"]
    assert not {f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)}

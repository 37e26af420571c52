"""The package layout's rules, read from the import statements: layers know no study and no RL (a memory adapter
for the PPO agents lives in memlab.rl), rl knows no study, no study imports another, and nothing below the arena
imports it (the arena uses the studies' public references, not the other way round). An import from another package
goes through that package's public surface: names in its ``__all__``, imported from the package itself. The core
top-level modules (memlab/scan.py, memlab/logspace.py, memlab/kalman.py, ...) are open to every package."""

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "memlab"
STUDIES = ("belief", "ictd", "pissm", "recall")
PACKAGES = ("layers", "rl", "arena", *STUDIES)


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


def _package(module: str) -> str | None:
    """The package a module ``memlab.<package>...`` lives in; None for the core top-level modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else None


def _cross_package_imports() -> list[tuple[str, int, str, list[str]]]:
    """(file, line, module, names) of every ``from memlab.<B>... import names`` / ``import memlab.<B>...`` in a file
    of another package (or of the core); names is None for a plain ``import``."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        own = rel.split("/")[0] if "/" in rel else None
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [(node.module, [alias.name for alias in node.names])]
            elif isinstance(node, ast.Import):
                targets = [(alias.name, None) for alias in node.names]
            else:
                continue
            for module, names in targets:
                other = _package(module) if module.startswith("memlab.") else None
                if other is not None and other != own:
                    found.append((rel, node.lineno, module, names))
    return found


def test_imports_across_packages_go_through_the_public_api():
    """``from memlab.belief import log_belief`` (a name in ``memlab.belief.__all__``) from the arena, never
    ``from memlab.belief.filters import ...``: what one package takes from another is that package's ``__all__``."""
    imports = _cross_package_imports()
    assert len(imports) > 10  # the walk sees the cross-package imports (the arena alone has several)
    bad = []
    for rel, line, module, names in imports:
        package = "memlab." + module.split(".")[1]
        if module != package or names is None:
            bad.append(f"{rel}:{line}: {module} is not the package {package}")
            continue
        public = set(importlib.import_module(package).__all__)
        bad += [f"{rel}:{line}: {name} is not in {package}.__all__" for name in names if name not in public]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_exists(package):
    """Each package's ``__all__`` names only what the package really has."""
    module = importlib.import_module(f"memlab.{package}")
    assert [name for name in module.__all__ if not hasattr(module, name)] == []

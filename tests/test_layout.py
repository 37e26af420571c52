"""The package layout's rules, read from the import statements: layers know no study and no RL (a memory adapter
for the PPO agents lives in memlab.rl), rl knows no study, no study imports another, nothing below the arena
imports it (the arena uses the studies' public references, not the other way round), and no module imports itself
through others. An import from another package goes through that package's public surface: names in its
``__all__``, imported from the package itself. The core top-level modules (memlab/scan.py, memlab/logspace.py,
memlab/kalman.py, ...) are open to every package. Also: every summary template an experiment reads ships in the
wheel."""

import ast
import fnmatch
import importlib
import tomllib
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


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the other memlab modules it imports, read from every import statement (in functions and under ``if
    TYPE_CHECKING:`` too): relative imports resolved, ``from memlab.x import y`` an edge to ``memlab.x.y`` where that
    is a module, else to ``memlab.x``."""
    modules = {}
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        package = (name if path.name == "__init__.py" else name.rpartition(".")[0]).split(".")
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # from . import x, from ..y import z
                    base = ".".join([*package[:len(package) - node.level + 1], *filter(None, [node.module])])
                targets.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module: every import circle (Tarjan's algorithm)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = [stack.pop()]
            while component[-1] != v:
                component.append(stack.pop())
            on_stack.difference_update(component)
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_cycles():
    """No module imports, directly or through others, a module that imports it, not even for annotations only (``if
    TYPE_CHECKING:``) or inside a function: shared types live in the lower module."""
    assert import_cycles(import_graph()) == []


def test_import_cycles_are_found():
    """The check above can fail: two circles, one of them of three modules, beside modules outside any circle."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f", "d"}, "f": {"e"}, "g": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"], ["e", "f"]]


def test_import_graph_reads_type_checking_and_relative_imports(tmp_path):
    package = tmp_path / "memlab"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import low\n")
    (package / "sub" / "low.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                            "    from memlab.sub.high import Thing\n")
    (package / "sub" / "high.py").write_text("from .low import x\nfrom memlab import sub\nimport numpy\n")
    graph = import_graph(package)
    assert graph == {"memlab": set(), "memlab.sub": {"memlab.sub.low"}, "memlab.sub.low": {"memlab.sub.high"},
                     "memlab.sub.high": {"memlab.sub.low", "memlab.sub"}}
    assert import_cycles(graph) == [["memlab.sub", "memlab.sub.high", "memlab.sub.low"]]


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


def _cell_functions() -> list:
    """Every cell function of the package (``store.cell``): module-level functions with a ``cell_name``."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        module = importlib.import_module(".".join(("memlab", *path.relative_to(SRC).with_suffix("").parts))
                                         .removesuffix(".__init__"))
        found += [f for f in vars(module).values() if callable(f) and getattr(f, "cell_name", None)
                  and getattr(f, "__module__", None) == module.__name__]
    return found


def _config_class_names() -> set[str]:
    from memlab import catalog

    return {type(config).__name__ for e in catalog.EXPERIMENTS.values() for config in e.profiles.values()}


def _whole_config_parameters(cells: list, configs: set[str]) -> list[str]:
    """'module.function(parameter)' of every cell parameter annotated with an experiment's config class."""
    import inspect

    return [f"{f.__module__}.{f.__name__}({name})" for f in cells
            for name, p in inspect.signature(f).parameters.items()
            if getattr(p.annotation, "__name__", p.annotation) in configs]


def test_cells_take_the_values_they_read_not_an_experiments_whole_config():
    """A cell is stored by its arguments' values: one given the whole experiment config would be recomputed (and
    its stored result orphaned) whenever a value it never reads changes, e.g. the number of cells of the sweep."""
    cells, configs = _cell_functions(), _config_class_names()
    assert len(cells) > 30 and len(configs) > 20
    assert _whole_config_parameters(cells, configs) == []


def test_a_cell_given_a_whole_config_is_found():
    import dataclasses

    from memlab.store import cell

    @dataclasses.dataclass(frozen=True)
    class Nothing:
        pass

    @cell("test.whole-config", result=Nothing)
    def whole(cfg: "VerifyConfig", kind: str) -> dict:  # noqa: F821 -- the annotation as a string, as modules have
        return {}

    assert _whole_config_parameters([whole], {"VerifyConfig"}) == [f"{__name__}.whole(cfg)"]


def _cells_without_their_result_type(cells: list) -> list[str]:
    """'module.function' of every cell function that declares no result type (``store.cell(..., result=...)``) or
    whose return annotation is not that type (``-> dict``, another type)."""
    import inspect

    untyped = []
    for f in cells:
        declared = {k.__name__ for k in getattr(f, "cell_result", None) or ()}
        annotation = inspect.signature(f).return_annotation
        named = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
        if not declared or {n.strip() for n in named.split("|")} != declared:
            untyped.append(f"{f.__module__}.{f.__name__}")
    return untyped


def test_every_cell_returns_the_result_type_it_declares():
    """A cell's result is a declared type (a frozen dataclass its sweep gives back), not a dict read by string keys:
    a typo in a field's name is an error where it is made and the fields are documented in one place."""
    cells = _cell_functions()
    assert len(cells) > 30
    assert _cells_without_their_result_type(cells) == []


def test_a_cell_without_its_result_type_is_found():
    import dataclasses

    from memlab.store import cell

    @dataclasses.dataclass(frozen=True)
    class Numbers:
        x: float

    @cell("test.dict", result=Numbers)
    def as_dict(n: int) -> dict:
        return {"x": n}

    @cell("test.typed", result=Numbers)
    def typed(n: int) -> "Numbers":
        return Numbers(n)

    assert _cells_without_their_result_type([as_dict, typed]) == [f"{__name__}.as_dict"]

"""Rooms of the right size, and no lab notebook in the code: an experiment module holds at most 300 lines, any other
module 400; a function at most 60 lines, a ``make_train`` (with the ``train`` it returns) 90, as is a ``make_epoch``
(the training epoch that ``make_train`` and ``make_chunked_train`` share); and no comment,
docstring or summary template names an issue number (history lives in git)."""

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "memlab"
EXPERIMENT_MODULE_LINES, MODULE_LINES = 300, 400
FUNCTION_LINES, MAKE_TRAIN_LINES = 60, 90
TRAINING_BUILDERS = ("make_train", "make_epoch")
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+")


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def oversized_modules(paths: list[Path], root: Path = SRC) -> list[str]:
    """Modules over their limit, named relative to ``root``'s parent."""
    found = []
    for path in paths:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        limit = EXPERIMENT_MODULE_LINES if "experiments" in path.parts else MODULE_LINES
        if lines > limit:
            found.append(f"{path.relative_to(root.parent)}: {lines} lines > {limit}")
    return found


def oversized_functions(path: Path, root: Path = SRC) -> list[str]:
    """Functions longer than their limit; the functions nested in a ``make_train`` count toward its own limit."""
    found, name = [], path.relative_to(root.parent)

    def visit(node, inside_make_train=False):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = child.end_lineno - child.lineno + 1
                limit = MAKE_TRAIN_LINES if child.name in TRAINING_BUILDERS else FUNCTION_LINES
                if not inside_make_train and lines > limit:
                    found.append(f"{name}:{child.lineno} {child.name}: {lines} lines > {limit}")
                visit(child, inside_make_train or child.name in TRAINING_BUILDERS)
            else:
                visit(child, inside_make_train)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def test_modules_are_at_most_their_size():
    assert oversized_modules(_modules()) == []


def test_functions_are_at_most_their_size():
    assert [f for path in _modules() for f in oversized_functions(path)] == []


def test_the_size_checks_can_fail(tmp_path):
    long = tmp_path / "experiments" / "long.py"
    long.parent.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    nested = body.replace("    x", "        x")
    long.write_text(f"def f():\n{body}\n\n\ndef make_train():\n    def train():\n{nested}\n" + "\n" * 240)
    lines = len(long.read_text().splitlines())
    assert lines > 300
    assert oversized_modules([long], tmp_path) == [f"{long.relative_to(tmp_path.parent)}: {lines} lines > 300"]
    # f is over; make_train (63 lines) is not, nor is the train nested in it (62)
    assert [f.split(" ", 1)[1] for f in oversized_functions(long, tmp_path)] == ["f: 62 lines > 60"]


def test_no_issue_numbers_in_the_code():
    """Comments, docstrings and summary templates say why, not which issue asked for it."""
    found = [f"{path.relative_to(SRC.parent)}:{i}" for path in [*_modules(), *sorted(SRC.rglob("*.md"))]
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if ISSUE.search(line)]
    assert found == []

"""``memlab run ... --plugin FILE.py`` (or a module name): the user's code that registers layers or tasks
(``memlab.arena.register_layer``), imported before the run and again, on demand, in every worker process.

The plugins are kept in the environment variable MEMLAB_PLUGINS (os.pathsep-separated), which worker processes
inherit; a registry that meets an unknown name calls :func:`load_plugins` before it gives up.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["add_plugins", "load_plugins"]

VARIABLE = "MEMLAB_PLUGINS"
_loaded: set[str] = set()


def _import(spec: str) -> None:
    if spec in _loaded:
        return
    if spec.endswith(".py"):
        path = Path(spec).resolve()
        if not path.is_file():
            raise ValueError(f"plugin file {spec!r} does not exist")
        name = f"memlab_plugin_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # before running it, so pickled references to its functions resolve
        _loaded.add(spec)
        module_spec.loader.exec_module(module)
        import cloudpickle  # its functions travel by value: a worker of a Ray cluster cannot import the file

        cloudpickle.register_pickle_by_value(module)
    else:
        _loaded.add(spec)
        try:
            importlib.import_module(spec)
        except ModuleNotFoundError as e:
            _loaded.discard(spec)
            raise ValueError(f"plugin module {spec!r} cannot be imported: {e}") from e


def add_plugins(specs: list[str]) -> None:
    """Import ``specs`` (paths of .py files, or module names) now, and record them for worker processes."""
    specs = [str(Path(s).resolve()) if s.endswith(".py") else s for s in specs]
    known = [s for s in os.environ.get(VARIABLE, "").split(os.pathsep) if s]
    os.environ[VARIABLE] = os.pathsep.join(dict.fromkeys(known + specs))
    for spec in specs:
        _import(spec)


def load_plugins() -> None:
    """Import the plugins recorded in MEMLAB_PLUGINS that this process has not imported yet."""
    for spec in os.environ.get(VARIABLE, "").split(os.pathsep):
        if spec:
            _import(spec)

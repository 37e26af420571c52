"""``memlab run NAME --set field=value``: change fields of a profile's config from the command line.

A value is read by the type of the field's current value: ints, floats, bools (true/false), strings, and tuples as
comma-separated items (``--set layers=gru,lru``; an empty tuple's items by its annotation, ``tuple[int, ...]``); a
nested config's field by a dotted path (``--set train.steps=200``); a field annotated ``int | None`` (or float, str)
by its value or ``none``. Any other field, or a value of the wrong type, is a ValueError naming it.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable
from typing import Any

__all__ = ["apply_overrides"]


def _parse(path: str, text: str, current: Any, item_type: type = str) -> Any:
    if isinstance(current, bool):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"--set {path}: expected true or false, got {text!r}")
        return text.lower() == "true"
    if isinstance(current, tuple):
        items = [s.strip() for s in text.split(",") if s.strip()]
        like = current[0] if current else item_type()
        return tuple(_parse(path, item, like) for item in items)
    for kind in (int, float, str):
        if isinstance(current, kind):
            try:
                return kind(text)
            except ValueError:
                raise ValueError(f"--set {path}: expected {kind.__name__}, got {text!r}") from None
    raise ValueError(f"--set {path}: a field holding {type(current).__name__} cannot be set from the command line")


def _set(config: Any, names: list[str], text: str, path: str) -> Any:
    fields = {f.name for f in dataclasses.fields(config)}
    if names[0] not in fields:
        raise ValueError(f"--set {path}: {type(config).__name__} has no field {names[0]!r}; fields: "
                         f"{', '.join(sorted(fields))}")
    current = getattr(config, names[0])
    if len(names) > 1:
        if not dataclasses.is_dataclass(current):
            raise ValueError(f"--set {path}: {names[0]!r} is not a nested config")
        value = _set(current, names[1:], text, path)
    elif dataclasses.is_dataclass(current):
        raise ValueError(f"--set {path}: {names[0]!r} is a nested config; set its fields, e.g. {path}.FIELD=VALUE")
    else:
        optional = _optional_type(config, names[0])
        if optional and text.lower() == "none":
            value = None
        else:
            value = _parse(path, text, optional() if current is None and optional else current,
                           _item_type(config, names[0]))
    return dataclasses.replace(config, **{names[0]: value})


def _annotation_args(config: Any, name: str) -> tuple:
    """The arguments of the field's annotation (``tuple[int, ...]`` -> (int, ...)); () if it cannot be read."""
    try:
        return typing.get_args(typing.get_type_hints(type(config)).get(name))
    except (NameError, TypeError):
        return ()


def _optional_type(config: Any, name: str) -> type | None:
    """``T`` where the field is annotated ``T | None`` (T one of int, float, str), else None: such a field is set
    from its value's text, or to None by ``none``."""
    args = _annotation_args(config, name)
    kinds = [a for a in args if a is not type(None)]
    return kinds[0] if type(None) in args and len(kinds) == 1 and kinds[0] in (int, float, str) else None


def _item_type(config: Any, name: str) -> type:
    """The item type a tuple field is annotated with (``tuple[int, ...]`` -> int; str if unknown): an empty
    tuple has no item to read it from."""
    args = _annotation_args(config, name)
    return args[0] if args and args[0] in (int, float, str, bool) else str


def apply_overrides(config: Any, assignments: Iterable[str]) -> Any:
    """``config`` with every ``path=value`` of ``assignments`` applied (module docstring)."""
    for assignment in assignments:
        path, sep, text = assignment.partition("=")
        if not sep or not path.strip():
            raise ValueError(f"--set expects FIELD=VALUE, got {assignment!r}")
        config = _set(config, path.strip().split("."), text.strip(), path.strip())
    return config

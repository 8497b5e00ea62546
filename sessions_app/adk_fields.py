"""The ADK fields ctxadmin keeps without interpreting them (pure; no Django import).

A field of ADK's event models (``sessions_app.adk_shapes``) that ctxadmin does not read is
kept as given: its name must be one of its model's, a nested model must be an object (a
list or map of them, a list or map of objects) whose keys are that model's again, and a
free value must be JSON (strings, finite numbers, booleans, null, lists, string-keyed
objects) no deeper than ``MAX_DEPTH``. A key outside ADK's models is refused, its path
named.
"""

from __future__ import annotations

import math
from typing import Any

from ctxadmin.pruning import echoed
from sessions_app.adk_shapes import MODELS

MAX_DEPTH = 32


class KeptFieldError(ValueError):
    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _echo(key: str) -> str:
    return echoed(key)


def check_json(value: Any, path: str, depth: int = 0) -> None:
    """``value`` is plain JSON, at most ``MAX_DEPTH`` levels deep."""
    if depth > MAX_DEPTH:
        raise KeptFieldError(path, f"nests deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise KeptFieldError(path, "must be a finite number")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            check_json(item, f"{path}[{index}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise KeptFieldError(path, "keys must be strings")
            check_json(item, f"{path}.{_echo(key)}", depth + 1)
        return
    raise KeptFieldError(path, "must be JSON")


def unknown_key(value: dict, model: str, path: str, also: frozenset[str] = frozenset()) -> None:
    """Refuse the first key of ``value`` that is neither ``model``'s nor in ``also``."""
    fields = MODELS[model]
    unknown = sorted(key for key in value if key not in fields and key not in also)
    if unknown:
        name = _echo(str(unknown[0]))
        raise KeptFieldError(f"{path}.{name}" if path else name, "unknown field")


def check_field(value: Any, kind: str | None, path: str, depth: int) -> None:
    """One field's value against what the table says it holds."""
    if value is None:
        return
    if kind is None:
        check_json(value, path, depth)
    elif kind.startswith("["):
        if not isinstance(value, list):
            raise KeptFieldError(path, "must be a list")
        for index, item in enumerate(value):
            check_model(item, kind[1:-1], f"{path}[{index}]", depth=depth + 1)
    elif kind.startswith("{"):
        if not isinstance(value, dict):
            raise KeptFieldError(path, "must be an object")
        for key, item in value.items():
            check_model(item, kind[1:-1], f"{path}.{_echo(str(key))}", depth=depth + 1)
    else:
        check_model(value, kind, path, depth=depth)


def check_model(
    value: Any, model: str, path: str, *, skip: frozenset[str] = frozenset(), depth: int = 0
) -> None:
    """``value`` is an object of ADK's ``model``; keys in ``skip`` are the caller's (it
    checks them itself)."""
    if depth > MAX_DEPTH:
        raise KeptFieldError(path, f"nests deeper than {MAX_DEPTH} levels")
    if not isinstance(value, dict):
        raise KeptFieldError(path, "must be an object")
    unknown_key(value, model, path, skip)
    fields = MODELS[model]
    for key, item in value.items():
        if key not in skip:
            check_field(item, fields[key], f"{path}.{key}" if path else key, depth + 1)

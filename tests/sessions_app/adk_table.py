"""Writes ``sessions_app/adk_shapes.py`` from the installed google-adk's pydantic models.

``python -m tests.sessions_app.adk_table`` regenerates the module; ``test_adk_shapes``
fails while the committed module and the installed ADK differ.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path

import pydantic

MODULE = Path(__file__).resolve().parents[2] / "sessions_app" / "adk_shapes.py"

HEADER = '''"""The shapes of the pinned google-adk {version} event models (pure data; generated).

For each pydantic model reachable from ``google.adk.events.Event``: its field names as
``Event.model_dump(mode="json")`` writes them, and what each holds: the name of a nested
model, ``[Model]`` for a list of them, ``{{Model}}`` for a string-keyed map of them, or
``None`` for a free JSON value. Written by ``python -m tests.sessions_app.adk_table``;
``tests/sessions_app/test_adk_shapes.py`` fails when it and the installed ADK differ.
"""

from __future__ import annotations

ADK_VERSION = "{version}"

'''


def _models_in(annotation) -> list[type[pydantic.BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return [annotation]
    found = []
    for arg in typing.get_args(annotation):
        found += _models_in(arg)
    return found


def _strip_optional(annotation):
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _strip_optional(args[0])
    return annotation


def field_kind(annotation) -> str | None:
    annotation = _strip_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation.__name__
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and len(args) == 1:
        inner = _strip_optional(args[0])
        if isinstance(inner, type) and issubclass(inner, pydantic.BaseModel):
            return f"[{inner.__name__}]"
    if origin is dict and len(args) == 2:
        inner = _strip_optional(args[1])
        if isinstance(inner, type) and issubclass(inner, pydantic.BaseModel):
            return f"{{{inner.__name__}}}"
    if _models_in(annotation):
        raise ValueError(f"an unsupported model-bearing annotation: {annotation!r}")
    return None


def shapes() -> dict[str, dict[str, str | None]]:
    from google.adk.events import Event

    table: dict[str, dict[str, str | None]] = {}

    def walk(model: type[pydantic.BaseModel]) -> None:
        if model.__name__ in table:
            return
        table[model.__name__] = {}
        for name, field in model.model_fields.items():
            table[model.__name__][name] = field_kind(field.annotation)
            for nested in _models_in(field.annotation):
                walk(nested)

    walk(Event)
    return {name: dict(sorted(fields.items())) for name, fields in sorted(table.items())}


def render() -> str:
    from importlib.metadata import version

    lines = [HEADER.format(version=version("google-adk"))]
    lines.append("MODELS: dict[str, dict[str, str | None]] = {\n")
    for model, fields in shapes().items():
        lines.append(f'    "{model}": {{\n')
        for name, kind in fields.items():
            shown = "None" if kind is None else f'"{kind}"'
            lines.append(f'        "{name}": {shown},\n')
        lines.append("    },\n")
    lines.append("}\n")
    return "".join(lines)


if __name__ == "__main__":
    MODULE.write_text(render())

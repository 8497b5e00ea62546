"""Strict JSON decoding for request bodies (pure; no Django import).

Rejects what PostgreSQL's jsonb or our canonical hashing cannot hold faithfully: invalid
UTF-8, duplicate keys, NaN/Infinity, integers outside 64 bits, NUL characters, lone
surrogates (a ``\\ud800`` escape: valid JSON text, but no UTF-8 can encode it), and nesting
deeper than a limit. ``loads_strict`` is the one decoder for every door that reads JSON.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ctxadmin.pruning import echoed

MAX_INT = 2**63 - 1
MIN_INT = -(2**63)


# A NUL or a surrogate: a string holding one cannot be stored (jsonb, text) or encoded.
_REFUSED_CHARACTER = re.compile(r"[\x00\ud800-\udfff]")
# Text decoded from UTF-8 holds no surrogate; JSON gets one only from a \uD800-\uDFFF escape.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class JsonInputError(ValueError):
    def __init__(self, code: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    result: dict = {}
    for key, value in pairs:
        if key in result:
            raise JsonInputError(
                "malformed_json", f"duplicate key {echoed(key)!r} in a JSON object"
            )
        result[key] = value
    return result


def _parse_int(text: str) -> int:
    value = int(text) if len(text) <= 20 else None
    if value is None or not MIN_INT <= value <= MAX_INT:
        raise JsonInputError("number_out_of_range", "an integer is outside 64 bits")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise JsonInputError("number_out_of_range", "a number is too large")
    return value


def _reject_constant(name: str) -> Any:
    raise JsonInputError("malformed_json", f"{name} is not valid JSON")


def _holds_nul(text: str) -> bool:
    return "\x00" in text


def check_tree(value: Any, max_depth: int, name: str = "body", *, surrogates: bool = True) -> None:
    """Iteratively check nesting depth and the characters of every key and string (no
    recursion to exhaust); a refused character is reported with the path that holds it.
    ``surrogates=False`` looks for NUL only (a tenth of the cost on long texts), for a value
    known to hold no surrogate."""
    refused = _REFUSED_CHARACTER.search if surrogates else _holds_nul
    stack: list[tuple[Any, int, tuple | None]] = [(value, 1, None)]
    while stack:
        node, depth, where = stack.pop()
        if isinstance(node, dict):
            if depth > max_depth:
                raise _too_deep(name, max_depth)
            for key, child in node.items():
                if refused(key):
                    raise _refused_character(key, (where, key), name)
                stack.append((child, depth + 1, (where, key)))
        elif isinstance(node, list):
            if depth > max_depth:
                raise _too_deep(name, max_depth)
            for index, child in enumerate(node):
                stack.append((child, depth + 1, (where, index)))
        elif isinstance(node, str) and refused(node):
            raise _refused_character(node, where, name)


def _too_deep(name: str, max_depth: int) -> JsonInputError:
    return JsonInputError("json_too_deep", f"the {name} nests deeper than {max_depth} levels")


def _refused_character(text: str, where: tuple | None, name: str) -> JsonInputError:
    character = _REFUSED_CHARACTER.search(text).group()
    field = json_path(where) or name
    if character == "\x00":
        message = f"a NUL character at {field}"
    else:
        message = f"a lone surrogate (\\u{ord(character):04x}) at {field}: no UTF-8 can encode it"
    return JsonInputError("invalid_characters", message, {"field": field})


def shown(text: str) -> str:
    """A client's key as an error may name it: NUL and surrogates escaped (the answer must
    itself be valid UTF-8 JSON), bounded and never a credential."""
    escaped = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    return echoed(escaped)


def json_path(where: tuple | None) -> str:
    """``events[0].content.parts[1]`` for the linked ``(parent, key)`` pairs of ``check_tree``
    (empty for the whole document)."""
    steps: list[str | int] = []
    while where is not None:
        where, step = where
        steps.append(step)
    path = ""
    for step in reversed(steps):
        if isinstance(step, int):
            path += f"[{step}]"
        else:
            path += f".{shown(step)}" if path else shown(step)
    return path


def loads_strict(raw: bytes, max_depth: int, *, name: str = "body") -> Any:
    """The JSON document in ``raw``, or :class:`JsonInputError` (its code, a message naming
    ``name`` or the path inside it, and ``details.field`` for a refused character)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonInputError(
            "invalid_utf8", f"the {name} is not valid UTF-8 (byte {exc.start})"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        value = json.loads(
            text,
            object_pairs_hook=_pairs,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_reject_constant,
        )
    except RecursionError:
        raise _too_deep(name, max_depth) from None
    except json.JSONDecodeError as exc:
        raise JsonInputError(
            "malformed_json",
            f"the {name} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        ) from None
    surrogates = "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None
    check_tree(value, max_depth, name, surrogates=surrogates)
    return value

"""Strict JSON decoding for request bodies (pure; no Django import).

Rejects what PostgreSQL's jsonb or our canonical hashing cannot hold faithfully: invalid
UTF-8, duplicate keys, NaN/Infinity, integers outside 64 bits, NUL characters, and nesting
deeper than a limit.
"""

from __future__ import annotations

import json
from typing import Any

from ctxadmin.pruning import echoed

MAX_INT = 2**63 - 1
MIN_INT = -(2**63)


class JsonInputError(ValueError):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


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
        raise JsonInputError("number_out_of_range", "an integer in the body is outside 64 bits")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise JsonInputError("number_out_of_range", "a number in the body is too large")
    return value


def _reject_constant(name: str) -> Any:
    raise JsonInputError("malformed_json", f"{name} is not valid JSON")


def check_tree(value: Any, max_depth: int) -> None:
    """Iteratively check nesting depth and NUL characters (no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > max_depth:
                raise JsonInputError(
                    "json_too_deep", f"the body nests deeper than {max_depth} levels"
                )
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, child in items:
                if isinstance(key, str) and "\x00" in key:
                    raise JsonInputError("invalid_characters", "the body contains a NUL character")
                stack.append((child, depth + 1))
        elif isinstance(node, str) and "\x00" in node:
            raise JsonInputError("invalid_characters", "the body contains a NUL character")


def loads_strict(raw: bytes, max_depth: int) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonInputError(
            "invalid_utf8", f"the body is not valid UTF-8 (byte {exc.start})"
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
        raise JsonInputError(
            "json_too_deep", f"the body nests deeper than {max_depth} levels"
        ) from None
    except json.JSONDecodeError as exc:
        raise JsonInputError(
            "malformed_json",
            f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        ) from None
    check_tree(value, max_depth)
    return value

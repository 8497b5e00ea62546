"""Memory-search filters: a small JSON language compiled to one SQL condition (pure).

The condition is meant to be ANDed with the (app, user) scope by the caller, so it can only
narrow a search. It refers to exactly three columns of ``memory_memoryentry`` (``metadata``,
``session_id``, ``created_at``), unqualified; every key and value travels as a ``%s``
parameter, and the only literal text in the SQL is fixed by this module. Every problem raises
``FilterError(path, message)`` before any SQL exists.

Grammar (a JSON object; all of its conditions are ANDed)::

    filter      := null | { entry, ... }                        at most 32 conditions in all,
                                                                and 64 KiB (UTF-8) of string
                                                                values (metadata, session ids)
    entry       := "session_id": session | "created_at": created | KEY: value
    KEY         := 1-64 characters of [A-Za-z0-9_.:-]           a dotted key is one key name
    value       := scalar                                       same as {"$eq": scalar}
                 | { op: operand, ... }                         one or more, ANDed
    op          := "$eq" scalar | "$ne" scalar
                 | "$in" [scalar, ...] | "$nin" [scalar, ...]   1-100 items
                 | ("$gt" | "$gte" | "$lt" | "$lte") (number | DATE)
                 | "$exists" boolean
    scalar      := string | number | boolean | null             numbers finite
    session     := string | { "$eq": string } | { "$in": [string, ...] }   strings <= 128 chars
    created     := { ("$gt" | "$gte" | "$lt" | "$lte"): DATE, ... }
    DATE        := YYYY-MM-DD                                   midnight UTC
                 | YYYY-MM-DD(T| )HH:MM[:SS[.f{1,9}]](Z|+HH[[:]MM]|-HH[[:]MM])   zone <= 15:59

Semantics of metadata conditions:

- equality (``$eq``, ``$in`` and a bare scalar) is typed and uses jsonb containment
  (``metadata @> '{"k": v}'``), which a GIN index on ``metadata`` can serve: ``10`` matches
  ``10`` and ``10.0`` but not ``"10"`` or ``true``; ``null`` matches a key holding JSON null,
  never a missing key; a string never matches an array that contains it;
- ``$ne`` and ``$nin`` are the negation of the above, so an entry WITHOUT the key matches
  them (``{"k": {"$ne": "a"}}`` keeps every entry whose ``k`` is not exactly ``"a"``);
- a number operand of ``$gt``/``$gte``/``$lt``/``$lte`` compares, exactly (as ``numeric``),
  only metadata values that are JSON numbers; a DATE operand compares only metadata strings
  that are DATEs as above, or a date-time without zone (read as UTC); any other value (a
  number, a non-date string, an impossible date such as ``2024-02-30``) simply does not
  match, and never raises;
- ``$exists: true`` matches an entry holding the key, whatever its value (null included).

``session_id`` and ``created_at`` address the entry's columns: ``session_id`` is ``""`` for
an entry without session provenance; ``created_at`` takes range operators only.
Logical operators (``$and``, ``$or``, ``$not``, ``$nor``) and nested paths are not supported.

Cost: the list of an ``$in``/``$nin`` is one array parameter (``metadata @> ANY(...)``), so
the largest filter is 32 clauses for the planner, not 3,200 (which took it 0.4-0.8 s to plan
on an empty scope), and the string cap bounds the text parsed, escaped and sent.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

from ctxadmin.pruning import REDACTED, looks_like_secret

__all__ = [
    "MAX_CONDITIONS",
    "MAX_IN_VALUES",
    "MAX_STRING_BYTES",
    "FilterError",
    "compile_filter",
]

MAX_CONDITIONS = 32
MAX_IN_VALUES = 100
MAX_KEY_LENGTH = 64
MAX_SESSION_ID_LENGTH = 128
MAX_STRING_BYTES = 64 * 1024

_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,64}", re.ASCII)

# DATE grammar, shared by Python (operand validation) and PostgreSQL (guarding casts of
# metadata strings). It admits only real calendar dates (leap years included) of years
# 0001-9999, hours 00-23 and zone offsets PostgreSQL accepts, so a string it matches always
# casts without error. Only ASCII digits are spelled out ([0-9], never \d), and the
# patterns hold neither quotes, backslashes nor percent signs, so they are safe SQL literals.
_DATE = (
    "(?!0000)(?:"
    "[0-9]{4}-(?:"
    "(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    "|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29"
    ")"
)
_TIME = "(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:[.][0-9]{1,9})?)?"
_ZONE = "(?:Z|[+-](?:0[0-9]|1[0-5])(?::?[0-5][0-9])?)"
_ZONED_BODY = f"{_DATE}[T ]{_TIME}{_ZONE}"
_LOCAL_BODY = f"{_DATE}(?:[T ]{_TIME})?"

_ZONED = re.compile(_ZONED_BODY, re.ASCII)
_LOCAL = re.compile(_LOCAL_BODY, re.ASCII)
_DATE_ONLY = re.compile(_DATE, re.ASCII)

_METADATA = "metadata"
_SESSION_ID = "session_id"
_CREATED_AT = "created_at"
_RESERVED = frozenset({_SESSION_ID, _CREATED_AT})

_LOGICAL = frozenset({"$and", "$or", "$not", "$nor"})
_RANGE_SQL = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_METADATA_OPERATORS = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists")
_SESSION_OPERATORS = ("$eq", "$in")

_CONTAINS = f"{_METADATA} @> %s::jsonb"
# One array parameter however many values: the planner sees one clause (a GIN bitmap scan
# per value at run time), where an OR of a hundred containments costs it a bitmap path each.
_CONTAINS_ANY = f"{_METADATA} @> ANY(%s::jsonb[])"
_HAS_KEY = f"{_METADATA} ? %s"
_NUMBER_VALUE = (
    f"CASE WHEN jsonb_typeof({_METADATA} -> %s) = 'number' THEN ({_METADATA} -> %s)::numeric END"
)
_DATE_VALUE = (
    f"CASE WHEN ({_METADATA} ->> %s) ~ '^{_ZONED_BODY}$' THEN ({_METADATA} ->> %s)::timestamptz"
    f" WHEN ({_METADATA} ->> %s) ~ '^{_LOCAL_BODY}$'"
    f" THEN ({_METADATA} ->> %s)::timestamp AT TIME ZONE 'UTC' END"
)

_json_string = json.JSONEncoder(ensure_ascii=False).encode  # a str: straight to the C encoder

_DATE_HELP = (
    "expected an ISO 8601 date (YYYY-MM-DD) or date-time with a time zone "
    "(YYYY-MM-DDTHH:MM[:SS[.fff]] followed by Z or +HH:MM / -HH:MM)"
)


class FilterError(ValueError):
    """A filter that cannot be compiled; ``path`` names the offending part."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def compile_filter(filter: dict | None) -> tuple[str, list]:
    """Compile ``filter`` into ``(sql, params)``; ``None`` or ``{}`` give ``("TRUE", [])``."""
    if filter is None:
        return "TRUE", []
    if not isinstance(filter, dict):
        raise FilterError("filter", "must be a JSON object")
    compiler = _Compiler()
    for key, value in filter.items():
        compiler.entry(key, value)
    return compiler.result()


class _Compiler:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.params: list = []
        self.string_bytes = 0

    def result(self) -> tuple[str, list]:
        if not self.parts:
            return "TRUE", []
        return " AND ".join(f"({part})" for part in self.parts), self.params

    def add(self, sql: str, params: list) -> None:
        if len(self.parts) >= MAX_CONDITIONS:
            raise FilterError("filter", f"too many conditions: at most {MAX_CONDITIONS}")
        self.parts.append(sql)
        self.params.extend(params)

    def counted(self, value: Any) -> Any:
        """``value``, its UTF-8 bytes counted toward ``MAX_STRING_BYTES`` if it is a string."""
        if isinstance(value, str):
            self.string_bytes += len(value.encode("utf-8"))
            if self.string_bytes > MAX_STRING_BYTES:
                raise FilterError(
                    "filter",
                    f"too much text: at most {MAX_STRING_BYTES} bytes of string values in all",
                )
        return value

    def scalar(self, value: Any, path: str) -> Any:
        return self.counted(_scalar(value, path))

    def scalars(self, items: list, path: str, check) -> list:
        """``check(item, path)`` of each item, counted; an item's path is built only for its
        error (the largest filter checks thousands of values)."""
        checked = []
        for index, item in enumerate(items):
            try:
                checked.append(self.counted(check(item, path)))
            except FilterError as exc:
                if exc.path != path:
                    raise
                raise FilterError(f"{path}[{index}]", exc.message) from None
        return checked

    # ------------------------------------------------------------------ top level

    def entry(self, key: Any, value: Any) -> None:
        if not isinstance(key, str):
            raise FilterError(f"filter.{key!r}", "keys must be strings")
        path = f"filter.{_show(key)}"
        if key.startswith("$"):
            if key in _LOGICAL:
                raise FilterError(
                    path,
                    "logical operators are not supported; top-level conditions are always ANDed",
                )
            raise FilterError(path, "operators go inside a key's condition object")
        if key == _SESSION_ID:
            self.session_id(value, path)
        elif key == _CREATED_AT:
            self.created_at(value, path)
        else:
            if not _KEY.fullmatch(key):
                raise FilterError(
                    path,
                    f"metadata keys are 1-{MAX_KEY_LENGTH} characters of A-Z a-z 0-9 _ . : -",
                )
            self.metadata(key, value, path)

    # ------------------------------------------------------------------ metadata

    def metadata(self, key: str, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            self.add(_CONTAINS, [_containment(key, self.scalar(value, path), path)])
            return
        operators = _operators(value, path, _METADATA_OPERATORS)
        for op, operand in operators:
            op_path = f"{path}.{op}"
            if op == "$eq":
                self.add(_CONTAINS, [_containment(key, self.scalar(operand, op_path), op_path)])
            elif op == "$ne":
                self.add(
                    f"NOT ({_CONTAINS})",
                    [_containment(key, self.scalar(operand, op_path), op_path)],
                )
            elif op in ("$in", "$nin"):
                values = self.scalars(_items(operand, op_path), op_path, _scalar)
                documents = _unique(_containment(key, value, op_path) for value in values)
                sql = _CONTAINS_ANY
                self.add(sql if op == "$in" else f"NOT ({sql})", [_array_literal(documents)])
            elif op == "$exists":
                if not isinstance(operand, bool):
                    raise FilterError(op_path, "expected true or false")
                self.add(_HAS_KEY if operand else f"NOT ({_HAS_KEY})", [key])
            else:
                self.range(key, op, operand, op_path)

    def range(self, key: str, op: str, operand: Any, path: str) -> None:
        comparison = _RANGE_SQL[op]
        if _is_number(operand):
            bound = _decimal(_finite(operand, path), path)
            self.add(f"{_NUMBER_VALUE} {comparison} %s::numeric", [key, key, bound])
        elif isinstance(operand, str):
            bound = _date_operand(operand, path)
            self.add(f"{_DATE_VALUE} {comparison} %s::timestamptz", [key] * 4 + [bound])
        else:
            raise FilterError(path, f"expected a number or a date string; {_DATE_HELP}")

    # ------------------------------------------------------------------ columns

    def session_id(self, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            self.add(f"{_SESSION_ID} = %s", [self.counted(_session_value(value, path))])
            return
        for op, operand in _operators(value, path, _SESSION_OPERATORS):
            op_path = f"{path}.{op}"
            if op == "$eq":
                self.add(f"{_SESSION_ID} = %s", [self.counted(_session_value(operand, op_path))])
            else:
                values = _unique(self.scalars(_items(operand, op_path), op_path, _session_value))
                self.add(f"{_SESSION_ID} = ANY(%s)", [values])

    def created_at(self, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            raise FilterError(path, "expected an object of range operators ($gt, $gte, $lt, $lte)")
        for op, operand in _operators(value, path, tuple(_RANGE_SQL)):
            op_path = f"{path}.{op}"
            if not isinstance(operand, str):
                raise FilterError(op_path, _DATE_HELP)
            bound = _date_operand(operand, op_path)
            self.add(f"{_CREATED_AT} {_RANGE_SQL[op]} %s::timestamptz", [bound])


# ---------------------------------------------------------------------- values


def _show(key: str) -> str:
    """A client's key as an error path quotes it: bounded, a credential redacted."""
    if looks_like_secret(key[:4096]):
        return REDACTED
    return key if len(key) <= 80 else key[:80] + "..."


def _operators(value: dict, path: str, allowed: tuple[str, ...]) -> list[tuple[str, Any]]:
    if not value:
        raise FilterError(path, "a condition object needs at least one operator")
    result = []
    for op, operand in value.items():
        if not isinstance(op, str):
            raise FilterError(f"{path}.{op!r}", "keys must be strings")
        if op not in allowed:
            op_path = f"{path}.{_show(op)}"
            if not op.startswith("$"):
                raise FilterError(
                    op_path,
                    "nested objects are not supported; a condition object holds operators only",
                )
            if op in _LOGICAL:
                raise FilterError(op_path, "logical operators are not supported")
            raise FilterError(op_path, f"unknown operator; expected one of {', '.join(allowed)}")
        result.append((op, operand))
    return result


def _items(operand: Any, path: str) -> list:
    if not isinstance(operand, list):
        raise FilterError(path, "expected a list")
    if not operand:
        raise FilterError(path, "expected a non-empty list")
    if len(operand) > MAX_IN_VALUES:
        raise FilterError(path, f"at most {MAX_IN_VALUES} values")
    return operand


def _unique(values) -> list:
    return list(dict.fromkeys(values))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _finite(value: int | float, path: str) -> int | float:
    if isinstance(value, float) and not math.isfinite(value):
        raise FilterError(path, "numbers must be finite")
    return value


def _decimal(value: int | float, path: str) -> Decimal:
    try:
        return Decimal(repr(value))
    except ValueError:
        raise FilterError(path, "number too large") from None


def _text(value: str, path: str) -> str:
    if "\x00" in value:
        raise FilterError(path, "strings cannot contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise FilterError(path, "strings must be valid Unicode") from None
    return value


def _scalar(value: Any, path: str) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _text(value, path)
    if _is_number(value):
        return _finite(value, path)
    if isinstance(value, dict | list):
        raise FilterError(
            path, "expected a string, number, boolean or null (objects and lists are not scalars)"
        )
    raise FilterError(path, f"unsupported value of type {type(value).__name__}")


def _containment(key: str, value: Any, path: str) -> str:
    """The JSON text of ``{key: value}`` (``json.dumps``'s, spaces included), for a scalar
    already checked: written out directly, as thousands of ``json.dumps`` calls cost more
    than the rest of a filter's compilation."""
    if isinstance(value, str):
        text = _json_string(value)
    elif value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        try:
            text = int.__repr__(value)
        except ValueError:  # more digits than Python converts
            raise FilterError(path, "number too large") from None
    else:
        text = float.__repr__(value)
    return f"{{{_json_string(key)}: {text}}}"


def _array_literal(texts: list[str]) -> str:
    """PostgreSQL's array input text of ``texts``: each element double-quoted, a backslash
    before each ``"`` and ``\\`` in it. A string parameter is quoted once, in C; the driver's
    list adapter runs a regular expression per element (25-50 ms for the 3,200 of the largest
    filter). No text here holds a NUL: ``_text`` refuses it and keys are ASCII."""
    return (
        "{"
        + ",".join('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"' for text in texts)
        + "}"
    )


def _session_value(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise FilterError(path, 'expected a string ("" for entries without a session)')
    if len(value) > MAX_SESSION_ID_LENGTH:
        raise FilterError(path, f"session ids are at most {MAX_SESSION_ID_LENGTH} characters")
    return _text(value, path)


def _date_operand(value: str, path: str) -> str:
    """The PostgreSQL ``timestamptz`` text of a DATE operand (date-only: midnight UTC)."""
    if _ZONED.fullmatch(value):
        return value
    if _DATE_ONLY.fullmatch(value):
        return f"{value}T00:00:00Z"
    if _LOCAL.fullmatch(value):
        raise FilterError(path, "a date-time needs a time zone (Z or +HH:MM / -HH:MM)")
    raise FilterError(path, _DATE_HELP)

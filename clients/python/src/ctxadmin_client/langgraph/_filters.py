"""LangGraph's store filters, evaluated on a value (pure).

``{"field": v}`` is equality (a dict matches field by field, a list element by element),
``{"field": {"$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte": v}}`` compares. A range
comparison compares numbers as numbers (``10 > 9``, whatever their JSON spelling) and
strings as strings; a number never compares with a string, and a missing field matches no
range (LangGraph's in-memory store raises there; PostgreSQL's compares JSON text, so
``"10" < "9"``).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

_RANGES = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le}
OPERATORS = frozenset({"$eq", "$ne", *_RANGES})


def _number(value: Any) -> bool:
    return isinstance(value, int | float)


def _ranged(value: Any, op: str, operand: Any) -> bool:
    if _number(value) and _number(operand):
        return _RANGES[op](float(value), float(operand))
    if isinstance(value, str) and isinstance(operand, str):
        return _RANGES[op](value, operand)
    return False


def _apply(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return value == operand
    if op == "$ne":
        return value != operand
    if op in _RANGES:
        return _ranged(value, op, operand)
    raise ValueError(f"unsupported filter operator {op!r} (supported: {sorted(OPERATORS)})")


def matches(value: Any, condition: Any) -> bool:
    """Whether ``value`` (a field of an item's value) satisfies ``condition``."""
    if isinstance(condition, Mapping):
        if any(str(key).startswith("$") for key in condition):
            return all(_apply(value, op, operand) for op, operand in condition.items())
        if not isinstance(value, Mapping):
            return False
        return all(matches(value.get(key), child) for key, child in condition.items())
    if isinstance(condition, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(condition)
            and all(matches(v, c) for v, c in zip(value, condition, strict=True))
        )
    return value == condition


def item_matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(matches(value.get(key), cond) for key, cond in filter.items())


def namespace_matches(namespace: tuple[str, ...], match_type: str, path: tuple[str, ...]) -> bool:
    """LangGraph's namespace match conditions: a prefix or a suffix, ``*`` any label."""
    if len(namespace) < len(path):
        return False
    if match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"unsupported match type {match_type!r}")
    return all(want == "*" or label == want for label, want in pairs)


def check(filter: Mapping[str, Any] | None) -> None:
    """Refuse an operator LangGraph does not define before anything is read."""
    for condition in (filter or {}).values():
        if isinstance(condition, Mapping):
            unknown = sorted(k for k in condition if str(k).startswith("$") and k not in OPERATORS)
            if unknown:
                raise ValueError(
                    f"unsupported filter operator {unknown[0]!r} (supported: {sorted(OPERATORS)})"
                )
            if not any(str(k).startswith("$") for k in condition):
                check(condition)

"""The context policy: filters, budgets and overflow (pure; no Django import).

``parse_context_policy`` validates a client policy strictly (an unknown key or a bad value raises
``PolicyError`` naming it) before any event is read.

    {"filters": {"authors": {"include": [...] | ["all"], "exclude": [...] | ["all"]},
                 "invocation_ids": {"include": [...], "exclude": [...]},
                 "content_types": {"include": [...], "exclude": [...]},
                 "timestamp": {"from": T, "to": T},
                 "include_partial": false, "final_only": false},
     "budgets": {"max_bytes": N, "max_tokens": N, "max_request_bytes": N,
                 "max_request_tokens": N, "bytes_per_token": 4, "max_input_events": N},
     "overflow": "error" | "truncate" | "compress"}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxadmin.pruning import echoed
from sessions_app.events import CONTENT_TYPES, KIND_BITS, EventError, parse_timestamp

OVERFLOW_MODES = ("error", "truncate", "compress")
MAX_FILTER_VALUES = 256
_BUDGET_KEYS = (
    "max_bytes",
    "max_tokens",
    "max_request_bytes",
    "max_request_tokens",
    "bytes_per_token",
    "max_input_events",
)


class PolicyError(ValueError):
    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class IncludeExclude:
    include: frozenset[str] | None = None  # None: everything
    exclude: frozenset[str] = frozenset()

    def allows(self, value: str) -> bool:
        if value in self.exclude:
            return False
        return self.include is None or value in self.include


@dataclass(frozen=True)
class ContextPolicy:
    authors: IncludeExclude = IncludeExclude()
    invocation_ids: IncludeExclude = IncludeExclude()
    content_include_mask: int | None = None  # an event passes with any included kind
    content_exclude_mask: int = 0  # an event fails with any excluded kind
    timestamp_from: float | None = None  # seconds since the epoch, inclusive
    timestamp_to: float | None = None
    include_partial: bool = False
    final_only: bool = False
    max_bytes: int | None = None
    max_tokens: int | None = None
    max_request_bytes: int | None = None
    max_request_tokens: int | None = None
    bytes_per_token: int = 4
    max_input_events: int | None = None
    overflow: str = "error"

    @property
    def filters_on_identity(self) -> bool:
        """Whether selection needs authors and invocation ids."""
        return self.authors != IncludeExclude() or self.invocation_ids != IncludeExclude()

    @property
    def filters_on_time(self) -> bool:
        return self.timestamp_from is not None or self.timestamp_to is not None

    @property
    def has_filters(self) -> bool:
        return (
            self.authors != IncludeExclude()
            or self.invocation_ids != IncludeExclude()
            or self.content_include_mask is not None
            or self.content_exclude_mask != 0
            or self.timestamp_from is not None
            or self.timestamp_to is not None
            or self.final_only
        )

    def history_byte_limit(self) -> int | None:
        limits = [
            self.max_bytes,
            None if self.max_tokens is None else self.max_tokens * self.bytes_per_token,
        ]
        present = [limit for limit in limits if limit is not None]
        return min(present) if present else None

    def request_byte_limit(self, ceiling: int) -> int:
        limits = [ceiling, self.max_request_bytes]
        if self.max_request_tokens is not None:
            limits.append(self.max_request_tokens * self.bytes_per_token)
        return min(limit for limit in limits if limit is not None)


def _object(value: Any, path: str, allowed: set[str]) -> dict:
    if not isinstance(value, dict):
        raise PolicyError(path, "must be an object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise PolicyError(f"{path}.{echoed(unknown[0])}", "unknown key")
    return value


def _string_list(value: Any, path: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise PolicyError(path, "must be a list of strings")
    if len(value) > MAX_FILTER_VALUES:
        raise PolicyError(path, f"must have at most {MAX_FILTER_VALUES} values")
    return value


def _include_exclude(value: Any, path: str, *, allow_all: bool) -> IncludeExclude:
    value = _object(value, path, {"include", "exclude"})
    include = None
    if "include" in value:
        items = _string_list(value["include"], f"{path}.include")
        if allow_all and "all" in items:
            if len(items) != 1:
                raise PolicyError(f"{path}.include", "'all' cannot be combined with other values")
        else:
            include = frozenset(items)
    exclude = frozenset(_string_list(value.get("exclude", []), f"{path}.exclude"))
    if allow_all and "all" in exclude:
        # As in include, "all" means every value, never one named "all": nothing passes.
        if len(exclude) != 1:
            raise PolicyError(f"{path}.exclude", "'all' cannot be combined with other values")
        return IncludeExclude(frozenset(), frozenset())
    return IncludeExclude(include, exclude)


def _content_mask(values: list[str], path: str) -> int:
    mask = 0
    for value in values:
        if value not in KIND_BITS:
            raise PolicyError(
                path, f"unknown content type {echoed(value)!r}; choose from {list(CONTENT_TYPES)}"
            )
        mask |= KIND_BITS[value]
    return mask


def _positive(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(path, "must be an integer")
    if value < 1:
        raise PolicyError(path, "must be at least 1")
    return value


def parse_context_policy(raw: Any, path: str = "policy") -> ContextPolicy:
    if raw is None:
        return ContextPolicy()
    raw = _object(raw, path, {"filters", "budgets", "overflow"})
    fields: dict[str, Any] = {}
    filters = _object(
        raw.get("filters", {}),
        f"{path}.filters",
        {
            "authors",
            "invocation_ids",
            "content_types",
            "timestamp",
            "include_partial",
            "final_only",
        },
    )
    if "authors" in filters:
        fields["authors"] = _include_exclude(
            filters["authors"], f"{path}.filters.authors", allow_all=True
        )
    if "invocation_ids" in filters:
        fields["invocation_ids"] = _include_exclude(
            filters["invocation_ids"], f"{path}.filters.invocation_ids", allow_all=True
        )
    if "content_types" in filters:
        where = f"{path}.filters.content_types"
        types = _object(filters["content_types"], where, {"include", "exclude"})
        if "include" in types:
            fields["content_include_mask"] = _content_mask(
                _string_list(types["include"], f"{where}.include"), f"{where}.include"
            )
        fields["content_exclude_mask"] = _content_mask(
            _string_list(types.get("exclude", []), f"{where}.exclude"), f"{where}.exclude"
        )
    if "timestamp" in filters:
        where = f"{path}.filters.timestamp"
        window = _object(filters["timestamp"], where, {"from", "to"})
        try:
            if window.get("from") is not None:
                fields["timestamp_from"] = parse_timestamp(
                    window["from"], f"{where}.from"
                ).timestamp()
            if window.get("to") is not None:
                fields["timestamp_to"] = parse_timestamp(window["to"], f"{where}.to").timestamp()
        except EventError as exc:
            raise PolicyError(exc.path, exc.message) from None
        if (
            fields.get("timestamp_from")
            and fields.get("timestamp_to")
            and (fields["timestamp_from"] > fields["timestamp_to"])
        ):
            raise PolicyError(where, "'from' is after 'to'")
    for flag in ("include_partial", "final_only"):
        if flag in filters:
            if not isinstance(filters[flag], bool):
                raise PolicyError(f"{path}.filters.{flag}", "must be true or false")
            fields[flag] = filters[flag]
    budgets = _object(raw.get("budgets", {}), f"{path}.budgets", set(_BUDGET_KEYS))
    for key in _BUDGET_KEYS:
        if budgets.get(key) is not None:
            fields[key] = _positive(budgets[key], f"{path}.budgets.{key}")
    if "overflow" in raw:
        if raw["overflow"] not in OVERFLOW_MODES:
            raise PolicyError(f"{path}.overflow", f"must be one of {list(OVERFLOW_MODES)}")
        fields["overflow"] = raw["overflow"]
    return ContextPolicy(**fields)

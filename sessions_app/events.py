"""Event validation and derivation (pure; no Django import).

``validate_event`` checks one client event strictly (unknown keys, types, bounds) and
returns its normalised form; ``derive`` computes what is stored beside it: the kinds of
content it carries, its function call and response ids, its sizes and its content hash.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ctxadmin.canonical import canonical_json, canonical_size, fingerprint
from ctxadmin.pruning import echoed, prune_secrets
from ctxadmin.timestamps import iso_timestamp

# Kinds of content, as bits (stored in Event.kinds; filterable in SQL and in Python).
TEXT = 1
FUNCTION_CALL = 2
FUNCTION_RESPONSE = 4
MULTIMODAL = 8
MODEL_CONTENT = 16
# A compaction event (ADK's ``actions.compaction``): a record for ADK-shaped readers, never
# history itself; the checkpoint it names renders in its place.
COMPACTION = 32
KIND_BITS = {
    "text": TEXT,
    "function_call": FUNCTION_CALL,
    "function_response": FUNCTION_RESPONSE,
    "multimodal": MULTIMODAL,
    "model_content": MODEL_CONTENT,
}
CONTENT_TYPES = tuple(KIND_BITS)


@dataclass(frozen=True)
class EventLimits:
    max_event_bytes: int = 2 * 1024 * 1024
    max_parts: int = 128
    max_inline_data_bytes: int = 1024 * 1024
    max_state_keys: int = 256
    max_metadata_bytes: int = 16 * 1024


class EventError(ValueError):
    """A client event is invalid; ``path`` points at the offending field."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}\Z")
_ROLE = re.compile(r"^[a-z][a-z_]{0,31}\Z")
# Shared with the OpenAPI schema (sessions_app/api/schemas.py).
MIME_TYPE_PATTERN = r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
FUNCTION_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_.:-]{0,255}"
_MIME = re.compile(rf"^{MIME_TYPE_PATTERN}\Z")
_FUNCTION_NAME = re.compile(rf"^{FUNCTION_NAME_PATTERN}\Z")
_STATE_KEY_MAX = 256
_AUTHOR_MAX = 128
_URI_MAX = 2048

EVENT_KEYS = frozenset(
    {
        "event_id",
        "invocation_id",
        "author",
        "content",
        "partial",
        "turn_complete",
        "actions",
        "timestamp",
        "usage_metadata",
        "custom_metadata",
    }
)
ACTION_KEYS = frozenset({"state_delta", "artifact_delta"})
USAGE_KEYS = frozenset(
    {
        "prompt_token_count",
        "candidates_token_count",
        "total_token_count",
        "cached_content_token_count",
        "thoughts_token_count",
        "tool_use_prompt_token_count",
    }
)
PART_KINDS = ("text", "function_call", "function_response", "inline_data", "file_data")


def _object(value: Any, path: str) -> dict:
    if not isinstance(value, dict):
        raise EventError(path, "must be an object")
    return value


def _only(value: dict, allowed: frozenset[str] | set[str], path: str) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        name = echoed(unknown[0])
        raise EventError(f"{path}.{name}" if path else name, "unknown field")


def _string(value: Any, path: str, *, max_length: int, pattern: re.Pattern | None = None) -> str:
    if not isinstance(value, str):
        raise EventError(path, "must be a string")
    if len(value) > max_length:
        raise EventError(path, f"must be at most {max_length} characters")
    if pattern is not None and not pattern.match(value):
        raise EventError(path, f"has an invalid format ({pattern.pattern})")
    return value


def _identifier(value: Any, path: str) -> str:
    return _string(value, path, max_length=128, pattern=_ID)


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise EventError(path, "must be true or false")
    return value


def parse_timestamp(value: Any, path: str = "timestamp") -> datetime:
    """ISO 8601 (with a zone) or seconds since the epoch (ADK's float timestamps)."""
    if isinstance(value, bool):
        raise EventError(path, "must be an ISO 8601 string or seconds since the epoch")
    if isinstance(value, int | float):
        if not math.isfinite(value) or not 0 <= value < 253402300800:
            raise EventError(path, "is out of range")
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, str) and len(value) <= 64:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None:
            if parsed.tzinfo is None:
                raise EventError(path, "must include a time zone (e.g. Z)")
            return parsed.astimezone(UTC)
    raise EventError(path, "must be an ISO 8601 string or seconds since the epoch")


def _validate_part(part: Any, path: str, limits: EventLimits) -> dict:
    part = _object(part, path)
    present = [kind for kind in PART_KINDS if kind in part]
    _only(part, set(PART_KINDS), path)
    if len(present) != 1:
        raise EventError(path, f"must have exactly one of {', '.join(PART_KINDS)}")
    kind = present[0]
    value = part[kind]
    where = f"{path}.{kind}"
    if kind == "text":
        _string(value, where, max_length=limits.max_event_bytes)
        return {"text": value}
    value = _object(value, where)
    if kind in ("function_call", "function_response"):
        payload_key = "args" if kind == "function_call" else "response"
        _only(value, {"id", "name", payload_key}, where)
        if "id" not in value:
            raise EventError(f"{where}.id", "is required (it pairs calls with responses)")
        if "name" not in value:
            raise EventError(f"{where}.name", "is required")
        payload = value.get(payload_key, {})
        _object(payload, f"{where}.{payload_key}")
        return {
            kind: {
                "id": _identifier(value["id"], f"{where}.id"),
                "name": _string(
                    value["name"], f"{where}.name", max_length=256, pattern=_FUNCTION_NAME
                ),
                payload_key: payload,
            }
        }
    if kind == "inline_data":
        _only(value, {"mime_type", "data"}, where)
        mime = _string(value.get("mime_type"), f"{where}.mime_type", max_length=255, pattern=_MIME)
        data = _string(value.get("data"), f"{where}.data", max_length=limits.max_event_bytes)
        try:
            decoded = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise EventError(f"{where}.data", "must be standard base64") from None
        if len(decoded) > limits.max_inline_data_bytes:
            raise EventError(
                f"{where}.data", f"decodes to more than {limits.max_inline_data_bytes} bytes"
            )
        return {"inline_data": {"mime_type": mime, "data": data}}
    _only(value, {"mime_type", "file_uri"}, where)
    return {
        "file_data": {
            "mime_type": _string(
                value.get("mime_type"), f"{where}.mime_type", max_length=255, pattern=_MIME
            ),
            "file_uri": _string(value.get("file_uri"), f"{where}.file_uri", max_length=_URI_MAX),
        }
    }


def validate_content(content: Any, path: str, limits: EventLimits) -> dict:
    content = _object(content, path)
    _only(content, {"role", "parts"}, path)
    role = _string(content.get("role"), f"{path}.role", max_length=32, pattern=_ROLE)
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        raise EventError(f"{path}.parts", "must be a non-empty list")
    if len(parts) > limits.max_parts:
        raise EventError(f"{path}.parts", f"must have at most {limits.max_parts} parts")
    return {
        "role": role,
        "parts": [
            _validate_part(part, f"{path}.parts[{i}]", limits) for i, part in enumerate(parts)
        ],
    }


def _validate_actions(actions: Any, path: str, limits: EventLimits) -> dict:
    actions = _object(actions, path)
    _only(actions, ACTION_KEYS, path)
    result: dict = {}
    if "state_delta" in actions:
        delta = _object(actions["state_delta"], f"{path}.state_delta")
        if len(delta) > limits.max_state_keys:
            raise EventError(
                f"{path}.state_delta", f"must have at most {limits.max_state_keys} keys"
            )
        for key in delta:
            if not key or len(key) > _STATE_KEY_MAX:
                raise EventError(
                    f"{path}.state_delta", f"keys must be 1-{_STATE_KEY_MAX} characters"
                )
            if key in ("app:", "user:", "temp:"):
                raise EventError(
                    f"{path}.state_delta.{echoed(key)}", "a scope prefix needs a name after it"
                )
        if delta:
            result["state_delta"] = delta
    if "artifact_delta" in actions:
        delta = _object(actions["artifact_delta"], f"{path}.artifact_delta")
        for name, version in delta.items():
            _string(name, f"{path}.artifact_delta", max_length=256)
            if isinstance(version, bool) or not isinstance(version, int) or version < 0:
                raise EventError(
                    f"{path}.artifact_delta.{echoed(name)}", "must be a version number >= 0"
                )
        if delta:
            result["artifact_delta"] = delta
    return result


def validate_event(raw: Any, path: str, limits: EventLimits) -> dict:
    """The normalised event (without server-assigned fields) or an ``EventError``."""
    raw = _object(raw, path)
    _only(raw, EVENT_KEYS, path)
    event: dict[str, Any] = {}
    if raw.get("event_id") is not None:
        event["event_id"] = _identifier(raw["event_id"], f"{path}.event_id")
    invocation = raw.get("invocation_id")
    event["invocation_id"] = (
        "" if invocation in (None, "") else _identifier(invocation, f"{path}.invocation_id")
    )
    if "author" not in raw:
        raise EventError(f"{path}.author", "is required")
    event["author"] = _string(raw["author"], f"{path}.author", max_length=_AUTHOR_MAX)
    if not event["author"].strip():
        raise EventError(f"{path}.author", "must not be blank")
    content = raw.get("content")
    event["content"] = (
        None if content is None else validate_content(content, f"{path}.content", limits)
    )
    event["partial"] = _bool(raw.get("partial", False), f"{path}.partial")
    turn_complete = raw.get("turn_complete")
    event["turn_complete"] = (
        None if turn_complete is None else _bool(turn_complete, f"{path}.turn_complete")
    )
    actions = raw.get("actions")
    event["actions"] = _validate_actions(
        {} if actions is None else actions, f"{path}.actions", limits
    )
    event["timestamp"] = (
        None
        if raw.get("timestamp") is None
        else parse_timestamp(raw["timestamp"], f"{path}.timestamp")
    )
    usage = raw.get("usage_metadata")
    if usage is not None:
        usage = _object(usage, f"{path}.usage_metadata")
        _only(usage, USAGE_KEYS, f"{path}.usage_metadata")
        for key, value in usage.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise EventError(f"{path}.usage_metadata.{echoed(key)}", "must be an integer >= 0")
    event["usage_metadata"] = usage
    custom = raw.get("custom_metadata")
    if custom is not None:
        custom = _object(custom, f"{path}.custom_metadata")
        if canonical_size(custom) > limits.max_metadata_bytes:
            raise EventError(
                f"{path}.custom_metadata", f"must be at most {limits.max_metadata_bytes} bytes"
            )
    event["custom_metadata"] = custom
    return event


@dataclass(frozen=True)
class Derived:
    kinds: int
    call_ids: list[str] | None
    response_ids: list[str] | None
    byte_size: int
    context_json: str  # the history item, pruned and canonical: what every build sends
    context_bytes: int  # its UTF-8 length, what budgets count
    content_hash: str


def content_kinds(content: dict | None) -> tuple[int, list[str], list[str]]:
    if not content:
        return 0, [], []
    kinds = MODEL_CONTENT if content.get("role") == "model" else 0
    calls: list[str] = []
    responses: list[str] = []
    for part in content["parts"]:
        if "text" in part:
            kinds |= TEXT
        elif "function_call" in part:
            kinds |= FUNCTION_CALL
            calls.append(part["function_call"]["id"])
        elif "function_response" in part:
            kinds |= FUNCTION_RESPONSE
            responses.append(part["function_response"]["id"])
        else:
            kinds |= MULTIMODAL
    return kinds, calls, responses


def identity(event: dict) -> dict:
    """What makes two sends of one event_id the same event (timestamps excluded: a retry
    may carry a fresh one)."""
    return {
        key: event[key]
        for key in (
            "event_id",
            "invocation_id",
            "author",
            "content",
            "turn_complete",
            "actions",
            "usage_metadata",
            "custom_metadata",
        )
    }


def history_item(event: dict, timestamp: str) -> dict:
    """The event as it appears in a context envelope: secret-pruned, content-bearing fields.
    ``timestamp`` is ISO 8601 text (as ``datetime.isoformat`` and PostgreSQL's JSON write it)."""
    item = {
        "event_id": event["event_id"],
        "invocation_id": event["invocation_id"],
        "author": event["author"],
        "timestamp": timestamp,
        "content": event["content"],
    }
    if event["actions"]:
        item["actions"] = event["actions"]
    return prune_secrets(item)


def content_hash(event: dict) -> str:
    return fingerprint(identity(event))


def derive(event: dict, timestamp: datetime, event_hash: str) -> Derived:
    """Derived columns of ``event`` as stored (``temp:`` state keys already removed);
    ``event_hash`` is the hash of the event as the client sent it."""
    kinds, calls, responses = content_kinds(event["content"])
    when = iso_timestamp(timestamp)
    item = canonical_json(history_item(event, when))
    return Derived(
        kinds=kinds,
        call_ids=calls or None,
        response_ids=responses or None,
        byte_size=canonical_size({**identity(event), "timestamp": when}),
        context_json=item.decode("utf-8"),
        context_bytes=len(item),
        content_hash=event_hash,
    )


def estimate_tokens(byte_count: int, bytes_per_token: int = 4) -> int:
    return -(-byte_count // bytes_per_token)

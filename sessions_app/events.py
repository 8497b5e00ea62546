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
from sessions_app.adk_fields import KeptFieldError, check_field, unknown_key
from sessions_app.adk_shapes import MODELS

# Kinds of content, as bits (stored in Event.kinds; filterable in SQL and in Python).
TEXT = 1
FUNCTION_CALL = 2
FUNCTION_RESPONSE = 4
MULTIMODAL = 8
MODEL_CONTENT = 16
# A compaction event (ADK's ``actions.compaction``): a record for ADK-shaped readers, never
# history itself; the checkpoint it names renders in its place.
COMPACTION = 32
# A client's own compaction (ADK's ``EventsCompactionConfig``): its compacted content stands
# in for the events of its time span; and a client's rewind (``rewind_before_invocation_id``)
# hides the invocations it rewinds. Neither is history itself (sessions_app.context.adk_view).
CLIENT_COMPACTION = 64
REWIND = 128
MARKERS = CLIENT_COMPACTION | REWIND
# Events that are never read as ordinary history, by the context builder or by compaction.
NOT_HISTORY = COMPACTION | MARKERS
#: Each kind's bit and its name, in the order the console lists them.
KIND_NAMES = (
    (TEXT, "text"),
    (FUNCTION_CALL, "function call"),
    (FUNCTION_RESPONSE, "function response"),
    (MULTIMODAL, "multimodal"),
    (MODEL_CONTENT, "model content"),
    (COMPACTION, "compaction"),
    (CLIENT_COMPACTION, "client compaction"),
    (REWIND, "rewind"),
)


def kind_names(kinds: int) -> list[str]:
    """The kinds a ``kinds`` bitmask holds, as words (an unknown bit as ``bit <n>``)."""
    names = [name for bit, name in KIND_NAMES if kinds & bit]
    known = sum(bit for bit, _name in KIND_NAMES)
    names += [f"bit {b}" for b in range(15) if kinds & ~known & (1 << b)]
    return names


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
    # The ADK fields kept beside the interpreted ones at the event's top level (canonical
    # JSON); what is kept inside content and actions counts toward ``max_event_bytes``.
    max_kept_bytes: int = 256 * 1024


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
# ADK's Event fields kept as given beside them (``id`` is ctxadmin's ``event_id``).
KEPT_EVENT_KEYS = frozenset(MODELS["Event"]) - EVENT_KEYS - {"id"}
ACTION_KEYS = frozenset(
    {"state_delta", "artifact_delta", "compaction", "rewind_before_invocation_id"}
)
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


def _kept(value: dict, model: str, path: str, interpreted: frozenset[str]) -> dict:
    """The ADK fields of ``value`` ctxadmin does not interpret, checked and kept as given;
    a key outside ``model`` is refused."""
    fields = MODELS[model]
    try:
        unknown_key(value, model, path, interpreted)
        for key, item in value.items():
            if key not in interpreted:
                check_field(item, fields[key], f"{path}.{key}", 1)
    except KeptFieldError as exc:
        raise EventError(exc.path, exc.message) from None
    return {key: item for key, item in value.items() if key not in interpreted}


_BASE64 = re.compile(r"^[A-Za-z0-9+/_-]*={0,2}\Z")
_URLSAFE = str.maketrans("-_", "+/")


def _base64(data: str, path: str) -> bytes:
    """Standard or URL-safe base64 (pydantic writes ADK's bytes URL-safe), padded."""
    try:
        if len(data) % 4 or not _BASE64.match(data):
            raise ValueError
        return base64.b64decode(data.translate(_URLSAFE), validate=True)
    except (binascii.Error, ValueError):
        raise EventError(path, "must be base64 (standard or URL-safe, padded)") from None


def _function_part(kind: str, value: dict, where: str) -> dict:
    payload_key = "args" if kind == "function_call" else "response"
    model = "FunctionCall" if kind == "function_call" else "FunctionResponse"
    result = _kept(value, model, where, frozenset({"id", "name", payload_key}))
    if value.get("id") is None:
        raise EventError(f"{where}.id", "is required (it pairs calls with responses)")
    if value.get("name") is None:
        raise EventError(f"{where}.name", "is required")
    result["id"] = _identifier(value["id"], f"{where}.id")
    result["name"] = _string(value["name"], f"{where}.name", max_length=256, pattern=_FUNCTION_NAME)
    if value.get(payload_key) is not None:  # absent stays absent
        result[payload_key] = _object(value[payload_key], f"{where}.{payload_key}")
    return result


def _data_part(kind: str, value: dict, where: str, limits: EventLimits) -> dict:
    if kind == "inline_data":
        result = _kept(value, "Blob", where, frozenset({"mime_type", "data"}))
        data = _string(value.get("data"), f"{where}.data", max_length=limits.max_event_bytes)
        if len(_base64(data, f"{where}.data")) > limits.max_inline_data_bytes:
            raise EventError(
                f"{where}.data", f"decodes to more than {limits.max_inline_data_bytes} bytes"
            )
        result["data"] = data
    else:
        result = _kept(value, "FileData", where, frozenset({"mime_type", "file_uri"}))
        result["file_uri"] = _string(
            value.get("file_uri"), f"{where}.file_uri", max_length=_URI_MAX
        )
    result["mime_type"] = _string(
        value.get("mime_type"), f"{where}.mime_type", max_length=255, pattern=_MIME
    )
    return result


def _validate_part(part: Any, path: str, limits: EventLimits) -> dict:
    """At most one of the data kinds ctxadmin reads; ADK's other part fields (a thought,
    its signature, executable code, ...) kept beside it."""
    part = _object(part, path)
    present = [kind for kind in PART_KINDS if part.get(kind) is not None]
    if len(present) > 1:
        raise EventError(path, f"must have at most one of {', '.join(PART_KINDS)}")
    result = _kept(part, "Part", path, frozenset(PART_KINDS))
    if not present:
        return result
    kind = present[0]
    value = part[kind]
    where = f"{path}.{kind}"
    if kind == "text":
        result["text"] = _string(value, where, max_length=limits.max_event_bytes)
    elif kind in ("function_call", "function_response"):
        result[kind] = _function_part(kind, _object(value, where), where)
    else:
        result[kind] = _data_part(kind, _object(value, where), where, limits)
    return result


def validate_content(content: Any, path: str, limits: EventLimits) -> dict:
    """ADK's ``Content``: ``role`` and ``parts`` both optional (absent stays absent)."""
    content = _object(content, path)
    _only(content, {"role", "parts"}, path)
    result: dict[str, Any] = {}
    if content.get("role") is not None:
        result["role"] = _string(content["role"], f"{path}.role", max_length=32, pattern=_ROLE)
    parts = content.get("parts")
    if parts is not None:
        if not isinstance(parts, list):
            raise EventError(f"{path}.parts", "must be a list")
        if len(parts) > limits.max_parts:
            raise EventError(f"{path}.parts", f"must have at most {limits.max_parts} parts")
        result["parts"] = [
            _validate_part(part, f"{path}.parts[{i}]", limits) for i, part in enumerate(parts)
        ]
    return result


def parts_of(content: dict | None) -> list[dict]:
    """A content's parts (none when it has no content or no parts)."""
    return (content or {}).get("parts") or []


def _finite(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise EventError(path, "must be a finite number (seconds since the epoch)")
    return value


def _compaction(value: Any, path: str, limits: EventLimits) -> dict:
    """ADK's ``EventCompaction``: the time span it covers and the content replacing it."""
    value = _object(value, path)
    _only(value, {"start_timestamp", "end_timestamp", "compacted_content"}, path)
    for key in ("start_timestamp", "end_timestamp", "compacted_content"):
        if value.get(key) is None:
            raise EventError(f"{path}.{key}", "is required")
    return {
        "start_timestamp": _finite(value["start_timestamp"], f"{path}.start_timestamp"),
        "end_timestamp": _finite(value["end_timestamp"], f"{path}.end_timestamp"),
        "compacted_content": validate_content(
            value["compacted_content"], f"{path}.compacted_content", limits
        ),
    }


def _validate_actions(actions: Any, path: str, limits: EventLimits) -> dict:
    actions = _object(actions, path)
    result = _kept(actions, "EventActions", path, ACTION_KEYS)
    if actions.get("state_delta") is not None:
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
        result["state_delta"] = delta
    if actions.get("artifact_delta") is not None:
        delta = _object(actions["artifact_delta"], f"{path}.artifact_delta")
        for name, version in delta.items():
            _string(name, f"{path}.artifact_delta", max_length=256)
            if isinstance(version, bool) or not isinstance(version, int) or version < 0:
                raise EventError(
                    f"{path}.artifact_delta.{echoed(name)}", "must be a version number >= 0"
                )
        result["artifact_delta"] = delta
    if actions.get("compaction") is not None:
        result["compaction"] = _compaction(actions["compaction"], f"{path}.compaction", limits)
    if actions.get("rewind_before_invocation_id") is not None:
        result["rewind_before_invocation_id"] = _identifier(
            actions["rewind_before_invocation_id"], f"{path}.rewind_before_invocation_id"
        )
    return result


def validate_state_remove(value: Any, path: str, limits: EventLimits) -> list[str]:
    """The state keys an append removes (``app:``, ``user:`` or the session's own; ``temp:``
    keys are never stored): at most ``max_state_keys`` distinct keys, each 1-256 characters."""
    if not isinstance(value, list) or not all(isinstance(key, str) for key in value):
        raise EventError(path, "must be a list of state keys")
    if len(value) > limits.max_state_keys:
        raise EventError(path, f"must have at most {limits.max_state_keys} keys")
    for index, key in enumerate(value):
        if not key or len(key) > _STATE_KEY_MAX:
            raise EventError(f"{path}[{index}]", f"must be 1-{_STATE_KEY_MAX} characters")
        if key in ("app:", "user:", "temp:"):
            raise EventError(f"{path}[{index}]", "a scope prefix needs a name after it")
        if key.startswith("temp:"):
            raise EventError(f"{path}[{index}]", "temp: keys are never stored")
    return sorted(set(value))


def _usage(usage: Any, path: str) -> dict:
    usage = _object(usage, path)
    result = _kept(usage, "GenerateContentResponseUsageMetadata", path, USAGE_KEYS)
    for key in USAGE_KEYS & usage.keys():
        value = usage[key]
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise EventError(f"{path}.{echoed(key)}", "must be an integer >= 0")
        result[key] = value
    return result


def validate_event(raw: Any, path: str, limits: EventLimits) -> dict:
    """The normalised event (without server-assigned fields) or an ``EventError``. ADK's
    fields that ctxadmin does not interpret are kept: inside content, actions and usage
    metadata where they are, and the top-level ones in ``adk_fields`` (None without)."""
    raw = _object(raw, path)
    _only(raw, EVENT_KEYS | KEPT_EVENT_KEYS, path)
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
    partial = raw.get("partial")
    event["partial"] = False if partial is None else _bool(partial, f"{path}.partial")
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
    event["usage_metadata"] = None if usage is None else _usage(usage, f"{path}.usage_metadata")
    custom = raw.get("custom_metadata")
    if custom is not None:
        custom = _object(custom, f"{path}.custom_metadata")
        if canonical_size(custom) > limits.max_metadata_bytes:
            raise EventError(
                f"{path}.custom_metadata", f"must be at most {limits.max_metadata_bytes} bytes"
            )
    event["custom_metadata"] = custom
    kept = {key: raw[key] for key in KEPT_EVENT_KEYS & raw.keys() if raw[key] is not None}
    if kept:
        kept = _kept(kept, "Event", path, frozenset())
        if canonical_size(kept) > limits.max_kept_bytes:
            raise EventError(
                path,
                f"the kept ADK fields ({', '.join(sorted(kept))}) must be at most "
                f"{limits.max_kept_bytes} bytes",
            )
    event["adk_fields"] = kept or None
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
    """The content's kind bits and its call and response ids. A part with none of the
    data kinds but other ADK data (a thought signature, executable code) is multimodal; a
    content without any data part is no content."""
    kinds = 0
    calls: list[str] = []
    responses: list[str] = []
    for part in parts_of(content):
        if "text" in part:
            kinds |= TEXT
        elif "function_call" in part:
            kinds |= FUNCTION_CALL
            calls.append(part["function_call"]["id"])
        elif "function_response" in part:
            kinds |= FUNCTION_RESPONSE
            responses.append(part["function_response"]["id"])
        elif any(value is not None for value in part.values()):
            kinds |= MULTIMODAL
    if kinds and content.get("role") == "model":
        kinds |= MODEL_CONTENT
    return kinds, calls, responses


def marker_kind(actions: dict) -> int:
    """A client's rewind or compaction event stands for something else in a context; its
    own content is not history (as ADK's contents processor reads them)."""
    if actions.get("rewind_before_invocation_id"):
        return REWIND
    if actions.get("compaction"):
        return CLIENT_COMPACTION
    return 0


_IDENTITY_KEYS = (
    "event_id",
    "invocation_id",
    "author",
    "content",
    "turn_complete",
    "actions",
    "usage_metadata",
    "custom_metadata",
)


def identity(event: dict) -> dict:
    """What makes two sends of one event_id the same event (timestamps excluded: a retry
    may carry a fresh one), the kept ADK fields included."""
    same = {key: event[key] for key in _IDENTITY_KEYS}
    # An empty delta is no delta (ADK sends them empty; older events were stored without).
    same["actions"] = {
        key: value
        for key, value in event["actions"].items()
        if not (key in ("state_delta", "artifact_delta") and not value)
    }
    if event.get("adk_fields"):
        same["adk_fields"] = event["adk_fields"]
    # An absent ``args``/``response`` is an empty one (events stored before ADK's fields were
    # kept as given were stored with it filled in: their re-sends must still match).
    if same["content"] and same["content"].get("parts"):
        same["content"] = {
            **same["content"],
            "parts": [_with_payload(part) for part in same["content"]["parts"]],
        }
    return same


def _with_payload(part: dict) -> dict:
    for kind, payload in (("function_call", "args"), ("function_response", "response")):
        value = part.get(kind)
        if isinstance(value, dict) and value.get(payload) is None:
            return {**part, kind: {**value, payload: {}}}
    return part


def history_item(event: dict, timestamp: str) -> dict:
    """The event as it appears in a context envelope: secret-pruned, content-bearing fields.
    ``timestamp`` is ISO 8601 text (as ``datetime.isoformat`` and PostgreSQL's JSON write it).
    A client's compaction event appears as its compacted content at its end timestamp."""
    compaction = event["actions"].get("compaction")
    if compaction and not event["actions"].get("rewind_before_invocation_id"):
        end = datetime.fromtimestamp(compaction["end_timestamp"], UTC)
        return prune_secrets(
            {
                "event_id": event["event_id"],
                "invocation_id": event["invocation_id"],
                "author": event["author"],
                "timestamp": iso_timestamp(end),
                "content": compaction["compacted_content"],
            }
        )
    item = {
        "event_id": event["event_id"],
        "invocation_id": event["invocation_id"],
        "author": event["author"],
        "timestamp": timestamp,
        "content": event["content"],
    }
    actions = {key: value for key, value in event["actions"].items() if value not in ({}, [])}
    if actions:
        item["actions"] = actions
    return prune_secrets(item)


def content_hash(event: dict) -> str:
    return fingerprint(identity(event))


def derive(event: dict, timestamp: datetime, event_hash: str) -> Derived:
    """Derived columns of ``event`` as stored (``temp:`` state keys already removed);
    ``event_hash`` is the hash of the event as the client sent it."""
    marker = marker_kind(event["actions"])
    kinds, calls, responses = (marker, [], []) if marker else content_kinds(event["content"])
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

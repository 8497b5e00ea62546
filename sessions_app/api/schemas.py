"""OpenAPI component schemas for sessions, events and contexts.

Events and context requests are validated by the pure validators in ``sessions_app.events``
and ``sessions_app.context.policy`` (fast enough for 500-event batches); these schemas
document the same shapes. ``tests/test_sessions_schema.py`` validates real requests and
responses against them so the two cannot drift apart.
"""

from __future__ import annotations

from ctxadmin.api.paths import ID_PATTERN
from sessions_app.events import CONTENT_TYPES, USAGE_KEYS


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


_ID = {"type": "string", "pattern": f"^{ID_PATTERN}$", "maxLength": 128}
_TIMESTAMP = {
    "oneOf": [
        {"type": "string", "format": "date-time"},
        {"type": "number", "description": "seconds since the epoch"},
    ]
}
_OBJECT = {"type": "object", "additionalProperties": True}


def _strict(properties: dict, required: list[str] | None = None, **extra) -> dict:
    schema = {"type": "object", "additionalProperties": False, "properties": properties, **extra}
    if required:
        schema["required"] = required
    return schema


def _one_key(name: str, value: dict) -> dict:
    return _strict({name: value}, [name])


_INCLUDE_EXCLUDE = _strict(
    {
        "include": {"type": "array", "items": {"type": "string"}, "maxItems": 256},
        "exclude": {"type": "array", "items": {"type": "string"}, "maxItems": 256},
    }
)
_POSITIVE = {"type": "integer", "minimum": 1}


def _page(item: str) -> dict:
    """A cursor page of ``item``s."""
    return _strict(
        {
            "results": {"type": "array", "items": ref(item)},
            "next": {"type": "string", "nullable": True},
            "previous": {"type": "string", "nullable": True},
        },
        ["results", "next", "previous"],
    )


COMPONENTS = {
    "Part": {
        "description": "Exactly one of text, function_call, function_response, inline_data, "
        "file_data.",
        "oneOf": [
            _one_key("text", {"type": "string"}),
            _one_key(
                "function_call",
                _strict({"id": _ID, "name": {"type": "string"}, "args": _OBJECT}, ["id", "name"]),
            ),
            _one_key(
                "function_response",
                _strict(
                    {"id": _ID, "name": {"type": "string"}, "response": _OBJECT}, ["id", "name"]
                ),
            ),
            _one_key(
                "inline_data",
                _strict(
                    {"mime_type": {"type": "string"}, "data": {"type": "string", "format": "byte"}},
                    ["mime_type", "data"],
                ),
            ),
            _one_key(
                "file_data",
                _strict(
                    {"mime_type": {"type": "string"}, "file_uri": {"type": "string"}},
                    ["mime_type", "file_uri"],
                ),
            ),
        ],
    },
    "Content": _strict(
        {
            "role": {"type": "string", "pattern": "^[a-z][a-z_]{0,31}$"},
            "parts": {"type": "array", "items": ref("Part"), "minItems": 1},
        },
        ["role", "parts"],
    ),
    "EventActions": _strict(
        {
            "state_delta": {
                "type": "object",
                "additionalProperties": True,
                "description": "app:, user:, temp: prefixes select the scope",
            },
            "artifact_delta": {"type": "object", "additionalProperties": {"type": "integer"}},
        }
    ),
    "UsageMetadata": _strict(
        {key: {"type": "integer", "minimum": 0} for key in sorted(USAGE_KEYS)}
    ),
    "EventInput": _strict(
        {
            "event_id": _ID,
            "invocation_id": {"type": "string", "maxLength": 128},
            "author": {"type": "string", "minLength": 1, "maxLength": 128},
            "content": {**ref("Content"), "nullable": True},
            "partial": {"type": "boolean"},
            "turn_complete": {"type": "boolean", "nullable": True},
            "actions": ref("EventActions"),
            "timestamp": _TIMESTAMP,
            "usage_metadata": {**ref("UsageMetadata"), "nullable": True},
            "custom_metadata": {**_OBJECT, "nullable": True},
        },
        ["author"],
    ),
    "Event": _strict(
        {
            "event_id": {"type": "string"},
            "seq": {"type": "integer", "nullable": True, "description": "null: not stored"},
            "invocation_id": {"type": "string"},
            "author": {"type": "string"},
            "content": {**ref("Content"), "nullable": True},
            "partial": {"type": "boolean"},
            "turn_complete": {"type": "boolean", "nullable": True},
            "actions": _OBJECT,
            "timestamp": {"type": "string", "format": "date-time"},
            "usage_metadata": {**_OBJECT, "nullable": True},
            "custom_metadata": {**_OBJECT, "nullable": True},
            "byte_size": {"type": "integer"},
            "token_estimate": {"type": "integer"},
            "content_hash": {"type": "string"},
            "stored": {"type": "boolean"},
        },
        ["event_id", "seq", "author", "partial", "timestamp", "stored"],
    ),
    "AppendRequest": {
        **_strict(
            {
                "event": ref("EventInput"),
                "events": {"type": "array", "items": ref("EventInput"), "minItems": 1},
                "expected_revision": {"type": "integer", "minimum": 0},
            }
        ),
        "description": "Exactly one of `event` or `events` (at most CTXADMIN_MAX_BATCH_EVENTS).",
    },
    "AppendResponse": _strict(
        {
            "events": {"type": "array", "items": ref("Event")},
            "created": {"type": "integer"},
            "revision": {"type": "integer"},
            "state": _OBJECT,
        },
        ["events", "created", "revision", "state"],
    ),
    "SessionCreate": _strict(
        {"session_id": _ID, "state": _OBJECT},
    ),
    "SessionSummary": _strict(
        {
            "session_id": {"type": "string"},
            "user_id": {"type": "string"},
            "revision": {"type": "integer"},
            "event_count": {"type": "integer"},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
        },
        ["session_id", "user_id", "revision", "event_count", "created_at", "updated_at"],
    ),
    "Session": _strict(
        {
            "session_id": {"type": "string"},
            "user_id": {"type": "string"},
            "app": {"type": "string"},
            "revision": {"type": "integer"},
            "event_count": {"type": "integer"},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
            "state": _OBJECT,
            "events": {"type": "array", "items": ref("Event")},
            "events_complete": {"type": "boolean"},
        },
        ["session_id", "user_id", "app", "revision", "state", "events"],
    ),
    "SessionPage": _page("SessionSummary"),
    "EventPage": _page("Event"),
    "UserState": _strict(
        {"app": {"type": "string"}, "user_id": {"type": "string"}, "state": _OBJECT}
    ),
    "ContextPolicy": _strict(
        {
            "filters": _strict(
                {
                    "authors": _INCLUDE_EXCLUDE,
                    "invocation_ids": _INCLUDE_EXCLUDE,
                    "content_types": _strict(
                        {
                            "include": {"type": "array", "items": {"enum": list(CONTENT_TYPES)}},
                            "exclude": {"type": "array", "items": {"enum": list(CONTENT_TYPES)}},
                        }
                    ),
                    "timestamp": _strict({"from": _TIMESTAMP, "to": _TIMESTAMP}),
                    "include_partial": {"type": "boolean"},
                    "final_only": {"type": "boolean"},
                }
            ),
            "budgets": _strict(
                {
                    "max_bytes": _POSITIVE,
                    "max_tokens": _POSITIVE,
                    "max_request_bytes": _POSITIVE,
                    "max_request_tokens": _POSITIVE,
                    "bytes_per_token": _POSITIVE,
                    "max_input_events": _POSITIVE,
                }
            ),
            "overflow": {"enum": ["error", "truncate", "compress"]},
        }
    ),
    "ContextRequest": _strict(
        {
            "current_input": ref("Content"),
            "instructions": {"type": "string"},
            "generation_config": _OBJECT,
            "tools": {"type": "array", "items": _OBJECT},
            "policy": ref("ContextPolicy"),
        },
        ["current_input"],
    ),
    "ContextResponse": _strict(
        {
            "envelope": _strict(
                {
                    "instructions": {"type": "string", "nullable": True},
                    "generation_config": {**_OBJECT, "nullable": True},
                    "tools": {"type": "array", "items": _OBJECT},
                    "history": {"type": "array", "items": _OBJECT},
                    "memory": {"type": "array", "items": _OBJECT},
                    "current_input": ref("Content"),
                }
            ),
            "accounting": _OBJECT,
            "context_fingerprint": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        },
        ["envelope", "accounting", "context_fingerprint"],
    ),
}


def add_components(result, generator, request, public):
    """drf-spectacular post-processing hook: register the components above."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(COMPONENTS)
    return result

"""OpenAPI component schemas for sessions, events and contexts.

Events and context requests are validated by the pure validators in ``sessions_app.events``
and ``sessions_app.context.policy`` (fast enough for 500-event batches); these schemas
document the same shapes. ``tests/sessions_app/test_sessions_schema.py`` validates real requests and
responses against them so the two cannot drift apart.
"""

from __future__ import annotations

from ctxadmin.api.paths import ID_PATTERN
from ctxadmin.api.schema import OBJECT, exactly_one_of, page, ref, strict
from sessions_app.adk_shapes import ADK_VERSION, MODELS
from sessions_app.compaction.policy import LIMITS as POLICY_LIMITS
from sessions_app.compaction.policy import NULLABLE as _NULLABLE_POLICY_FIELDS
from sessions_app.compaction.policy import RETENTION_MODES, SUMMARIZER_KINDS, ZERO_ALLOWED
from sessions_app.events import (
    ACTION_KEYS,
    CONTENT_TYPES,
    FUNCTION_NAME_PATTERN,
    KEPT_EVENT_KEYS,
    MIME_TYPE_PATTERN,
    PART_KINDS,
    USAGE_KEYS,
)

_ID = {"type": "string", "pattern": f"^{ID_PATTERN}$", "maxLength": 128}
_TIMESTAMP = {
    "oneOf": [
        {"type": "string", "format": "date-time"},
        {"type": "number", "description": "seconds since the epoch"},
    ]
}
_FUNCTION_NAME = {"type": "string", "pattern": f"^{FUNCTION_NAME_PATTERN}$"}
_MIME_TYPE = {"type": "string", "pattern": f"^{MIME_TYPE_PATTERN}$", "maxLength": 255}


def _kept_schema(kind: str | None) -> dict:
    """A kept ADK field: its nested models as open objects (their keys are ADK's; the
    validator checks them against ``sessions_app.adk_shapes``), a free value as any JSON."""
    if kind is None:
        return {}
    if kind.startswith("["):
        return {
            "type": "array",
            "items": OBJECT,
            "nullable": True,
            "description": f"ADK's {kind[1:-1]} objects",
        }
    if kind.startswith("{"):
        return {**OBJECT, "nullable": True, "description": f"ADK's {kind[1:-1]} objects by key"}
    return {**OBJECT, "description": f"ADK's {kind}", "nullable": True}


def _kept(model: str, interpreted) -> dict:
    """The properties of ADK's ``model`` ctxadmin keeps as given (all but ``interpreted``)."""
    fields = MODELS[model]
    return {name: _kept_schema(fields[name]) for name in sorted(set(fields) - set(interpreted))}


_KEPT_NOTE = (
    f"Fields of google-adk {ADK_VERSION}'s model that ctxadmin does not interpret are kept as "
    "given and returned unchanged; keys outside it are refused."
)
_BYTES = {"type": "string", "format": "byte", "description": "standard or URL-safe base64"}


_INCLUDE_EXCLUDE = strict(
    {
        "include": {"type": "array", "items": {"type": "string"}, "maxItems": 256},
        "exclude": {"type": "array", "items": {"type": "string"}, "maxItems": 256},
    }
)
_POSITIVE = {"type": "integer", "minimum": 1}


COMPONENTS = {
    "Part": {
        **strict(
            {
                "text": {"type": "string", "nullable": True},
                "function_call": strict(
                    {
                        "id": _ID,
                        "name": _FUNCTION_NAME,
                        "args": {**OBJECT, "nullable": True},
                        **_kept("FunctionCall", ["id", "name", "args"]),
                    },
                    ["id", "name"],
                ),
                "function_response": strict(
                    {
                        "id": _ID,
                        "name": _FUNCTION_NAME,
                        "response": {**OBJECT, "nullable": True},
                        **_kept("FunctionResponse", ["id", "name", "response"]),
                    },
                    ["id", "name"],
                ),
                "inline_data": strict(
                    {
                        "mime_type": _MIME_TYPE,
                        "data": _BYTES,
                        **_kept("Blob", ["mime_type", "data"]),
                    },
                    ["mime_type", "data"],
                ),
                "file_data": strict(
                    {
                        "mime_type": _MIME_TYPE,
                        "file_uri": {"type": "string", "maxLength": 2048},
                        **_kept("FileData", ["mime_type", "file_uri"]),
                    },
                    ["mime_type", "file_uri"],
                ),
                **_kept("Part", PART_KINDS),
                "thought": {"type": "boolean", "nullable": True},
                "thought_signature": {**_BYTES, "nullable": True},
            }
        ),
        "description": "At most one of text, function_call, function_response, inline_data, "
        "file_data (what ctxadmin reads), beside any of ADK's other part fields (a thought, "
        "its signature, executable code, ...). " + _KEPT_NOTE,
    },
    "Content": strict(
        {
            "role": {"type": "string", "pattern": "^[a-z][a-z_]{0,31}$", "nullable": True},
            "parts": {"type": "array", "items": ref("Part"), "nullable": True},
        }
    ),
    "EventCompaction": strict(
        {
            "start_timestamp": {"type": "number", "description": "seconds since the epoch"},
            "end_timestamp": {"type": "number", "description": "seconds since the epoch"},
            "compacted_content": ref("Content"),
        },
        ["start_timestamp", "end_timestamp", "compacted_content"],
        description="A client's own compaction (ADK's EventsCompactionConfig): its content "
        "stands in a built context for the events of its time span.",
    ),
    "EventActions": strict(
        {
            "state_delta": {
                "type": "object",
                "additionalProperties": True,
                "description": "app:, user:, temp: prefixes select the scope",
            },
            "artifact_delta": {"type": "object", "additionalProperties": {"type": "integer"}},
            "compaction": ref("EventCompaction"),
            "rewind_before_invocation_id": {
                **_ID,
                "description": "hides the invocations from this one on from a built context",
            },
            **_kept("EventActions", ACTION_KEYS),
        },
        description=_KEPT_NOTE,
    ),
    "UsageMetadata": strict(
        {
            **{
                key: {"type": "integer", "minimum": 0, "nullable": True}
                for key in sorted(USAGE_KEYS)
            },
            **_kept("GenerateContentResponseUsageMetadata", USAGE_KEYS),
        },
        description=_KEPT_NOTE,
    ),
    "EventInput": strict(
        {
            "event_id": {**_ID, "nullable": True},
            "invocation_id": {"type": "string", "maxLength": 128, "nullable": True},
            "author": {"type": "string", "minLength": 1, "maxLength": 128},
            "content": {**ref("Content"), "nullable": True},
            "partial": {"type": "boolean", "nullable": True},
            "turn_complete": {"type": "boolean", "nullable": True},
            "actions": {**ref("EventActions"), "nullable": True},
            "timestamp": {**_TIMESTAMP, "nullable": True},
            "usage_metadata": {**ref("UsageMetadata"), "nullable": True},
            "custom_metadata": {**OBJECT, "nullable": True},
            **{
                name: {**_kept_schema(MODELS["Event"][name]), "nullable": True}
                for name in sorted(KEPT_EVENT_KEYS)
            },
        },
        ["author"],
        description=_KEPT_NOTE + " The top-level ones are bounded together "
        "(EventLimits.max_kept_bytes, 256 KiB of canonical JSON); the whole event by "
        "CTXADMIN_MAX_EVENT_BYTES.",
    ),
    "Event": strict(
        {
            "event_id": {"type": "string"},
            "seq": {"type": "integer", "nullable": True, "description": "null: not stored"},
            "invocation_id": {"type": "string"},
            "author": {"type": "string"},
            "content": {**ref("Content"), "nullable": True},
            "partial": {"type": "boolean"},
            "turn_complete": {"type": "boolean", "nullable": True},
            "actions": ref("StoredEventActions"),
            "timestamp": {"type": "string", "format": "date-time"},
            "usage_metadata": {**OBJECT, "nullable": True},
            "custom_metadata": {**OBJECT, "nullable": True},
            "byte_size": {"type": "integer"},
            "token_estimate": {"type": "integer"},
            "content_hash": {"type": "string"},
            "stored": {"type": "boolean"},
            **{name: _kept_schema(MODELS["Event"][name]) for name in sorted(KEPT_EVENT_KEYS)},
        },
        ["event_id", "seq", "author", "partial", "timestamp", "stored"],
        description="The event as stored: ctxadmin's fields, and ADK's kept fields as sent "
        "(present only when sent).",
    ),
    "AppendRequest": {
        **strict(
            {
                "event": ref("EventInput"),
                "events": {"type": "array", "items": ref("EventInput"), "minItems": 1},
                "expected_revision": {"type": "integer", "minimum": 0, "nullable": True},
                "state_remove": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": 256},
                    "maxItems": 256,
                    "nullable": True,
                    "description": "state keys to remove (session keys, `user:` and `app:` "
                    "keys; not `temp:`), after the batch's deltas and only with the events "
                    "this append stores. A delta's null stays a stored null (as in ADK).",
                },
            }
        ),
        "description": "Exactly one of `event` or `events` (at most CTXADMIN_MAX_BATCH_EVENTS).",
        # Neither both nor none: stated under `not` so that client generators, which read
        # a top-level oneOf as a union of types, keep this one object type.
        **exactly_one_of("event", "events"),
    },
    "AppendResponse": strict(
        {
            "events": {"type": "array", "items": ref("Event")},
            "created": {"type": "integer"},
            "revision": {"type": "integer"},
            "updated_at": {
                "type": "string",
                "format": "date-time",
                "description": "the session's last update as stored (what a read of it shows)",
            },
            "state": OBJECT,
        },
        ["events", "created", "revision", "updated_at", "state"],
    ),
    "SessionCreate": strict(
        {
            "session_id": {**_ID, "nullable": True, "description": "absent or null: generated"},
            "state": OBJECT,
        },
    ),
    "SessionSummary": strict(
        {
            "session_id": {"type": "string"},
            "user_id": {"type": "string"},
            "revision": {"type": "integer"},
            "event_count": {"type": "integer"},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
            "state": {
                **OBJECT,
                "description": "with include=state: the session's keys merged with its user: "
                "and app: state",
            },
        },
        ["session_id", "user_id", "revision", "event_count", "created_at", "updated_at"],
    ),
    "Session": strict(
        {
            "session_id": {"type": "string"},
            "user_id": {"type": "string"},
            "app": {"type": "string"},
            "revision": {"type": "integer"},
            "event_count": {"type": "integer"},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
            "state": ref("MergedState"),
            "events": {"type": "array", "items": ref("Event")},
            "events_complete": {"type": "boolean"},
        },
        ["session_id", "user_id", "app", "revision", "state", "events"],
    ),
    "StoredEventActions": {
        **OBJECT,
        "description": "The event's actions as stored: what EventActions accepted, as sent.",
    },
    "MergedState": {
        **OBJECT,
        "description": "The session's keys merged with its user: and app: state.",
    },
    "SessionPage": page("SessionSummary"),
    "EventPage": page("Event"),
    "UserState": strict(
        {"app": {"type": "string"}, "user_id": {"type": "string"}, "state": OBJECT}
    ),
    "ContextPolicy": strict(
        {
            "filters": strict(
                {
                    "authors": _INCLUDE_EXCLUDE,
                    "invocation_ids": _INCLUDE_EXCLUDE,
                    "content_types": strict(
                        {
                            "include": {"type": "array", "items": {"enum": list(CONTENT_TYPES)}},
                            "exclude": {"type": "array", "items": {"enum": list(CONTENT_TYPES)}},
                        }
                    ),
                    # Either end may be null: no bound on that side (as the policy reads it).
                    "timestamp": strict(
                        {
                            "from": {**_TIMESTAMP, "nullable": True},
                            "to": {**_TIMESTAMP, "nullable": True},
                        }
                    ),
                    "include_partial": {"type": "boolean"},
                    "final_only": {"type": "boolean"},
                }
            ),
            "budgets": strict(
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
}
# ADK's fields are optional: null is absent, for the data kinds of a part and the actions
# ctxadmin reads as for the rest.
for _component, _names in (
    ("Part", ("function_call", "function_response", "inline_data", "file_data")),
    (
        "EventActions",
        ("state_delta", "artifact_delta", "compaction", "rewind_before_invocation_id"),
    ),
):
    _properties = COMPONENTS[_component]["properties"]
    for _name in _names:
        _properties[_name] = {**_properties[_name], "nullable": True}

_UUID = {"type": "string", "format": "uuid"}
_NULLABLE_INT = {"type": "integer", "nullable": True}
_POLICY_PROPERTIES = {
    **{
        name: {"type": "integer", "minimum": 0 if name in ZERO_ALLOWED else 1, "maximum": limit}
        for name, limit in POLICY_LIMITS.items()
    },
    "summarizer": strict(
        {
            "kind": {"enum": list(SUMMARIZER_KINDS)},
            "connection": {"type": "string", "pattern": "^[a-z0-9_-]{1,64}$"},
            "model": {"type": "string", "maxLength": 128},
            "max_output_tokens": {"type": "integer", "minimum": 1, "maximum": 65536},
        }
    ),
    "retention": {"enum": list(RETENTION_MODES)},
    "automatic": {"type": "boolean"},
}
for _name in _NULLABLE_POLICY_FIELDS:
    _POLICY_PROPERTIES[_name] = {**_POLICY_PROPERTIES[_name], "nullable": True}
_COMPACTION = {
    "compaction_id": _UUID,
    "status": {"enum": ["pending", "running", "active", "superseded", "failed"]},
    "origin": {"enum": ["automatic", "manual", "overflow"]},
    "trigger": {"type": "string", "nullable": True},
    "representation": {"enum": ["summary", "pruned", None], "nullable": True},
    "coverage": strict(
        {"first_seq": {"type": "integer"}, "last_seq": {"type": "integer"}},
        ["first_seq", "last_seq"],
        nullable=True,
    ),
    "source_event_count": {"type": "integer"},
    "source_fingerprint": {"type": "string", "nullable": True},
    "tokens_before": _NULLABLE_INT,
    "tokens_after": _NULLABLE_INT,
    "summarizer": {"type": "string", "nullable": True},
    "model": {"type": "string", "nullable": True},
    "usage": OBJECT,
    "parent_id": {**_UUID, "nullable": True},
    "subsumed_by": {**_UUID, "nullable": True},
    "summary_event_id": {"type": "string", "nullable": True},
    "projected_event_ids": {"type": "array", "items": {"type": "string"}},
    "purged_events": {"type": "integer"},
    "error": strict(
        {"code": {"type": "string"}, "message": {"type": "string"}},
        ["code", "message"],
        nullable=True,
    ),
    "duration_ms": {"type": "number", "nullable": True},
    "created_at": {"type": "string", "format": "date-time", "nullable": True},
    "finished_at": {"type": "string", "format": "date-time", "nullable": True},
}
COMPONENTS.update(
    {
        "CompactionPolicy": strict(_POLICY_PROPERTIES),
        "PolicyState": strict(
            {"policy": ref("CompactionPolicy"), "source": {"enum": ["session", "app", "default"]}},
            ["policy", "source"],
        ),
        "CompactionRequest": strict(
            {
                "compaction_id": _UUID,
                "async": {"type": "boolean"},
                "timeout_ms": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": POLICY_LIMITS["timeout_ms"],
                },
                "expected_head": {**_UUID, "nullable": True},
                "source_event_ids": {
                    "type": "array",
                    "items": _ID,
                    "minItems": 1,
                    "maxItems": 5000,
                },
            }
        ),
        "Compaction": strict(_COMPACTION, sorted(_COMPACTION)),
        "CompactionDetail": strict(
            {**_COMPACTION, "summary": {**OBJECT, "nullable": True}},
            sorted([*_COMPACTION, "summary"]),
        ),
        "CompactionAccepted": strict(
            {
                "compaction_id": _UUID,
                "status": {"enum": ["pending"]},
                "status_url": {"type": "string", "format": "uri"},
            },
            ["compaction_id", "status", "status_url"],
        ),
        "CompactionPage": page("Compaction"),
    }
)

_CAPABILITIES = [
    "identity",
    "state_read",
    "artifact_put",
    "artifact_get",
    "artifact_list",
    "artifact_list_versions",
    "artifact_delete",
    "artifact_attach",
    "memory_search",
    "memory_add",
    "memory_delete",
    "context_build",
    "session_read",
    "event_append",
    "memory_get",
]
_TOOL_TOKEN_INFO = {
    "prefix": {"type": "string"},
    "app": {"type": "string"},
    "user_id": {"type": "string"},
    "session_id": {"type": "string"},
    "invocation_id": {"type": "string"},
    "function_call_id": {"type": "string"},
    "tool_name": {"type": "string"},
    "capabilities": {"type": "array", "items": {"enum": _CAPABILITIES}},
    "created_at": {"type": "string", "format": "date-time"},
    "expires_at": {"type": "string", "format": "date-time"},
    "revoked_at": {"type": "string", "format": "date-time", "nullable": True},
}
_USER_TOKEN_INFO = {
    "prefix": {"type": "string"},
    "app": {"type": "string"},
    "user_id": {"type": "string"},
    "session_id": {"type": "string", "nullable": True},
    "label": {"type": "string"},
    "capabilities": {"type": "array", "items": {"enum": _CAPABILITIES}},
    "state": {"enum": ["active", "expired", "revoked"]},
    "created_by_key": {"type": "string"},
    "created_at": {"type": "string", "format": "date-time"},
    "expires_at": {"type": "string", "format": "date-time"},
    "last_used_at": {"type": "string", "format": "date-time", "nullable": True},
    "revoked_at": {"type": "string", "format": "date-time", "nullable": True},
    "revoked_reason": {
        "enum": ["revoked", "erased", "minter_revoked", None],
        "nullable": True,
        "description": "why a revoked token ended (token_ended's reason): revoked by a call, "
        "its user erased, or the key that minted it revoked or rotated",
    },
}
COMPONENTS.update(
    {
        "ToolTokenMint": strict(
            {
                "tool_name": {"type": "string", "minLength": 1},
                "capabilities": {"type": "array", "items": {"enum": _CAPABILITIES}},
                "ttl_ms": {"type": "integer", "minimum": 1000, "maximum": 3600000},
                "function_call_id": _ID,
            },
            ["tool_name"],
        ),
        "ToolTokenInfo": strict(_TOOL_TOKEN_INFO, list(_TOOL_TOKEN_INFO)),
        "ToolTokenMinted": strict(
            {"token": {"type": "string", "description": "shown once"}, **_TOOL_TOKEN_INFO},
            ["token", *_TOOL_TOKEN_INFO],
        ),
        "UserTokenMint": strict(
            {
                "capabilities": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"enum": _CAPABILITIES},
                },
                "session_id": {**_ID, "nullable": True},
                "ttl_ms": {"type": "integer", "minimum": 1000, "maximum": 30 * 86_400_000},
                "label": {"type": "string", "maxLength": 200},
            },
            ["capabilities"],
        ),
        "UserToken": strict(_USER_TOKEN_INFO, list(_USER_TOKEN_INFO)),
        "UserTokenMinted": strict(
            {"token": {"type": "string", "description": "shown once"}, **_USER_TOKEN_INFO},
            ["token", *_USER_TOKEN_INFO],
        ),
        "UserTokenPage": page("UserToken"),
        "UserTokenRevokeByMinter": strict(
            {
                "minted_by": {
                    "type": "string",
                    "pattern": "^[a-z0-9]{10}$",
                    "description": "the prefix of the API key that minted the tokens",
                }
            },
            ["minted_by"],
        ),
        "UserTokensRevoked": strict({"revoked": {"type": "integer", "minimum": 0}}, ["revoked"]),
        "SessionState": strict(
            {
                "app": {"type": "string"},
                "user_id": {"type": "string"},
                "session_id": {"type": "string"},
                "state": OBJECT,
            },
            ["app", "user_id", "session_id", "state"],
        ),
    }
)


def add_components(result, generator, request, public):
    """drf-spectacular post-processing hook: register the components above."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(COMPONENTS)
    return result

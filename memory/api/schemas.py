"""OpenAPI component schemas for long-term memory (registered by a drf-spectacular hook)."""

from __future__ import annotations

from ctxadmin.api.paths import ID_PATTERN, MAX_ID_LENGTH
from ctxadmin.api.schema import page, ref
from memory.extractors import EXTRACTOR_KINDS, MAX_OUTPUT_TOKENS
from memory.facts import MAX_FACT_KEY_LENGTH
from memory.filters import MAX_CONDITIONS, MAX_IN_VALUES, MAX_STRING_BYTES
from memory.inputs import (
    EMBED_MODES,
    INGESTION_MODES,
    KEY_PATTERN,
    MAX_BATCH_MEMORIES,
    MAX_BM25_MIN_SCORE,
    MAX_INGEST_EVENTS,
    MAX_KEY_LENGTH,
    MAX_QUERY_BYTES,
    MAX_RETENTION_DAYS,
    MAX_SEARCH_LIMIT,
    MAX_TOUCH_IDS,
    MAX_TTL_SECONDS,
    MAX_WEIGHT,
    MODES,
    SCORE_TYPES,
)
from memory.models import ErasureReceipt

_OBJECT = {"type": "object", "additionalProperties": True}
_NULLABLE_STRING = {"type": "string", "nullable": True}
_SESSION_ID = {"type": "string", "pattern": f"^{ID_PATTERN}$", "maxLength": MAX_ID_LENGTH}
# A provenance id; empty or null when there is none.
_NULLABLE_ID = {"type": "string", "pattern": f"^(?:{ID_PATTERN})?$", "nullable": True}
_NULLABLE_TIME = {"type": "string", "format": "date-time", "nullable": True}
_FINGERPRINT = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_INSTANT = {"type": "string", "format": "date-time", "nullable": True, "maxLength": 64}


def _strict(properties: dict, required: list[str] | None = None) -> dict:
    schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    return schema


_PROVENANCE = _strict(
    {
        "session_id": _NULLABLE_STRING,
        "event_id": _NULLABLE_STRING,
        "author": _NULLABLE_STRING,
        "timestamp": {
            "oneOf": [{"type": "string", "format": "date-time"}, {"type": "number"}],
            "nullable": True,
        },
    }
)
# What a client may send: identifiers (an answer may also show an ingested event's author).
_PROVENANCE_INPUT = _strict(
    {
        **_PROVENANCE["properties"],
        "session_id": _NULLABLE_ID,
        "event_id": _NULLABLE_ID,
        "author": _NULLABLE_ID,
    }
)
_WRITER = _strict(
    {
        "key_prefix": {
            **_NULLABLE_STRING,
            "description": "the writing API key's or token's prefix (null: a worker)",
        },
        "job_id": {"type": "string", "format": "uuid", "nullable": True},
        "event_id": _NULLABLE_STRING,
    },
    ["key_prefix", "job_id", "event_id"],
)
COMPONENTS = {
    "MemoryCreate": _strict(
        {
            "content": {"type": "string", "minLength": 1},
            "metadata": _OBJECT,
            "provenance": {**_PROVENANCE_INPUT, "nullable": True},
            "idempotency_key": {
                "type": "string",
                "pattern": f"^{KEY_PATTERN}$",
                "maxLength": MAX_KEY_LENGTH,
                "nullable": True,
            },
            "embed": {"enum": list(EMBED_MODES)},
            "erasure_epoch": {
                "type": "integer",
                "minimum": 0,
                "nullable": True,
                "description": "The scope's erasure epoch this write was prepared at; older "
                "than the current one: 409 memory_erasure_epoch_stale, nothing written.",
            },
            "ttl_seconds": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TTL_SECONDS,
                "nullable": True,
                "description": "The entry's own time to live (default: the app policy's "
                "`default_ttl_seconds`); at most that default and at least the policy's "
                "`retention_days` in seconds, when set (else 400 `validation_error`). A touch "
                "(`POST .../memories/touch`) restarts it.",
            },
            "replace": {
                "type": "boolean",
                "default": False,
                "description": "With an `idempotency_key`: the entry holding the key (live or "
                "expired) takes this write's content, metadata and terms in place, in one "
                "statement (200; 201 when none held it); concurrent replaces of one key leave "
                "one entry. 409 `legal_hold` or `memory_retained` as erasing it would be. "
                "Refused (400) with a `key`; 409 `memory_keyed` when the idempotency key "
                "names a version of a memory with a key (never rewritten in place).",
            },
            "key": {
                "type": "string",
                "pattern": "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$",
                "minLength": 1,
                "maxLength": MAX_FACT_KEY_LENGTH,
                "nullable": True,
                "description": "The fact this memory is a version of (`preference.seat`): "
                "dot-separated segments of a-z 0-9 _ -, case-folded. It supersedes the key's "
                "version its `valid_from` falls inside (the live one, for a newer fact); the "
                "same content as the live version is that version (200).",
            },
            "valid_from": {
                **_INSTANT,
                "description": "When it became true (ISO 8601 with a zone); default: "
                "`provenance.timestamp`, else the add time.",
            },
        },
        ["content"],
    ),
    "MemoryBatch": _strict(
        {
            "memories": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_BATCH_MEMORIES,
                "items": ref("MemoryCreate"),
            }
        },
        ["memories"],
    ),
    "MemoryBatchResult": _strict(
        {
            "memories": {
                "type": "array",
                "description": "Each add's entry and whether it was created, in order.",
                "items": _strict(
                    {"memory": ref("Memory"), "created": {"type": "boolean"}},
                    ["memory", "created"],
                ),
            }
        },
        ["memories"],
    ),
    "MemoryUserPage": page("MemoryUser"),
    "MemoryUser": _strict({"user_id": _SESSION_ID}, ["user_id"]),
    "MemoryTouch": _strict(
        {
            "ids": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_TOUCH_IDS,
                "items": {"type": "string", "format": "uuid"},
            }
        },
        ["ids"],
    ),
    "MemoryTouchResult": _strict(
        {
            "memories": {
                "type": "array",
                "description": "The live entries with a TTL that were refreshed (others among "
                "`ids`, unknown, expired or without a TTL, are left out).",
                "items": _strict(
                    {
                        "id": {"type": "string", "format": "uuid"},
                        "expires_at": {"type": "string", "format": "date-time"},
                    },
                    ["id", "expires_at"],
                ),
            }
        },
        ["memories"],
    ),
    "Memory": _strict(
        {
            "id": {"type": "string", "format": "uuid"},
            "content": {"type": "string"},
            "metadata": _OBJECT,
            "provenance": _PROVENANCE,
            "idempotency_key": _NULLABLE_STRING,
            "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "embedding_model": _NULLABLE_STRING,
            "created_at": {"type": "string", "format": "date-time"},
            "expires_at": _NULLABLE_TIME,
            "retain_until": _NULLABLE_TIME,
            "key": {**_NULLABLE_STRING, "description": "the fact it is a version of"},
            "valid_from": {
                "type": "string",
                "format": "date-time",
                "description": "valid time: when it became true",
            },
            "valid_to": {
                **_NULLABLE_TIME,
                "description": "valid time: when its successor became true (null: still true)",
            },
            "recorded_at": {
                "type": "string",
                "format": "date-time",
                "description": "record time: when ctxadmin stored it (the server's clock)",
            },
            "retired_at": {
                **_NULLABLE_TIME,
                "description": "record time: when ctxadmin first closed it (set with valid_to)",
            },
            "superseded_by": {
                "type": "string",
                "format": "uuid",
                "nullable": True,
                "description": "the next version of its key",
            },
            "supersedes": {
                "type": "string",
                "format": "uuid",
                "nullable": True,
                "description": "the version of its key it cut short",
            },
            "near_duplicate_of": {
                "type": "string",
                "format": "uuid",
                "nullable": True,
                "description": "the unkeyed memory of the scope this one nearly repeats, set "
                "by a worker once the add commits (a flag; ingestion merges such turns "
                "instead)",
            },
        },
        [
            "id",
            "content",
            "metadata",
            "provenance",
            "idempotency_key",
            "sha256",
            "embedding_model",
            "created_at",
            "expires_at",
            "retain_until",
            "key",
            "valid_from",
            "valid_to",
            "recorded_at",
            "retired_at",
            "superseded_by",
            "supersedes",
            "near_duplicate_of",
        ],
    ),
    "MemoryHistory": _strict(
        {
            "versions": {
                "type": "array",
                "description": "oldest valid first",
                "items": {"$ref": "#/components/schemas/MemoryVersion"},
            }
        },
        ["versions"],
    ),
    "MemorySearch": _strict(
        {
            "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_BYTES},
            "mode": {"enum": list(MODES)},
            "filter": {
                **_OBJECT,
                "nullable": True,
                "description": "Conditions on metadata, `session_id` and `created_at`, all "
                f"ANDed (README, memory search): at most {MAX_CONDITIONS} conditions, "
                f"{MAX_IN_VALUES} values in each `$in`/`$nin` and {MAX_STRING_BYTES} bytes "
                "(UTF-8) of string values in all; beyond, 400 `validation_error` on `filter`.",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT},
            "min_score": {
                "type": "number",
                "nullable": True,
                "description": "Keep only hits whose `score` is at least this, on the mode's "
                f"scale: BM25 in lexical mode (0 to {MAX_BM25_MIN_SCORE:g}), cosine similarity "
                "in vector mode (-1 to 1), the fused score in hybrid mode (`rrf` or "
                f"`weighted`, 0 to {2 * MAX_WEIGHT}); out of its mode's range, 400 "
                "`validation_error`. Given, it replaces the default relevance floor (no hits "
                "unless one has a lexical match or a cosine similarity at or above the "
                "embedder's calibrated threshold, then those with a lexical match or a cosine "
                "at or above its lower calibrated one; for a Chinese, Japanese or Korean query "
                "with an embedder that does not read those scripts, a lexical match only; "
                "docs/memory.md, relevance floor): `0` in hybrid "
                "mode or `-1` in vector mode "
                "returns the top `limit` whatever their evidence.",
            },
            # null: the embedder's measured fusion, as when absent.
            "weights": {
                **_strict(
                    {
                        "lexical": {"type": "number", "minimum": 0, "maximum": MAX_WEIGHT},
                        "vector": {"type": "number", "minimum": 0, "maximum": MAX_WEIGHT},
                    }
                ),
                "minProperties": 1,
                "nullable": True,
            },
            "as_of": {
                **_INSTANT,
                "description": "valid time: search the versions true at this instant "
                "(default: now)",
            },
            "known_at": {
                **_INSTANT,
                "description": "record time: as ctxadmin knew them at this instant (default: now)",
            },
        },
        ["query"],
    ),
    "MemoryPage": page("Memory"),
    "MemorySearchResult": _strict(
        {
            "hits": {
                "type": "array",
                "items": _strict(
                    {
                        "id": {"type": "string", "format": "uuid"},
                        "content": {"type": "string"},
                        "score": {"type": "number"},
                        "score_type": {"enum": list(SCORE_TYPES)},
                        "timestamp": {"type": "string", "format": "date-time"},
                        "metadata": _OBJECT,
                        "provenance": _PROVENANCE,
                    },
                    [
                        "id",
                        "content",
                        "score",
                        "score_type",
                        "timestamp",
                        "metadata",
                        "provenance",
                    ],
                ),
            }
        },
        ["hits"],
    ),
}

COMPONENTS["MemoryEventsRequest"] = _strict(
    {
        "session_id": {
            **_SESSION_ID,
            "nullable": True,
            "description": "The events' session: their memories' provenance, and part of "
            "each one's idempotency key (`session:<session_id>:<event_id>`). Absent or "
            "null: no session; each is keyed by its event id in the user's scope "
            "(`event:<event_id>`), so a repeat is still a duplicate.",
        },
        "events": {
            "type": "array",
            "items": {"$ref": "#/components/schemas/EventInput"},
            "minItems": 1,
            "maxItems": MAX_INGEST_EVENTS,
        },
        "custom_metadata": {
            **_OBJECT,
            "nullable": True,
            "description": "Metadata stored on every memory made from these events, beside "
            "their `role` and `source` (which it cannot set): the same keys, redaction and "
            "size limit as a memory's `metadata`. ADK's `add_events_to_memory` "
            "`custom_metadata`. A repeated event keeps the metadata it was first stored with.",
        },
    },
    ["events"],
)
COMPONENTS["MemoryEventsResult"] = _strict(
    {
        "added": {"type": "integer"},
        "duplicates": {"type": "integer"},
        "skipped": {"type": "integer"},
        "skipped_by_reason": {"type": "object", "additionalProperties": {"type": "integer"}},
        "memory_ids": {"type": "array", "items": {"type": "string", "format": "uuid"}},
    },
    ["added", "duplicates", "skipped", "skipped_by_reason", "memory_ids"],
)

COMPONENTS["Extractor"] = {
    "type": "object",
    "additionalProperties": False,
    "description": "What ingestion does with a session's turns: none stores each as said; "
    "rules extracts facts offline by stated rules; openai_compatible, gemini and anthropic "
    "ask a model behind a provider connection (connection and model required). Whatever "
    "an extractor proposes is checked whole and applied in one transaction, or refused.",
    "properties": {
        "kind": {"enum": list(EXTRACTOR_KINDS)},
        "connection": {"type": "string", "pattern": "^[a-z0-9_-]{1,64}$"},
        "model": {"type": "string", "maxLength": 128},
        "max_output_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_OUTPUT_TOKENS},
    },
}
_POLICY_FIELDS = {
    "consent_required": {
        "type": "boolean",
        "description": "Adds and searches for a user need their granted consent (403 "
        "consent_required).",
    },
    "default_ttl_seconds": {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_TTL_SECONDS,
        "nullable": True,
        "description": "New entries expire this long after they are written: invisible at "
        "once, purged later.",
    },
    "retention_days": {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_RETENTION_DAYS,
        "nullable": True,
        "description": "New entries cannot be erased (entry or session erasure) for this "
        "long; user erasure ignores it.",
    },
    "legal_hold": {
        "type": "boolean",
        "description": "No erasure (409 legal_hold) and no expiry purge in the whole app.",
    },
    "ingestion": {
        "enum": list(INGESTION_MODES),
        "description": "on_success: an append that completes an invocation (turn_complete, or "
        "a final text answer of the model) admits a durable ingestion job for the session's "
        "events not yet admitted.",
    },
    "extractor": {
        "allOf": [ref("Extractor")],
        "description": "The extractor ingestion jobs use (default none); an admission may "
        "name another.",
    },
}
COMPONENTS["MemoryPolicy"] = _strict(_POLICY_FIELDS)
COMPONENTS["MemoryPolicyState"] = _strict(
    {
        **_POLICY_FIELDS,
        "source": {"enum": ["default", "app"]},
        "updated_at": _NULLABLE_TIME,
    },
    [*_POLICY_FIELDS, "source", "updated_at"],
)
COMPONENTS["MemoryConsentUpdate"] = _strict({"granted": {"type": "boolean"}}, ["granted"])
COMPONENTS["MemoryConsent"] = _strict(
    {
        "granted": {"type": "boolean", "nullable": True, "description": "null: not recorded"},
        "consent_required": {"type": "boolean"},
        "updated_at": _NULLABLE_TIME,
    },
    ["granted", "consent_required", "updated_at"],
)
COMPONENTS["MemoryLegalHold"] = _strict(
    {
        "legal_hold": {"type": "boolean", "description": "this user's own hold"},
        "app_legal_hold": {"type": "boolean", "description": "the app policy's hold"},
        "since": _NULLABLE_TIME,
    },
    ["legal_hold", "app_legal_hold", "since"],
)
COMPONENTS["MemoryErasureEpoch"] = _strict(
    {"erasure_epoch": {"type": "integer", "minimum": 0}}, ["erasure_epoch"]
)
COMPONENTS["MemoryUserErasure"] = _strict(
    {"confirm": {"type": "string", "description": "exactly `erase user <user>`"}}, ["confirm"]
)
COMPONENTS["MemoryErasureReceipt"] = _strict(
    {
        "receipt_id": {"type": "string", "format": "uuid"},
        "kind": {"enum": [kind for kind, _label in ErasureReceipt.KINDS]},
        "scope_fingerprint": {
            **_FINGERPRINT,
            "description": "sha256 of the canonical JSON of {app_id, user_id}",
        },
        "target_fingerprint": {
            **_FINGERPRINT,
            "nullable": True,
            "description": "session: sha256 of {app_id, user_id, session_id}; entry: of "
            "{app_id, user_id, memory_id}; user: null",
        },
        "erased_by": {"type": "string", "description": "the API key's prefix"},
        "counts": _strict(
            {
                "entries": {"type": "integer", "minimum": 0},
                "queued_work": {"type": "integer", "minimum": 0},
                "consent_records": {"type": "integer", "minimum": 0},
                "tokens_revoked": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "user erasure: the user's user and tool tokens it ended",
                },
                "user_state_keys": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "user erasure: the user: state keys it removed",
                },
                "user_artifacts": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "user erasure: the user: artifact names it deleted (with "
                    "every version)",
                },
            },
            ["entries", "queued_work", "consent_records"],
        ),
        "erasure_epoch": {
            "type": "integer",
            "minimum": 0,
            "description": "the scope's erasure epoch after the erasure",
        },
        "erased_at": {"type": "string", "format": "date-time"},
    },
    [
        "receipt_id",
        "kind",
        "scope_fingerprint",
        "target_fingerprint",
        "erased_by",
        "counts",
        "erasure_epoch",
        "erased_at",
    ],
)
# Operations whose JSON body arrives on a DELETE (drf-spectacular documents bodies on POST,
# PUT and PATCH only).
_DELETE_BODIES = {"memories_erase": ("MemoryUserErasure", False)}


def add_components(result, generator, request, public):
    """drf-spectacular post-processing hook: register the components above."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(COMPONENTS)
    for path in result.get("paths", {}).values():
        operation = path.get("delete")
        if operation and operation.get("operationId") in _DELETE_BODIES:
            name, required = _DELETE_BODIES[operation["operationId"]]
            operation["requestBody"] = {
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}
                },
                "required": required,
            }
    return result


COMPONENTS["MemoryVersion"] = _strict(
    {**COMPONENTS["Memory"]["properties"], "written_by": _WRITER},
    [*COMPONENTS["Memory"]["required"], "written_by"],
)

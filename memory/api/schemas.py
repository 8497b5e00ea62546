"""OpenAPI component schemas for long-term memory (registered by a drf-spectacular hook)."""

from __future__ import annotations

_OBJECT = {"type": "object", "additionalProperties": True}
_NULLABLE_STRING = {"type": "string", "nullable": True}


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
COMPONENTS = {
    "MemoryCreate": _strict(
        {
            "content": {"type": "string", "minLength": 1},
            "metadata": _OBJECT,
            "provenance": _PROVENANCE,
            "idempotency_key": {"type": "string", "maxLength": 256},
            "embed": {"enum": ["auto", "sync", "async"]},
        },
        ["content"],
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
        ],
    ),
    "MemorySearch": _strict(
        {
            "query": {"type": "string", "minLength": 1, "maxLength": 4096},
            "mode": {"enum": ["lexical", "vector", "hybrid"]},
            "filter": _OBJECT,
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "min_score": {"type": "number"},
            "weights": _strict(
                {
                    "lexical": {"type": "number", "minimum": 0, "maximum": 100},
                    "vector": {"type": "number", "minimum": 0, "maximum": 100},
                }
            ),
        },
        ["query"],
    ),
    "MemorySearchResult": _strict(
        {
            "hits": {
                "type": "array",
                "items": _strict(
                    {
                        "id": {"type": "string", "format": "uuid"},
                        "content": {"type": "string"},
                        "score": {"type": "number"},
                        "score_type": {"enum": ["ts_rank", "cosine", "rrf"]},
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
        "session_id": {"type": "string", "maxLength": 128},
        "events": {
            "type": "array",
            "items": {"$ref": "#/components/schemas/EventInput"},
            "minItems": 1,
            "maxItems": 500,
        },
    },
    ["session_id", "events"],
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


def add_components(result, generator, request, public):
    """drf-spectacular post-processing hook: register the components above."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(COMPONENTS)
    return result

"""OpenAPI component schemas of the runner's requests and answers: a context build and an
invocation. Their limits and lists are the parsers' own (``runner.inputs``, memory's search
inputs), so the document cannot drift from what is enforced."""

from __future__ import annotations

from ctxadmin.api.paths import ID_PATTERN
from ctxadmin.api.schema import OBJECT, ref, strict
from memory.facts import MAX_FACT_KEY_LENGTH, MAX_INSTANT_LENGTH
from memory.inputs import MAX_QUERY_BYTES, MAX_SEARCH_LIMIT, MODES
from memory.profile import (
    DEFAULT_PROFILE_BYTES,
    MAX_PROFILE_BYTES,
    MAX_PROFILE_FIELDS,
    MAX_PROFILE_PREFIXES,
)
from memory.render import MIN_PACKED_HIT_BYTES
from runner.inputs import (
    INGESTION_MODES,
    MAX_DEADLINE_MS,
    MAX_MEMORY_HIT_BYTES,
    MAX_MEMORY_TOTAL_BYTES,
    MEMORY_ON_ERROR,
    MIN_CACHE_TTL_MS,
)

_ID = {"type": "string", "pattern": f"^{ID_PATTERN}$", "maxLength": 128}
_NULLABLE_INT = {"type": "integer", "nullable": True}
_INSTANT = {
    "type": "string",
    "format": "date-time",
    "nullable": True,
    "maxLength": MAX_INSTANT_LENGTH,
}
_PROFILE = strict(
    {
        "prefixes": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_PROFILE_PREFIXES,
            "items": {"type": "string", "minLength": 1, "maxLength": MAX_FACT_KEY_LENGTH},
            "description": "keys or key prefixes in the key grammar (dot-separated segments "
            "of a-z 0-9 _ -, case-folded), matched segment by segment",
        },
        "max_fields": {"type": "integer", "minimum": 1, "maximum": MAX_PROFILE_FIELDS},
        "max_bytes": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_PROFILE_BYTES,
            "description": f"the most bytes of the block (default {DEFAULT_PROFILE_BYTES})",
        },
    },
    ["prefixes"],
    nullable=True,
)


def _retrieval(filter_schema: dict, **first: dict) -> dict:
    """A memory retrieval's members (an invocation's takes its query from the input; a
    context build's names it first)."""
    return {
        **first,
        "mode": {"enum": list(MODES), "description": "How memory is searched. Absent: hybrid."},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_SEARCH_LIMIT,
            "description": "The most hits to search for. Absent: as many as the slot could "
            f"hold, each at its smallest ({MIN_PACKED_HIT_BYTES} bytes), up to "
            f"{MAX_SEARCH_LIMIT}; the slot being what the request budget leaves after the "
            "fixed parts, or max_total_bytes. Leaving out everything but the query is the best "
            "configuration measured (hybrid, packed, the best hits with their neighbours).",
        },
        "filter": filter_schema,
        "as_of": {
            **_INSTANT,
            "description": "valid time: the slot shows the version of each key true at this "
            "instant (default: now)",
        },
        "known_at": {
            **_INSTANT,
            "description": "record time: as ctxadmin knew them at this instant (default: now)",
        },
        "max_hit_bytes": {"type": "integer", "minimum": 1, "maximum": MAX_MEMORY_HIT_BYTES},
        "max_total_bytes": {
            "type": "integer",
            "nullable": True,
            "minimum": 1,
            "maximum": MAX_MEMORY_TOTAL_BYTES,
            "description": "A byte cap for the memory slot, each hit its own item. Absent or "
            "null: the hits are packed, as one item, into what the request budget leaves.",
        },
        "on_error": {"enum": list(MEMORY_ON_ERROR)},
    }


CONTEXT_COMPONENTS = {
    "ContextRequest": strict(
        {
            "current_input": ref("Content"),
            # Each optional member may also be null: the same as absent.
            "instructions": {"type": "string", "nullable": True},
            "generation_config": {**OBJECT, "nullable": True},
            "tools": {"type": "array", "items": OBJECT, "nullable": True},
            "policy": {**ref("ContextPolicy"), "nullable": True},
            "memory": strict(
                _retrieval(
                    {**OBJECT, "nullable": True},
                    query={"type": "string", "minLength": 1, "maxLength": MAX_QUERY_BYTES},
                ),
                ["query"],
                nullable=True,
            ),
            # The user's profile block, placed first in the envelope.
            "profile": _PROFILE,
        },
        ["current_input"],
    ),
    "ContextResponse": strict(
        {
            "envelope": strict(
                {
                    "instructions": {"type": "string", "nullable": True},
                    "generation_config": {**OBJECT, "nullable": True},
                    "tools": {"type": "array", "items": OBJECT},
                    "history": {"type": "array", "items": OBJECT},
                    "memory": {"type": "array", "items": OBJECT},
                    # Present when the request asks for a profile: [] or one item.
                    "profile": {"type": "array", "items": OBJECT},
                    "current_input": ref("Content"),
                }
            ),
            "accounting": OBJECT,
            "context_fingerprint": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        },
        ["envelope", "accounting", "context_fingerprint"],
    ),
}

INVOCATION_COMPONENTS = {
    "InvocationRequest": strict(
        {
            "invocation_id": _ID,
            "input": ref("Content"),
            "agent": strict(
                {
                    "provider": {
                        "type": "string",
                        "description": "a connection of CTXADMIN_PROVIDERS, or `fake`",
                    },
                    "model": {"type": "string", "maxLength": 128},
                    "name": {"type": "string", "maxLength": 128},
                    "instructions": {"type": "string"},
                    "declarations": {"type": "array", "items": OBJECT},
                    "generation_config": OBJECT,
                },
                ["provider", "model"],
            ),
            "context_policy": ref("ContextPolicy"),
            "memory_retrieval": strict(_retrieval(OBJECT)),
            # The user's profile block, sent first (before history and memory).
            "profile": _PROFILE,
            "cache": {
                "oneOf": [
                    strict(
                        {
                            "ttl_ms": {"type": "integer", "minimum": MIN_CACHE_TTL_MS},
                            "min_prefix_tokens": {"type": "integer", "minimum": 0},
                        }
                    ),
                    {"enum": ["off"]},
                ],
                "nullable": True,
            },
            "ingestion": {"enum": list(INGESTION_MODES)},
            "deadline_ms": {"type": "integer", "minimum": 1, "maximum": MAX_DEADLINE_MS},
        },
        ["invocation_id", "input", "agent"],
    ),
    "Invocation": strict(
        {
            "invocation_id": {"type": "string"},
            "status": {"enum": ["completed"]},
            "content": ref("Content"),
            "function_calls": {"type": "array", "items": OBJECT},
            "usage": strict(
                {
                    "input_tokens": _NULLABLE_INT,
                    "output_tokens": _NULLABLE_INT,
                    "cached_tokens": _NULLABLE_INT,
                }
            ),
            "cache": OBJECT,
            "compaction": strict(
                {
                    "pre_request_id": {"type": "string", "format": "uuid", "nullable": True},
                    "queued_id": {
                        "type": "string",
                        "format": "uuid",
                        "nullable": True,
                        "description": "the automatic compaction check this turn queued",
                    },
                }
            ),
            "ingestion": OBJECT,
            "context": strict(
                {
                    "tokens": _NULLABLE_INT,
                    "memory_hits": {"type": "integer"},
                    "events": _NULLABLE_INT,
                }
            ),
            "event_ids": strict(
                {
                    "input": {"type": "string"},
                    "output": {"type": "array", "items": {"type": "string"}},
                }
            ),
            "timings": strict(
                {
                    "provider_ms": {"type": "number", "nullable": True},
                    "total_ms": {"type": "number", "nullable": True},
                }
            ),
        },
        [
            "invocation_id",
            "status",
            "content",
            "function_calls",
            "usage",
            "cache",
            "ingestion",
            "event_ids",
        ],
    ),
}


def _insert_after(schemas: dict, anchor: str, components: dict) -> dict:
    """``schemas`` with ``components`` right after ``anchor`` (the session component they
    build on), so the document reads in the order of the API."""
    ordered: dict = {}
    for name, schema in schemas.items():
        ordered[name] = schema
        if name == anchor:
            ordered.update(components)
    return ordered


def add_components(result, generator, request, public):
    """drf-spectacular post-processing hook (after the sessions' own): register the runner's
    components, each after the session component it builds on."""
    components = result.setdefault("components", {})
    schemas = components.get("schemas", {})
    schemas = _insert_after(schemas, "ContextPolicy", CONTEXT_COMPONENTS)
    components["schemas"] = _insert_after(schemas, "CompactionPage", INVOCATION_COMPONENTS)
    return result

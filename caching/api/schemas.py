"""OpenAPI component schemas of the prefix-cache API (validated against real responses in
``tests/caching/test_cache_api.py``)."""

from __future__ import annotations

from caching.acquire import BYPASS_REASONS
from caching.inputs import MAX_TIMEOUT_MS
from caching.keys import FAILURE_MODES, MAX_CONTENTS, MAX_LABELS, MAX_TOOLS, MIN_TTL_MS
from ctxadmin.api.schema import exactly_one_of


def _strict(properties: dict, required: list[str] | None = None) -> dict:
    schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


_FINGERPRINT = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_COUNT = {"type": "integer", "minimum": 0}
_TIME = {"type": "string", "format": "date-time", "nullable": True}

COMPONENTS = {
    "CachePolicy": _strict(
        {
            "min_prefix_tokens": {
                "type": "integer",
                "minimum": 0,
                "description": "below this estimated size (or the provider's floor for the "
                "model, whichever is larger) acquire bypasses with no provider call; "
                "default 1024",
            },
            "default_ttl_ms": {"type": "integer", "minimum": MIN_TTL_MS},
            "max_ttl_ms": {"type": "integer", "minimum": MIN_TTL_MS},
            "max_entries": {
                "type": "integer",
                "minimum": 1,
                "description": "live entries of the app above which acquire bypasses with "
                "`registry_full`",
            },
            "max_waiters": {"type": "integer", "minimum": 1},
            "failure_mode": {"enum": list(FAILURE_MODES)},
            "bytes_per_token": {"type": "integer", "minimum": 1, "maximum": 16},
            "labels": {
                "type": "object",
                "maxProperties": MAX_LABELS,
                "additionalProperties": {"type": "string", "maxLength": 128},
            },
        }
    ),
    "CacheScope": _strict(
        {
            "provider": {"type": "string", "description": "`gemini` or `fake`"},
            "user_id": {"type": "string", "maxLength": 128},
            "model": {"type": "string", "maxLength": 128},
            "policy": _ref("CachePolicy"),
        },
        ["provider", "user_id", "model"],
    ),
    "CachePrefix": _strict(
        {
            "system_instruction": {"type": "string"},
            "tools": {"type": "array", "maxItems": MAX_TOOLS, "items": {"type": "object"}},
            "tool_config": {"type": "object"},
            "contents": {
                "type": "array",
                "maxItems": MAX_CONTENTS,
                "items": _strict(
                    {
                        "role": {"enum": ["user", "model"]},
                        "parts": {"type": "array", "minItems": 1, "items": {"type": "object"}},
                    },
                    ["role", "parts"],
                ),
            },
        }
    ),
    "CacheAcquire": _strict(
        {
            "scope": _ref("CacheScope"),
            "prefix": _ref("CachePrefix"),
            "ttl_ms": {
                "type": "integer",
                "minimum": MIN_TTL_MS,
                "description": "default: the policy's default_ttl_ms",
            },
            "timeout_ms": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT_MS,
                "description": "the caller's deadline, from receipt (default 10000)",
            },
        },
        ["scope", "prefix"],
    ),
    "CacheAcquired": _strict(
        {
            "status": {"enum": ["created", "hit", "bypass"]},
            "reason": {"enum": [*BYPASS_REASONS, None], "nullable": True},
            "lease": {
                "type": "string",
                "nullable": True,
                "description": "opaque; resolved server-side by the invocation runner",
            },
            "scope_fingerprint": _FINGERPRINT,
            "prefix_fingerprint": _FINGERPRINT,
            "ttl_ms": {"type": "integer"},
            "expires_at": _TIME,
            "cached_tokens": {"type": "integer", "nullable": True},
            "prefix_tokens": _COUNT,
            "generation": {"type": "integer", "nullable": True},
            "waited": {"type": "boolean"},
        },
        [
            "status",
            "reason",
            "lease",
            "scope_fingerprint",
            "prefix_fingerprint",
            "ttl_ms",
            "expires_at",
            "cached_tokens",
            "prefix_tokens",
            "generation",
            "waited",
        ],
    ),
    "CacheScopeTarget": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"scope": _ref("CacheScope"), "scope_fingerprint": _FINGERPRINT},
        "description": "exactly one of scope and scope_fingerprint",
        **exactly_one_of("scope", "scope_fingerprint"),
    },
    "CacheInvalidated": _strict(
        {
            "scope_fingerprint": _FINGERPRINT,
            "generation": {"type": "integer"},
            "entries_invalidated": _COUNT,
            "creates_in_flight": _COUNT,
        },
        ["scope_fingerprint", "generation", "entries_invalidated", "creates_in_flight"],
    ),
    "CacheLiveEntry": _strict(
        {
            "id": {"type": "string", "format": "uuid"},
            "state": {"enum": ["creating", "active"]},
            "prefix_fingerprint": _FINGERPRINT,
            "ttl_ms": {"type": "integer"},
            "generation": {"type": "integer"},
            "prefix_tokens": _COUNT,
            "cached_tokens": {"type": "integer", "nullable": True},
            "waiters": _COUNT,
            "hits": {**_COUNT, "description": "acquires this entry answered as a hit"},
            "created_at": {"type": "string", "format": "date-time"},
            "expires_at": _TIME,
        }
    ),
    "CacheScopeStatus": _strict(
        {
            "scope_fingerprint": _FINGERPRINT,
            "provider": {"type": "string"},
            "user_id": {"type": "string"},
            "model": {"type": "string"},
            "policy_fingerprint": _FINGERPRINT,
            "policy": _ref("CachePolicy"),
            "generation": {"type": "integer"},
            "created_at": {"type": "string", "format": "date-time"},
            "invalidated_at": _TIME,
            "entries": _COUNT,
            "in_flight": _COUNT,
            "waiters": _COUNT,
            "deleting": _COUNT,
            "failed": _COUNT,
            "earliest_expiry": _TIME,
            "latest_expiry": _TIME,
            "live_entries": {"type": "array", "items": _ref("CacheLiveEntry")},
        }
    ),
}


def add_components(result, generator, request, public):
    """drf-spectacular post-processing hook: register the components above."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(COMPONENTS)
    return result

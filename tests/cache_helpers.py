"""Shared pieces of the prefix-cache tests: request bodies and registry inspection."""

from __future__ import annotations

from typing import Any

from caching import registry
from caching.models import CacheEntry
from ctxadmin.models import App

# Distinctive text: tests search captured output for it to prove it never leaks.
PREFIX_MARKER = "zebra-quartz-prefix-marker"


def prefix(words: int = 600, marker: str = PREFIX_MARKER, system: str | None = None) -> dict:
    """A prefix of about ``words`` * 7 bytes (≈ words * 1.75 estimated tokens)."""
    text = " ".join(f"{marker}-{i}" if i % 50 == 0 else "lorem" for i in range(words))
    return {
        "system_instruction": system or f"You are a careful assistant. {marker}",
        "contents": [
            {"role": "user", "parts": [{"text": text}]},
            {"role": "model", "parts": [{"text": "Understood."}]},
        ],
    }


def scope(
    user: str = "alice",
    *,
    provider: str = "fake",
    model: str = "gemini-2.5-flash",
    **policy: Any,
) -> dict:
    return {
        "provider": provider,
        "user_id": user,
        "model": model,
        "policy": {"min_prefix_tokens": 100, **policy},
    }


def body(
    scope_: dict | None = None,
    prefix_: dict | None = None,
    *,
    ttl_ms: int | None = None,
    timeout_ms: int = 10_000,
) -> dict:
    value = {
        "scope": scope() if scope_ is None else scope_,
        "prefix": prefix() if prefix_ is None else prefix_,
        "timeout_ms": timeout_ms,
    }
    if ttl_ms is not None:
        value["ttl_ms"] = ttl_ms
    return value


def acquire(app: App, value: dict) -> registry.Outcome:
    return registry.acquire(app, registry.parse_acquire(value, app))


def states(app: App) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in CacheEntry.objects.filter(app=app).values_list("state", flat=True):
        counts[state] = counts.get(state, 0) + 1
    return counts

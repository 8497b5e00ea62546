"""The cache API's request bodies, parsed and checked: ``parse_acquire`` (an acquire) and
``parse_scope_body`` (a scope, by value or fingerprint), under the deployment's ``limits``.
The parsing itself is ``caching.keys``'s (pure); this module reads the limits from the
settings and turns an input error into the API's ``ServiceError``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from caching.keys import (
    CacheInputError,
    CacheScope,
    Limits,
    Prefix,
    check_sensitive,
    parse_prefix,
    parse_scope,
    parse_ttl,
)
from ctxadmin.errors import ServiceError
from ctxadmin.models import App
from ctxadmin.pruning import echoed

DEFAULT_TIMEOUT_MS = 10_000
MAX_TIMEOUT_MS = 120_000
ACQUIRE_KEYS = frozenset({"scope", "prefix", "ttl_ms", "timeout_ms"})


def limits() -> Limits:
    return Limits(
        max_ttl_ms=settings.CTXADMIN_CACHE_MAX_TTL_MS,
        max_entries=settings.CTXADMIN_CACHE_MAX_ENTRIES,
        max_waiters=settings.CTXADMIN_CACHE_MAX_WAITERS,
        providers=tuple(settings.CTXADMIN_CACHE_PROVIDERS),
    )


def _service_error(exc: CacheInputError) -> ServiceError:
    return ServiceError(
        exc.code,
        exc.message if exc.code != "validation_error" else str(exc),
        details={"field": exc.path},
    )


@dataclass(frozen=True)
class AcquireRequest:
    scope: CacheScope
    prefix: Prefix
    ttl_ms: int
    timeout_ms: int


def parse_acquire(body: Any, app: App) -> AcquireRequest:
    try:
        check_sensitive(body)
        if not isinstance(body, dict):
            raise CacheInputError("body", "must be a JSON object")
        unknown = sorted(set(body) - ACQUIRE_KEYS)
        if unknown:
            raise CacheInputError(echoed(unknown[0]), "unknown field")
        for required in ("scope", "prefix"):
            if required not in body:
                raise CacheInputError(required, "is required")
        scope = parse_scope(body["scope"], app.name, limits())
        prefix = parse_prefix(body["prefix"])
        ttl_ms = parse_ttl(body.get("ttl_ms"), scope.policy)
        timeout_ms = body.get("timeout_ms", DEFAULT_TIMEOUT_MS)
        if (
            not isinstance(timeout_ms, int)
            or isinstance(timeout_ms, bool)
            or not 1 <= timeout_ms <= MAX_TIMEOUT_MS
        ):
            raise CacheInputError("timeout_ms", f"must be an integer from 1 to {MAX_TIMEOUT_MS}")
    except CacheInputError as exc:
        raise _service_error(exc) from None
    return AcquireRequest(scope, prefix, ttl_ms, timeout_ms)


def parse_scope_body(body: Any, app: App) -> CacheScope | str:
    """``{"scope": {...}}`` or ``{"scope_fingerprint": "<hex>"}`` (exactly one)."""
    try:
        check_sensitive(body)
        if not isinstance(body, dict):
            raise CacheInputError("body", "must be a JSON object")
        unknown = sorted(set(body) - {"scope", "scope_fingerprint"})
        if unknown:
            raise CacheInputError(echoed(unknown[0]), "unknown field")
        if ("scope" in body) == ("scope_fingerprint" in body):
            raise CacheInputError("body", "give exactly one of scope and scope_fingerprint")
        if "scope" in body:
            return parse_scope(body["scope"], app.name, limits())
        value = body["scope_fingerprint"]
        if not isinstance(value, str) or len(value) != 64 or set(value) - set("0123456789abcdef"):
            raise CacheInputError("scope_fingerprint", "must be 64 lowercase hex digits")
        return value
    except CacheInputError as exc:
        raise _service_error(exc) from None

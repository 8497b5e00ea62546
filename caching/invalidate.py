"""Invalidation: a scope's generation is bumped (older leases resolve to ``lease_expired``)
and the provider deletes of its entries are queued; a create in flight becomes an orphan
when it lands."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import connection, transaction

from caching.creators import CHANNEL
from caching.keys import CacheScope
from caching.models import CacheScope as ScopeRow
from caching.status import scope_row
from ctxadmin.models import App
from ctxadmin.wake import wake

logger = logging.getLogger("ctxadmin.cache")


def invalidate(app: App, target: CacheScope | str, reason: str = "invalidated") -> dict:
    """Bump the scope's generation (older leases resolve to ``lease_expired``) and queue the
    provider deletes of its entries; a create in flight becomes an orphan when it lands."""
    row = scope_row(app, target)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE caching_cachescope SET generation = generation + 1, invalidated_at = now() "
            "WHERE id = %s RETURNING generation",
            [row.pk],
        )
        generation = cursor.fetchone()[0]
        cursor.execute(
            "UPDATE caching_cacheentry SET state = 'deleting', delete_reason = %s, "
            "delete_due_at = now() WHERE scope_id = %s AND state = 'active'",
            [reason, row.pk],
        )
        retired = cursor.rowcount
        cursor.execute(
            "SELECT count(*) FROM caching_cacheentry WHERE scope_id = %s AND state = 'creating'",
            [row.pk],
        )
        in_flight = cursor.fetchone()[0]
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, "invalidate"])
        wake("caching.cleanup")
    logger.info(
        "cache_invalidate",
        extra={"app": app.name, "scope": row.fingerprint[:16], "entries": retired},
    )
    return {
        "scope_fingerprint": row.fingerprint,
        "generation": generation,
        "entries_invalidated": retired,
        "creates_in_flight": in_flight,
    }


def invalidate_all(app: App | None = None, reason: str = "shutdown") -> int:
    """Invalidate every scope (of ``app``, or of the deployment); the entries retired."""
    scopes = ScopeRow.objects.all() if app is None else ScopeRow.objects.filter(app=app)
    total = 0
    for row in scopes.select_related("app").iterator():
        total += invalidate(row.app, row.fingerprint, reason)["entries_invalidated"]
    return total


@dataclass(frozen=True)
class NamedInvalidation:
    """What ``invalidate_named`` did: ``mismatch`` names the part of the name that did not
    match (nothing changed), else the scope's model and provider and the invalidation."""

    mismatch: str | None
    model: str = ""
    provider: str = ""
    result: dict = field(default_factory=dict)


def invalidate_named(app: App, user_id: str, model: str, fingerprint: str) -> NamedInvalidation:
    """Invalidate the scope ``fingerprint`` of ``app`` only if it is (``user_id``,
    ``model``)'s. The scope is locked, so it cannot change between the comparison and the
    invalidation."""
    with transaction.atomic():
        row = ScopeRow.objects.select_for_update().filter(app=app, fingerprint=fingerprint).first()
        if row is None or row.user_id != user_id:
            return NamedInvalidation("scope_fingerprint")
        if row.model != model:
            return NamedInvalidation("model")
        result = invalidate(app, row.fingerprint)
    return NamedInvalidation(None, row.model, row.provider, result)

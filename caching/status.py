"""A scope's registry rows, content-free: counts, waiters, expiries and the live entries'
fingerprints (``scope_status``), and the provider deletes still queued."""

from __future__ import annotations

from django.db import connection

from caching.hits import flush_hits
from caching.keys import CacheScope
from caching.models import CacheEntry
from caching.models import CacheScope as ScopeRow
from ctxadmin.errors import not_found
from ctxadmin.models import App

MAX_STATUS_ENTRIES = 100


def scope_row(app: App, target: CacheScope | str) -> ScopeRow:
    fp = target if isinstance(target, str) else target.fingerprint
    row = ScopeRow.objects.filter(app=app, fingerprint=fp).first()
    if row is None:
        raise not_found()
    return row


def pending_deletes(app: App | None = None) -> int:
    rows = CacheEntry.objects.filter(state="deleting")
    return (rows if app is None else rows.filter(app=app)).count()


def scope_status(app: App, fingerprint: str) -> dict:
    """Content-free: counts, waiters, expiries and the live entries' fingerprints."""
    flush_hits()
    row = scope_row(app, fingerprint)
    counts = {state: 0 for state in ("active", "creating", "failed", "deleting")}
    waiters = 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state, count(*), COALESCE(sum(waiters), 0) FROM caching_cacheentry "
            "WHERE scope_id = %s GROUP BY state",
            [row.pk],
        )
        for state, count, state_waiters in cursor.fetchall():
            counts[state] = count
            if state == "creating":
                waiters = int(state_waiters)
        cursor.execute(
            "SELECT min(expires_at), max(expires_at) FROM caching_cacheentry "
            "WHERE scope_id = %s AND state = 'active'",
            [row.pk],
        )
        earliest, latest = cursor.fetchone()
    live = (
        CacheEntry.objects.filter(scope=row, state__in=("creating", "active"))
        .order_by("-created_at")
        .values(
            "id",
            "state",
            "prefix_fingerprint",
            "ttl_ms",
            "generation",
            "prefix_tokens",
            "cached_tokens",
            "waiters",
            "hits",
            "created_at",
            "expires_at",
        )[:MAX_STATUS_ENTRIES]
    )
    return {
        "scope_fingerprint": row.fingerprint,
        "provider": row.provider,
        "user_id": row.user_id,
        "model": row.model,
        "policy_fingerprint": row.policy_fingerprint,
        "policy": row.policy,
        "generation": row.generation,
        "created_at": row.created_at,
        "invalidated_at": row.invalidated_at,
        "entries": counts["active"],
        "in_flight": counts["creating"],
        "waiters": waiters,
        "deleting": counts["deleting"],
        "failed": counts["failed"],
        "earliest_expiry": earliest,
        "latest_expiry": latest,
        "live_entries": [{**entry, "id": str(entry["id"])} for entry in live],
    }

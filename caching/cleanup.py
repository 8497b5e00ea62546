"""The ``caching.cleanup`` beat task's work: expiries, lost creators, stale failures and the
provider deletes (invalidated, expired, orphaned, shut down), each in bounded batches with
per-call timeouts, retried with backoff."""

from __future__ import annotations

import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connection, transaction

from caching import crypto
from caching.adapters import PROVIDER_CALLS, get_adapter
from caching.models import CacheEntry
from ctxadmin.batches import in_batches
from ctxadmin.providers.base import ProviderError

logger = logging.getLogger("ctxadmin.cache")

MAX_DELETE_ATTEMPTS = 10
DELETE_BACKOFF_MAX_S = 3600
FIND_TIMEOUT_S = 10.0


def expire_batch(limit: int) -> int:
    """Retire active entries past their expiry (their leases already resolve as expired)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE caching_cacheentry SET state = 'deleting', delete_reason = 'expired', "
            "delete_due_at = now() WHERE id IN (SELECT id FROM caching_cacheentry "
            "WHERE state = 'active' AND expires_at <= now() ORDER BY expires_at LIMIT %s "
            "FOR UPDATE SKIP LOCKED)",
            [limit],
        )
        return cursor.rowcount


def sweep_creators_batch(limit: int) -> int:
    """``creating`` rows whose creator is presumed dead (past its lease and every waiter's
    deadline): deleted by tag at the provider, in case the create went through."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE caching_cacheentry SET state = 'deleting', delete_reason = 'creator_lost', "
            "delete_due_at = now() WHERE id IN (SELECT id FROM caching_cacheentry "
            "WHERE state = 'creating' AND create_lease_until < now() AND deadline < now() "
            "ORDER BY create_lease_until LIMIT %s FOR UPDATE SKIP LOCKED)",
            [limit],
        )
        return cursor.rowcount


def purge_failed_batch(limit: int) -> int:
    """Failed creates no waiter can still be reading."""
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM caching_cacheentry WHERE id IN (SELECT id FROM caching_cacheentry "
            "WHERE state = 'failed' AND deadline < now() LIMIT %s FOR UPDATE SKIP LOCKED)",
            [limit],
        )
        return cursor.rowcount


def _delete_backoff_s(attempt: int) -> float:
    return min(DELETE_BACKOFF_MAX_S, 2.0 ** min(attempt, 20))


def delete_batch(limit: int) -> int:
    """Claim up to ``limit`` due deletes, call the provider for them on bounded worker
    threads (each call with its own timeout) and settle them; the rows handled."""
    timeout_s = settings.CTXADMIN_CACHE_DELETE_TIMEOUT_MS / 1000
    claim_s = 2 * (timeout_s + FIND_TIMEOUT_S) + 10
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE caching_cacheentry e SET delete_due_at = now() + make_interval(secs => %s), "
            "delete_attempts = e.delete_attempts + 1 FROM caching_cachescope s "
            "WHERE s.id = e.scope_id AND e.id IN (SELECT id FROM caching_cacheentry "
            "WHERE state = 'deleting' AND delete_due_at <= now() ORDER BY delete_due_at "
            "LIMIT %s FOR UPDATE SKIP LOCKED) "
            "RETURNING e.id, s.provider, e.resource, e.delete_attempts, "
            "COALESCE(e.expires_at < now(), false), e.delete_reason",
            [claim_s, limit],
        )
        claimed = cursor.fetchall()
    if not claimed:
        return 0
    workers = min(settings.CTXADMIN_CACHE_CLEANUP_WORKERS, len(claimed))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cache-delete") as pool:
        results = list(
            pool.map(lambda row: _provider_delete(row[0], row[1], row[2], timeout_s), claimed)
        )
    done = [row[0] for row, error in zip(claimed, results, strict=True) if error is None]
    retry = [(row, error) for row, error in zip(claimed, results, strict=True) if error]
    abandoned = [row[0] for row, _ in retry if row[3] >= MAX_DELETE_ATTEMPTS and row[4]]
    with transaction.atomic():
        if done or abandoned:
            CacheEntry.objects.filter(pk__in=done + abandoned, state="deleting").delete()
        for row, error in retry:
            if row[0] in abandoned:
                logger.warning(
                    "cache_delete_abandoned",
                    extra={"entry": str(row[0]), "attempts": row[3], "code": error},
                )
                continue
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE caching_cacheentry SET error_code = %s, "
                    "delete_due_at = now() + make_interval(secs => %s) WHERE id = %s",
                    [error, _delete_backoff_s(row[3]), row[0]],
                )
    return len(claimed)


def _provider_delete(entry_id: uuid.UUID, provider: str, sealed: str, timeout_s: float):
    """Delete the entry's resource (or, with none recorded, whatever was made under its tag):
    None when nothing is left at the provider, else the error code."""
    try:
        adapter = get_adapter(provider)
    except LookupError:
        return None  # the provider is no longer configured: nothing this deployment can do
    try:
        if sealed:
            name = crypto.decrypt(sealed)
            names = [name] if name else []
        else:
            names = adapter.find(entry_id.hex, timeout_s=FIND_TIMEOUT_S)
            PROVIDER_CALLS.labels("find", "ok").inc()
        for name in names:
            adapter.delete(name, timeout_s=timeout_s)
            PROVIDER_CALLS.labels("delete", "ok").inc()
    except ProviderError as exc:
        PROVIDER_CALLS.labels("delete", exc.code).inc()
        return exc.code
    except NotImplementedError:
        return None
    return None


def cleanup(batch: int | None = None, max_batches: int = 20) -> dict[str, int]:
    """One run of the beat task: expiries, lost creators, stale failures, provider deletes;
    each in bounded batches, each batch its own transaction."""
    size = batch or settings.CTXADMIN_CACHE_CLEANUP_BATCH
    return {
        "expired": in_batches(lambda: expire_batch(size), size, max_batches),
        "creators_lost": in_batches(lambda: sweep_creators_batch(size), size, max_batches),
        "failed_purged": in_batches(lambda: purge_failed_batch(size), size, max_batches),
        "deleted": in_batches(lambda: delete_batch(size), size, max_batches),
    }

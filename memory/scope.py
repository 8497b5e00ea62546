"""One (app, user) scope of memory: its fingerprint, its capacity, its erasure lock and its
erasure epoch.

The fingerprint names a scope in records that outlive its erasure (receipts, epochs, ended
outbox jobs) without carrying the user id. The lock orders writes that carry an epoch after
any erasure of the scope (erasures take it exclusively, those writes shared). The epoch is 0
until the scope's first user erasure and one more after each: a write prepared at an older
epoch is refused (409 ``memory_erasure_epoch_stale``), so it cannot bring erased memory back.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection

from ctxadmin.erasure import lock_user, user_fingerprint
from ctxadmin.errors import ServiceError, invalid
from ctxadmin.models import App


def scope_fingerprint(app: App | int, user_id: str) -> str:
    """SHA-256 of the canonical JSON of ``{"app_id", "user_id"}``: names a scope in records
    that outlive its erasure without carrying the user id."""
    return user_fingerprint(app, user_id)


def lock_scope(app: App, user_id: str, *, shared: bool = False) -> None:
    """The scope's erasure lock, to the end of the current transaction. Erasures take it
    exclusively; writes that carry an epoch take it shared (they do not wait for each
    other, only for an erasure). The user's lock (``ctxadmin.erasure``): the other domains'
    writes of what the user reaches take the same one."""
    lock_user(app, user_id, shared=shared)


def current_epoch(app: App, user_id: str) -> int:
    """The scope's erasure epoch: 0 until its first user erasure, then one more each time."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT epoch FROM memory_erasureepoch WHERE app_id = %s AND scope_fingerprint = %s",
            [app.pk, scope_fingerprint(app, user_id)],
        )
        row = cursor.fetchone()
    return 0 if row is None else int(row[0])


def check_epoch(app: App, user_id: str, epoch: int) -> None:
    """Refuse a write carrying an epoch older than the scope's (409
    ``memory_erasure_epoch_stale``) or newer (400: no such epoch yet). Under the shared
    scope lock, the answer holds until the write commits."""
    current = current_epoch(app, user_id)
    if epoch < current:
        raise ServiceError(
            "memory_erasure_epoch_stale",
            "This user's memory was erased after this write was prepared; it was not stored.",
            status_code=409,
            details={"erasure_epoch": epoch, "current_erasure_epoch": current},
        )
    if epoch > current:
        raise invalid("erasure_epoch", f"is ahead of this scope's current erasure epoch {current}")


def advance_epoch(app: App, user_id: str) -> int:
    """One more epoch for the scope (a user erasure, in its transaction); the new epoch."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO memory_erasureepoch (app_id, scope_fingerprint, epoch, updated_at)
            VALUES (%s, %s, 1, now())
            ON CONFLICT (app_id, scope_fingerprint) DO UPDATE
                SET epoch = memory_erasureepoch.epoch + 1, updated_at = now()
            RETURNING epoch
            """,
            [app.pk, scope_fingerprint(app, user_id)],
        )
        return int(cursor.fetchone()[0])


def check_capacity(app: App, user_id: str, adding: int = 1) -> None:
    """Refuse (422 ``memory_capacity_exceeded``) ``adding`` more entries where they would
    pass the scope's limit (its statistics row: every entry until it is purged) or the
    deployment's (from PostgreSQL's row estimate)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT coalesce((SELECT entries FROM memory_scopestats
                              WHERE app_id = %s AND user_id = %s), 0),
                   (SELECT greatest(reltuples, 0)::bigint FROM pg_class
                     WHERE oid = 'memory_memoryentry'::regclass)
            """,
            [app.pk, user_id],
        )
        in_scope, total = cursor.fetchone()
    if in_scope + adding > settings.CTXADMIN_MEMORY_MAX_PER_SCOPE:
        raise ServiceError(
            "memory_capacity_exceeded",
            "This user's memory is full.",
            status_code=422,
            details={"limit": "per_scope", "maximum": settings.CTXADMIN_MEMORY_MAX_PER_SCOPE},
        )
    if total + adding > settings.CTXADMIN_MEMORY_MAX_TOTAL:
        raise ServiceError(
            "memory_capacity_exceeded",
            "The deployment's memory is full.",
            status_code=422,
            details={"limit": "total", "maximum": settings.CTXADMIN_MEMORY_MAX_TOTAL},
        )

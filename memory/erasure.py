"""Erasure of memory: one entry, one session's entries, or a whole user's memory.

Each erasure runs in one transaction that holds the scope's erasure lock, refuses under a
legal hold (409 ``legal_hold``), deletes the entries (their vectors and lexical index live
in the same rows), erases the scope's queued ingestion work through the registered
erasers, and keeps a content-free ``ErasureReceipt``: the key prefix, the scope's
fingerprint (never the user id), the kind, the counts and the time. Erasing nothing is
404 ``not_found`` and leaves no receipt.

Entry and session erasure honour retention (an entry whose ``retain_until`` has not
passed is not erased: 409 ``memory_retained``); user erasure ignores retention, never a
legal hold. User erasure also removes the user's consent record and advances the scope's
erasure epoch: a write that carries an older epoch (work queued or in flight before the
erasure) is refused with 409 ``memory_erasure_epoch_stale``, so it cannot bring the erased
memory back.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from django.db import connection, transaction

from ctxadmin.canonical import fingerprint
from ctxadmin.errors import ServiceError, strict_object, uuid_or_404
from ctxadmin.models import App
from memory.governance import invalid, refuse_if_held, scope_fingerprint
from memory.models import ErasureReceipt
from sessions_app.events import iso_timestamp

logger = logging.getLogger("ctxadmin.memory")

ERASE_USER_KEYS = frozenset({"confirm"})
MAX_EPOCH = 2**63 - 1
# The first key of the two-key advisory lock taken per scope ("mem\0").
_LOCK_NAMESPACE = 0x6D656D00

#: ``(app, user_id, session_id or None) -> how many queued items were erased``. Called in
#: the erasure's transaction, after the scope lock: an eraser deletes (or cancels) the queued
#: ingestion work of the scope — of the one session when ``session_id`` is given.
QueuedWorkEraser = Callable[[App, str, "str | None"], int]
_QUEUED_WORK_ERASERS: list[QueuedWorkEraser] = []


def register_queued_work_eraser(eraser: QueuedWorkEraser) -> QueuedWorkEraser:
    """Register a queue's eraser (usable as a decorator). Work already claimed by a worker is
    covered by the erasure epoch instead: its write carries the epoch it was queued at."""
    if eraser not in _QUEUED_WORK_ERASERS:
        _QUEUED_WORK_ERASERS.append(eraser)
    return eraser


def _erase_queued_work(app: App, user_id: str, session_id: str | None) -> int:
    return sum(int(eraser(app, user_id, session_id)) for eraser in _QUEUED_WORK_ERASERS)


# ----------------------------------------------------------------------------- epochs


def lock_scope(app: App, user_id: str, *, shared: bool = False) -> None:
    """The scope's erasure lock, to the end of the current transaction. Erasures take it
    exclusively; writes that carry an epoch take it shared (they do not wait for each
    other, only for an erasure)."""
    if not connection.in_atomic_block:
        raise RuntimeError("lock_scope needs a transaction")
    key = int(scope_fingerprint(app, user_id)[:8], 16) - 2**31
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s, %s)", [_LOCK_NAMESPACE, key])


def current_epoch(app: App, user_id: str) -> int:
    """The scope's erasure epoch: 0 until its first user erasure, then one more each time."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT epoch FROM memory_erasureepoch WHERE app_id = %s AND scope_fingerprint = %s",
            [app.pk, scope_fingerprint(app, user_id)],
        )
        row = cursor.fetchone()
    return 0 if row is None else int(row[0])


def parse_epoch(value: Any, path: str = "erasure_epoch") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_EPOCH:
        raise invalid(path, "must be a non-negative integer (an erasure epoch)")
    return value


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


def _advance_epoch(app: App, user_id: str) -> int:
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


# ----------------------------------------------------------------------------- erasure


def not_found() -> ServiceError:
    return ServiceError("not_found", "Not found.", status_code=404)


def _retained(count: int, until) -> ServiceError:
    return ServiceError(
        "memory_retained",
        "The app's retention period keeps this memory; it cannot be erased yet.",
        status_code=409,
        details={"retained": count, "retain_until": iso_timestamp(until)},
    )


def _receipt(
    app: App,
    user_id: str,
    *,
    kind: str,
    target: str,
    key_prefix: str,
    counts: dict[str, int],
    epoch: int,
) -> dict:
    row = ErasureReceipt.objects.create(
        id=uuid.uuid4(),
        app=app,
        kind=kind,
        scope_fingerprint=scope_fingerprint(app, user_id),
        target_fingerprint=target,
        erased_by=key_prefix,
        counts=counts,
        erasure_epoch=epoch,
    )
    logger.info(
        "memory_erased",
        extra={"app": app.pk, "kind": kind, "receipt": str(row.id), **counts},
    )
    return receipt_json(row)


def receipt_json(row: ErasureReceipt) -> dict:
    return {
        "receipt_id": str(row.id),
        "kind": row.kind,
        "scope_fingerprint": row.scope_fingerprint,
        "target_fingerprint": row.target_fingerprint or None,
        "erased_by": row.erased_by,
        "counts": row.counts,
        "erasure_epoch": row.erasure_epoch,
        "erased_at": iso_timestamp(row.created_at),
    }


def _counts(entries: int, queued: int = 0, consent: int = 0) -> dict[str, int]:
    return {"entries": entries, "queued_work": queued, "consent_records": consent}


def erase_entry(app: App, user_id: str, memory_id: str, key_prefix: str) -> dict:
    """One entry (expired or not). 404 when it does not exist in this scope."""
    entry_id = uuid_or_404(memory_id)
    with transaction.atomic():
        lock_scope(app, user_id)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT retain_until, retain_until > now() FROM memory_memoryentry "
                "WHERE app_id = %s AND user_id = %s AND id = %s FOR UPDATE",
                [app.pk, user_id, entry_id],
            )
            row = cursor.fetchone()
            if row is None:
                raise not_found()
            refuse_if_held(app, user_id)
            if row[1]:
                raise _retained(1, row[0])
            cursor.execute(
                "DELETE FROM memory_memoryentry WHERE app_id = %s AND user_id = %s AND id = %s",
                [app.pk, user_id, entry_id],
            )
        return _receipt(
            app,
            user_id,
            kind=ErasureReceipt.ENTRY,
            target=fingerprint({"app_id": app.pk, "user_id": user_id, "memory_id": str(entry_id)}),
            key_prefix=key_prefix,
            counts=_counts(1),
            epoch=current_epoch(app, user_id),
        )


def erase_session(app: App, user_id: str, session_id: str, key_prefix: str) -> dict:
    """Every entry whose provenance names this session, and the session's queued work."""
    with transaction.atomic():
        lock_scope(app, user_id)
        refuse_if_held(app, user_id)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*), max(retain_until) FROM memory_memoryentry "
                "WHERE app_id = %s AND user_id = %s AND session_id = %s AND retain_until > now()",
                [app.pk, user_id, session_id],
            )
            retained, until = cursor.fetchone()
            if retained:
                raise _retained(retained, until)
            cursor.execute(
                "DELETE FROM memory_memoryentry "
                "WHERE app_id = %s AND user_id = %s AND session_id = %s",
                [app.pk, user_id, session_id],
            )
            entries = cursor.rowcount
        queued = _erase_queued_work(app, user_id, session_id)
        if not entries and not queued:
            raise not_found()
        return _receipt(
            app,
            user_id,
            kind=ErasureReceipt.SESSION,
            target=fingerprint({"app_id": app.pk, "user_id": user_id, "session_id": session_id}),
            key_prefix=key_prefix,
            counts=_counts(entries, queued),
            epoch=current_epoch(app, user_id),
        )


def parse_user_confirmation(body: Any, user_id: str) -> None:
    """``{"confirm": "erase user <user_id>"}``, exactly."""
    strict_object(body, ERASE_USER_KEYS)
    expected = f"erase user {user_id}"
    if body.get("confirm") != expected:
        raise invalid("confirm", f"must be exactly {expected!r} to erase this user's memory")


def erase_user(app: App, user_id: str, key_prefix: str) -> dict:
    """The user's whole memory, ignoring retention: entries, queued work and the consent
    record; the scope's erasure epoch advances in the same transaction."""
    with transaction.atomic():
        lock_scope(app, user_id)
        refuse_if_held(app, user_id)
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM memory_memoryentry WHERE app_id = %s AND user_id = %s",
                [app.pk, user_id],
            )
            entries = cursor.rowcount
            cursor.execute(
                "DELETE FROM memory_consent WHERE app_id = %s AND user_id = %s",
                [app.pk, user_id],
            )
            consent = cursor.rowcount
        queued = _erase_queued_work(app, user_id, None)
        if not entries and not queued and not consent:
            raise not_found()
        epoch = _advance_epoch(app, user_id)
        return _receipt(
            app,
            user_id,
            kind=ErasureReceipt.USER,
            target="",
            key_prefix=key_prefix,
            counts=_counts(entries, queued, consent),
            epoch=epoch,
        )

"""Erasure of memory: one entry, one session's entries, or a whole user's memory.

Each erasure runs in one transaction that holds the scope's erasure lock, refuses under a
legal hold (409 ``legal_hold``), deletes the entries (their vectors and lexical index live
in the same rows), erases the scope's queued ingestion work through the registered
erasers, and keeps a content-free ``ErasureReceipt``: the key prefix, the scope's
fingerprint (never the user id), the kind, the counts and the time. Erasing an entry or a
session that holds nothing is 404 ``not_found`` and leaves no receipt; erasing a user with
nothing left answers a receipt of zero counts (erasure pipelines retry until they succeed).

Entry and session erasure honour retention (an entry whose ``retain_until`` has not
passed is not erased: 409 ``memory_retained``); user erasure ignores retention, never a
legal hold. User erasure also removes the user's consent record and advances the scope's
erasure epoch: a write that carries an older epoch (work queued or in flight before the
erasure) is refused with 409 ``memory_erasure_epoch_stale``, so it cannot bring the erased
memory back. In the same transaction it erases what the user reaches beyond memory through
the erasers other domains register in ``ctxadmin.erasure`` (their tokens end, their
``user:`` state and ``user:`` artifacts go); the writes of those take the same lock, shared.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from django.db import connection, transaction

from ctxadmin.canonical import fingerprint
from ctxadmin.erasure import erase_user_reach
from ctxadmin.errors import ServiceError, not_found, uuid_or_404
from ctxadmin.models import App
from ctxadmin.timestamps import iso_timestamp
from memory.governance import refuse_if_held
from memory.models import ErasureReceipt
from memory.scope import advance_epoch, current_epoch, lock_scope, scope_fingerprint

logger = logging.getLogger("ctxadmin.memory")

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


# ----------------------------------------------------------------------------- erasure


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


def erase_user(app: App, user_id: str, key_prefix: str) -> dict:
    """The user's whole memory, ignoring retention: entries, queued work and the consent
    record; and what the user reaches without a session (tokens, ``user:`` state and
    artifacts). The scope's erasure epoch advances in the same transaction."""
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
        counts = {**_counts(entries, queued, consent), **erase_user_reach(app, user_id)}
        # A user with nothing left (an erasure pipeline's retry) gets a receipt of zero counts;
        # the epoch moves only when something was erased.
        erased = any(counts.values())
        epoch = advance_epoch(app, user_id) if erased else current_epoch(app, user_id)
        return _receipt(
            app,
            user_id,
            kind=ErasureReceipt.USER,
            target="",
            key_prefix=key_prefix,
            counts=counts,
            epoch=epoch,
        )

"""Admission: a session's events after ``after_seq`` become one job (or find the job that
already ingests exactly them at the scope's current epoch), under the outbox's limits;
and the automatic path, when an append completes an invocation."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now

from ctxadmin.canonical import canonical_json, fingerprint
from ctxadmin.errors import ServiceError, invalid, not_found, strict_object
from ctxadmin.models import App
from ctxadmin.wake import wake
from memory import governance
from memory.extractors import NO_EXTRACTOR, ExtractorSpec
from memory.inputs import ID, parse_extractor_field
from memory.models import OutboxJob
from memory.outbox.jobs import (
    ACTIVE_SQL,
    ADAPTER,
    ADMISSIONS,
    EXTRACTION_ADAPTER,
    code_of,
)
from memory.outbox.sanitise import sanitise
from memory.scope import current_epoch, lock_scope, scope_fingerprint
from sessions_app import selectors as sessions

logger = logging.getLogger("ctxadmin.outbox")

MAX_JOB_EVENTS = 5_000
# The stored bytes of the events one job takes at most (its first event whatever its size).
MAX_JOB_BYTES = 8 * 1024 * 1024
MAX_ATTEMPTS_LIMIT = 20
ADMIT_KEYS = frozenset({"session_id", "after_seq", "max_attempts", "extractor"})
# Ended jobs that admitting the same events again starts afresh (a completed one is found).
_REVIVABLE = (OutboxJob.FAILED, OutboxJob.CANCELLED)
# The first key of the global admission lock ("obx\0").
_ADMISSION_LOCK = (0x6F627800, 0)


@dataclass(frozen=True)
class Admission:
    job: OutboxJob
    deduplicated: bool
    more: bool
    next_after_seq: int | None


def parse_request(body: Any) -> tuple[str, int, int, ExtractorSpec | None]:
    """``{"session_id", "after_seq"?, "max_attempts"?, "extractor"?}`` → (session id,
    after_seq, attempts, the extractor asked for or None for the app's)."""
    strict_object(body, ADMIT_KEYS)
    session_id = body.get("session_id")
    if not isinstance(session_id, str) or not ID.match(session_id):
        raise invalid("session_id", "must be a session id")
    after_seq = body.get("after_seq", 0)
    if after_seq is None:
        after_seq = 0
    if isinstance(after_seq, bool) or not isinstance(after_seq, int) or not 0 <= after_seq < 2**62:
        raise invalid("after_seq", "must be a non-negative integer (an event seq)")
    attempts = body.get("max_attempts", settings.CTXADMIN_OUTBOX_MAX_ATTEMPTS)
    if (
        isinstance(attempts, bool)
        or not isinstance(attempts, int)
        or not 1 <= attempts <= MAX_ATTEMPTS_LIMIT
    ):
        raise invalid("max_attempts", f"must be an integer from 1 to {MAX_ATTEMPTS_LIMIT}")
    extractor = None
    if body.get("extractor") is not None:
        extractor = parse_extractor_field(
            body["extractor"], "extractor", frozenset(settings.CTXADMIN_PROVIDERS)
        )
    return session_id, after_seq, attempts, extractor


def job_id_for(
    app: App,
    user_id: str,
    session_id: str,
    event_ids: list[str],
    epoch: int,
    extractor: ExtractorSpec = NO_EXTRACTOR,
) -> str:
    """The deterministic id of the job that ingests these events at this epoch (with this
    extractor: the same events extracted by another one are another job)."""
    fields = {
        "adapter": ADAPTER,
        "app_id": app.pk,
        "user_id": user_id,
        "session_id": session_id,
        "event_ids": event_ids,
        "erasure_epoch": epoch,
    }
    if extractor.extracts:
        fields.update(adapter=EXTRACTION_ADAPTER, extractor=extractor.as_dict())
    digest = fingerprint(fields)
    return str(uuid.UUID(hex=digest[:32]))


def _check_limits(
    cursor, app: App, user_id: str, payload_bytes: int, *, revive: bool = False
) -> None:
    """Under the admission lock: the cap on all rows (not for a job admitted again, which
    replaces its own row), then the active limits per scope, per app, then the global ones.
    The first limit that would be exceeded is named, with when to try again (active jobs end
    as workers drain them: the sweep's period)."""
    cursor.execute("SELECT coalesce((SELECT total FROM memory_outboxrows WHERE id = 1), 0)")
    rows = int(cursor.fetchone()[0])
    cap = settings.CTXADMIN_OUTBOX_MAX_ROWS
    if rows >= cap and not revive:
        raise ServiceError(
            "terminal_retention_full",
            "The outbox holds as many jobs as it may keep; ended jobs must be pruned first.",
            status_code=429,
            details={"limit": "rows", "maximum": cap},
        )
    cursor.execute(
        f"""
        SELECT count(*) FILTER (WHERE app_id = %s AND user_id = %s),
               coalesce(sum(payload_bytes) FILTER (WHERE app_id = %s AND user_id = %s), 0),
               count(*) FILTER (WHERE app_id = %s),
               count(*), coalesce(sum(payload_bytes), 0)
          FROM memory_outboxjob WHERE phase IN {ACTIVE_SQL}
        """,  # noqa: S608 - constant phases
        [app.pk, user_id, app.pk, user_id, app.pk],
    )
    scope_jobs, scope_bytes, app_jobs, all_jobs, all_bytes = cursor.fetchone()
    limits = (
        ("active_jobs_per_scope", scope_jobs + 1, "This user has", "jobs waiting"),
        ("active_bytes_per_scope", scope_bytes + payload_bytes, "This user's jobs hold", "bytes"),
        ("active_jobs_per_app", app_jobs + 1, "This app has", "jobs waiting"),
        ("active_jobs", all_jobs + 1, "The deployment has", "jobs waiting"),
        ("active_bytes", all_bytes + payload_bytes, "The deployment's jobs hold", "bytes"),
    )
    for limit, wanted, who, what in limits:
        maximum = getattr(settings, f"CTXADMIN_OUTBOX_MAX_{limit.upper()}")
        if wanted > maximum:
            retry_after = settings.CTXADMIN_OUTBOX_SWEEP_SECONDS
            raise ServiceError(
                "outbox_capacity_exceeded",
                f"{who} as many ingestion {what} as allowed ({limit}: {maximum}).",
                status_code=429,
                details={"limit": limit, "maximum": maximum, "retry_after_s": retry_after},
                headers={"Retry-After": str(retry_after)},
            )


def admit(
    app: App,
    user_id: str,
    session_id: str,
    *,
    after_seq: int = 0,
    max_attempts: int | None = None,
    appended_after=None,
    extractor: ExtractorSpec | None = None,
) -> Admission:
    """Admit the session's events after ``after_seq`` as one job, or find the job that
    already ingests exactly them at the current epoch (a failed or cancelled one starts
    again, from its first event: what it wrote counts as duplicates). 404 for a session
    not in this scope, 422 ``nothing_to_ingest`` when no event follows ``after_seq``, 403
    ``consent_required`` under a consent policy without consent, 429
    ``outbox_capacity_exceeded`` (naming the limit) or ``terminal_retention_full``. With an
    extractor (``extractor``, else the app's policy's), the job extracts facts from the
    turns (``extraction.v1``) instead of storing each as said."""
    attempts = settings.CTXADMIN_OUTBOX_MAX_ATTEMPTS if max_attempts is None else max_attempts
    if extractor is None:
        extractor = governance.app_extractor(app)
    governance.write_terms(app, user_id)  # consent, fail-closed
    rows = sessions.events_after(
        app,
        user_id,
        session_id,
        after_seq,
        appended_after=appended_after,
        max_bytes=MAX_JOB_BYTES,
        max_events=MAX_JOB_EVENTS + 1,
    )
    if not rows:
        if not sessions.session_exists(app, user_id, session_id):
            raise not_found()
        raise ServiceError(
            "nothing_to_ingest",
            "The session has no event after after_seq.",
            status_code=422,
            details={"after_seq": after_seq},
        )
    taken = 0
    while taken < len(rows) and taken < MAX_JOB_EVENTS:
        if taken and rows[taken]["running"] > MAX_JOB_BYTES:
            break
        taken += 1
    more = taken < len(rows) or sessions.has_events_after(
        app, user_id, session_id, rows[taken - 1]["seq"]
    )
    rows = rows[:taken]
    payload, reasons, redacted = [], {}, 0
    for row in rows:
        item, was_redacted = sanitise(row)
        payload.append(item)
        redacted += was_redacted
        if "skip" in item:
            reasons[item["skip"]] = reasons.get(item["skip"], 0) + 1
    payload_bytes = len(canonical_json(payload))
    event_ids = [row["event_id"] for row in rows]
    with transaction.atomic():
        # An erasure of the scope waits for this admission, then cancels the job it wrote.
        lock_scope(app, user_id, shared=True)
        epoch = current_epoch(app, user_id)
        job_id = job_id_for(app, user_id, session_id, event_ids, epoch, extractor)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", list(_ADMISSION_LOCK))
            existing = OutboxJob.objects.filter(pk=job_id, app=app).first()
            if existing is not None and existing.phase not in _REVIVABLE:
                ADMISSIONS.labels("deduplicated").inc()
                return Admission(existing, True, more, rows[-1]["seq"] if more else None)
            try:
                _check_limits(cursor, app, user_id, payload_bytes, revive=existing is not None)
            except ServiceError:
                ADMISSIONS.labels("refused").inc()
                raise
        if existing is not None:  # a failed or cancelled job of the same events: again
            existing.delete()
        job = OutboxJob.objects.create(
            id=job_id,
            app=app,
            user_id=user_id,
            scope_fingerprint=scope_fingerprint(app, user_id),
            session_id=session_id,
            adapter=EXTRACTION_ADAPTER if extractor.extracts else ADAPTER,
            extractor=extractor.as_dict() if extractor.extracts else {},
            erasure_epoch=epoch,
            phase=OutboxJob.PENDING,
            payload=payload,
            payload_bytes=payload_bytes,
            events=len(payload),
            first_seq=rows[0]["seq"],
            last_seq=rows[-1]["seq"],
            skipped=0,
            redacted=redacted,
            skipped_by_reason={},
            max_attempts=attempts,
            due_at=Now(),  # the database's clock, as every due check uses
        )
        wake("memory.drain_outbox", job_id)
    ADMISSIONS.labels("admitted").inc()
    logger.info(
        "outbox_admitted",
        extra={
            "app": app.pk,
            "job": job_id,
            "events": len(payload),
            "bytes": payload_bytes,
            "to_skip": sum(reasons.values()),
            "redacted": redacted,
        },
    )
    job.refresh_from_db()
    return Admission(job, False, more, rows[-1]["seq"] if more else None)


def next_after_seq(app: App, user_id: str, session_id: str) -> int:
    """The last seq already admitted for the session at the scope's current epoch by a job
    that has not failed or been cancelled (0: none)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT coalesce(max(last_seq), 0) FROM memory_outboxjob
             WHERE app_id = %s AND user_id = %s AND session_id = %s
               AND erasure_epoch = %s AND phase IN ('pending', 'running', 'retry', 'completed')
            """,
            [app.pk, user_id, session_id, current_epoch(app, user_id)],
        )
        return int(cursor.fetchone()[0])


def erased_at(app: App, user_id: str, session_id: str):
    """When this user's memory or this session's memories were last erased (None: never):
    events appended before then are never ingested automatically again, whatever the
    outbox still remembers of them."""
    scope = scope_fingerprint(app, user_id)
    target = fingerprint({"app_id": app.pk, "user_id": user_id, "session_id": session_id})
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT greatest(
                (SELECT updated_at FROM memory_erasureepoch
                  WHERE app_id = %s AND scope_fingerprint = %s),
                (SELECT max(created_at) FROM memory_erasurereceipt
                  WHERE app_id = %s AND scope_fingerprint = %s AND kind = 'session'
                    AND target_fingerprint = %s))
            """,
            [app.pk, scope, app.pk, scope, target],
        )
        return cursor.fetchone()[0]


def admit_on_success(app: App, user_id: str, session_id: str) -> Admission | None:
    """The automatic path (the app's memory policy says ``ingestion: on_success``): admit
    the session's events not yet admitted and appended since the user's or the session's
    last erasure. A refusal is logged, never raised: the events the append stored stay, and
    the next completed invocation tries again."""
    try:
        return admit(
            app,
            user_id,
            session_id,
            after_seq=next_after_seq(app, user_id, session_id),
            appended_after=erased_at(app, user_id, session_id),
        )
    except ServiceError as exc:
        if code_of(exc) != "nothing_to_ingest":
            logger.warning(
                "outbox_automatic_admission_refused", extra={"app": app.pk, "code": code_of(exc)}
            )
        return None


def on_invocation_completed(sender, *, app: App, user_id: str, session_id: str, **kwargs):
    """Receiver of ``invocation_completed`` (``sessions_app.selectors``). Every append that
    completes an invocation asks, so an app without the policy costs one lookup; the
    admission runs in a savepoint, so that a failure leaves the caller's transaction
    usable."""
    try:
        if not governance.ingests_on_success(app):
            return
        with transaction.atomic():
            admit_on_success(app, user_id, session_id)
    except Exception as exc:  # the append has happened; never fail it from here
        logger.warning(
            "outbox_automatic_admission_failed",
            extra={"app": app.pk, "error": type(exc).__name__},
        )

"""The durable ingestion outbox: session events become memories through leased jobs.

Admission is one local transaction: the session's events after ``after_seq`` (at most
``MAX_JOB_EVENTS`` and ``MAX_JOB_BYTES``) are sanitised — credentials in text redacted,
partial, control, empty and oversized events marked skipped — the scope's erasure epoch is
captured, and the job
row is written (its id derived from the adapter, the scope, the session, the ordered event
ids and the epoch, so the same request finds the same job). Limits on active jobs and bytes,
global and per scope, and a cap on all rows are checked under one lock, so concurrent
admissions cannot overshoot them.

Workers claim one due job at a time with ``FOR UPDATE SKIP LOCKED`` (the earliest due
first: pending and retrying jobs by their next attempt, running ones once their lease has
expired), under a random owner token and a lease. Each batch of at most ``BATCH_EVENTS``
events is written in one transaction that first takes the scope's erasure lock (shared),
renews the lease — only if the token still owns the running job — and checks that the
job's epoch is still the scope's; then writes the entries (each with the idempotency key
``session:<session_id>:<event_id>``, so a re-delivered batch counts duplicates) and the
job's cursor and counts. A lost lease writes nothing; a stale epoch cancels the job and
writes nothing. Failures retry with exponential backoff and jitter until ``max_attempts``;
a job whose worker died that many times fails. Ended jobs keep counts only (their payload is
cleared) and are pruned after the retention period, oldest first, in bounded batches.

Nothing here logs, returns or passes to Celery any content: ids, counts, bytes, codes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import secrets
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone
from prometheus_client import Counter

from ctxadmin.api.paths import path_segment_error
from ctxadmin.canonical import canonical_json, fingerprint
from ctxadmin.errors import ServiceError, invalid, not_found, strict_object, uuid_or_404
from ctxadmin.models import App
from ctxadmin.pruning import looks_like_secret, redact_secret_text
from ctxadmin.wake import wake
from memory import entries, erasure, governance, ingest
from memory.inputs import REDACTED
from memory.models import OutboxJob
from memory.scope import current_epoch, lock_scope, scope_fingerprint
from memory.vectors import embedder_is_local, vector_text
from sessions_app.events import iso_timestamp

logger = logging.getLogger("ctxadmin.outbox")

ADMISSIONS = Counter(
    "ctxadmin_outbox_admissions_total",
    "Ingestion admissions by outcome (admitted, deduplicated, refused).",
    ["outcome"],
)
JOBS_ENDED = Counter(
    "ctxadmin_outbox_jobs_ended_total",
    "Ingestion jobs ended, by phase and code.",
    ["phase", "code"],
)
EVENTS_PROCESSED = Counter(
    "ctxadmin_outbox_events_total",
    "Events written by ingestion jobs, by fate (added, duplicate, skipped).",
    ["fate"],
)

ADAPTER = "session_events.v1"
BATCH_EVENTS = 500
MAX_JOB_EVENTS = 5_000
# The stored bytes of the events one job takes at most (its first event whatever its size).
MAX_JOB_BYTES = 8 * 1024 * 1024
MAX_ATTEMPTS_LIMIT = 20
ADMIT_KEYS = frozenset({"session_id", "after_seq", "max_attempts"})
# Ended jobs that admitting the same events again starts afresh (a completed one is found).
_REVIVABLE = (OutboxJob.FAILED, OutboxJob.CANCELLED)
ACTIVE = OutboxJob.ACTIVE
TERMINAL = OutboxJob.TERMINAL
_ACTIVE_SQL = "('pending', 'running', 'retry')"
_TERMINAL_SQL = "('completed', 'failed', 'cancelled')"
# The first key of the global admission lock ("obx\0").
_ADMISSION_LOCK = (0x6F627800, 0)

# Fixed messages per error code: what a job's status shows (never an exception's text).
_MESSAGES = {
    "cancelled": "The job was cancelled by a client or an operator.",
    "erased": "The user's memory (or this session's) was erased; the job was cancelled.",
    "stale_epoch": "The user's memory was erased after the job was admitted; nothing was "
    "written for it.",
    "worker_lost": "The worker running the job stopped as often as the job may be attempted.",
    "consent_required": "The app requires the user's consent to long-term memory, and it is "
    "not granted.",
    "memory_capacity_exceeded": "The user's or the deployment's memory is full.",
    "embedding_failed": "The embedder could not embed the batch.",
    "database_error": "A database error interrupted the batch.",
    "internal_error": "An unexpected error interrupted the batch.",
}
# Errors that no retry can fix: the job fails at once.
_PERMANENT = frozenset({"consent_required"})


# ----------------------------------------------------------------------------- sanitising


def sanitise(row: dict) -> tuple[dict, bool]:
    """One stored event as a payload item, and whether credentials were redacted from it.

    An item to write keeps the event's id, seq, author, role, timestamp and text (with any
    credential-looking span replaced by ``[redacted]``); an item to skip keeps only its id,
    seq and the reason: ``partial``, ``control`` (no text part: state or artifact changes),
    ``empty``, ``too_large`` (over ``CTXADMIN_MEMORY_MAX_CONTENT_BYTES``), ``secret`` (nothing
    left once redacted)."""
    base = {"event_id": row["event_id"], "seq": row["seq"]}
    unfit = ingest.unfit_reason(row)
    if unfit is not None:
        return {**base, "skip": unfit}, False
    text = ingest.event_text(row).replace("\x00", "")
    redacted = False
    if looks_like_secret(text):
        text = redact_secret_text(text).strip()
        redacted = True
        if not text.replace(REDACTED, "").strip() or looks_like_secret(text):
            return {**base, "skip": "secret"}, True
    if len(text.encode("utf-8")) > settings.CTXADMIN_MEMORY_MAX_CONTENT_BYTES:
        return {**base, "skip": "too_large"}, redacted
    return {
        **base,
        "author": row["author"],
        "role": (row["content"] or {}).get("role") or row.get("role") or "",
        "timestamp": iso_timestamp(row["timestamp"]),
        "text": text,
    }, redacted


# ----------------------------------------------------------------------------- admission


@dataclass(frozen=True)
class Admission:
    job: OutboxJob
    deduplicated: bool
    more: bool
    next_after_seq: int | None


def parse_request(body: Any) -> tuple[str, int, int]:
    """``{"session_id", "after_seq"?, "max_attempts"?}`` → (session id, after_seq, attempts)."""
    strict_object(body, ADMIT_KEYS)
    session_id = body.get("session_id")
    if not isinstance(session_id, str) or path_segment_error("sid", session_id):
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
    return session_id, after_seq, attempts


def _session_events(
    app: App, user_id: str, session_id: str, after_seq: int, appended_after=None
) -> list[dict]:
    """The session's events after ``after_seq`` in order, with the running total of their
    stored bytes: those that start within ``MAX_JOB_BYTES`` (the first event always), at
    most ``MAX_JOB_EVENTS`` + 1."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT event_id, seq, author, role, content, timestamp, running FROM (
                SELECT e.event_id, e.seq, e.author, e.role, e.content, e.timestamp,
                       e.byte_size, sum(e.byte_size) OVER (ORDER BY e.seq) AS running
                  FROM sessions_app_session s
                  JOIN sessions_app_event e ON e.session_id = s.id
                 WHERE s.app_id = %s AND s.user_id = %s AND s.session_id = %s AND e.seq > %s
                   AND (%s::timestamptz IS NULL OR e.created_at > %s::timestamptz)
            ) events
             WHERE running - byte_size <= %s
             ORDER BY seq
             LIMIT %s
            """,
            [
                app.pk,
                user_id,
                session_id,
                after_seq,
                appended_after,
                appended_after,
                MAX_JOB_BYTES,
                MAX_JOB_EVENTS + 1,
            ],
        )
        names = [column.name for column in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    for row in rows:  # Django's connections read jsonb as text
        if isinstance(row["content"], str):
            row["content"] = json.loads(row["content"])
    return rows


def _has_events_after(app: App, user_id: str, session_id: str, seq: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT EXISTS (SELECT 1 FROM sessions_app_session s
                             JOIN sessions_app_event e ON e.session_id = s.id
                            WHERE s.app_id = %s AND s.user_id = %s AND s.session_id = %s
                              AND e.seq > %s)
            """,
            [app.pk, user_id, session_id, seq],
        )
        return cursor.fetchone()[0]


def _session_exists(app: App, user_id: str, session_id: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM sessions_app_session WHERE app_id = %s AND user_id = %s "
            "AND session_id = %s",
            [app.pk, user_id, session_id],
        )
        return cursor.fetchone() is not None


def job_id_for(app: App, user_id: str, session_id: str, event_ids: list[str], epoch: int) -> str:
    """The deterministic id of the job that ingests these events at this epoch."""
    digest = fingerprint(
        {
            "adapter": ADAPTER,
            "app_id": app.pk,
            "user_id": user_id,
            "session_id": session_id,
            "event_ids": event_ids,
            "erasure_epoch": epoch,
        }
    )
    return str(uuid.UUID(hex=digest[:32]))


def _check_limits(
    cursor, app: App, user_id: str, payload_bytes: int, *, revive: bool = False
) -> None:
    """Under the admission lock: the cap on all rows (not for a job admitted again, which
    replaces its own row), then the active limits per scope, then the global ones. The first
    limit that would be exceeded is named."""
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
               count(*), coalesce(sum(payload_bytes), 0)
          FROM memory_outboxjob WHERE phase IN {_ACTIVE_SQL}
        """,  # noqa: S608 - constant phases
        [app.pk, user_id, app.pk, user_id],
    )
    scope_jobs, scope_bytes, all_jobs, all_bytes = cursor.fetchone()
    limits = (
        ("active_jobs_per_scope", scope_jobs + 1, "This user has", "jobs waiting"),
        ("active_bytes_per_scope", scope_bytes + payload_bytes, "This user's jobs hold", "bytes"),
        ("active_jobs", all_jobs + 1, "The deployment has", "jobs waiting"),
        ("active_bytes", all_bytes + payload_bytes, "The deployment's jobs hold", "bytes"),
    )
    for limit, wanted, who, what in limits:
        maximum = getattr(settings, f"CTXADMIN_OUTBOX_MAX_{limit.upper()}")
        if wanted > maximum:
            raise ServiceError(
                "outbox_capacity_exceeded",
                f"{who} as many ingestion {what} as allowed ({limit}: {maximum}).",
                status_code=429,
                details={"limit": limit, "maximum": maximum},
            )


def admit(
    app: App,
    user_id: str,
    session_id: str,
    *,
    after_seq: int = 0,
    max_attempts: int | None = None,
    appended_after=None,
) -> Admission:
    """Admit the session's events after ``after_seq`` as one job, or find the job that
    already ingests exactly them at the current epoch (a failed or cancelled one starts
    again, from its first event: what it wrote counts as duplicates). 404 for a session
    not in this scope, 422 ``nothing_to_ingest`` when no event follows ``after_seq``, 403
    ``consent_required`` under a consent policy without consent, 429
    ``outbox_capacity_exceeded`` (naming the limit) or ``terminal_retention_full``."""
    attempts = settings.CTXADMIN_OUTBOX_MAX_ATTEMPTS if max_attempts is None else max_attempts
    governance.write_terms(app, user_id)  # consent, fail-closed
    rows = _session_events(app, user_id, session_id, after_seq, appended_after)
    if not rows:
        if not _session_exists(app, user_id, session_id):
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
    more = taken < len(rows) or _has_events_after(app, user_id, session_id, rows[taken - 1]["seq"])
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
        job_id = job_id_for(app, user_id, session_id, event_ids, epoch)
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
            adapter=ADAPTER,
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
        if _code(exc) != "nothing_to_ingest":
            logger.warning(
                "outbox_automatic_admission_refused", extra={"app": app.pk, "code": _code(exc)}
            )
        return None


def on_invocation_completed(sender, *, app: App, user_id: str, session_id: str, **kwargs):
    """Receiver of ``sessions_app.signals.invocation_completed``. Every append that
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


def _code(exc: ServiceError) -> str:
    return exc.code if isinstance(exc.code, str) else "error"


# ----------------------------------------------------------------------------- claiming


@dataclass
class Claim:
    job: OutboxJob
    token: str


# The earliest due claimable job that no other worker holds, through the partial index of
# active jobs (``outbox_claimable``): never a scan of ended jobs.
CLAIM_NEXT_SQL = f"""
    SELECT id, phase, attempts, max_attempts FROM memory_outboxjob
     WHERE phase IN {_ACTIVE_SQL} AND due_at <= statement_timestamp()
     ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED
"""  # noqa: S608 - constant phases
# Ended jobs past the retention period, oldest first, through ``outbox_terminal``.
PRUNE_SQL = f"""
    DELETE FROM memory_outboxjob
     WHERE id IN (
        SELECT id FROM memory_outboxjob
         WHERE phase IN {_TERMINAL_SQL} AND finished_at <= statement_timestamp() - %s
         ORDER BY finished_at
         LIMIT %s
         FOR UPDATE SKIP LOCKED)
"""  # noqa: S608 - constant phases


def claim(prefer: str | None = None) -> Claim | None:
    """Claim one due job (``prefer`` first when it is due): the earliest due among pending
    and retrying jobs whose next attempt has come and running jobs whose lease has expired,
    skipping rows another worker holds. A job whose worker died on its last allowed attempt
    fails here instead (poison protection) and the next due job is claimed."""
    token = secrets.token_hex(16)
    lease = settings.CTXADMIN_OUTBOX_LEASE_SECONDS
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            row = None
            if prefer is not None:
                cursor.execute(
                    f"SELECT id, phase, attempts, max_attempts FROM memory_outboxjob "  # noqa: S608
                    f"WHERE id = %s AND phase IN {_ACTIVE_SQL} AND due_at <= statement_timestamp() "
                    f"FOR UPDATE SKIP LOCKED",
                    [prefer],
                )
                row = cursor.fetchone()
                prefer = None
            if row is None:
                cursor.execute(CLAIM_NEXT_SQL)
                row = cursor.fetchone()
            if row is None:
                return None
            job_id, phase, attempts, max_attempts = row
            if phase == OutboxJob.RUNNING and attempts >= max_attempts:
                _end_jobs(cursor, OutboxJob.FAILED, "worker_lost", "id = %s", [job_id])
                logger.warning(
                    "outbox_job_failed", extra={"job": str(job_id), "code": "worker_lost"}
                )
                continue
            cursor.execute(
                """
                UPDATE memory_outboxjob
                   SET phase = 'running', owner_token = %s, attempts = attempts + 1,
                       due_at = statement_timestamp() + %s * interval '1 second',
                       started_at = coalesce(started_at, statement_timestamp()),
                       updated_at = statement_timestamp()
                 WHERE id = %s
                """,
                [token, lease, job_id],
            )
        job = OutboxJob.objects.select_related("app").get(pk=job_id)
        logger.info(
            "outbox_claimed",
            extra={"job": str(job_id), "attempt": job.attempts, "cursor": job.cursor},
        )
        return Claim(job, token)


# ----------------------------------------------------------------------------- processing


class LeaseLost(Exception):
    """The job is no longer this worker's: its lease expired and another worker claimed
    it, or a client or an erasure cancelled it."""


@dataclass
class BatchResult:
    added: int = 0
    duplicates: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


def _embedded(items: list[dict]) -> tuple[list[str | None], str]:
    """Vectors (as pgvector text) for the items when the embedder runs in this process; for
    an HTTP embedder none (the entries are searchable lexically at once, and the embedding
    task fills them in)."""
    from memory import embeddings

    embedder = embeddings.embedder_from_settings()
    if not embedder_is_local(embedder) or not items:
        return [None] * len(items), ""
    vectors = embeddings.embed_memories(embedder, [item["text"] for item in items])
    return [vector_text(v) for v in vectors], embedder.name


def _renew(cursor, job: OutboxJob, token: str) -> None:
    cursor.execute(
        """
        UPDATE memory_outboxjob
           SET due_at = statement_timestamp() + %s * interval '1 second',
               updated_at = statement_timestamp()
         WHERE id = %s AND owner_token = %s AND phase = 'running'
        """,
        [settings.CTXADMIN_OUTBOX_LEASE_SECONDS, job.pk, token],
    )
    if cursor.rowcount != 1:
        raise LeaseLost()


def _write_batch(cursor, job: OutboxJob, items: list[dict], vectors, model: str) -> BatchResult:
    """Insert the batch's entries; a key stored already is a duplicate (same content) or a
    skip (``changed_since_ingested``: other content under the key; ``expired_key_kept``: an
    expired entry that retention or a legal hold keeps)."""
    result = BatchResult()
    if not items:
        return result
    app, user_id, session_id = job.app, job.user_id, job.session_id
    terms = governance.write_terms(app, user_id)
    keys = [f"session:{session_id}:{item['event_id']}" for item in items]
    governance.release_expired_keys(app, user_id, keys)
    entries.check_capacity(app, user_id, len(items))
    texts = [item["text"] for item in items]
    digests = [hashlib.sha256(text.encode("utf-8")).hexdigest() for text in texts]
    metadata = [
        canonical_json({"role": item["role"], "source": "session"}).decode() for item in items
    ]
    cursor.execute(
        """
        INSERT INTO memory_memoryentry
            (id, app_id, user_id, content, content_sha256, metadata, idempotency_key,
             session_id, event_id, author, source_timestamp, search, embedding,
             embedding_model, content_bytes, created_at, updated_at, expires_at, retain_until)
        SELECT i.id, %s, %s, i.content, i.digest, i.metadata::jsonb, i.key, %s, i.event_id,
               i.author, i.ts::timestamptz, to_tsvector(%s::regconfig, i.content),
               i.vector::vector, CASE WHEN i.vector IS NULL THEN '' ELSE %s END,
               octet_length(i.content), statement_timestamp(), statement_timestamp(),
               statement_timestamp() + %s::integer * interval '1 second',
               statement_timestamp() + %s::integer * interval '1 day'
          FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                      %s::text[], %s::text[], %s::text[])
               AS i(id, content, digest, metadata, key, event_id, author, ts, vector)
        ON CONFLICT (app_id, user_id, idempotency_key)
            WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING idempotency_key
        """,
        [
            app.pk,
            user_id,
            session_id,
            settings.CTXADMIN_MEMORY_TS_CONFIG,
            model,
            terms.ttl_seconds,
            terms.retention_days,
            [uuid.uuid4() for _ in items],
            texts,
            digests,
            metadata,
            keys,
            [item["event_id"] for item in items],
            [item["author"] for item in items],
            [item["timestamp"] for item in items],
            vectors,
        ],
    )
    inserted = {row[0] for row in cursor.fetchall()}
    result.added = len(inserted)
    if len(inserted) < len(keys):
        wanted = {k: d for k, d in zip(keys, digests, strict=True) if k not in inserted}
        cursor.execute(
            f"SELECT idempotency_key, content_sha256, {entries.LIVE} FROM memory_memoryentry "  # noqa: S608
            "WHERE app_id = %s AND user_id = %s AND idempotency_key = ANY(%s)",
            [app.pk, user_id, list(wanted)],
        )
        for key, digest, live in cursor.fetchall():
            if not live:
                reason = "expired_key_kept"
            elif digest == wanted[key]:
                result.duplicates += 1
                continue
            else:
                reason = "changed_since_ingested"
            result.skipped[reason] = result.skipped.get(reason, 0) + 1
    return result


def process(claimed: Claim) -> str:
    """Write the claimed job's remaining batches; the job's phase when this worker stops."""
    job, token = claimed.job, claimed.token
    unembedded = False
    try:
        while job.cursor < job.events:
            batch = job.payload[job.cursor : job.cursor + BATCH_EVENTS]
            items = [item for item in batch if "skip" not in item]
            skips: dict[str, int] = {}
            for item in batch:
                if "skip" in item:
                    skips[item["skip"]] = skips.get(item["skip"], 0) + 1
            vectors, model = _embedded(items)
            unembedded = unembedded or bool(items and not model)
            with transaction.atomic(), connection.cursor() as cursor:
                lock_scope(job.app, job.user_id, shared=True)
                _renew(cursor, job, token)
                stale = current_epoch(job.app, job.user_id) != job.erasure_epoch
                if stale or not batch:  # not batch: an erasure cleared the payload
                    code = "stale_epoch" if stale else "erased"
                    _end_jobs(cursor, OutboxJob.CANCELLED, code, "id = %s", [job.pk])
                    logger.info("outbox_job_cancelled", extra={"job": str(job.pk), "code": code})
                    return OutboxJob.CANCELLED
                result = _write_batch(cursor, job, items, vectors, model)
                for reason, count in result.skipped.items():
                    skips[reason] = skips.get(reason, 0) + count
                _advance(cursor, job, token, len(batch), result, skips)
            logger.info(
                "outbox_batch_written",
                extra={
                    "job": str(job.pk),
                    "batch": job.batches,
                    "events": len(batch),
                    "added": result.added,
                    "duplicates": result.duplicates,
                    "skipped": sum(skips.values()),
                },
            )
        if unembedded:  # an HTTP embedder: the embedding task fills the vectors in
            wake("memory.embed_pending")
        return OutboxJob.COMPLETED
    except LeaseLost:
        logger.info("outbox_lease_lost", extra={"job": str(job.pk)})
        return "lease_lost"
    except Exception as exc:  # the attempt failed: retry later, or fail for good
        return _record_failure(job, token, exc)


def _advance(cursor, job: OutboxJob, token: str, size: int, result: BatchResult, skips) -> None:
    job.cursor += size
    job.batches += 1
    job.added += result.added
    job.duplicates += result.duplicates
    for reason, count in skips.items():
        job.skipped_by_reason[reason] = job.skipped_by_reason.get(reason, 0) + count
    job.skipped = sum(job.skipped_by_reason.values())
    done = job.cursor >= job.events
    cursor.execute(
        """
        UPDATE memory_outboxjob
           SET cursor = %s, batches = %s, added = %s, duplicates = %s, skipped = %s,
               skipped_by_reason = %s::jsonb, updated_at = statement_timestamp(),
               phase = CASE WHEN %s THEN 'completed' ELSE phase END,
               payload = CASE WHEN %s THEN '[]'::jsonb ELSE payload END,
               owner_token = CASE WHEN %s THEN '' ELSE owner_token END,
               finished_at = CASE WHEN %s THEN statement_timestamp() ELSE finished_at END
         WHERE id = %s AND owner_token = %s
        """,
        [
            job.cursor,
            job.batches,
            job.added,
            job.duplicates,
            job.skipped,
            canonical_json(job.skipped_by_reason).decode(),
            done,
            done,
            done,
            done,
            job.pk,
            token,
        ],
    )
    EVENTS_PROCESSED.labels("added").inc(result.added)
    EVENTS_PROCESSED.labels("duplicate").inc(result.duplicates)
    EVENTS_PROCESSED.labels("skipped").inc(sum(skips.values()))
    if done:
        JOBS_ENDED.labels(OutboxJob.COMPLETED, "").inc()
        job.phase = OutboxJob.COMPLETED
        logger.info(
            "outbox_job_completed",
            extra={
                "job": str(job.pk),
                "added": job.added,
                "duplicates": job.duplicates,
                "skipped": job.skipped,
                "batches": job.batches,
            },
        )


def _end_jobs(cursor, phase: str, code: str, condition: str, params: list) -> int:
    """End the jobs matching ``condition`` (SQL with placeholders, of ours): the phase, the
    code and its fixed message, no payload, no owner; after an erasure of their user
    (``stale_epoch``) no user or session id either. The count ended."""
    erased = code == "stale_epoch"
    cursor.execute(
        f"""
        UPDATE memory_outboxjob
           SET phase = %s, payload = '[]'::jsonb, owner_token = '', error_code = %s,
               error_message = %s, finished_at = statement_timestamp(),
               updated_at = statement_timestamp(),
               user_id = CASE WHEN %s THEN '' ELSE user_id END,
               session_id = CASE WHEN %s THEN '' ELSE session_id END
         WHERE {condition}
        """,  # noqa: S608 - the condition is one of this module's
        [phase, code, _MESSAGES[code], erased, erased, *params],
    )
    JOBS_ENDED.labels(phase, code).inc(cursor.rowcount)
    return cursor.rowcount


def _error_code(exc: Exception) -> str:
    from django.db import DatabaseError

    from memory.embeddings import EmbeddingError

    if isinstance(exc, ServiceError):
        code = _code(exc)
        return code if code in _MESSAGES else "internal_error"
    if isinstance(exc, EmbeddingError):
        return "embedding_failed"
    if isinstance(exc, DatabaseError):
        return "database_error"
    return "internal_error"


def backoff_seconds(attempt: int) -> float:
    """Exponential backoff with jitter: ``base * 2**(attempt-1)`` capped, then a uniform
    draw between half of it and all of it (never a thundering herd, never zero)."""
    base = settings.CTXADMIN_OUTBOX_BACKOFF_SECONDS
    ceiling = settings.CTXADMIN_OUTBOX_BACKOFF_MAX_SECONDS
    delay = min(ceiling, base * 2 ** max(0, attempt - 1))
    return delay * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not a secret


def _record_failure(job: OutboxJob, token: str, exc: Exception) -> str:
    code = _error_code(exc)
    final = code in _PERMANENT or job.attempts >= job.max_attempts
    with transaction.atomic(), connection.cursor() as cursor:
        if final:
            _end_jobs(
                cursor,
                OutboxJob.FAILED,
                code,
                "id = %s AND owner_token = %s AND phase = 'running'",
                [job.pk, token],
            )
        else:
            cursor.execute(
                """
                UPDATE memory_outboxjob
                   SET phase = 'retry', owner_token = '', error_code = %s, error_message = %s,
                       due_at = statement_timestamp() + %s * interval '1 second',
                       updated_at = statement_timestamp()
                 WHERE id = %s AND owner_token = %s AND phase = 'running'
                """,
                [code, _MESSAGES[code], backoff_seconds(job.attempts), job.pk, token],
            )
        if cursor.rowcount != 1:
            return "lease_lost"
    logger.warning(
        "outbox_attempt_failed",
        extra={
            "job": str(job.pk),
            "attempt": job.attempts,
            "code": code,
            "error": type(exc).__name__,
            "final": final,
        },
    )
    return OutboxJob.FAILED if final else OutboxJob.RETRY


def drain(prefer: str | None = None, *, budget_seconds: float = 60.0) -> dict[str, int]:
    """Claim and process due jobs until none is due or the time budget is spent."""
    deadline = time.monotonic() + budget_seconds
    outcomes: dict[str, int] = {}
    while time.monotonic() < deadline:
        claimed = claim(prefer)
        prefer = None
        if claimed is None:
            break
        outcome = process(claimed)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


# ----------------------------------------------------------------------------- clients


def get_job(app: App, job_id: str) -> OutboxJob:
    job = OutboxJob.objects.filter(pk=uuid_or_404(job_id), app=app).first()
    if job is None:
        raise not_found()
    return job


def cancel(app: App, job_id: str) -> OutboxJob:
    """Cancel an active job (a running one stops before its next batch). Cancelling a
    cancelled job is a no-op; a completed or failed job is 409 ``outbox_job_ended``."""
    job = get_job(app, job_id)
    changed = cancel_jobs([job.pk])
    job.refresh_from_db()
    if not changed and job.phase != OutboxJob.CANCELLED:
        raise ServiceError(
            "outbox_job_ended",
            f"The job has ended ({job.phase}); only an active job can be cancelled.",
            status_code=409,
            details={"phase": job.phase},
        )
    if changed:
        logger.info("outbox_job_cancelled", extra={"job": str(job.pk), "code": "cancelled"})
    return job


def retry_now(job_ids: list) -> int:
    """Make waiting jobs (pending, retrying) due now and wake a worker; the count changed."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_outboxjob SET due_at = statement_timestamp(), "
            "updated_at = statement_timestamp() "
            "WHERE id = ANY(%s) AND phase IN ('pending', 'retry')",
            [list(job_ids)],
        )
        count = cursor.rowcount
        if count:
            wake("memory.drain_outbox")
    return count


def cancel_jobs(job_ids: list) -> int:
    """Cancel the active jobs among ``job_ids`` (an operator's action); the count cancelled."""
    with connection.cursor() as cursor:
        return _end_jobs(
            cursor,
            OutboxJob.CANCELLED,
            "cancelled",
            f"id = ANY(%s) AND phase IN {_ACTIVE_SQL}",
            [list(job_ids)],
        )


def job_json(job: OutboxJob) -> dict:
    """Content-free: ids, phase, counts, attempts, times, a fixed error message."""
    running = job.phase == OutboxJob.RUNNING
    now = timezone.now()
    return {
        "job_id": str(job.pk),
        "phase": job.phase,
        "session_id": job.session_id or None,
        "scope_fingerprint": job.scope_fingerprint,
        "erasure_epoch": job.erasure_epoch,
        "events": job.events,
        "first_seq": job.first_seq,
        "last_seq": job.last_seq,
        "cursor": job.cursor,
        "batches": job.batches,
        "added": job.added,
        "duplicates": job.duplicates,
        "skipped": job.skipped,
        "skipped_by_reason": job.skipped_by_reason,
        "redacted": job.redacted,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "next_attempt_at": iso_timestamp(job.due_at)
        if job.phase in (OutboxJob.PENDING, OutboxJob.RETRY)
        else None,
        "lease": (
            {"expires_at": iso_timestamp(job.due_at), "expired": job.due_at <= now}
            if running
            else None
        ),
        "error": {"code": job.error_code, "message": job.error_message} if job.error_code else None,
        "created_at": iso_timestamp(job.created_at),
        "updated_at": iso_timestamp(job.updated_at),
        "started_at": iso_timestamp(job.started_at) if job.started_at else None,
        "finished_at": iso_timestamp(job.finished_at) if job.finished_at else None,
    }


def stats(app: App) -> dict:
    """The app's jobs by phase, the age of its oldest job waiting past its due time, running
    jobs whose lease has expired, and the bytes its active jobs hold."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT phase, count(*) FROM memory_outboxjob WHERE app_id = %s GROUP BY phase",
            [app.pk],
        )
        by_phase = {phase: 0 for phase, _ in OutboxJob.PHASES}
        by_phase.update({phase: int(count) for phase, count in cursor.fetchall()})
        cursor.execute(
            f"""
            SELECT extract(epoch FROM statement_timestamp()
                                      - min(due_at) FILTER (WHERE phase <> 'running')),
                   count(*) FILTER (WHERE phase = 'running')
              FROM memory_outboxjob
             WHERE app_id = %s AND phase IN {_ACTIVE_SQL} AND due_at <= statement_timestamp()
            """,  # noqa: S608 - constant phases
            [app.pk],
        )
        oldest, expired = cursor.fetchone()
        cursor.execute(
            f"SELECT coalesce(sum(payload_bytes), 0) FROM memory_outboxjob "  # noqa: S608
            f"WHERE app_id = %s AND phase IN {_ACTIVE_SQL}",
            [app.pk],
        )
        active_bytes = int(cursor.fetchone()[0])
    return {
        "by_phase": by_phase,
        "active": sum(by_phase[p] for p in ACTIVE),
        "oldest_due_age_seconds": round(float(oldest), 3) if oldest is not None else None,
        "expired_leases": int(expired),
        "active_bytes": active_bytes,
    }


# ----------------------------------------------------------------------------- erasure


@erasure.register_queued_work_eraser
def _erase_jobs(app: App, user_id: str, session_id: str | None) -> int:
    """In the erasure's transaction, for the scope's (or the session's) active jobs.

    Queued jobs (pending, retrying) are cancelled. A running job's payload is cleared; after
    a user erasure its worker's next batch meets the advanced epoch and ends the job
    ``cancelled`` (``stale_epoch``) without writing, and after a session erasure (no new
    epoch) the job is cancelled here, so its worker's next lease renewal fails. A user
    erasure also blanks the user and session ids of every job of the scope (the scope
    fingerprint stays). The count is the active jobs stopped."""
    message = _MESSAGES["erased"]
    with connection.cursor() as cursor:
        if session_id is None:
            cursor.execute(
                """
                UPDATE memory_outboxjob
                   SET phase = CASE WHEN phase = 'running' THEN phase ELSE 'cancelled' END,
                       error_code = CASE WHEN phase = 'running' THEN '' ELSE 'erased' END,
                       error_message = CASE WHEN phase = 'running' THEN '' ELSE %s END,
                       finished_at = CASE WHEN phase = 'running' THEN NULL
                                          ELSE statement_timestamp() END,
                       payload = '[]'::jsonb, updated_at = statement_timestamp()
                 WHERE app_id = %s AND user_id = %s AND phase IN ('pending', 'running', 'retry')
                RETURNING phase
                """,
                [message, app.pk, user_id],
            )
            phases = [row[0] for row in cursor.fetchall()]
            JOBS_ENDED.labels(OutboxJob.CANCELLED, "erased").inc(phases.count("cancelled"))
            stopped = len(phases)
            # A running job keeps its ids until its worker ends it (``_end`` blanks them).
            cursor.execute(
                "UPDATE memory_outboxjob SET user_id = '', session_id = '', "
                "updated_at = statement_timestamp() "
                "WHERE app_id = %s AND user_id = %s AND phase <> 'running'",
                [app.pk, user_id],
            )
            return stopped
        return _end_jobs(
            cursor,
            OutboxJob.CANCELLED,
            "erased",
            f"app_id = %s AND user_id = %s AND session_id = %s AND phase IN {_ACTIVE_SQL}",
            [app.pk, user_id, session_id],
        )


# ----------------------------------------------------------------------------- pruning


def prune(limit: int | None = None, *, older_than: timedelta | None = None) -> int:
    """Delete up to ``limit`` (``CTXADMIN_OUTBOX_PRUNE_BATCH``) ended jobs that ended more
    than ``older_than`` (the retention period) ago, oldest first, through the partial index
    of ended jobs. Active jobs are never touched."""
    limit = settings.CTXADMIN_OUTBOX_PRUNE_BATCH if limit is None else limit
    if older_than is None:
        older_than = timedelta(seconds=settings.CTXADMIN_OUTBOX_RETENTION_SECONDS)
    with connection.cursor() as cursor:
        cursor.execute(PRUNE_SQL, [older_than, limit])
        return cursor.rowcount

"""What clients and operators do with jobs: read one, cancel, make due now, the status
JSON and the per-app statistics; and pruning ended jobs past the retention period."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from ctxadmin.errors import ServiceError, not_found, uuid_or_404
from ctxadmin.models import App
from ctxadmin.timestamps import iso_timestamp
from ctxadmin.wake import wake
from memory.extractors import stored_extractor
from memory.models import OutboxJob
from memory.outbox.jobs import (
    ACTIVE,
    ACTIVE_SQL,
    EXTRACTION_ADAPTER,
    EXTRACTION_TOTALS,
    TERMINAL_SQL,
    end_jobs,
)

logger = logging.getLogger("ctxadmin.outbox")

# Ended jobs past the retention period, oldest first, through ``outbox_terminal``; the batch
# is claimed once (a rescanned subquery under IN would claim more than the bound).
PRUNE_SQL = f"""
    WITH batch AS MATERIALIZED (
        SELECT id FROM memory_outboxjob
         WHERE phase IN {TERMINAL_SQL} AND finished_at <= statement_timestamp() - %s
         ORDER BY finished_at
         LIMIT %s
         FOR UPDATE SKIP LOCKED)
    DELETE FROM memory_outboxjob WHERE id IN (SELECT id FROM batch)
"""  # noqa: S608 - constant phases


def get_job(app: App, job_id: str) -> OutboxJob:
    job = OutboxJob.objects.filter(pk=uuid_or_404(job_id, "outbox job"), app=app).first()
    if job is None:
        raise not_found("outbox job", job_id)
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
        return end_jobs(
            cursor,
            OutboxJob.CANCELLED,
            "cancelled",
            f"id = ANY(%s) AND phase IN {ACTIVE_SQL}",
            [list(job_ids)],
        )


def _extraction(job: OutboxJob) -> dict | None:
    """An extraction job's extractor (its kind) and totals; None for a verbatim job."""
    if job.adapter != EXTRACTION_ADAPTER:
        return None
    totals = {name: int(job.extracted.get(name, 0)) for name in EXTRACTION_TOTALS}
    return {"extractor": stored_extractor(job.extractor).kind, **totals}


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
        "adapter": job.adapter,
        "extraction": _extraction(job),
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
             WHERE app_id = %s AND phase IN {ACTIVE_SQL} AND due_at <= statement_timestamp()
            """,  # noqa: S608 - constant phases
            [app.pk],
        )
        oldest, expired = cursor.fetchone()
        cursor.execute(
            f"SELECT coalesce(sum(payload_bytes), 0) FROM memory_outboxjob "  # noqa: S608
            f"WHERE app_id = %s AND phase IN {ACTIVE_SQL}",
            [app.pk],
        )
        active_bytes = int(cursor.fetchone()[0])
    return {
        "by_phase": by_phase,
        "active": sum(by_phase[p] for p in ACTIVE),
        "oldest_due_age_seconds": round(float(oldest), 3) if oldest is not None else None,
        "expired_leases": int(expired),
        "active_bytes": active_bytes,
        "extraction": extraction_stats(app),
    }


def extraction_stats(app: App) -> dict:
    """Content-free: the app's active extraction jobs, those waiting for the token budget,
    and today's (UTC) runs, refusals and tokens beside the daily budget."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT count(*),
                   count(*) FILTER (WHERE error_code = 'extraction_budget_exhausted')
              FROM memory_outboxjob
             WHERE app_id = %s AND adapter = %s AND phase IN {ACTIVE_SQL}
            """,  # noqa: S608 - constant phases
            [app.pk, EXTRACTION_ADAPTER],
        )
        active, deferred = cursor.fetchone()
        cursor.execute(
            """
            SELECT count(*), count(*) FILTER (WHERE outcome = 'refused'),
                   coalesce(sum(coalesce(input_tokens, 0) + coalesce(output_tokens, 0)), 0)
              FROM memory_extractionrun
             WHERE app_id = %s AND created_at >= date_trunc('day', now(), 'UTC')
            """,
            [app.pk],
        )
        runs, refused, tokens = cursor.fetchone()
    return {
        "active_jobs": int(active),
        "deferred_for_budget": int(deferred),
        "runs_today": int(runs),
        "refused_today": int(refused),
        "tokens_today": int(tokens),
        "tokens_per_day": settings.CTXADMIN_EXTRACTION_TOKENS_PER_APP_DAY,
    }


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

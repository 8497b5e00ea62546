"""Claiming outbox jobs and holding them: one due job claimed under a lease and a random
owner token, the lease renewed only while the token still owns the running job, and an
attempt's failure recorded as a retry with backoff and jitter, or as the job's end."""

from __future__ import annotations

import logging
import random
import secrets
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from ctxadmin.errors import ServiceError
from memory import embedders
from memory.extraction import ExtractionFailed
from memory.models import OutboxJob
from memory.outbox.jobs import ACTIVE_SQL, MESSAGES, code_of, end_jobs

logger = logging.getLogger("ctxadmin.outbox")

# Errors that no retry can fix: the job fails at once.
_PERMANENT = frozenset({"consent_required", "extractor_unavailable"})


@dataclass
class Claim:
    job: OutboxJob
    token: str


# The earliest due claimable job that no other worker holds, through the partial index of
# active jobs (``outbox_claimable``): never a scan of ended jobs.
CLAIM_NEXT_SQL = f"""
    SELECT id, phase, attempts, max_attempts FROM memory_outboxjob
     WHERE phase IN {ACTIVE_SQL} AND due_at <= statement_timestamp()
     ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED
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
                    f"WHERE id = %s AND phase IN {ACTIVE_SQL} AND due_at <= statement_timestamp() "
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
                end_jobs(cursor, OutboxJob.FAILED, "worker_lost", "id = %s", [job_id])
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


class LeaseLost(Exception):
    """The job is no longer this worker's: its lease expired and another worker claimed
    it, or a client or an erasure cancelled it."""


def renew(cursor, job: OutboxJob, token: str) -> None:
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


def _error_code(exc: Exception) -> str:
    if isinstance(exc, ServiceError):
        code = code_of(exc)
        return code if code in MESSAGES else "internal_error"
    if isinstance(exc, embedders.EmbeddingError):
        return "embedding_failed"
    if isinstance(exc, ExtractionFailed):
        return exc.code if exc.code in MESSAGES else "provider_call_failed"
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


def record_failure(job: OutboxJob, token: str, exc: Exception) -> str:
    code = _error_code(exc)
    final = code in _PERMANENT or job.attempts >= job.max_attempts
    with transaction.atomic(), connection.cursor() as cursor:
        if final:
            end_jobs(
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
                [code, MESSAGES[code], backoff_seconds(job.attempts), job.pk, token],
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

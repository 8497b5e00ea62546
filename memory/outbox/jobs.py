"""What every part of the outbox shares about job rows: the phases as SQL, the fixed
message per error code, the metrics, and ending jobs (the one statement that sets an end
phase, so every end clears the payload and the owner alike)."""

from __future__ import annotations

from prometheus_client import Counter

from ctxadmin.canonical import canonical_json
from ctxadmin.errors import ServiceError
from memory.models import OutboxJob

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
# A job whose turns an extractor turns into memory operations (``memory.outbox.extract``).
EXTRACTION_ADAPTER = "extraction.v1"
# An extraction job's totals (its ``extracted``): batches the extractor answered, answers
# applied and refused, operations' outcomes, and the model's tokens.
EXTRACTION_TOTALS = (
    "runs",
    "applied",
    "refused",
    "added",
    "updated",
    "retired",
    "unchanged",
    "input_tokens",
    "output_tokens",
)
ACTIVE = OutboxJob.ACTIVE
TERMINAL = OutboxJob.TERMINAL
ACTIVE_SQL = "('pending', 'running', 'retry')"
TERMINAL_SQL = "('completed', 'failed', 'cancelled')"

# Fixed messages per error code: what a job's status shows (never an exception's text).
MESSAGES = {
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
    "extractor_unavailable": "The extractor's provider connection is not configured.",
    "extraction_budget_exhausted": "The extractor's token budget for today is spent: the job "
    "waits for the next day.",
    "provider_timeout": "The extractor's model did not answer in time.",
    "provider_rate_limited": "The extractor's provider refused the call for its rate limit.",
    "provider_unavailable": "The extractor's provider was unavailable.",
    "provider_auth_failed": "The extractor's provider refused the credentials.",
    "provider_rejected": "The extractor's provider rejected the call.",
    "provider_bad_response": "The extractor's provider answered in an unexpected shape.",
    "provider_output_too_large": "The extractor's model answered more than may be read.",
    "provider_call_failed": "The extractor's provider call failed.",
}
# Errors that no retry can fix: the job fails at once.


def end_jobs(cursor, phase: str, code: str, condition: str, params: list) -> int:
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
        [phase, code, MESSAGES[code], erased, erased, *params],
    )
    JOBS_ENDED.labels(phase, code).inc(cursor.rowcount)
    return cursor.rowcount


def write_progress(cursor, job: OutboxJob, token: str) -> bool:
    """Write the job's cursor, batch count and totals as they stand on ``job`` (only while
    ``token`` owns it); past its last event the job is completed, its payload and owner
    cleared. Whether it completed."""
    done = job.cursor >= job.events
    cursor.execute(
        """
        UPDATE memory_outboxjob
           SET cursor = %s, batches = %s, added = %s, duplicates = %s, skipped = %s,
               skipped_by_reason = %s::jsonb, extracted = %s::jsonb,
               updated_at = statement_timestamp(),
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
            canonical_json(job.extracted).decode(),
            done,
            done,
            done,
            done,
            job.pk,
            token,
        ],
    )
    if done:
        JOBS_ENDED.labels(OutboxJob.COMPLETED, "").inc()
        job.phase = OutboxJob.COMPLETED
    return done


def code_of(exc: ServiceError) -> str:
    """The error's code (``error`` when it has none)."""
    return exc.code if isinstance(exc.code, str) else "error"

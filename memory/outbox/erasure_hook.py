"""The outbox's queued-work eraser, registered with ``memory.erasure`` on import (every
process imports it from ``memory.apps``): an erasure cancels the scope's queued jobs."""

from __future__ import annotations

from django.db import connection

from ctxadmin.models import App
from memory import erasure
from memory.models import OutboxJob
from memory.outbox.jobs import (
    ACTIVE_SQL,
    JOBS_ENDED,
    MESSAGES,
    end_jobs,
)


@erasure.register_queued_work_eraser
def _erase_jobs(app: App, user_id: str, session_id: str | None) -> int:
    """In the erasure's transaction, for the scope's (or the session's) active jobs.

    Queued jobs (pending, retrying) are cancelled. A running job's payload is cleared; after
    a user erasure its worker's next batch meets the advanced epoch and ends the job
    ``cancelled`` (``stale_epoch``) without writing, and after a session erasure (no new
    epoch) the job is cancelled here, so its worker's next lease renewal fails. A user
    erasure also blanks the user and session ids of every job of the scope (the scope
    fingerprint stays). The extraction runs of the scope (or the session) are deleted. The
    count is the active jobs stopped."""
    message = MESSAGES["erased"]
    with connection.cursor() as cursor:
        # What extractors answered about the user (or of the session): content, gone with it.
        cursor.execute(
            "DELETE FROM memory_extractionrun WHERE app_id = %s AND user_id = %s "
            "AND (%s::text IS NULL OR session_id = %s)",
            [app.pk, user_id, session_id, session_id],
        )
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
        return end_jobs(
            cursor,
            OutboxJob.CANCELLED,
            "erased",
            f"app_id = %s AND user_id = %s AND session_id = %s AND phase IN {ACTIVE_SQL}",
            [app.pk, user_id, session_id],
        )

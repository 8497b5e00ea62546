"""Queueing automatic compaction checks from the append path (kept light: one conditional
INSERT, and a task published after commit)."""

from __future__ import annotations

import uuid

from django.db import connection

from ctxadmin.wake import wake

#: The task that runs a queued compaction (``sessions_app.tasks``), by name.
RUN_COMPACTION = "sessions_app.run_compaction"


def completes_invocation(event: dict) -> bool:
    """An append that ends an invocation: ``turn_complete``, or a final model answer (text,
    no function call or response) from an author other than the user."""
    if event.get("partial"):
        return False
    if event.get("turn_complete") is True:
        return True
    content = event.get("content")
    if not content or event.get("author") == "user":
        return False
    parts = content.get("parts", [])
    return any("text" in p for p in parts) and not any(
        "function_call" in p or "function_response" in p for p in parts
    )


def request_automatic(session_pk: int) -> None:
    """Queue one automatic check for the session unless one is in flight already (the
    partial unique index decides, across every process); the task runs after commit.

    The session row is taken (``FOR KEY SHARE``) before the check is written, in the same
    statement, as every writer of a session's checkpoints takes it first (see
    ``services.hold_session``): a fast append queues its check after its own statement,
    outside any lock. A session deleted meanwhile gets no check."""
    checkpoint_id = uuid.uuid4()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH locked AS (
                SELECT id, app_id FROM sessions_app_session WHERE id = %s FOR KEY SHARE
            )
            INSERT INTO sessions_app_checkpoint
                (id, compaction_id, app_id, session_id, status, origin, trigger,
                 representation, reason, message, source_event_ids, source_fingerprint,
                 items_json, items_bytes, item_count, tokens, summarizer, model, usage, policy,
                 high_water_seq, window_end_invocation, projected_event_ids, summary_event_id,
                 purged_events, created_at)
            SELECT %s, %s, app_id, id, 'pending', 'automatic', '', '', '', '', '{}', '', '',
                   0, 0, 0, '', '', '{}', '{}', 0, '', '{}', '', 0, now()
              FROM locked
            ON CONFLICT (session_id) WHERE status IN ('pending', 'running') DO NOTHING
            RETURNING id
            """,
            [session_pk, checkpoint_id, checkpoint_id],
        )
        created = cursor.fetchone()
    if created is not None:
        wake(RUN_COMPACTION, str(checkpoint_id))

"""Running compactions: a worker's claim under a lease (its attempt number fences the
commit), the engine run outside any transaction, and how a run that cannot commit ends
(skipped, failed with backoff, or lost to a later claim).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from sessions_app.compaction import engine, model, summarizers
from sessions_app.compaction.commit import (
    CommitConflict,
    LeaseLost,
    Unchecked,
    commit_outcome,
    head_unchecked,
)
from sessions_app.compaction.policies import effective_policy
from sessions_app.compaction.policy import CompactionPolicy
from sessions_app.history import automatic_state, head_of, source_events, visible_checkpoints
from sessions_app.models import Checkpoint, CompactionState, Session
from sessions_app.store import hold_session

logger = logging.getLogger("ctxadmin.compaction")


# An asynchronous run whose worker died this many times fails (``worker_lost``).
MAX_ATTEMPTS = 3


BACKOFF_BASE = timedelta(minutes=1)


TRANSIENT_FAILURES = frozenset({"stale_head", "compaction_conflict"})


BACKOFF_MAX = timedelta(hours=1)


def claim(checkpoint_id: str) -> Checkpoint | None:
    """Claim an asynchronous run for this worker, under a lease: a pending one, or a running
    one whose worker's lease has ended (that worker died). The claim's attempt number fences
    the commit: a worker whose run was claimed again since writes nothing. None when there is
    nothing to claim (another worker holds it, it has ended, or its workers died
    ``MAX_ATTEMPTS`` times: the sweeper fails it)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE sessions_app_checkpoint
               SET status = 'running', attempts = attempts + 1,
                   lease_expires_at = statement_timestamp() + %s * interval '1 second'
             WHERE id = %s
               AND (status = 'pending'
                    OR (status = 'running' AND lease_expires_at <= statement_timestamp()
                        AND attempts < %s))
            RETURNING attempts
            """,
            [settings.CTXADMIN_COMPACTION_LEASE_SECONDS, checkpoint_id, MAX_ATTEMPTS],
        )
        claimed = cursor.fetchone()
    if claimed is None:
        return None
    if claimed[0] > 1:
        logger.info(
            "compaction reclaimed", extra={"checkpoint_id": checkpoint_id, "attempt": claimed[0]}
        )
    return Checkpoint.objects.select_related("session__app").get(pk=checkpoint_id)


def run_claimed(row: Checkpoint, session: Session) -> Checkpoint:
    """A pending row a worker claimed: an automatic check, or an asynchronous manual request
    with what it asked for (its timeout, expected head and named events)."""
    policy, _source = effective_policy(session)
    if row.origin != "manual":
        return execute(row, session, policy)
    return execute(
        row,
        session,
        policy,
        timeout_ms=row.timeout_ms,
        expected_head=(
            (None if row.expected_head is None else str(row.expected_head))
            if row.check_head
            else head_unchecked
        ),
        pinned=tuple(row.source_event_ids) or None,
    )


def execute(
    row: Checkpoint,
    session: Session,
    policy: CompactionPolicy,
    *,
    timeout_ms: int | None = None,
    current_input_tokens: int = 0,
    expected_head: str | Unchecked | None = head_unchecked,
    pinned: tuple[str, ...] | None = None,
    history_limit_bytes: int | None = None,
) -> Checkpoint:
    """Run the engine for ``row`` (status ``running``) and record the result. A skipped
    automatic check deletes its row; the updated row is returned otherwise."""
    started = time.monotonic()
    deadline = started + (timeout_ms or policy.timeout_ms) / 1000
    visible = visible_checkpoints(session.pk)
    head = head_of(visible)
    events = source_events(session.pk, visible, policy)
    inp = model.EngineInput(
        events=events,
        visible=[v.view for v in visible],
        policy=policy,
        origin=row.origin,
        current_input_tokens=current_input_tokens,
        automatic=automatic_state(session.pk)
        if row.origin == "automatic"
        else model.AutomaticState(),
        pinned=pinned,
        history_limit_bytes=history_limit_bytes,
    )
    outcome = engine.compact(
        inp,
        summarizers.summarizer_for(policy.summarizer),
        deadline=deadline,
        checkpoint_id=str(row.compaction_id),
    )
    elapsed_ms = (time.monotonic() - started) * 1000
    row.summarizer = policy.summarizer.kind
    row.model = policy.summarizer.model or ""
    row.policy = policy.as_dict()
    if outcome.status == "skipped":
        if not _note_skip(session.pk, row, outcome.reason):
            return _lease_lost(row)
        row.status, row.reason, row.message = "skipped", outcome.reason, outcome.message
        row.tokens_before = outcome.tokens_before
        return row
    if outcome.status == "error":
        return _fail(row, outcome.reason, outcome.message, outcome, elapsed_ms)
    try:
        commit_outcome(row, session, outcome, policy, visible, head, expected_head, started)
    except CommitConflict as conflict:
        return _fail(row, conflict.code, str(conflict), outcome, elapsed_ms, conflict.details)
    except LeaseLost:
        return _lease_lost(row)
    row.refresh_from_db()
    logger.info(
        "compaction committed",
        extra={
            "checkpoint_id": str(row.id),
            "session_pk": session.pk,
            "origin": row.origin,
            "trigger": row.trigger,
            "representation": row.representation,
            "first_seq": row.first_seq,
            "last_seq": row.last_seq,
            "tokens_before": row.tokens_before,
            "tokens_after": row.tokens_after,
            "duration_ms": row.duration_ms,
        },
    )
    return row


def _note_skip(session_pk: int, row: Checkpoint, reason: str) -> bool:
    """A skipped check leaves no checkpoint row, only the session's counters; False (and
    nothing written) when the run was claimed again since: that run decides."""
    with transaction.atomic(), connection.cursor() as cursor:
        hold_session(cursor, session_pk)
        cursor.execute(
            """
            WITH gone AS (
                DELETE FROM sessions_app_checkpoint
                 WHERE id = %s AND status = 'running' AND attempts = %s
             RETURNING id
            )
            INSERT INTO sessions_app_compactionstate
                (session_id, ineffective_streak, checks, last_skip_reason, last_checked_at)
            SELECT %s, 0, 1, %s, now() WHERE EXISTS (SELECT 1 FROM gone)
            ON CONFLICT (session_id) DO UPDATE
               SET checks = sessions_app_compactionstate.checks + 1,
                   last_skip_reason = EXCLUDED.last_skip_reason,
                   last_checked_at = EXCLUDED.last_checked_at
            """,
            [row.pk, row.attempts, session_pk, reason],
        )
        return cursor.rowcount == 1


def _fail(
    row: Checkpoint,
    code: str,
    message: str,
    outcome: model.Outcome,
    elapsed_ms: float,
    details: dict | None = None,
) -> Checkpoint:
    row.status = Checkpoint.FAILED
    row.reason = code
    row.message = message[:500]
    row.trigger = outcome.trigger
    row.usage = outcome.usage
    row.tokens_before = outcome.tokens_before or None
    row.tokens_after = outcome.tokens_after or None
    row.duration_ms = round(elapsed_ms, 3)
    row.finished_at = timezone.now()
    fields = (
        "status",
        "reason",
        "message",
        "trigger",
        "usage",
        "tokens_before",
        "tokens_after",
        "duration_ms",
        "finished_at",
        "summarizer",
        "model",
        "policy",
    )
    recorded = Checkpoint.objects.filter(
        pk=row.pk, status=Checkpoint.RUNNING, attempts=row.attempts
    ).update(**{name: getattr(row, name) for name in fields})
    if not recorded:
        return _lease_lost(row)
    # An automatic run that failed for a reason that would recur (an ineffective summary, a
    # summarizer or provider failure, a deadline) backs off, so a failing provider does not
    # cost a run, and a row, per completed invocation. Conflicts are transient: no backoff.
    if row.origin == "automatic" and code not in TRANSIENT_FAILURES:
        state, _created = CompactionState.objects.get_or_create(session_id=row.session_id)
        state.ineffective_streak += 1
        backoff = min(BACKOFF_BASE * (2 ** (state.ineffective_streak - 1)), BACKOFF_MAX)
        state.backoff_until = timezone.now() + backoff
        state.save(update_fields=["ineffective_streak", "backoff_until"])
    row.conflict_details = details or {}
    logger.info(
        "compaction failed",
        extra={"checkpoint_id": str(row.id), "session_pk": row.session_id, "code": code},
    )
    return row


def _lease_lost(row: Checkpoint) -> Checkpoint:
    """This worker's run was claimed again since: it wrote nothing; the row as it is now."""
    logger.info(
        "compaction lease lost", extra={"checkpoint_id": str(row.id), "attempt": row.attempts}
    )
    found = Checkpoint.objects.filter(pk=row.pk).first()
    return found or row

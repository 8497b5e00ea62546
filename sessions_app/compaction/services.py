"""Compaction writes: policies, requests, running the engine, committing checkpoints.

A request is a ``Checkpoint`` row (its id is the request id). The engine runs outside any
transaction; its result is committed in one transaction that re-checks everything it
assumed (compare-and-swap): the head is still the parent it read (else ``stale_head``), the
visible checkpoints are the ones it read and the range holds exactly the events it
summarised, in order (else ``compaction_conflict``). Events appended meanwhile lie after the
range and are kept.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from ctxadmin.canonical import canonical_json, canonical_size, fingerprint
from ctxadmin.errors import ServiceError, uuid_or_404
from ctxadmin.models import App
from sessions_app import store
from sessions_app.compaction import engine
from sessions_app.compaction.policy import DEFAULT_POLICY, CompactionPolicy, PolicyError
from sessions_app.compaction.policy import parse_policy as parse_compaction_policy
from sessions_app.events import COMPACTION, Derived
from sessions_app.models import AppCompactionPolicy, Checkpoint, CompactionState, Event, Session
from sessions_app.services import invalid, not_found

logger = logging.getLogger("ctxadmin.compaction")

# An asynchronous run whose worker died this many times fails (``worker_lost``).
MAX_ATTEMPTS = 3
BACKOFF_BASE = timedelta(minutes=1)
TRANSIENT_FAILURES = frozenset({"stale_head", "compaction_conflict"})
BACKOFF_MAX = timedelta(hours=1)
SUMMARY_EVENT_AUTHOR = "ctxadmin"


# ----------------------------------------------------------------------------- policies


def _connections() -> frozenset[str]:
    return frozenset(settings.CTXADMIN_PROVIDERS)


def parse_policy(body: Any, base: CompactionPolicy | None = None) -> CompactionPolicy:
    try:
        return parse_compaction_policy(body, connections=_connections(), base=base)
    except PolicyError as exc:
        raise invalid(exc.path, exc.message) from None


def stored_policy(data: dict) -> CompactionPolicy:
    """A policy stored earlier (normalised). A provider connection removed from settings
    since then does not break reading it: the run reports ``summarizer_error``."""
    return parse_compaction_policy(data)


def app_policy(app: App) -> CompactionPolicy | None:
    row = AppCompactionPolicy.objects.filter(app=app).first()
    return None if row is None else stored_policy(row.policy)


def effective_policy(session: Session) -> tuple[CompactionPolicy, str]:
    """(the policy, where it comes from: ``session``, ``app`` or ``default``)."""
    if session.compaction_policy is not None:
        return stored_policy(session.compaction_policy), "session"
    row = AppCompactionPolicy.objects.filter(app_id=session.app_id).first()
    if row is not None:
        return stored_policy(row.policy), "app"
    return DEFAULT_POLICY, "default"


def set_app_policy(app: App, body: Any) -> CompactionPolicy:
    policy = parse_policy(body)
    AppCompactionPolicy.objects.update_or_create(app=app, defaults={"policy": policy.as_dict()})
    return policy


def clear_app_policy(app: App) -> None:
    AppCompactionPolicy.objects.filter(app=app).delete()


def set_session_policy(session: Session, body: Any) -> CompactionPolicy:
    policy = parse_policy(body)
    Session.objects.filter(pk=session.pk).update(compaction_policy=policy.as_dict())
    session.compaction_policy = policy.as_dict()
    return policy


def clear_session_policy(session: Session) -> None:
    Session.objects.filter(pk=session.pk).update(compaction_policy=None)
    session.compaction_policy = None


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Visible:
    """A visible checkpoint as read for the engine and the context builder."""

    view: engine.CheckpointView
    items_json: str
    items_bytes: int
    item_count: int
    status: str = ""


def head_of(visible: list[Visible]) -> str | None:
    """The active checkpoint (the head is never subsumed, so it is among the visible)."""
    return next((v.view.id for v in visible if v.status == Checkpoint.ACTIVE), None)


_VISIBLE_SQL = """
    SELECT id::text, first_seq, last_seq, representation, tokens, summary, trigger,
           high_water_seq, window_end_invocation, items_json, items_bytes, item_count, status
      FROM sessions_app_checkpoint
     WHERE session_id = %s AND status IN ('active', 'superseded') AND subsumed_by_id IS NULL
     ORDER BY first_seq, created_at
"""


def visible_checkpoints(session_pk: int) -> list[Visible]:
    with connection.cursor() as cursor:
        cursor.execute(_VISIBLE_SQL, [session_pk])
        rows = cursor.fetchall()
    return [
        Visible(
            engine.CheckpointView(
                id=cid,
                first_seq=first,
                last_seq=last,
                representation=representation,
                tokens=tokens,
                summary=store.decode(summary),
                trigger=trigger,
                high_water_seq=high_water,
                window_end_invocation=window_end,
            ),
            items_json,
            items_bytes,
            item_count,
            status,
        )
        for (
            cid,
            first,
            last,
            representation,
            tokens,
            summary,
            trigger,
            high_water,
            window_end,
            items_json,
            items_bytes,
            item_count,
            status,
        ) in rows
    ]


def uncovered_sql(ranges: list[tuple[int, int]]) -> tuple[str, list[int]]:
    """A SQL condition (on ``seq``) true for events outside every range."""
    if not ranges:
        return "TRUE", []
    clause = " OR ".join(["seq BETWEEN %s AND %s"] * len(ranges))
    return f"NOT ({clause})", [bound for pair in ranges for bound in pair]


def _overlap_start(session_pk: int, visible: list[Visible], policy: CompactionPolicy) -> int | None:
    """The first seq of the invocations a sliding window re-summarises (its overlap)."""
    if not policy.compaction_interval or not policy.overlap_size:
        return None
    previous = next((v.view for v in reversed(visible) if v.view.trigger == "sliding_window"), None)
    if previous is None or not previous.window_end_invocation:
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT min(first) FROM (
                SELECT min(seq) AS first FROM sessions_app_event
                 WHERE session_id = %s AND seq <= %s AND invocation_id <> ''
                   AND kinds & %s = 0
                 GROUP BY invocation_id ORDER BY min(seq) DESC LIMIT %s
            ) overlap
            """,
            [session_pk, previous.last_seq, COMPACTION, policy.overlap_size],
        )
        return cursor.fetchone()[0]


def source_events(
    session_pk: int, visible: list[Visible], policy: CompactionPolicy
) -> list[engine.SourceEvent]:
    """The events compaction may read: outside the visible summaries (pruned checkpoints
    keep their sources, so a later summary can absorb them), plus a sliding window's
    overlap; never compaction events."""
    hidden = [(v.view.first_seq, v.view.last_seq) for v in visible]
    condition, params = uncovered_sql(hidden)
    overlap = _overlap_start(session_pk, visible, policy)
    if overlap is not None:
        condition = f"({condition} OR seq >= %s)"
        params = [*params, overlap]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq, event_id, invocation_id, author, context_json, context_bytes, "  # noqa: S608
            "date_part('epoch', timestamp), turn_complete FROM sessions_app_event "
            f"WHERE session_id = %s AND kinds & %s = 0 AND {condition} ORDER BY seq",
            [session_pk, COMPACTION, *params],
        )
        rows = cursor.fetchall()
    return [
        engine.SourceEvent(
            seq=seq,
            event_id=event_id,
            invocation_id=invocation_id,
            author=author,
            item=store.decode(item),
            context_bytes=size,
            timestamp=float(when),
            turn_complete=turn_complete,
        )
        for seq, event_id, invocation_id, author, item, size, when, turn_complete in rows
    ]


def automatic_state(session_pk: int) -> engine.AutomaticState:
    """Successful automatic compactions in the last hour, and whether a backoff holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT (SELECT count(*) FROM sessions_app_checkpoint
                     WHERE session_id = %s AND origin = 'automatic'
                       AND status IN ('active', 'superseded')
                       AND created_at >= now() - interval '1 hour'),
                   coalesce((SELECT backoff_until > now() FROM sessions_app_compactionstate
                              WHERE session_id = %s), false)
            """,
            [session_pk, session_pk],
        )
        recent, backing_off = cursor.fetchone()
    return engine.AutomaticState(recent_successes=recent, backing_off=bool(backing_off))


# ----------------------------------------------------------------------------- requests


def _existing(session: Session, compaction_id: uuid.UUID) -> Checkpoint | None:
    """The app's compaction of this id (ids live in their app's key space: another app's
    compaction of the same id is never seen here)."""
    found = Checkpoint.objects.filter(app_id=session.app_id, compaction_id=compaction_id).first()
    if found is None:
        return None
    if found.session_id != session.pk:
        raise ServiceError(
            "compaction_id_taken",
            "This compaction id is used by another session.",
            status_code=409,
            details={"compaction_id": str(compaction_id)},
        )
    return found


def _in_progress(session: Session) -> ServiceError:
    running = (
        Checkpoint.objects.filter(session=session, status__in=["pending", "running"])
        .values_list("compaction_id", flat=True)
        .first()
    )
    return ServiceError(
        "compaction_in_progress",
        "A compaction of this session is pending or running.",
        status_code=409,
        details={"compaction_id": str(running) if running else None},
    )


@dataclass(frozen=True)
class ManualRequest:
    compaction_id: uuid.UUID
    run_async: bool = False
    timeout_ms: int | None = None
    check_head: bool = False  # compare the head with expected_head (None: no checkpoint yet)
    expected_head: str | None = None
    source_event_ids: tuple[str, ...] | None = None


def request_manual(session: Session, request: ManualRequest) -> tuple[Checkpoint, bool]:
    """(the checkpoint, whether this call created it). Synchronous unless ``run_async``."""
    existing = _existing(session, request.compaction_id)
    if existing is not None:
        return existing, False
    policy, _source = effective_policy(session)
    expected_key = None  # the expected head's own key, for the check at commit
    if request.check_head:
        head_key, head = _head(session.pk)
        if head != request.expected_head:
            raise _stale_head(request.expected_head, head)
        expected_key = head_key
    status = Checkpoint.PENDING if request.run_async else Checkpoint.RUNNING
    try:
        with transaction.atomic():
            _take_over_pending_check(session.pk)
            row = Checkpoint.objects.create(
                id=uuid.uuid4(),
                app_id=session.app_id,
                compaction_id=request.compaction_id,
                session=session,
                status=status,
                origin="manual",
                policy=policy.as_dict(),
                source_event_ids=list(request.source_event_ids or []),
                timeout_ms=request.timeout_ms,
                check_head=request.check_head,
                expected_head=expected_key,
            )
    except IntegrityError:
        raise _in_progress(session) from None
    if request.run_async:
        from sessions_app.tasks import run_compaction

        run_compaction.delay_on_commit(str(row.id))
        return row, True
    return execute(
        row,
        session,
        policy,
        timeout_ms=request.timeout_ms,
        expected_head=expected_key if request.check_head else head_unchecked,
        pinned=request.source_event_ids,
    ), True


def hold_session(cursor, session_pk: int) -> None:
    """Take the session row (``FOR KEY SHARE``) in the current transaction, before writing
    one of its checkpoints or its compaction state, as every such writer does. An append
    holds the row while it queues its own check; a writer that wrote first would wait for
    the row in its foreign-key check while the append waited for what it wrote: a deadlock,
    which PostgreSQL breaks by failing one of them."""
    cursor.execute("SELECT 1 FROM sessions_app_session WHERE id = %s FOR KEY SHARE", [session_pk])


def _take_over_pending_check(session_pk: int) -> None:
    """A requested compaction replaces an automatic check no worker has claimed yet (its
    task then finds nothing pending); a running one still makes the request a 409.

    The session row is taken first (``hold_session``)."""
    with connection.cursor() as cursor:
        hold_session(cursor, session_pk)
    Checkpoint.objects.filter(
        session_id=session_pk, status=Checkpoint.PENDING, origin="automatic"
    ).delete()


def _head(session_pk: int) -> tuple[str | None, str | None]:
    """The active checkpoint's own key and its compaction id (None, None without one)."""
    head = (
        Checkpoint.objects.filter(session_id=session_pk, status=Checkpoint.ACTIVE)
        .values_list("id", "compaction_id")
        .first()
    )
    return (None, None) if head is None else (str(head[0]), str(head[1]))


def compaction_ids(keys) -> dict[str, str]:
    """The compaction ids of checkpoints by their own keys (what the API shows of them)."""
    wanted = [key for key in keys if key is not None]
    if not wanted:
        return {}
    return {
        str(key): str(public)
        for key, public in Checkpoint.objects.filter(pk__in=wanted).values_list(
            "id", "compaction_id"
        )
    }


def _stale_head(expected, current) -> ServiceError:
    return ServiceError(
        "stale_head",
        "The session's active checkpoint is not the one expected; nothing changed.",
        status_code=409,
        details={"expected_head": expected, "current_head": current},
    )


class _Unchecked:
    """The caller did not name an expected head."""


head_unchecked = _Unchecked()


class CommitConflict(Exception):
    def __init__(self, code: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.details = details or {}


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


class LeaseLost(Exception):
    """The run was claimed again since this worker claimed it (its lease had ended)."""


def _lock_own(row: Checkpoint) -> None:
    """Lock the row, and raise ``LeaseLost`` unless it is still this run's (running, at the
    attempt this worker claimed; 0 for a run inside a web request)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, attempts FROM sessions_app_checkpoint WHERE id = %s FOR UPDATE",
            [row.pk],
        )
        found = cursor.fetchone()
    if found is None or found[0] != Checkpoint.RUNNING or found[1] != row.attempts:
        raise LeaseLost()


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


def run_overflow(
    session: Session, current_input_tokens: int, history_limit_bytes: int | None = None
) -> Checkpoint:
    """``overflow: compress`` in a context build: compact now, within the policy's timeout,
    aiming the summary at what the rest of the history leaves of its budget."""
    policy, _source = effective_policy(session)
    try:
        with transaction.atomic():
            _take_over_pending_check(session.pk)
            key = uuid.uuid4()
            row = Checkpoint.objects.create(
                id=key,
                app_id=session.app_id,
                compaction_id=key,
                session=session,
                status=Checkpoint.RUNNING,
                origin="overflow",
                policy=policy.as_dict(),
            )
    except IntegrityError:
        raise _in_progress(session) from None
    return execute(
        row,
        session,
        policy,
        current_input_tokens=current_input_tokens,
        expected_head=head_unchecked,
        history_limit_bytes=history_limit_bytes,
    )


def run_pre_request(session: Session, current_input_tokens: int) -> Checkpoint | None:
    """Before an invocation's model call, under token pressure: an automatic check run now
    (the automatic limits and backoff apply), or None when one is in flight already."""
    policy, _source = effective_policy(session)
    try:
        with transaction.atomic():
            _take_over_pending_check(session.pk)
            key = uuid.uuid4()
            row = Checkpoint.objects.create(
                id=key,
                app_id=session.app_id,
                compaction_id=key,
                session=session,
                status=Checkpoint.RUNNING,
                origin="automatic",
                policy=policy.as_dict(),
            )
    except IntegrityError:
        return None
    return execute(row, session, policy, current_input_tokens=current_input_tokens)


# ----------------------------------------------------------------------------- running


def execute(
    row: Checkpoint,
    session: Session,
    policy: CompactionPolicy,
    *,
    timeout_ms: int | None = None,
    current_input_tokens: int = 0,
    expected_head: str | _Unchecked | None = head_unchecked,
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
    inp = engine.EngineInput(
        events=events,
        visible=[v.view for v in visible],
        policy=policy,
        origin=row.origin,
        current_input_tokens=current_input_tokens,
        automatic=automatic_state(session.pk)
        if row.origin == "automatic"
        else engine.AutomaticState(),
        pinned=pinned,
        history_limit_bytes=history_limit_bytes,
    )
    from sessions_app.compaction.summarizers import summarizer_for

    outcome = engine.compact(
        inp,
        summarizer_for(policy.summarizer),
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
        _commit(row, session, outcome, policy, visible, head, expected_head, started)
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
    outcome: engine.Outcome,
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


def _summary_event(row: Checkpoint, outcome: engine.Outcome, start, end) -> dict:
    """The ADK-shaped record of a summary: ``actions.compaction`` with the covered time span
    and the summary as the content that replaces it."""
    content = outcome.items[0]["content"]
    return {
        "event_id": f"compaction-{row.compaction_id}",
        "invocation_id": f"compaction-{row.compaction_id}",
        "author": SUMMARY_EVENT_AUTHOR,
        "content": None,
        "turn_complete": None,
        "actions": {
            "compaction": {
                "start_timestamp": start,
                "end_timestamp": end,
                "compacted_content": content,
            }
        },
        "usage_metadata": None,
        "custom_metadata": {"checkpoint_id": str(row.compaction_id)},
    }


def _commit(
    row: Checkpoint,
    session: Session,
    outcome: engine.Outcome,
    policy: CompactionPolicy,
    visible: list[Visible],
    head: str | None,
    expected_head,
    started: float,
) -> None:
    """Everything the engine assumed is checked again under the session's row lock; then
    the summary event, the checkpoint, its parent and what it subsumes, and the purge
    commit together."""
    absorbed = set(outcome.absorbed)
    now = timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT state, last_seq FROM sessions_app_session WHERE id = %s FOR UPDATE",
                [session.pk],
            )
            locked = cursor.fetchone()
        if locked is None:
            raise CommitConflict("compaction_conflict", "The session no longer exists.")
        _lock_own(row)
        state, last_seq = store.decode(locked[0]), locked[1]
        now_visible_rows = visible_checkpoints(session.pk)
        current_head = head_of(now_visible_rows)
        if current_head != head or (
            expected_head is not head_unchecked and current_head != expected_head
        ):
            public = compaction_ids([head, current_head])
            raise CommitConflict(
                "stale_head",
                "The session's active checkpoint changed; nothing changed.",
                {"expected_head": public.get(head), "current_head": public.get(current_head)},
            )
        if {v.view.id for v in now_visible_rows} != {v.view.id for v in visible}:
            raise CommitConflict(
                "compaction_conflict", "The session's checkpoints changed; nothing changed."
            )
        absorbed_ranges = [
            (v.view.first_seq, v.view.last_seq) for v in visible if v.view.id in absorbed
        ]
        condition, params = uncovered_sql(absorbed_ranges)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT event_id, seq, date_part('epoch', timestamp) "  # noqa: S608
                "FROM sessions_app_event "
                f"WHERE session_id = %s AND seq BETWEEN %s AND %s AND kinds & %s = 0 "
                f"AND {condition} ORDER BY seq",
                [session.pk, outcome.first_seq, outcome.last_seq, COMPACTION, *params],
            )
            present = cursor.fetchall()
        present_ids = tuple(event_id for event_id, _seq, _when in present)
        missing = set(outcome.projected) - set(present_ids)
        if missing:
            raise CommitConflict(
                "missing_artifact",
                "A projected tool response's stored original is gone; nothing changed.",
                {"missing": len(missing)},
            )
        if present_ids != outcome.source_event_ids:
            raise CommitConflict(
                "compaction_conflict",
                "The events of the range are not the ones summarised; nothing changed.",
            )
        if outcome.projected:
            _store_projected(session, outcome)
        items_json = "[" + ",".join(canonical_json(i).decode("utf-8") for i in outcome.items) + "]"
        items_bytes = sum(canonical_size(i) for i in outcome.items)
        summary_event_id = ""
        if outcome.representation == "summary":
            if present and present[0][1] == outcome.first_seq:
                start, end = float(present[0][2]), float(present[-1][2])
            else:  # the range begins with absorbed checkpoints
                start, end = _boundary_epochs(session.pk, outcome.first_seq, outcome.last_seq)
            event = _summary_event(row, outcome, start, end)
            derived = Derived(
                kinds=COMPACTION,
                call_ids=None,
                response_ids=None,
                byte_size=canonical_size(event),
                context_json="",
                context_bytes=0,
                content_hash=fingerprint(event),
            )
            store.insert_events(
                session.pk, [store.NewEvent(last_seq + 1, event, now, derived)], state, now
            )
            summary_event_id = event["event_id"]
        _retire(session.pk, row.pk, outcome.first_seq, outcome.last_seq)
        Checkpoint.objects.filter(pk=row.pk).update(
            status=Checkpoint.ACTIVE,
            parent_id=head,
            trigger=outcome.trigger,
            representation=outcome.representation,
            first_seq=outcome.first_seq,
            last_seq=outcome.last_seq,
            source_event_ids=list(outcome.source_event_ids),
            source_fingerprint=outcome.source_fingerprint,
            summary=outcome.summary,
            items_json=items_json,
            items_bytes=items_bytes,
            item_count=len(outcome.items),
            tokens=sum(engine.item_tokens(i, policy.bytes_per_token) for i in outcome.items),
            tokens_before=outcome.tokens_before,
            tokens_after=outcome.tokens_after,
            summarizer=policy.summarizer.kind,
            model=policy.summarizer.model or "",
            usage=outcome.usage,
            policy=policy.as_dict(),
            high_water_seq=last_seq,
            window_end_invocation=outcome.window_end_invocation,
            projected_event_ids=list(outcome.projected),
            summary_event_id=summary_event_id,
            duration_ms=round((time.monotonic() - started) * 1000, 3),
            finished_at=now,
        )
        if policy.retention == "purge":
            _purge(session.pk, row, list(outcome.source_event_ids))


def _store_projected(session: Session, outcome: engine.Outcome) -> None:
    """Keep each projected tool response whole as the session artifact its projection names
    (in the commit's transaction: the checkpoint never names an original that is not kept)."""
    from artifacts import services as artifacts

    wanted: dict[str, str] = {}  # artifact name -> the projection's sha256
    for item in outcome.items:
        for part in (item.get("content") or {}).get("parts", []):
            response = (part.get("function_response") or {}).get("response")
            if isinstance(response, dict) and response.get("projected"):
                original = response.get("original", "")
                if original.startswith("artifact:"):
                    wanted[original.removeprefix("artifact:")] = response["sha256"]
    if not wanted:
        return
    contents = dict(
        Event.objects.filter(session=session, event_id__in=list(outcome.projected)).values_list(
            "event_id", "content"
        )
    )
    for event_id, content in contents.items():
        for index, part in enumerate((content or {}).get("parts", [])):
            name = engine.projected_artifact_name(event_id, index)
            if name not in wanted or "function_response" not in part:
                continue
            body = canonical_json(part["function_response"].get("response"))
            if hashlib.sha256(body).hexdigest() != wanted[name]:
                raise CommitConflict(
                    "missing_artifact", "A projected tool response changed; nothing changed."
                )
            if (
                artifacts.latest_sha256(session.app, session.user_id, session.session_id, name)
                == wanted[name]
            ):
                continue  # kept by an earlier compaction of the same event
            artifacts.save_artifact(
                session.app,
                session.user_id,
                session.session_id,
                name,
                body,
                "application/json",
                {
                    "event_id": event_id,
                    "function_call_id": part["function_response"].get("id", ""),
                    "tool": part["function_response"].get("name", ""),
                },
            )


def _retire(session_pk: int, checkpoint_pk, first_seq: int, last_seq: int) -> None:
    """Before the new checkpoint becomes the head: the old head is superseded, every
    committed checkpoint inside the new range is subsumed (hidden) by it, and a success ends
    any backoff. One statement per table, each row changed once."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE sessions_app_checkpoint
               SET status = CASE WHEN status = 'active' THEN 'superseded' ELSE status END,
                   subsumed_by_id = CASE
                       WHEN subsumed_by_id IS NULL AND first_seq >= %s AND last_seq <= %s
                       THEN %s ELSE subsumed_by_id END
             WHERE session_id = %s AND id <> %s AND status IN ('active', 'superseded')
               AND (status = 'active'
                    OR (subsumed_by_id IS NULL AND first_seq >= %s AND last_seq <= %s))
            """,
            [first_seq, last_seq, checkpoint_pk, session_pk, checkpoint_pk, first_seq, last_seq],
        )
        cursor.execute(
            "UPDATE sessions_app_compactionstate SET ineffective_streak = 0, backoff_until = NULL "
            "WHERE session_id = %s AND (ineffective_streak <> 0 OR backoff_until IS NOT NULL)",
            [session_pk],
        )


def _boundary_epochs(session_pk: int, first_seq: int, last_seq: int) -> tuple:
    """ADK's float timestamps of the range's first and last stored events (None once
    purged)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT date_part('epoch', timestamp) FROM sessions_app_event "
            "WHERE session_id = %s AND seq >= %s ORDER BY seq LIMIT 1), "
            "(SELECT date_part('epoch', timestamp) FROM sessions_app_event "
            "WHERE session_id = %s AND seq <= %s ORDER BY seq DESC LIMIT 1)",
            [session_pk, first_seq, session_pk, last_seq],
        )
        start, end = cursor.fetchone()
    return (None if start is None else float(start), None if end is None else float(end))


def _purge(session_pk: int, row: Checkpoint, event_ids: list[str]) -> None:
    """``purge`` retention: delete exactly the summarised source events, once active. The
    tool tokens of a deleted call end with it (a call that is gone can never be answered,
    so nothing may act for it any longer)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH gone AS (
                DELETE FROM sessions_app_event
                 WHERE session_id = %s AND event_id = ANY(%s) AND kinds & %s = 0
             RETURNING seq, byte_size, token_estimate
            ),
            ended AS (
                UPDATE sessions_app_tooltoken
                   SET revoked_at = now(), revoked_reason = 'purged'
                 WHERE session_id = %s AND revoked_at IS NULL
                   AND call_seq IN (SELECT seq FROM gone)
             RETURNING 1
            )
            UPDATE sessions_app_session
               SET event_count = event_count - (SELECT count(*) FROM gone),
                   total_bytes = total_bytes - (SELECT coalesce(sum(byte_size), 0) FROM gone),
                   token_estimate = token_estimate
                                    - (SELECT coalesce(sum(token_estimate), 0) FROM gone)
             WHERE id = %s
         RETURNING (SELECT count(*) FROM gone)
            """,
            [session_pk, event_ids, COMPACTION, session_pk, session_pk],
        )
        purged = cursor.fetchone()[0]
    Checkpoint.objects.filter(pk=row.pk).update(purged_events=purged)


def get_checkpoint(session: Session, checkpoint_id: str) -> Checkpoint:
    found = Checkpoint.objects.filter(
        session=session, compaction_id=uuid_or_404(checkpoint_id)
    ).first()
    if found is None:
        raise not_found()
    return found

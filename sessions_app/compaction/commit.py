"""Committing a compaction's outcome in one transaction that re-checks everything the run
assumed (compare-and-swap): the head is still the parent it read (else ``stale_head``),
the visible checkpoints are the ones it read and the range holds exactly the events it
summarised, in order (else ``compaction_conflict``). Events appended meanwhile lie after
the range and are kept. Projection, retirement and purging happen in that transaction.
"""

from __future__ import annotations

import hashlib
import time

from django.db import connection, transaction
from django.utils import timezone

from ctxadmin.canonical import canonical_json, canonical_size, fingerprint
from sessions_app import store
from sessions_app.artifacts import services as artifacts
from sessions_app.compaction import model, projection
from sessions_app.compaction.policy import CompactionPolicy
from sessions_app.events import COMPACTION, NOT_HISTORY, Derived
from sessions_app.history import (
    Visible,
    compaction_ids,
    head_of,
    rewound_seqs,
    uncovered_sql,
    visible_checkpoints,
)
from sessions_app.models import Checkpoint, Event, Session

SUMMARY_EVENT_AUTHOR = "ctxadmin"


class Unchecked:
    """The caller did not name an expected head."""


head_unchecked = Unchecked()


class CommitConflict(Exception):
    def __init__(self, code: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.details = details or {}


class LeaseLost(Exception):
    """The run was claimed again since this worker claimed it (its lease had ended)."""


def lock_own(row: Checkpoint) -> None:
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


def _summary_event(row: Checkpoint, outcome: model.Outcome, start, end) -> dict:
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


def commit_outcome(
    row: Checkpoint,
    session: Session,
    outcome: model.Outcome,
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
        lock_own(row)
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
                [session.pk, outcome.first_seq, outcome.last_seq, NOT_HISTORY, *params],
            )
            present = cursor.fetchall()
        gone = rewound_seqs(session.pk)  # never sources (history.source_events)
        present = [row for row in present if row[1] not in gone]
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
            tokens=sum(model.item_tokens(i, policy.bytes_per_token) for i in outcome.items),
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
            purge_events(session.pk, row, list(outcome.source_event_ids))


def _store_projected(session: Session, outcome: model.Outcome) -> None:
    """Keep each projected tool response whole as the session artifact its projection names
    (in the commit's transaction: the checkpoint never names an original that is not kept)."""
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
            name = projection.projected_artifact_name(event_id, index)
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


def purge_events(session_pk: int, row: Checkpoint, event_ids: list[str]) -> None:
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
            [session_pk, event_ids, NOT_HISTORY, session_pk, session_pk],
        )
        purged = cursor.fetchone()[0]
    Checkpoint.objects.filter(pk=row.pk).update(purged_events=purged)

"""Reads of a session's history: its visible checkpoints and head, the events they do not
cover, and the automatic-compaction state the engine weighs.

Everything that builds on a session's history (compaction, the context a model call gets)
reads it here, so what counts as visible is written once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import starmap

from django.db import connection

from ctxadmin.canonical import canonical_json
from sessions_app import store
from sessions_app.compaction import model
from sessions_app.compaction.policy import CompactionPolicy
from sessions_app.context import envelope as env
from sessions_app.context.adk_view import AdkEvent, adk_view, rewound
from sessions_app.context.policy import ContextPolicy
from sessions_app.context.select import EventMeta
from sessions_app.events import (
    CLIENT_COMPACTION,
    COMPACTION,
    MARKERS,
    MODEL_CONTENT,
    NOT_HISTORY,
    REWIND,
    TEXT,
    content_kinds,
)
from sessions_app.models import Checkpoint, Session


@dataclass(frozen=True)
class Visible:
    """A visible checkpoint as read for the engine and the context builder."""

    view: model.CheckpointView
    items_json: str
    items_bytes: int
    item_count: int
    status: str = ""


def head_of(visible: list[Visible]) -> str | None:
    """The active checkpoint (the head is never subsumed, so it is among the visible)."""
    return next((v.view.id for v in visible if v.status == Checkpoint.ACTIVE), None)


VISIBLE_SQL = """
    SELECT id::text, first_seq, last_seq, representation, tokens, summary, trigger,
           high_water_seq, window_end_invocation, items_json, items_bytes, item_count, status
      FROM sessions_app_checkpoint
     WHERE session_id = %s AND status IN ('active', 'superseded') AND subsumed_by_id IS NULL
     ORDER BY first_seq, created_at
"""


def visible_checkpoints(session_pk: int) -> list[Visible]:
    with connection.cursor() as cursor:
        cursor.execute(VISIBLE_SQL, [session_pk])
        rows = cursor.fetchall()
    return [
        Visible(
            model.CheckpointView(
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
            [session_pk, previous.last_seq, NOT_HISTORY, policy.overlap_size],
        )
        return cursor.fetchone()[0]


def source_events(
    session_pk: int, visible: list[Visible], policy: CompactionPolicy
) -> list[model.SourceEvent]:
    """The events compaction may read: outside the visible summaries (pruned checkpoints
    keep their sources, so a later summary can absorb them), plus a sliding window's
    overlap; never compaction events (ctxadmin's or a client's) nor rewinds, so a client's
    compaction is never summarised as history (the raw events it covers are)."""
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
            [session_pk, NOT_HISTORY, *params],
        )
        rows = cursor.fetchall()
    gone = rewound_seqs(session_pk)
    return [
        model.SourceEvent(
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
        if seq not in gone
    ]


def rewound_seqs(session_pk: int) -> frozenset[int]:
    """The events a client's rewinds take out of the session's history: compaction never
    summarises them, as no context shows them (ADK's compactor applies rewinds too). One
    query that reads no event unless the session holds a rewind."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq, invocation_id, actions ->> 'rewind_before_invocation_id' "
            "FROM sessions_app_event WHERE session_id = %s AND kinds & %s = 0 AND EXISTS ("
            "SELECT 1 FROM sessions_app_event WHERE session_id = %s AND kinds & %s <> 0) "
            "ORDER BY seq",
            [session_pk, COMPACTION, session_pk, REWIND],
        )
        rows = cursor.fetchall()
    if not rows:
        return frozenset()
    return rewound(
        [AdkEvent(seq, invocation, 0, rewind_before=target) for seq, invocation, target in rows]
    )


def automatic_state(session_pk: int) -> model.AutomaticState:
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
    return model.AutomaticState(recent_successes=recent, backing_off=bool(backing_off))


def active_head(session_pk: int) -> tuple[str | None, str | None]:
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


def in_flight(session: Session):
    """The session's compactions pending or running (at most one: a partial unique index)."""
    return Checkpoint.objects.filter(
        session=session, status__in=(Checkpoint.PENDING, Checkpoint.RUNNING)
    )


# ----------------------------------------------------------------------------- for a context build


@dataclass(frozen=True)
class HistoryView:
    """What selection reads: event metadata outside the visible checkpoints, with each
    checkpoint as one entry where its range begins, and calls restored for responses whose
    call was compacted."""

    metas: list[EventMeta]
    checkpoints: dict[float, list[str]]  # entry seq -> its history items (canonical JSON)
    hidden: int  # events hidden by compaction
    restored: int
    # entry seq -> the (first, last) seqs of the stored events that checkpoint hides
    covered: dict[float, tuple[int, int]] | None = None


def read_history(session_pk: int, policy: ContextPolicy) -> HistoryView:
    visible = visible_checkpoints(session_pk)
    ranges = [(v.view.first_seq, v.view.last_seq) for v in visible]
    metas = event_metas(session_pk, policy, ranges)
    checkpoints: dict[float, list[str]] = {}
    adk_hidden = adk_restored = 0
    if any(meta.kinds & MARKERS for meta in metas):
        metas, checkpoints, adk_hidden, adk_restored = _client_markers(session_pk, metas, ranges)
    if not visible:
        return HistoryView(metas, checkpoints, adk_hidden, adk_restored)
    restored = _restored_calls(session_pk, policy, metas, ranges)
    for v in visible:
        position = v.view.first_seq - 0.5
        items = [canonical_json(item).decode("utf-8") for item in json.loads(v.items_json)]
        checkpoints[position] = items
        metas.append(
            EventMeta(
                seq=position,
                kinds=TEXT | MODEL_CONTENT,
                call_ids=None,
                response_ids=None,
                context_bytes=v.items_bytes + env.FRAMING_PER_ITEM_BYTES * (v.item_count - 1),
                checkpoint=True,
            )
        )
    metas.extend(restored)
    metas.sort(key=lambda meta: meta.seq)
    return HistoryView(
        metas,
        checkpoints,
        _hidden_count(session_pk, ranges) - len(restored) + adk_hidden,
        len(restored) + adk_restored,
        {v.view.first_seq - 0.5: (v.view.first_seq, v.view.last_seq) for v in visible},
    )


def hidden_texts(
    session_pk: int, ranges: list[tuple[int, int]], limit: int
) -> list[tuple[int, str, str, float, str]]:
    """The newest ``limit`` stored text events inside ``ranges`` (those checkpoints hide;
    none once purged): seq, event id, author, time (epoch seconds) and their text parts
    joined by newlines, as the history items hold them (secret-pruned)."""
    if not ranges:
        return []
    condition, params = uncovered_sql(ranges)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq, event_id, author, date_part('epoch', timestamp), "  # noqa: S608
            "context_json FROM sessions_app_event "
            f"WHERE session_id = %s AND kinds & %s = 0 AND kinds & %s <> 0 AND NOT {condition} "
            "ORDER BY seq DESC LIMIT %s",
            [session_pk, NOT_HISTORY, TEXT, *params, limit],
        )
        rows = cursor.fetchall()
    gone = rewound_seqs(session_pk)
    found = []
    for seq, event_id, author, when, item in rows:
        if seq in gone:
            continue
        content = json.loads(item).get("content") or {}
        # A model's thoughts are not what it said: they are never restored as text.
        parts = [
            p["text"]
            for p in content.get("parts") or ()
            if isinstance(p.get("text"), str) and not p.get("thought")
        ]
        if parts:
            found.append((seq, event_id, author, float(when), "\n".join(parts)))
    return found


def _micros(seconds: float) -> int:
    """Seconds since the epoch in whole microseconds, rounded as stored timestamps are."""
    return (datetime.fromtimestamp(seconds, UTC) - _EPOCH) // timedelta(microseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _client_markers(
    session_pk: int, metas: list[EventMeta], ranges: list[tuple[int, int]]
) -> tuple[list[EventMeta], dict[float, list[str]], int, int]:
    """The metas after a client's rewinds and compactions (as ADK's contents processor
    applies them to the events outside ctxadmin's checkpoints): hidden events and the
    markers leave, each kept compaction's content joins as an entry where it stands."""
    condition, params = uncovered_sql(ranges)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq, invocation_id, (extract(epoch FROM timestamp) * 1000000)::bigint, "  # noqa: S608
            "call_ids, response_ids, "
            "CASE WHEN kinds & %s <> 0 THEN actions -> 'compaction' END, "
            "actions ->> 'rewind_before_invocation_id', "
            "CASE WHEN kinds & %s <> 0 THEN context_json END, context_bytes "
            f"FROM sessions_app_event WHERE session_id = %s AND kinds & %s = 0 AND {condition} "
            "ORDER BY seq",
            [CLIENT_COMPACTION, CLIENT_COMPACTION, session_pk, COMPACTION, *params],
        )
        rows = cursor.fetchall()
    events, summaries = [], {}
    for seq, invocation, micros, calls, responses, compaction, rewind, item, size in rows:
        span = None
        if compaction is not None:
            compaction = store.decode(compaction)
            span = (_micros(compaction["start_timestamp"]), _micros(compaction["end_timestamp"]))
            summaries[seq] = (item, size)
        events.append(AdkEvent(seq, invocation, micros, calls, responses, span, rewind or None))
    view = adk_view(events)
    kept = [meta for meta in metas if meta.seq not in view.hidden]
    entries: dict[float, list[str]] = {}
    for seq, position in view.placed.items():
        item, size = summaries[seq]
        kinds, _calls, _responses = content_kinds(json.loads(item).get("content"))
        entries[position] = [item]
        kept.append(EventMeta(position, kinds, None, None, size, checkpoint=True))
    kept.sort(key=lambda meta: meta.seq)
    return kept, entries, view.hidden_events, view.restored


def _meta_columns(policy: ContextPolicy) -> list[str]:
    columns = ["seq", "kinds", "call_ids", "response_ids", "context_bytes"]
    if policy.filters_on_identity or policy.filters_on_time:
        columns += ["author", "invocation_id"]
    if policy.filters_on_time:
        columns.append("date_part('epoch', timestamp)")
    return columns


def event_metas(
    session_pk: int, policy: ContextPolicy, hidden: list[tuple[int, int]] | None = None
) -> list[EventMeta]:
    """Every visible event's selection metadata, never content. Authors, invocation ids and
    times are read only when the policy filters on them: per-value decoding is most of the
    cost. ctxadmin's compaction events and events inside ``hidden`` ranges are left out (a
    client's rewinds and compactions stay: ``read_history`` applies them)."""
    condition, params = uncovered_sql(hidden or [])
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(_meta_columns(policy))} FROM sessions_app_event "  # noqa: S608
            f"WHERE session_id = %s AND kinds & %s = 0 AND {condition} ORDER BY seq",
            [session_pk, COMPACTION, *params],
        )
        return list(starmap(EventMeta, cursor.fetchall()))


def _restored_calls(
    session_pk: int, policy: ContextPolicy, metas: list[EventMeta], ranges: list[tuple[int, int]]
) -> list[EventMeta]:
    """A response whose call was compacted away gets its call back (a model must never see
    a response without its call)."""
    calls = {call for meta in metas for call in meta.call_ids or ()}
    orphans = sorted(
        {answer for meta in metas for answer in meta.response_ids or () if answer not in calls}
    )
    if not orphans:
        return []
    condition, params = uncovered_sql(ranges)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(_meta_columns(policy))} FROM sessions_app_event "  # noqa: S608
            f"WHERE session_id = %s AND call_ids && %s::varchar[] AND NOT {condition} "
            "ORDER BY seq",
            [session_pk, orphans, *params],
        )
        return list(starmap(EventMeta, cursor.fetchall()))


def _hidden_count(session_pk: int, ranges: list[tuple[int, int]]) -> int:
    condition, params = uncovered_sql(ranges)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM sessions_app_event "  # noqa: S608
            f"WHERE session_id = %s AND kinds & %s = 0 AND NOT {condition}",
            [session_pk, NOT_HISTORY, *params],
        )
        return cursor.fetchone()[0]


def context_items(session_pk: int, seqs: list[int]) -> dict[int, str]:
    """The precomputed history items (canonical JSON) of the events ``seqs`` (ascending): a
    range scan when they are dense, by key when sparse."""
    if not seqs:
        return {}
    with connection.cursor() as cursor:
        if len(seqs) * 2 >= seqs[-1] - seqs[0] + 1:
            cursor.execute(
                "SELECT seq, context_json FROM sessions_app_event "
                "WHERE session_id = %s AND seq BETWEEN %s AND %s",
                [session_pk, seqs[0], seqs[-1]],
            )
        else:
            cursor.execute(
                "SELECT seq, context_json FROM sessions_app_event "
                "WHERE session_id = %s AND seq = ANY(%s)",
                [session_pk, seqs],
            )
        wanted = set(seqs)
        return {seq: item for seq, item in cursor.fetchall() if seq in wanted}

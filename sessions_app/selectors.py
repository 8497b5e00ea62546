"""Reads for sessions and events; and what other apps read of sessions_app.

Other apps (memory) import nothing of sessions_app but this module: the reads they need
(section "For other apps"), the event format's parsers and the ``invocation_completed``
signal, re-exported below under their own names.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from django.db import connection
from django.db.models import Count, F, Q, Sum
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce, TruncHour

from ctxadmin.models import App
from ctxadmin.series import per_hour
from sessions_app import history, store
from sessions_app import state as scopes
from sessions_app.events import (
    FUNCTION_CALL,
    FUNCTION_RESPONSE,
    KIND_BITS,
    EventError,
    EventLimits,
    parse_timestamp,
    validate_event,
)
from sessions_app.models import Checkpoint, Event, Invocation, Session
from sessions_app.signals import invocation_completed
from sessions_app.store import decode

# The event format and the signal, for other apps: memory validates the events it is sent
# (``validate_event``), parses times as sessions do, decodes jsonb read by a raw
# cursor, and admits ingestion when an invocation completes.
__all__ = [
    "EventError",
    "EventLimits",
    "decode",
    "events_after",
    "has_events_after",
    "invocation_completed",
    "parse_timestamp",
    "session_exists",
    "validate_event",
]


def scope_states(app: App, user_id: str) -> tuple[dict, dict]:
    """(app state, user state), un-prefixed, in one round trip."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 'app', state FROM sessions_app_appstate WHERE app_id = %s "
            "UNION ALL SELECT 'user', state FROM sessions_app_userstate "
            "WHERE app_id = %s AND user_id = %s",
            [app.pk, app.pk, user_id],
        )
        rows = dict(cursor.fetchall())
    return store.decode(rows.get("app")) or {}, store.decode(rows.get("user")) or {}


def merged_states(app: App, sessions: list[Session]) -> list[dict]:
    """Each session's state merged with the app's ``app:`` state and its user's ``user:``
    state, as a session read shows it: one query for the app's and all the users' states."""
    if not sessions:
        return []
    users = sorted({session.user_id for session in sessions})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT NULL, state FROM sessions_app_appstate WHERE app_id = %s "
            "UNION ALL SELECT user_id, state FROM sessions_app_userstate "
            "WHERE app_id = %s AND user_id = ANY(%s)",
            [app.pk, app.pk, users],
        )
        rows = cursor.fetchall()
    app_state = next((store.decode(state) for user, state in rows if user is None), None) or {}
    user_states = {user: store.decode(state) or {} for user, state in rows if user is not None}
    return [
        scopes.merged(session.state, app_state, user_states.get(session.user_id, {}))
        for session in sessions
    ]


def session_with_state(app: App, user_id: str, session_id: str) -> dict | None:
    """The session's summary and merged state (its own, ``app:`` and ``user:``), one query."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT s.id, s.revision, s.event_count, to_json(s.created_at) #>> '{}',
                   to_json(s.updated_at) #>> '{}', s.state,
                   (SELECT a.state FROM sessions_app_appstate a WHERE a.app_id = s.app_id),
                   (SELECT u.state FROM sessions_app_userstate u
                     WHERE u.app_id = s.app_id AND u.user_id = s.user_id)
              FROM sessions_app_session s
             WHERE s.app_id = %s AND s.user_id = %s AND s.session_id = %s
            """,
            [app.pk, user_id, session_id],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    pk, revision, event_count, created, updated, state, app_state, user_state = row
    return {
        "pk": pk,
        "session_id": session_id,
        "user_id": user_id,
        "revision": revision,
        "event_count": event_count,
        "created_at": created,
        "updated_at": updated,
        "app": app.name,
        "state": scopes.merged(
            store.decode(state), store.decode(app_state) or {}, store.decode(user_state) or {}
        ),
    }


def session_events_json(
    session_pk: int,
    *,
    num_recent_events: int | None,
    after_timestamp: datetime | None,
    cap: int,
    hidden: Sequence[tuple[int, int]] = (),
) -> tuple[list[str], bool]:
    """Events in seq order, as JSON texts: those at or after ``after_timestamp`` and outside
    the ``hidden`` seq ranges, then the newest ``num_recent_events`` of them (ADK semantics; 0
    means none). At most ``cap`` come back, the newest; ``complete`` says whether that was
    all of them."""
    if num_recent_events == 0:
        return [], True
    wanted = num_recent_events
    limit = cap if wanted is None else min(cap, wanted)
    where = ["session_id = %s"]
    params: list = [session_pk]
    if after_timestamp is not None:
        where.append("timestamp >= %s")
        params.append(after_timestamp)
    for first, last in hidden:
        where.append("seq NOT BETWEEN %s AND %s")
        params.extend([first, last])
    with connection.cursor() as cursor:
        cursor.execute(
            # JSON is built only for the rows the LIMIT keeps, whatever plan is chosen.
            f"SELECT {store.EVENT_JSON_SQL} FROM (SELECT * FROM sessions_app_event "  # noqa: S608
            f"WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT %s) newest ORDER BY seq DESC",
            [*params, limit + 1],
        )
        rows = [row[0] for row in cursor.fetchall()]
    # Incomplete only when the cap, not the caller's N, cut the list short.
    complete = len(rows) <= limit or (wanted is not None and wanted <= cap)
    rows = rows[:limit]
    rows.reverse()
    return rows, complete


def events_as_json(queryset):
    """``values("seq", "doc")`` rows: the seq (for the cursor) and the event as API JSON."""
    return queryset.annotate(
        doc=RawSQL(store.EVENT_JSON_SQL, ())  # noqa: S611 - a constant, no input
    ).values("seq", "doc")


def filter_events(
    queryset,
    *,
    authors=None,
    exclude_authors=None,
    invocation_ids=None,
    exclude_invocation_ids=None,
    content_types=None,
    exclude_content_types=None,
    after_timestamp=None,
    before_timestamp=None,
    final_only=False,
):
    """The list endpoint's filters, in SQL (kinds are bits, so content types are masks)."""
    if authors:
        queryset = queryset.filter(author__in=authors)
    if exclude_authors:
        queryset = queryset.exclude(author__in=exclude_authors)
    if invocation_ids:
        queryset = queryset.filter(invocation_id__in=invocation_ids)
    if exclude_invocation_ids:
        queryset = queryset.exclude(invocation_id__in=exclude_invocation_ids)
    if content_types:
        mask = sum(KIND_BITS[kind] for kind in set(content_types))
        queryset = queryset.alias(_included=F("kinds").bitand(mask)).exclude(_included=0)
    if exclude_content_types:
        mask = sum(KIND_BITS[kind] for kind in set(exclude_content_types))
        queryset = queryset.alias(_excluded=F("kinds").bitand(mask)).filter(_excluded=0)
    if after_timestamp is not None:
        queryset = queryset.filter(timestamp__gte=after_timestamp)
    if before_timestamp is not None:
        queryset = queryset.filter(timestamp__lte=before_timestamp)
    if final_only:
        tool_bits = FUNCTION_CALL | FUNCTION_RESPONSE
        queryset = queryset.alias(_tools=F("kinds").bitand(tool_bits)).filter(_tools=0)
    return queryset


# ----------------------------------------------------------------------------- for other apps


def events_after(
    app: App,
    user_id: str,
    session_id: str,
    after_seq: int,
    *,
    appended_after: datetime | None,
    max_bytes: int,
    max_events: int,
) -> list[dict]:
    """The session's events after ``after_seq`` (and appended after ``appended_after``, when
    given) in seq order, as dicts of ``event_id``, ``seq``, ``author``, ``role``, ``content``
    (decoded), ``timestamp`` and ``running`` (the running total of their stored bytes): those
    that start within ``max_bytes`` (the first event always), at most ``max_events``. What
    memory's ingestion outbox admits as one job."""
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
                max_bytes,
                max_events,
            ],
        )
        names = [column.name for column in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    for row in rows:  # Django's connections read jsonb as text
        if isinstance(row["content"], str):
            row["content"] = json.loads(row["content"])
    return rows


def has_events_after(app: App, user_id: str, session_id: str, seq: int) -> bool:
    """Whether the session (of this user) holds an event after ``seq``."""
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


def session_exists(app: App, user_id: str, session_id: str) -> bool:
    """Whether this user of this app has a session with this id."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM sessions_app_session WHERE app_id = %s AND user_id = %s "
            "AND session_id = %s",
            [app.pk, user_id, session_id],
        )
        return cursor.fetchone() is not None


# ----------------------------------------------------------------------------- one session


def session_or_none(app: App, user_id: str, session_id: str) -> Session | None:
    return Session.objects.filter(app=app, user_id=user_id, session_id=session_id).first()


def active_checkpoint(session: Session) -> Checkpoint | None:
    """The session's active checkpoint, without its items (what the console shows of it)."""
    return (
        Checkpoint.objects.filter(session=session, status=Checkpoint.ACTIVE)
        .only(
            "id",
            "compaction_id",
            "status",
            "origin",
            "trigger",
            "representation",
            "source_fingerprint",
            "first_seq",
            "last_seq",
            "source_event_ids",
            "tokens_before",
            "tokens_after",
            "created_at",
            "finished_at",
        )
        .first()
    )


def compactions_in_flight(session: Session) -> int:
    return history.in_flight(session).count()


# ----------------------------------------------------------------------------- the console's
# Counts per hour over a window (the console's dashboard): ids and numbers, never content.

INVOCATION_STATUSES = (Invocation.RUNNING, Invocation.COMPLETED, Invocation.FAILED)
CACHE_OUTCOMES = ("hit", "created", "bypass", "off")


def events_per_hour(hours: list[datetime]) -> list[int]:
    rows = (
        Event.objects.filter(created_at__gte=hours[0])
        .annotate(hour=TruncHour("created_at"))
        .values("hour")
        .annotate(n=Count("*"))
        .values_list("hour", "n")
    )
    return per_hour(hours, dict(rows))


def compactions_per_hour(hours: list[datetime]) -> dict:
    """Compactions requested in each hour, by outcome, and the tokens the committed ones
    saved (the effective context's estimate before minus after)."""
    committed = Q(status__in=Checkpoint.COMMITTED)
    rows = (
        Checkpoint.objects.filter(created_at__gte=hours[0])
        .annotate(hour=TruncHour("created_at"))
        .values("hour")
        .annotate(
            requested=Count("*"),
            committed=Count("pk", filter=committed),
            # A client's request with nothing to compact is answered, not a failure.
            failed=Count(
                "pk", filter=Q(status=Checkpoint.FAILED) & ~Q(reason="nothing_to_compact")
            ),
            saved_per_hour=Coalesce(
                Sum(
                    Coalesce(F("tokens_before"), 0) - Coalesce(F("tokens_after"), 0),
                    filter=committed,
                ),
                0,
            ),
        )
    )
    by_hour = {row.pop("hour"): row for row in rows}
    keys = ("requested", "committed", "failed", "saved_per_hour")
    return {key: [by_hour[h][key] if h in by_hour else 0 for h in hours] for key in keys}


def invocations_per_hour(hours: list[datetime]) -> dict:
    """Invocations started in each hour, by prefix-cache outcome and by status."""
    rows = (
        # Every status named: the (status, created_at) index then serves the window.
        Invocation.objects.filter(status__in=INVOCATION_STATUSES, created_at__gte=hours[0])
        .annotate(hour=TruncHour("created_at"))
        .values_list("hour", "status", "cache_status")
        .annotate(n=Count("*"))
    )
    by_cache: dict[str, dict[datetime, int]] = defaultdict(dict)
    by_status: dict[str, dict[datetime, int]] = defaultdict(dict)
    for hour, status, cache_status, n in rows:
        outcome = cache_status if cache_status in CACHE_OUTCOMES else "none"
        by_cache[outcome][hour] = by_cache[outcome].get(hour, 0) + n
        by_status[status][hour] = by_status[status].get(hour, 0) + n
    return {
        "cache_per_hour": {
            outcome: per_hour(hours, by_cache[outcome]) for outcome in (*CACHE_OUTCOMES, "none")
        },
        "status_per_hour": {
            status: per_hour(hours, by_status[status]) for status in INVOCATION_STATUSES
        },
    }

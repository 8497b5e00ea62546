"""Reads for sessions and events."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models import F

from ctxadmin.models import App
from sessions_app.events import FUNCTION_CALL, FUNCTION_RESPONSE, KIND_BITS
from sessions_app.models import Event, Session

EVENT_COLUMNS = (
    "event_id",
    "seq",
    "invocation_id",
    "author",
    "content",
    "turn_complete",
    "actions",
    "timestamp",
    "usage_metadata",
    "custom_metadata",
    "byte_size",
    "token_estimate",
    "content_hash",
)


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
    return _json(rows.get("app")), _json(rows.get("user"))


def _json(value) -> dict:
    if value is None:
        return {}
    if isinstance(value, str):  # a raw cursor may hand jsonb back as text
        import json

        return json.loads(value)
    return value


def event_dict(row: dict) -> dict:
    """The API representation of a stored event (from ``values()`` or a model's fields)."""
    return {
        "event_id": row["event_id"],
        "seq": row["seq"],
        "invocation_id": row["invocation_id"],
        "author": row["author"],
        "content": row["content"],
        "partial": False,
        "turn_complete": row["turn_complete"],
        "actions": row["actions"],
        "timestamp": row["timestamp"].isoformat(),
        "usage_metadata": row["usage_metadata"],
        "custom_metadata": row["custom_metadata"],
        "byte_size": row["byte_size"],
        "token_estimate": row["token_estimate"],
        "content_hash": row["content_hash"],
        "stored": True,
    }


def get_session(app: App, user_id: str, session_id: str) -> Session | None:
    return Session.objects.filter(app=app, user_id=user_id, session_id=session_id).first()


def session_events(
    session: Session,
    *,
    num_recent_events: int | None,
    after_timestamp: datetime | None,
    cap: int,
) -> tuple[list[dict], bool]:
    """Events in seq order: those at or after ``after_timestamp``, then the newest
    ``num_recent_events`` of them (ADK semantics; 0 means none). Returns (events, complete):
    at most ``cap`` events are returned, the newest, and ``complete`` says whether that was
    all of them."""
    if num_recent_events == 0:
        return [], True
    queryset = Event.objects.filter(session=session)
    if after_timestamp is not None:
        queryset = queryset.filter(timestamp__gte=after_timestamp)
    wanted = num_recent_events
    limit = cap if wanted is None else min(cap, wanted)
    rows = list(queryset.order_by("-seq").values(*EVENT_COLUMNS)[: limit + 1])
    # Incomplete only when the cap, not the caller's N, cut the list short.
    complete = len(rows) <= limit or (wanted is not None and wanted <= cap)
    rows = rows[:limit]
    rows.reverse()
    return [event_dict(row) for row in rows], complete


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

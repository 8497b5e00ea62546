"""The SQL of the append path: few round trips, no ORM query building on the hot path.

Timestamps are read as text (``to_json(ts) #>> '{}'``, ISO 8601 in the connection's UTC):
Django's timestamptz loader parses in Python and would dominate reads of many events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from sessions_app.events import Derived, estimate_tokens, iso_timestamp

# jsonb arrives as text on Django's connections (its JSONField decodes); decode here.
_loads = json.loads
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def decode(value: Any) -> Any:
    """A jsonb value as read by a raw cursor (text on Django's connections)."""
    return _loads(value) if isinstance(value, str) else value


# An event as API JSON, built by PostgreSQL: reading a session's events then costs one text
# value per event, with no decoding and re-encoding of content in Python.
EVENT_JSON_SQL = (
    "json_build_object('event_id', event_id, 'seq', seq, 'invocation_id', invocation_id, "
    "'author', author, 'content', content, 'partial', false, 'turn_complete', turn_complete, "
    "'actions', actions, 'timestamp', timestamp, 'usage_metadata', usage_metadata, "
    "'custom_metadata', custom_metadata, 'byte_size', byte_size, "
    "'token_estimate', token_estimate, 'content_hash', content_hash, 'stored', true)::text"
)


@dataclass(frozen=True)
class LockedSession:
    pk: int
    state: dict
    revision: int
    last_seq: int
    app_state: dict
    user_state: dict
    stored_hashes: dict[str, str]  # event_id -> content_hash, for the batch's ids


def lock_session(
    app_pk: int, user_id: str, session_id: str, event_ids: list[str]
) -> LockedSession | None:
    """Lock the session row (held to the end of the transaction) and read, in the same round
    trip, the app and user state and the stored hashes of any of ``event_ids``."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT s.id, s.state, s.revision, s.last_seq,
                   (SELECT a.state FROM sessions_app_appstate a WHERE a.app_id = s.app_id),
                   (SELECT u.state FROM sessions_app_userstate u
                     WHERE u.app_id = s.app_id AND u.user_id = s.user_id),
                   (SELECT json_object_agg(e.event_id, e.content_hash)
                      FROM sessions_app_event e
                     WHERE e.session_id = s.id AND e.event_id = ANY(%s))
              FROM sessions_app_session s
             WHERE s.app_id = %s AND s.user_id = %s AND s.session_id = %s
               FOR UPDATE OF s
            """,
            [event_ids, app_pk, user_id, session_id],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    pk, state, revision, last_seq, app_state, user_state, stored = row
    return LockedSession(
        pk,
        decode(state),
        revision,
        last_seq,
        decode(app_state) or {},
        decode(user_state) or {},
        decode(stored) or {},
    )


def _merge(sql: str, params: list) -> dict:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return decode(cursor.fetchone()[0])


def merge_app_state(app_pk: int, delta: dict) -> dict:
    """Shallow-merge ``delta`` into the app state (creating it), row-locked; the new state."""
    return _merge(
        """
        INSERT INTO sessions_app_appstate (app_id, state, updated_at)
        VALUES (%s, %s::jsonb, now())
        ON CONFLICT (app_id) DO UPDATE
           SET state = sessions_app_appstate.state || EXCLUDED.state, updated_at = now()
        RETURNING state
        """,
        [app_pk, _dumps(delta)],
    )


def merge_user_state(app_pk: int, user_id: str, delta: dict) -> dict:
    return _merge(
        """
        INSERT INTO sessions_app_userstate (app_id, user_id, state, updated_at)
        VALUES (%s, %s, %s::jsonb, now())
        ON CONFLICT (app_id, user_id) DO UPDATE
           SET state = sessions_app_userstate.state || EXCLUDED.state, updated_at = now()
        RETURNING state
        """,
        [app_pk, user_id, _dumps(delta)],
    )


@dataclass(frozen=True)
class NewEvent:
    seq: int
    event: dict
    timestamp: datetime
    derived: Derived

    @property
    def token_estimate(self) -> int:
        return estimate_tokens(self.derived.byte_size)

    def params(self, session_pk: int) -> list:
        event, derived = self.event, self.derived
        return [
            session_pk,
            self.seq,
            event["event_id"],
            event["invocation_id"],
            event["author"],
            (event["content"] or {}).get("role", ""),
            None if event["content"] is None else _dumps(event["content"]),
            event["turn_complete"],
            _dumps(event["actions"]),
            None if event["usage_metadata"] is None else _dumps(event["usage_metadata"]),
            None if event["custom_metadata"] is None else _dumps(event["custom_metadata"]),
            self.timestamp,
            derived.kinds,
            derived.call_ids,
            derived.response_ids,
            derived.byte_size,
            derived.context_bytes,
            derived.context_json,
            self.token_estimate,
            derived.content_hash,
        ]

    def as_dict(self) -> dict:
        event = self.event
        return {
            "event_id": event["event_id"],
            "seq": self.seq,
            "invocation_id": event["invocation_id"],
            "author": event["author"],
            "content": event["content"],
            "partial": False,
            "turn_complete": event["turn_complete"],
            "actions": event["actions"],
            "timestamp": iso_timestamp(self.timestamp),
            "usage_metadata": event["usage_metadata"],
            "custom_metadata": event["custom_metadata"],
            "byte_size": self.derived.byte_size,
            "token_estimate": self.token_estimate,
            "content_hash": self.derived.content_hash,
            "stored": True,
        }


_ROW = (
    "(%s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s::jsonb, %s::jsonb, %s::jsonb, %s, %s, "
    "%s::varchar[], %s::varchar[], %s, %s, %s, %s, %s, now())"
)


def insert_events(session_pk: int, rows: list[NewEvent], state: dict, now: datetime) -> None:
    """Insert the events and advance the session in one statement (the row is locked)."""
    params: list = []
    for row in rows:
        params.extend(row.params(session_pk))
    params.extend(
        [
            _dumps(state),
            rows[-1].seq,
            len(rows),
            sum(row.derived.byte_size for row in rows),
            sum(row.token_estimate for row in rows),
            now,
            session_pk,
        ]
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH inserted AS (
                INSERT INTO sessions_app_event
                    (session_id, seq, event_id, invocation_id, author, role, content,
                     turn_complete, actions, usage_metadata, custom_metadata, timestamp, kinds,
                     call_ids, response_ids, byte_size, context_bytes, context_json,
                     token_estimate, content_hash, created_at)
                VALUES {", ".join([_ROW] * len(rows))}
                RETURNING 1
            )
            UPDATE sessions_app_session
               SET state = %s::jsonb, revision = revision + 1, last_seq = %s,
                   event_count = event_count + %s, total_bytes = total_bytes + %s,
                   token_estimate = token_estimate + %s, updated_at = %s
             WHERE id = %s
            """,  # noqa: S608 - only placeholders are interpolated
            params,
        )


def stored_events(session_pk: int, event_ids: list[str]) -> dict[str, dict]:
    """Stored events by id (the idempotent re-sends of a batch), as the API shows them."""
    if not event_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT event_id, {EVENT_JSON_SQL} FROM sessions_app_event "  # noqa: S608
            "WHERE session_id = %s AND event_id = ANY(%s)",
            [session_pk, event_ids],
        )
        return {event_id: _loads(doc) for event_id, doc in cursor.fetchall()}

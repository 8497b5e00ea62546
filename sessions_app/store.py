"""The SQL of the append path: few round trips, no ORM query building on the hot path.

Timestamps are read as text (``to_json(ts) #>> '{}'``, ISO 8601 in the connection's UTC):
Django's timestamptz loader parses in Python and would dominate reads of many events.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from ctxadmin.timestamps import iso_timestamp
from sessions_app.events import Derived, estimate_tokens

# jsonb arrives as text on Django's connections (its JSONField decodes); decode here.
_loads = json.loads
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def decode(value: Any) -> Any:
    """A jsonb value as read by a raw cursor (text on Django's connections)."""
    return _loads(value) if isinstance(value, str) else value


# An event as API JSON, built by PostgreSQL: reading a session's events then costs one text
# value per event, with no decoding and re-encoding of content in Python. The kept ADK
# fields (a non-empty object whose names never collide) are spliced in as text.
_EVENT_OBJECT_SQL = (
    "json_build_object('event_id', event_id, 'seq', seq, 'invocation_id', invocation_id, "
    "'author', author, 'content', content, 'partial', false, 'turn_complete', turn_complete, "
    "'actions', actions, 'timestamp', timestamp, 'usage_metadata', usage_metadata, "
    "'custom_metadata', custom_metadata, 'byte_size', byte_size, "
    "'token_estimate', token_estimate, 'content_hash', content_hash, 'stored', true)::text"
)
EVENT_JSON_SQL = (
    f"CASE WHEN adk_fields IS NULL THEN {_EVENT_OBJECT_SQL} "
    f"ELSE left({_EVENT_OBJECT_SQL}, -1) || ', ' || substr(adk_fields::text, 2) END"
)


# Whether the session's effective compaction policy runs automatically: its own policy, else
# its app's; with neither, compaction runs only when asked for.
AUTOMATIC_SQL = (
    "COALESCE((s.compaction_policy ->> 'automatic')::boolean, "
    "(SELECT (p.policy ->> 'automatic')::boolean FROM sessions_app_appcompactionpolicy p "
    "WHERE p.app_id = s.app_id), false)"
)


@dataclass
class ScopeStates:
    """A session's own state and its app and user scopes (un-prefixed)."""

    state: dict
    app_state: dict
    user_state: dict


@dataclass(frozen=True)
class LockedSession:
    pk: int
    automatic_compaction: bool
    state: dict
    revision: int
    last_seq: int
    updated_at: datetime
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
            f"""
            SELECT s.id, s.state, s.revision, s.last_seq, s.updated_at, {AUTOMATIC_SQL},
                   (SELECT a.state FROM sessions_app_appstate a WHERE a.app_id = s.app_id),
                   (SELECT u.state FROM sessions_app_userstate u
                     WHERE u.app_id = s.app_id AND u.user_id = s.user_id),
                   (SELECT json_object_agg(e.event_id, e.content_hash)
                      FROM sessions_app_event e
                     WHERE e.session_id = s.id AND e.event_id = ANY(%s))
              FROM sessions_app_session s
             WHERE s.app_id = %s AND s.user_id = %s AND s.session_id = %s
               FOR UPDATE OF s
            """,  # noqa: S608 - a constant expression
            [event_ids, app_pk, user_id, session_id],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    pk, state, revision, last_seq, updated_at, automatic, app_state, user_state, stored = row
    return LockedSession(
        pk,
        automatic,
        decode(state),
        revision,
        last_seq,
        updated_at,
        decode(app_state) or {},
        decode(user_state) or {},
        decode(stored) or {},
    )


def _merge(sql: str, params: list) -> dict:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return decode(cursor.fetchone()[0])


def merge_app_state(app_pk: int, delta: dict, removed: tuple[str, ...] = ()) -> dict:
    """Shallow-merge ``delta`` into the app state (creating it), then remove the ``removed``
    keys, row-locked; the new state."""
    return _merge(
        """
        INSERT INTO sessions_app_appstate (app_id, state, updated_at)
        VALUES (%s, %s::jsonb, now())
        ON CONFLICT (app_id) DO UPDATE
           SET state = (sessions_app_appstate.state || EXCLUDED.state) - %s::text[],
               updated_at = now()
        RETURNING state
        """,
        [app_pk, _dumps(_without(delta, removed)), list(removed)],
    )


def merge_user_state(app_pk: int, user_id: str, delta: dict, removed: tuple[str, ...] = ()) -> dict:
    return _merge(
        """
        INSERT INTO sessions_app_userstate (app_id, user_id, state, updated_at)
        VALUES (%s, %s, %s::jsonb, now())
        ON CONFLICT (app_id, user_id) DO UPDATE
           SET state = (sessions_app_userstate.state || EXCLUDED.state) - %s::text[],
               updated_at = now()
        RETURNING state
        """,
        [app_pk, user_id, _dumps(_without(delta, removed)), list(removed)],
    )


def _without(delta: dict, removed: tuple[str, ...]) -> dict:
    return {key: value for key, value in delta.items() if key not in removed}


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
        return [session_pk, self.seq, *self.columns()]

    def columns(self) -> list:
        """The event's own column values, from ``event_id`` to ``content_hash``."""
        event, derived = self.event, self.derived
        return [
            event["event_id"],
            event["invocation_id"],
            event["author"],
            (event["content"] or {}).get("role", ""),
            None if event["content"] is None else _dumps(event["content"]),
            event["turn_complete"],
            _dumps(event["actions"]),
            None if event["usage_metadata"] is None else _dumps(event["usage_metadata"]),
            None if event["custom_metadata"] is None else _dumps(event["custom_metadata"]),
            None if not event.get("adk_fields") else _dumps(event["adk_fields"]),
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
            **(event.get("adk_fields") or {}),
        }


def answered_call_ids(rows: list[NewEvent]) -> list[str]:
    """The function-call ids a batch answers (their tool tokens end with the append)."""
    return sorted({call_id for row in rows for call_id in row.derived.response_ids or ()})


# A tool token ends when its call's answer is stored: a fact written with the answer, so it
# holds even after the events are gone (a ``purge`` compaction). Tokens only answer to calls
# made before the answer, which every stored call is.
END_ANSWERED_TOKENS_SQL = (
    "UPDATE sessions_app_tooltoken SET revoked_at = now(), revoked_reason = 'answered' "
    "WHERE session_id = {session} AND revoked_at IS NULL AND function_call_id = ANY({ids})"
)


def rewound_invocation_ids(rows: list[NewEvent]) -> list[str]:
    """The invocations a batch's rewind events rewind (ADK's ``rewind_before_invocation_id``)."""
    return sorted(
        {
            row.event["actions"]["rewind_before_invocation_id"]
            for row in rows
            if row.event["actions"].get("rewind_before_invocation_id")
        }
    )


def end_rewound_tokens(session_pk: int, invocation_ids: list[str]) -> None:
    """A rewind undoes its invocation and every one after it: the tool tokens of the calls
    it undoes (from the first event of the earliest rewound invocation on) end with it."""
    if not invocation_ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE sessions_app_tooltoken SET revoked_at = now(), revoked_reason = 'rewound' "
            "WHERE session_id = %s AND revoked_at IS NULL AND invocation_id IS NOT NULL "
            "AND call_seq >= (SELECT min(seq) FROM sessions_app_event "
            "WHERE session_id = %s AND invocation_id = ANY(%s))",
            [session_pk, session_pk, invocation_ids],
        )


def end_answered_tokens(session_pk: int, call_ids: list[str]) -> None:
    """End the tool tokens of the answered calls (inside the append's transaction)."""
    if not call_ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            END_ANSWERED_TOKENS_SQL.format(session="%s", ids="%s::varchar[]"),
            [session_pk, call_ids],
        )


_ROW = (
    "(%s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s::jsonb, %s::jsonb, %s::jsonb, %s::jsonb, %s, %s, "
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
                     turn_complete, actions, usage_metadata, custom_metadata, adk_fields,
                     timestamp, kinds,
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


# A row of VALUES for the single-statement append: the ordinal in the batch, then the event's
# own columns (NewEvent.columns).
_FAST_ROW = (
    "(%s::int, %s::varchar, %s::varchar, %s::varchar, %s::varchar, %s::jsonb, %s::boolean, "
    "%s::jsonb, %s::jsonb, %s::jsonb, %s::jsonb, %s::timestamptz, %s::smallint, %s::varchar[], "
    "%s::varchar[], %s::int, %s::int, %s::text, %s::int, %s::varchar)"
)


@dataclass(frozen=True)
class FastAppend:
    """What the single-statement append saw and did. ``applied`` is false when the session is
    missing, the revision is stale, a batch id is stored already or the merged session state
    may be too large: the caller then reports or takes the locking path."""

    found: bool
    applied: bool
    revision: int
    last_seq: int
    repeated_ids: bool
    state: dict
    app_state: dict
    user_state: dict
    session_pk: int = 0
    automatic_compaction: bool = False


def append_in_one_statement(
    app_pk: int,
    user_id: str,
    session_id: str,
    rows: list[NewEvent],
    session_delta: dict,
    expected_revision: int | None,
    state_limit_bytes: int,
    now: datetime,
) -> FastAppend:
    """Lock the session, check the revision and the batch's ids, insert the events and advance
    the session: one statement, so one round trip and its own transaction (autocommit).

    The lock re-reads the newest session row, so ``seq`` and ``revision`` are exact; a
    duplicate id committed between the statement's snapshot and the lock is caught by the
    unique index (the caller retries on the locking path). The merged session state is
    bounded by the length of its ``jsonb`` text, never shorter than its canonical JSON: a
    state this check refuses goes to the locking path for the exact check.
    """
    values: list = []
    for ordinal, row in enumerate(rows, start=1):
        values.append(ordinal)
        values.extend(row.columns())
    delta = _dumps(session_delta)
    answered = answered_call_ids(rows)
    # Only a batch that answers calls ends tokens (a data-modifying CTE always runs).
    ending = (
        ",\n            ended AS ("  # noqa: S608 - constants and placeholders only
        + END_ANSWERED_TOKENS_SQL.format(session="(SELECT id FROM ok)", ids="%s::varchar[]")
        + " AND (SELECT count(*) FROM inserted) > 0 RETURNING 1)"
        if answered
        else ""
    )
    # Inside a caller's transaction, a savepoint keeps a unique violation from aborting it.
    guard = transaction.atomic() if connection.in_atomic_block else nullcontext()
    with guard, connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH s AS (
                SELECT id, app_id, user_id, state, revision, last_seq, compaction_policy
                  FROM sessions_app_session
                 WHERE app_id = %s AND user_id = %s AND session_id = %s
                   FOR UPDATE
            ),
            repeated AS (
                SELECT EXISTS (
                    SELECT 1 FROM sessions_app_event e, s
                     WHERE e.session_id = s.id AND e.event_id = ANY(%s)
                ) AS any
            ),
            ok AS (
                SELECT s.id, s.revision, s.last_seq, s.state || %s::jsonb AS new_state
                  FROM s, repeated
                 WHERE NOT repeated.any
                   AND (%s::bigint IS NULL OR s.revision = %s::bigint)
                   AND octet_length((s.state || %s::jsonb)::text) <= %s
            ),
            inserted AS (
                INSERT INTO sessions_app_event
                    (session_id, seq, event_id, invocation_id, author, role, content,
                     turn_complete, actions, usage_metadata, custom_metadata, adk_fields,
                     timestamp, kinds,
                     call_ids, response_ids, byte_size, context_bytes, context_json,
                     token_estimate, content_hash, created_at)
                SELECT ok.id, ok.last_seq + v.ordinal, v.event_id, v.invocation_id, v.author,
                       v.role, v.content, v.turn_complete, v.actions, v.usage_metadata,
                       v.custom_metadata, v.adk_fields, v.timestamp, v.kinds, v.call_ids,
                       v.response_ids,
                       v.byte_size, v.context_bytes, v.context_json, v.token_estimate,
                       v.content_hash, now()
                  FROM ok, (VALUES {", ".join([_FAST_ROW] * len(rows))}) AS v
                       (ordinal, event_id, invocation_id, author, role, content, turn_complete,
                        actions, usage_metadata, custom_metadata, adk_fields, timestamp, kinds,
                        call_ids,
                        response_ids, byte_size, context_bytes, context_json, token_estimate,
                        content_hash)
                RETURNING 1
            ),
            advanced AS (
                UPDATE sessions_app_session t
                   SET state = ok.new_state, revision = ok.revision + 1,
                       last_seq = ok.last_seq + %s, event_count = t.event_count + %s,
                       total_bytes = t.total_bytes + %s, token_estimate = t.token_estimate + %s,
                       updated_at = %s
                  FROM ok
                 WHERE t.id = ok.id AND (SELECT count(*) FROM inserted) > 0
             RETURNING t.revision, t.state, t.last_seq
            ){ending}
            SELECT s.id, {AUTOMATIC_SQL}, s.revision, repeated.any,
                   (SELECT revision FROM advanced), (SELECT state FROM advanced),
                   (SELECT last_seq FROM advanced),
                   (SELECT a.state FROM sessions_app_appstate a WHERE a.app_id = s.app_id),
                   (SELECT u.state FROM sessions_app_userstate u
                     WHERE u.app_id = s.app_id AND u.user_id = s.user_id)
              FROM s, repeated
            """,  # noqa: S608 - only placeholders are interpolated
            [
                app_pk,
                user_id,
                session_id,
                [row.event["event_id"] for row in rows],
                delta,
                expected_revision,
                expected_revision,
                delta,
                state_limit_bytes,
                *values,
                len(rows),
                len(rows),
                sum(row.derived.byte_size for row in rows),
                sum(row.token_estimate for row in rows),
                now,
                *([answered] if answered else []),
            ],
        )
        found = cursor.fetchone()
    if found is None:
        return FastAppend(False, False, 0, 0, False, {}, {}, {})
    (
        session_pk,
        automatic,
        revision,
        repeated,
        new_revision,
        new_state,
        last_seq,
        app_state,
        user_state,
    ) = found
    applied = new_revision is not None
    return FastAppend(
        session_pk=session_pk,
        automatic_compaction=automatic,
        found=True,
        applied=applied,
        revision=new_revision if applied else revision,
        last_seq=last_seq or 0,
        repeated_ids=repeated,
        state=decode(new_state) if applied else {},
        app_state=decode(app_state) or {},
        user_state=decode(user_state) or {},
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


def hold_session(cursor, session_pk: int) -> None:
    """Take the session row (``FOR KEY SHARE``) in the current transaction, before writing
    one of its checkpoints or its compaction state, as every such writer does. An append
    holds the row while it queues its own check; a writer that wrote first would wait for
    the row in its foreign-key check while the append waited for what it wrote: a deadlock,
    which PostgreSQL breaks by failing one of them."""
    cursor.execute("SELECT 1 FROM sessions_app_session WHERE id = %s FOR KEY SHARE", [session_pk])

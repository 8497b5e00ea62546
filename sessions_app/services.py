"""Writes for sessions: create, append (compare-and-append, idempotent), delete."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from ctxadmin.canonical import canonical_size
from ctxadmin.erasure import lock_user
from ctxadmin.errors import ServiceError, invalid, session_not_found
from ctxadmin.models import App
from ctxadmin.pruning import echoed
from sessions_app import signals, store, telemetry
from sessions_app import state as scopes
from sessions_app.compaction import triggers as compaction
from sessions_app.events import (
    REWIND,
    EventError,
    EventLimits,
    content_hash,
    derive,
    iso_timestamp,
    validate_event,
)
from sessions_app.models import Session
from sessions_app.selectors import scope_states


def event_limits() -> EventLimits:
    return EventLimits(
        max_event_bytes=settings.CTXADMIN_MAX_EVENT_BYTES,
        max_parts=settings.CTXADMIN_MAX_EVENT_PARTS,
        max_inline_data_bytes=settings.CTXADMIN_MAX_INLINE_DATA_BYTES,
    )


def _check_state_size(state: dict, path: str) -> None:
    limit = settings.CTXADMIN_MAX_STATE_BYTES
    if canonical_size(state) > limit:
        raise ServiceError(
            "state_too_large",
            f"{path} would exceed {limit} bytes",
            status_code=422,
            details={"scope": path, "limit_bytes": limit},
        )


def create_session(
    app: App,
    user_id: str,
    session_id: str | None,
    initial_state: dict[str, Any],
    reach: scopes.StateReach = scopes.FULL_REACH,
) -> tuple[Session, dict]:
    """A new session; ``app:``/``user:`` keys of the initial state go to their scopes and
    ``temp:`` keys are dropped (ADK semantics), within the writer's ``reach``. Returns the
    session and its merged state."""
    check_reach(initial_state, reach, "state")
    delta = scopes.split_delta(initial_state)
    _check_state_size(delta.session, "session state")
    session_id = session_id or uuid.uuid4().hex
    try:
        with transaction.atomic():
            session = Session.objects.create(
                app=app, user_id=user_id, session_id=session_id, state=delta.session
            )
            if delta.app:
                _check_state_size(store.merge_app_state(app.pk, delta.app), "app state")
            if delta.user:
                lock_user(app, user_id, shared=True)  # after the user's erasure, or before it
                _check_state_size(store.merge_user_state(app.pk, user_id, delta.user), "user state")
    except IntegrityError:
        raise ServiceError(
            "session_exists",
            "A session with this id already exists for this user.",
            status_code=409,
            details={"session_id": session_id},
        ) from None
    session.refresh_from_db(fields=["created_at", "updated_at"])
    app_state, user_state = scope_states(app, user_id)
    return session, scopes.merged(session.state, app_state, user_state)


@dataclass
class AppendResult:
    events: list[dict]
    created: int
    revision: int
    # The session's last update as stored: this append's time, or unchanged when it stored
    # nothing (ADK's stale-writer check compares it with the session it read).
    updated_at: datetime
    state: dict


def check_reach(keys, reach: scopes.StateReach, field: str) -> None:
    """Refuse (403 ``state_scope_denied`` naming the key and ``field``) state ``keys`` — a
    delta, an initial state, a removal — in a scope the writer does not reach (see
    ``state.StateReach``)."""
    refused = scopes.out_of_reach(dict.fromkeys(keys), reach)
    if refused is None:
        return
    key, scope = refused
    raise ServiceError(
        "state_scope_denied",
        f"{field}: this credential may not write {scope} state ({echoed(key)!r}); "
        + (
            "app: state is written with an API key"
            if scope == "app"
            else "a credential bound to one session writes only that session's state"
        ),
        status_code=403,
        details={"field": field, "key": echoed(key), "scope": scope},
    )


def _check_reach(events: list[dict], reach: scopes.StateReach, path: str) -> None:
    """Refuse, naming the key, an event whose state delta writes a scope the writer does not
    reach; nothing of the batch is stored."""
    for index, event in enumerate(events):
        where = path if path == "event" else f"{path}[{index}]"
        check_reach(
            event["actions"].get("state_delta") or {}, reach, f"{where}.actions.state_delta"
        )


def _validated(raw_events: list, path: str) -> list[dict]:
    limits = event_limits()
    events: list[dict] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_events):
        where = path if path == "event" else f"{path}[{index}]"
        try:
            event = validate_event(raw, where, limits)
        except EventError as exc:
            raise invalid(exc.path, exc.message) from None
        event.setdefault("event_id", uuid.uuid4().hex)
        if event["event_id"] in seen:
            raise invalid(f"{where}.event_id", "is repeated within the batch")
        seen.add(event["event_id"])
        event["hash"] = content_hash(event)
        if (
            canonical_size({k: v for k, v in event.items() if k != "timestamp"})
            > limits.max_event_bytes
        ):
            raise ServiceError(
                "event_too_large",
                f"{where} exceeds {limits.max_event_bytes} bytes",
                status_code=413,
                details={"field": where, "limit_bytes": limits.max_event_bytes},
            )
        events.append(event)
    return events


def append_events(
    app: App,
    user_id: str,
    session_id: str,
    raw_events: list,
    *,
    expected_revision: int | None = None,
    path: str = "events",
    reach: scopes.StateReach = scopes.FULL_REACH,
    state_remove: list[str] | None = None,
) -> AppendResult:
    """Append a batch, all or nothing.

    The session row is locked for the append, so concurrent appenders to one session are
    serialised and lose no update; appenders to other sessions never wait. An event whose
    ``event_id`` is stored already comes back as stored when its content is the same, and is
    a 409 ``event_id_conflict`` otherwise. Partial events are validated and returned, never
    stored. ``expected_revision`` turns the append into a compare-and-append.

    New events without ``app:``/``user:`` deltas or a rewind (the common case) take one
    statement in autocommit: lock, id check, insert, advance. Anything else, or what that statement
    declines (a repeated id, a stale revision, a large state), takes the locking path:
    BEGIN, lock (with the scope states and stored copies of the batch's ids), the scope
    upserts, one insert-and-advance statement, COMMIT.

    ``reach`` is what the writer may write of the shared state scopes: a delta (or a
    removal) outside it is a 403 ``state_scope_denied`` naming the key.

    ``state_remove`` (validated keys) removes state keys of any stored scope after the
    batch's deltas, with the events this append stores (a re-sent batch removes nothing): a
    delta's null stays a stored null, as in ADK. It takes the locking path.
    """
    events = _validated(raw_events, path)
    _check_reach(events, reach, path)
    check_reach(state_remove or [], reach, "state_remove")
    removal = scopes.split_keys(state_remove or [])
    try:
        result = _append_once(app, user_id, session_id, events, expected_revision, removal)
    except IntegrityError as exc:
        # Two requests sent one event_id at once: the second locked the session after the
        # first committed, but its statement snapshot predates that event. Once more, it
        # sees the stored event and takes the idempotent path (or reports the conflict).
        if "event_unique_id" not in str(exc):
            raise
        result = _append_once(app, user_id, session_id, events, expected_revision, removal)
    if result.created and any(compaction.completes_invocation(e) for e in events):
        # The events are stored (committed, or in the caller's transaction): what receivers
        # write joins that transaction.
        signals.invocation_completed.send(
            sender=Session, app=app, user_id=user_id, session_id=session_id
        )
    return result


@dataclass(frozen=True)
class _Prepared:
    """A durable event ready to store: ``temp:`` keys gone, its state delta split by scope."""

    event: dict
    row: store.NewEvent
    delta: scopes.ScopedDelta


def _prepare(durable: list[dict], now) -> list[_Prepared]:
    prepared = []
    for event in durable:
        split = scopes.split_delta(event["actions"].get("state_delta", {}))
        stored = {k: v for k, v in event.items() if k != "actions"}
        stored["actions"] = {k: v for k, v in event["actions"].items() if k != "state_delta"}
        if "state_delta" in event["actions"]:  # temp: keys are never stored
            stored["actions"]["state_delta"] = scopes.without_temp(event["actions"]["state_delta"])
        timestamp = event["timestamp"] or now
        row = store.NewEvent(0, stored, timestamp, derive(stored, timestamp, event["hash"]))
        prepared.append(_Prepared(event, row, split))
    return prepared


def _combined(prepared: list[_Prepared]) -> scopes.ScopedDelta:
    delta = scopes.ScopedDelta()
    for item in prepared:
        delta.app.update(item.delta.app)
        delta.user.update(item.delta.user)
        delta.session.update(item.delta.session)
        delta.temp.update(item.delta.temp)
    return delta


def _append_once(
    app: App,
    user_id: str,
    session_id: str,
    events: list[dict],
    expected_revision: int | None,
    removal: scopes.ScopedDelta,
) -> AppendResult:
    now = timezone.now()
    prepared = _prepare([event for event in events if not event["partial"]], now)
    delta = _combined(prepared)
    removes = removal.app or removal.user or removal.session
    # A rewind ends the tool tokens of what it undoes: the locking path does that.
    rewinds = any(item.row.derived.kinds & REWIND for item in prepared)
    if prepared and not delta.app and not delta.user and not removes and not rewinds:
        result = _append_in_one_statement(
            app, user_id, session_id, events, prepared, delta, expected_revision, now
        )
        if result is not None:
            return result
    return _append_locked(
        app, user_id, session_id, events, prepared, expected_revision, now, removal
    )


def _append_in_one_statement(
    app: App,
    user_id: str,
    session_id: str,
    events: list[dict],
    prepared: list[_Prepared],
    delta: scopes.ScopedDelta,
    expected_revision: int | None,
    now,
) -> AppendResult | None:
    """The common append (new events, no ``app:``/``user:`` deltas) in one round trip; None
    when it needs the locking path (a repeated id, a stale revision, a large state)."""
    outcome = store.append_in_one_statement(
        app.pk,
        user_id,
        session_id,
        [item.row for item in prepared],
        delta.session,
        expected_revision,
        settings.CTXADMIN_MAX_STATE_BYTES,
        now,
    )
    if not outcome.found:
        raise session_not_found(user_id, session_id)
    if not outcome.applied:
        return None
    _after_append(outcome.session_pk, outcome.automatic_compaction, prepared)
    first_seq = outcome.last_seq - len(prepared)
    by_id = {
        item.event["event_id"]: replace(item.row, seq=first_seq + number).as_dict()
        for number, item in enumerate(prepared, start=1)
    }
    return _result(events, by_id, len(prepared), outcome.revision, now, outcome, delta, now)


def _append_locked(
    app: App,
    user_id: str,
    session_id: str,
    events: list[dict],
    prepared: list[_Prepared],
    expected_revision: int | None,
    now,
    removal: scopes.ScopedDelta,
) -> AppendResult:
    """Lock the session row, then decide: stale, repeated (idempotent or conflicting) ids,
    state size; then insert. BEGIN, lock, insert, COMMIT (plus an upsert per changed scope)."""
    with transaction.atomic():
        locked = store.lock_session(
            app.pk, user_id, session_id, [item.event["event_id"] for item in prepared]
        )
        if locked is None:
            raise session_not_found(user_id, session_id)
        fresh: list[_Prepared] = []
        repeated: list[str] = []
        conflicting: list[str] = []
        for item in prepared:
            event_id = item.event["event_id"]
            previous_hash = locked.stored_hashes.get(event_id)
            if previous_hash is None:
                fresh.append(item)
            elif previous_hash != item.event["hash"]:
                conflicting.append(event_id)
            else:
                repeated.append(event_id)
        # A batch that is wholly a re-send of stored events is answered as stored whatever
        # revision it names: the retry of an append whose answer was lost is not a stale write.
        retry = len(repeated) == len(events)
        if expected_revision is not None and expected_revision != locked.revision and not retry:
            raise ServiceError(
                "stale_session",
                "The session has changed since the revision you read; nothing was written.",
                status_code=409,
                details={
                    "expected_revision": expected_revision,
                    "current_revision": locked.revision,
                },
            )
        if conflicting:
            raise ServiceError(
                "event_id_conflict",
                "An event with this event_id is stored with different content.",
                status_code=409,
                details={"event_id": conflicting[0]},
            )
        delta = _combined(fresh)
        rows = [
            replace(item.row, seq=locked.last_seq + number)
            for number, item in enumerate(fresh, start=1)
        ]
        states = store.ScopeStates(locked.state, locked.app_state, locked.user_state)
        revision, updated_at = locked.revision, locked.updated_at
        if rows:
            if delta.session or removal.session:
                kept = {**states.state, **delta.session}
                states.state = scopes.without_keys(kept, removal.session)
                _check_state_size(states.state, "session state")
            if delta.app or removal.app:
                states.app_state = store.merge_app_state(app.pk, delta.app, tuple(removal.app))
                _check_state_size(states.app_state, "app state")
            if delta.user or removal.user:
                lock_user(app, user_id, shared=True)  # after the user's erasure, or before it
                states.user_state = store.merge_user_state(
                    app.pk, user_id, delta.user, tuple(removal.user)
                )
                _check_state_size(states.user_state, "user state")
            store.insert_events(locked.pk, rows, states.state, now)
            store.end_answered_tokens(locked.pk, store.answered_call_ids(rows))
            store.end_rewound_tokens(locked.pk, store.rewound_invocation_ids(rows))
            revision, updated_at = revision + 1, now
            _after_append(locked.pk, locked.automatic_compaction, fresh)
        by_id = store.stored_events(locked.pk, repeated)
    by_id.update((row.event["event_id"], row.as_dict()) for row in rows)
    return _result(events, by_id, len(rows), revision, updated_at, states, delta, now)


def _after_append(session_pk: int, automatic: bool, appended: list[_Prepared]) -> None:
    """An append that completes an invocation queues an automatic compaction check where
    the session's policy asks for one."""
    if automatic and any(compaction.completes_invocation(item.event) for item in appended):
        compaction.request_automatic(session_pk)


def _result(
    events: list[dict],
    by_id: dict[str, dict],
    created: int,
    revision: int,
    updated_at: datetime,
    states,
    delta: scopes.ScopedDelta,
    now,
) -> AppendResult:
    """The response: every event of the request in its order (partial ones unstored), and the
    merged state with this append's ``temp:`` keys."""
    if created:
        telemetry.EVENTS_APPENDED.inc(created)
    returned = [_unstored(e, now) if e["partial"] else by_id[e["event_id"]] for e in events]
    state = scopes.merged(states.state, states.app_state, states.user_state)
    state.update(delta.temp)
    return AppendResult(
        events=returned, created=created, revision=revision, updated_at=updated_at, state=state
    )


def _unstored(event: dict, now) -> dict:
    return {
        "event_id": event["event_id"],
        "seq": None,
        "invocation_id": event["invocation_id"],
        "author": event["author"],
        "content": event["content"],
        "partial": True,
        "turn_complete": event["turn_complete"],
        "actions": event["actions"],
        "timestamp": iso_timestamp(event["timestamp"] or now),
        "usage_metadata": event["usage_metadata"],
        "custom_metadata": event["custom_metadata"],
        "stored": False,
        **(event["adk_fields"] or {}),
    }


def delete_session(app: App, user_id: str, session_id: str) -> None:
    """Remove the session with its events (and, later, checkpoints); app and user state stay."""
    deleted, _ = Session.objects.filter(app=app, user_id=user_id, session_id=session_id).delete()
    if not deleted:
        raise session_not_found(user_id, session_id)

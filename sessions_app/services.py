"""Writes for sessions: create, append (compare-and-append, idempotent), delete."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from ctxadmin.api.errors import ApiError
from ctxadmin.canonical import canonical_size
from ctxadmin.models import App
from sessions_app import state as scopes
from sessions_app import telemetry
from sessions_app.events import (
    EventError,
    EventLimits,
    content_hash,
    derive,
    estimate_tokens,
    validate_event,
)
from sessions_app.models import AppState, Event, Session, UserState
from sessions_app.selectors import event_dict, scope_states


def event_limits() -> EventLimits:
    return EventLimits(
        max_event_bytes=settings.CTXADMIN_MAX_EVENT_BYTES,
        max_parts=settings.CTXADMIN_MAX_EVENT_PARTS,
        max_inline_data_bytes=settings.CTXADMIN_MAX_INLINE_DATA_BYTES,
    )


def invalid(path: str, message: str) -> ApiError:
    return ApiError("validation_error", f"{path}: {message}", details={"field": path})


def not_found() -> ApiError:
    return ApiError("not_found", "Not found.", status_code=404)


def _check_state_size(state: dict, path: str) -> None:
    limit = settings.CTXADMIN_MAX_STATE_BYTES
    if canonical_size(state) > limit:
        raise ApiError(
            "state_too_large",
            f"{path} would exceed {limit} bytes",
            status_code=422,
            details={"scope": path, "limit_bytes": limit},
        )


def _apply_scope_deltas(app: App, user_id: str, delta: scopes.ScopedDelta) -> None:
    """Lock and update the app/user state rows — only when the delta touches them, so
    appends without such keys never wait on each other (lock order: app, then user)."""
    if delta.app:
        AppState.objects.bulk_create([AppState(app=app)], ignore_conflicts=True)
        row = AppState.objects.select_for_update().get(app=app)
        row.state.update(delta.app)
        _check_state_size(row.state, "app state")
        row.save(update_fields=["state", "updated_at"])
    if delta.user:
        UserState.objects.bulk_create([UserState(app=app, user_id=user_id)], ignore_conflicts=True)
        row = UserState.objects.select_for_update().get(app=app, user_id=user_id)
        row.state.update(delta.user)
        _check_state_size(row.state, "user state")
        row.save(update_fields=["state", "updated_at"])


def create_session(
    app: App, user_id: str, session_id: str | None, initial_state: dict[str, Any]
) -> tuple[Session, dict]:
    """A new session; ``app:``/``user:`` keys of the initial state go to their scopes and
    ``temp:`` keys are dropped (ADK semantics). Returns the session and its merged state."""
    delta = scopes.split_delta(initial_state)
    _check_state_size(delta.session, "session state")
    session_id = session_id or uuid.uuid4().hex
    try:
        with transaction.atomic():
            session = Session.objects.create(
                app=app, user_id=user_id, session_id=session_id, state=delta.session
            )
            _apply_scope_deltas(app, user_id, delta)
    except IntegrityError:
        raise ApiError(
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
    state: dict


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
            raise ApiError(
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
) -> AppendResult:
    """Append a batch, all or nothing.

    The session row is locked for the append, so concurrent appenders to one session are
    serialised and lose no update; appenders to other sessions never wait. An event whose
    ``event_id`` is stored already comes back as stored when its content is the same, and is
    a 409 ``event_id_conflict`` otherwise. Partial events are validated and returned, never
    stored. ``expected_revision`` turns the append into a compare-and-append.
    """
    events = _validated(raw_events, path)
    temp: dict[str, Any] = {}  # temp: keys of the events stored now, for the response only
    durable = [event for event in events if not event["partial"]]
    now = timezone.now()
    with transaction.atomic():
        session = (
            Session.objects.select_for_update()
            .filter(app=app, user_id=user_id, session_id=session_id)
            .first()
        )
        if session is None:
            raise not_found()
        if expected_revision is not None and expected_revision != session.revision:
            raise ApiError(
                "stale_session",
                "The session has changed since the revision you read; nothing was written.",
                status_code=409,
                details={
                    "expected_revision": expected_revision,
                    "current_revision": session.revision,
                },
            )
        stored = (
            {
                row["event_id"]: row
                for row in Event.objects.filter(
                    session=session, event_id__in=[event["event_id"] for event in durable]
                ).values()
            }
            if durable
            else {}
        )
        rows: list[Event] = []
        delta = scopes.ScopedDelta()
        for event in durable:
            previous = stored.get(event["event_id"])
            if previous is not None:
                if previous["content_hash"] != event["hash"]:
                    raise ApiError(
                        "event_id_conflict",
                        "An event with this event_id is stored with different content.",
                        status_code=409,
                        details={"event_id": event["event_id"]},
                    )
                continue
            split = scopes.split_delta(event["actions"].get("state_delta", {}))
            delta.app.update(split.app)
            delta.user.update(split.user)
            delta.session.update(split.session)
            temp.update(split.temp)
            if "state_delta" in event["actions"]:
                kept = scopes.without_temp(event["actions"]["state_delta"])
                event["actions"] = (
                    {**event["actions"], "state_delta": kept}
                    if kept
                    else {k: v for k, v in event["actions"].items() if k != "state_delta"}
                )
            timestamp = event["timestamp"] or now
            derived = derive(event, timestamp, event["hash"])
            session.last_seq += 1
            rows.append(
                Event(
                    session=session,
                    seq=session.last_seq,
                    event_id=event["event_id"],
                    invocation_id=event["invocation_id"],
                    author=event["author"],
                    role=(event["content"] or {}).get("role", ""),
                    content=event["content"],
                    turn_complete=event["turn_complete"],
                    actions=event["actions"],
                    usage_metadata=event["usage_metadata"],
                    custom_metadata=event["custom_metadata"],
                    timestamp=timestamp,
                    kinds=derived.kinds,
                    call_ids=derived.call_ids,
                    response_ids=derived.response_ids,
                    byte_size=derived.byte_size,
                    context_bytes=derived.context_bytes,
                    token_estimate=estimate_tokens(derived.byte_size),
                    content_hash=derived.content_hash,
                )
            )
        if rows:
            if delta.session:
                session.state.update(delta.session)
                _check_state_size(session.state, "session state")
            _apply_scope_deltas(app, user_id, delta)
            Event.objects.bulk_create(rows)
            telemetry.EVENTS_APPENDED.inc(len(rows))
            session.revision += 1
            session.event_count += len(rows)
            session.total_bytes += sum(row.byte_size for row in rows)
            session.token_estimate += sum(row.token_estimate for row in rows)
            session.updated_at = now
            session.save(
                update_fields=[
                    "state",
                    "revision",
                    "last_seq",
                    "event_count",
                    "total_bytes",
                    "token_estimate",
                    "updated_at",
                ]
            )
        app_state, user_state = scope_states(app, user_id)

    by_id = {row.event_id: row for row in rows}
    returned = []
    for event in events:
        if event["partial"]:
            returned.append(_unstored(event, now))
        elif event["event_id"] in by_id:
            returned.append(event_dict(_row_values(by_id[event["event_id"]])))
        else:
            returned.append(event_dict(stored[event["event_id"]]))
    state = scopes.merged(session.state, app_state, user_state)
    state.update(temp)
    return AppendResult(events=returned, created=len(rows), revision=session.revision, state=state)


def _row_values(row: Event) -> dict:
    return {field.attname: getattr(row, field.attname) for field in Event._meta.concrete_fields}


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
        "timestamp": (event["timestamp"] or now).isoformat(),
        "usage_metadata": event["usage_metadata"],
        "custom_metadata": event["custom_metadata"],
        "stored": False,
    }


def delete_session(app: App, user_id: str, session_id: str) -> None:
    """Remove the session with its events (and, later, checkpoints); app and user state stay."""
    deleted, _ = Session.objects.filter(app=app, user_id=user_id, session_id=session_id).delete()
    if not deleted:
        raise not_found()

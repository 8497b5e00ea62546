"""ADK's data model to and from ctxadmin's JSON (pure: no I/O).

An ADK ``Event`` travels as ``Event.model_dump(mode="json", exclude_none=True)`` writes it,
with ``id`` sent as ``event_id`` and ``timestamp`` as float seconds; ctxadmin keeps every
field it does not interpret as given. On the way back the server's own fields (``seq``,
sizes, the content hash) are dropped, null fields left unset, ``partial: false`` (every
stored event's) left unset as ADK leaves it, and the timestamps read as float seconds again
(ctxadmin keeps microseconds, as ADK's ``DatabaseSessionService`` does).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from google.genai import types

#: What the server adds to a stored event; never part of ADK's ``Event``.
SERVER_EVENT_FIELDS = frozenset(
    {"seq", "byte_size", "token_estimate", "content_hash", "stored", "hidden"}
)


def session_id(value: str) -> str:
    """A session id as every call sends it: without surrounding whitespace, as ADK's own
    session services take it (``'order-42\\n'`` is ``order-42``; ctxadmin's ids hold none)."""
    return value.strip()


def seconds(value: Any) -> float:
    """Float seconds since the epoch from ctxadmin's ISO 8601 text or a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        return datetime.fromisoformat(value).timestamp()
    raise ValueError(f"not a timestamp: {type(value).__name__}")


def event_to_wire(event: Event) -> dict[str, Any]:
    """The append body of one event."""
    wire = event.model_dump(mode="json", exclude_none=True)
    wire["event_id"] = wire.pop("id")
    wire["timestamp"] = event.timestamp
    return wire


def event_from_wire(doc: Mapping[str, Any]) -> Event:
    """The ADK event a stored event stands for."""
    data = {
        key: value
        for key, value in doc.items()
        if key not in SERVER_EVENT_FIELDS and value is not None
    }
    # A stored event is never partial: ctxadmin answers false where ADK leaves it unset.
    if data.get("partial") is False:
        del data["partial"]
    if "event_id" in data:
        data["id"] = data.pop("event_id")
    if "timestamp" in data:
        data["timestamp"] = seconds(data["timestamp"])
    return Event.model_validate(data)


def revision_of(session: Session) -> int | None:
    """The stored revision a session object was read at (``None``: not read from ctxadmin)."""
    marker = session._storage_update_marker
    if marker is None:
        return None
    try:
        return int(marker)
    except ValueError:
        return None


def session_from_wire(app_name: str, doc: Mapping[str, Any], *, with_events: bool) -> Session:
    """An ADK session from ctxadmin's session JSON (state already merged with its ``app:``
    and ``user:`` keys by the server)."""
    events = [event_from_wire(item) for item in doc.get("events") or ()] if with_events else []
    session = Session(
        id=doc["session_id"],
        app_name=app_name,
        user_id=doc["user_id"],
        state=dict(doc.get("state") or {}),
        events=events,
        last_update_time=seconds(doc["updated_at"]),
    )
    if doc.get("revision") is not None:
        session._storage_update_marker = str(doc["revision"])
    return session


def user_state(merged: Mapping[str, Any]) -> dict[str, Any]:
    """The ``user:`` keys of a merged state, without their prefix (ADK's ``get_user_state``)."""
    return {
        key.removeprefix(State.USER_PREFIX): value
        for key, value in merged.items()
        if key.startswith(State.USER_PREFIX)
    }


def text_of(content: types.Content | None) -> str:
    """The text parts of a content, joined by blank lines."""
    if content is None or not content.parts:
        return ""
    return "\n\n".join(part.text for part in content.parts if part.text)

"""The summary events ctxadmin's own compactions store, taken into an ADK session object.

A compaction on the server (a context build's ``compress``, or automatic compaction after
appends) stores its summary as an ADK compaction event (``actions.compaction``), which
advances the session's revision. An ADK session object read before it would then be refused
as stale on its next append, though no other writer wrote. ``take_server_compactions`` adds
those events to the session object with the revision they made, when they are all that
changed; a session another writer appended to stays stale.
"""

from __future__ import annotations

from google.adk.sessions.session import Session

from ctxadmin_client import AsyncClient
from ctxadmin_client.adk import _wire

#: How many of the newest stored events are read to find them (compactions of one session
#: do not run concurrently, so one or two are the usual count).
RECENT_EVENTS = 8


async def take_server_compactions(client: AsyncClient, app: str, session: Session) -> bool:
    """Whether the session object now holds every event stored since it was read (each a
    server compaction's summary) and their revision."""
    revision = _wire.revision_of(session)
    if revision is None:
        return False
    doc = await client.get_session(
        app, session.user_id, _wire.session_id(session.id), num_recent_events=RECENT_EVENTS
    )
    known = {event.id for event in session.events}
    new = [_wire.event_from_wire(e) for e in doc["events"] if e["event_id"] not in known]
    if not new or doc["revision"] != revision + len(new):
        return False
    if not all(event.actions.compaction for event in new):
        return False
    session.events.extend(new)
    session._storage_update_marker = str(doc["revision"])
    session.last_update_time = _wire.seconds(doc["updated_at"])
    return True

"""``CtxAdminMemoryService``: Google ADK's ``BaseMemoryService`` on ctxadmin's memory.

Sessions and event deltas become memories through ``POST .../memories/events`` (the user's
and the model's text; one memory per event, idempotent: adding a session again adds only its
new events). Explicit ``MemoryEntry`` items are added as memories of their text. Search is
ctxadmin's hybrid (lexical + vector) search in the (app, user) scope: another user's memory
is never found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.adk.events.event import Event
from google.adk.memory import _utils as memory_utils
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session
from google.genai import types
from typing_extensions import override

from ctxadmin_client import errors
from ctxadmin_client.adk import _wire
from ctxadmin_client.adk._connection import ConnectedService, refusing_invalid_input

#: At most this many events go in one request (the API's batch limit).
EVENTS_PER_REQUEST = 500
#: As many hits as ADK's in-memory service returns at most.
SEARCH_LIMIT = 10


class CtxAdminMemoryService(ConnectedService, BaseMemoryService):
    """ADK memory stored and searched in ctxadmin.

    ``search_mode``: ``hybrid`` (the default), ``lexical`` or ``vector``; ``search_limit``:
    hits per search (1-100, default 10).
    """

    def __init__(
        self,
        base_url: Any = None,
        api_key: str | None = None,
        *,
        search_mode: str | None = None,
        search_limit: int = SEARCH_LIMIT,
        **options: Any,
    ) -> None:
        super().__init__(base_url, api_key, **options)
        self.search_mode = search_mode
        self.search_limit = search_limit

    @override
    @refusing_invalid_input
    async def add_session_to_memory(self, session: Session) -> None:
        await self.add_events_to_memory(
            app_name=session.app_name,
            user_id=session.user_id,
            events=session.events,
            session_id=session.id,
        )

    @override
    @refusing_invalid_input
    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Events with text become memories, with ``custom_metadata`` as their metadata (beside
        the ``role`` and ``source`` ctxadmin sets); the others are skipped. Adding an event
        again adds nothing (it is keyed by session and event id, or by event id alone)."""
        wanted = [
            _wire.event_to_wire(event)
            for event in events
            if not event.partial and event.content and event.content.parts
        ]
        for start in range(0, len(wanted), EVENTS_PER_REQUEST):
            await self.client.add_events_to_memory(
                self._app(app_name),
                user_id,
                wanted[start : start + EVENTS_PER_REQUEST],
                session_id=_wire.session_id(session_id) if session_id else None,
                custom_metadata=dict(custom_metadata) if custom_metadata else None,
            )

    @override
    @refusing_invalid_input
    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Each entry's text becomes one memory with the entry's ``custom_metadata`` (over the
        call's); an entry with an ``id`` is added idempotently under that id."""
        for entry in memories:
            text = _wire.text_of(entry.content)
            if not text:
                raise ValueError("a memory entry needs text content")
            metadata = {**(custom_metadata or {}), **entry.custom_metadata}
            provenance = {
                key: value
                for key, value in (("author", entry.author), ("timestamp", entry.timestamp))
                if value
            }
            await self.client.add_memory(
                self._app(app_name),
                user_id,
                text,
                metadata=metadata or None,
                idempotency_key=f"adk:{entry.id}" if entry.id else None,
                **({"provenance": provenance} if provenance else {}),
            )

    @override
    @refusing_invalid_input
    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        if not query.strip():
            return SearchMemoryResponse()
        answer = await self.client.search_memory(
            self._app(app_name),
            user_id,
            query,
            mode=self.search_mode,
            limit=self.search_limit,
        )
        return SearchMemoryResponse(memories=[_entry(hit) for hit in _hits(answer)])

    @override
    @refusing_invalid_input
    async def delete_memory(
        self, *, app_name: str, user_id: str, memory_id: str | None = None
    ) -> None:
        if not memory_id:
            return
        try:
            await self.client.delete_memory(self._app(app_name), user_id, memory_id)
        except errors.NotFoundError:
            return


def _hits(answer: Any) -> list[dict]:
    if isinstance(answer, list):
        return answer
    return list(answer.get("results") or answer.get("hits") or [])


def _entry(hit: Mapping[str, Any]) -> MemoryEntry:
    """A search hit as ADK's memory entry: its text as one part in the role it was said in
    (a memory made from an event keeps it; otherwise the user's when a user said it, the
    model's when an agent did), the event's time as ADK writes it, and the memory's own
    metadata (without the ``role`` and ``source`` ctxadmin records for an event's memory)."""
    provenance = hit.get("provenance") or {}
    metadata = dict(hit.get("metadata") or {})
    author = provenance.get("author")
    when = provenance.get("timestamp") or hit.get("timestamp")
    role = "user" if author in (None, "user") else "model"
    if provenance.get("event_id") and metadata.get("source") == "session":
        role = metadata.pop("role", role)
        metadata.pop("source")
        if when:
            when = memory_utils.format_timestamp(_wire.seconds(when))
    return MemoryEntry(
        id=str(hit["id"]),
        content=types.Content(role=role, parts=[types.Part(text=hit["content"])]),
        author=author,
        timestamp=when,
        custom_metadata=metadata,
    )

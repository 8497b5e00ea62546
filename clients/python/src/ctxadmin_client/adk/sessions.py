"""``CtxAdminSessionService``: Google ADK's ``BaseSessionService`` on ctxadmin.

A drop-in for ``DatabaseSessionService``: sessions, events and the ``app:``/``user:``/session
state scopes live in ctxadmin; ``temp:`` keys stay in the in-memory session and are never
sent. A session read from ctxadmin remembers the revision it was read at, and each append
sends it as ``expected_revision``: a writer holding a superseded copy gets ADK's
``StaleSessionError`` and nothing is written, as with ADK's database service. The summary
events of ctxadmin's own compactions (automatic, or a context build's ``compress``) are not
another writer: an append that finds only those stored since joins them and goes on.
"""

from __future__ import annotations

from typing import Any

from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from typing_extensions import override

from ctxadmin_client import errors
from ctxadmin_client.adk import _wire
from ctxadmin_client.adk._compactions import take_server_compactions
from ctxadmin_client.adk._connection import ConnectedService, refusing_invalid_input

STALE_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


class CtxAdminSessionService(ConnectedService, BaseSessionService):
    """ADK sessions stored in ctxadmin.

    ``CtxAdminSessionService(base_url, api_key)`` or ``CtxAdminSessionService(client=...)``
    with a ready ``ctxadmin_client.AsyncClient``; ``app=``: the ctxadmin app to use whatever
    app name ADK passes.
    """

    #: The page size of the lists read whole (sessions, a long session's events): the
    #: server's default ``CTXADMIN_MAX_PAGE_SIZE``, so each page is one round trip of as
    #: many items as a deployment allows by default.
    page_size = 200

    @override
    @refusing_invalid_input
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        session_id = _wire.session_id(session_id or "") or None
        try:
            doc = await self.client.create_session(
                self._app(app_name), user_id, session_id=session_id, state=state or {}
            )
        except errors.SessionExistsError:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        return _wire.session_from_wire(app_name, doc, with_events=False)

    @override
    @refusing_invalid_input
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        session_id = _wire.session_id(session_id)
        recent = config.num_recent_events if config else None
        after = config.after_timestamp if config else None
        app = self._app(app_name)
        try:
            doc = await self.client.get_session(
                app, user_id, session_id, num_recent_events=recent, after_timestamp=after
            )
            if doc.get("events_complete") is False:
                doc = {**doc, "events": await self._all_events(app, user_id, session_id, after)}
        except errors.NotFoundError:
            return None
        session = _wire.session_from_wire(app_name, doc, with_events=True)
        if recent is not None and len(session.events) > recent:
            session.events = session.events[-recent:] if recent else []
        return session

    async def _all_events(
        self, app: str, user_id: str, session_id: str, after: float | None
    ) -> list[dict]:
        """Every event of a session longer than one read returns, by pages."""
        filters: dict[str, Any] = {"include_hidden": "true"}
        if after is not None:
            filters["after_timestamp"] = after
        events = self.client.list_events(app, user_id, session_id, limit=self.page_size, **filters)
        return [event async for event in events]

    @override
    @refusing_invalid_input
    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """Without events, with merged state; oldest update first (ties by user, then id)."""
        items = self.client.list_sessions(
            self._app(app_name),
            user_id=user_id,
            include_state=True,
            order="asc",
            limit=self.page_size,
        )
        sessions = [
            _wire.session_from_wire(app_name, item, with_events=False) async for item in items
        ]
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    @override
    @refusing_invalid_input
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        try:
            await self.client.delete_session(
                self._app(app_name), user_id, _wire.session_id(session_id)
            )
        except errors.NotFoundError:
            return

    @override
    @refusing_invalid_input
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        answer = await self.client.get_user_state(self._app(app_name), user_id)
        return _wire.user_state(answer.get("state") or {})

    async def _append(self, app: str, session: Session, wire: dict) -> dict:
        try:
            return await self.client.append_event(
                app,
                session.user_id,
                _wire.session_id(session.id),
                wire,
                expected_revision=_wire.revision_of(session),
            )
        except errors.NotFoundError:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None

    @override
    @refusing_invalid_input
    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        # As ADK's base class: temp: keys reach the in-memory session, never storage.
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        app = self._app(session.app_name)
        wire = _wire.event_to_wire(event)
        try:
            answer = await self._append(app, session, wire)
        except errors.StaleSessionError:
            # A compaction on the server stored its summary meanwhile: take it, then retry.
            if not await take_server_compactions(self.client, app, session):
                raise StaleSessionError(STALE_MESSAGE) from None
            try:
                answer = await self._append(app, session, wire)
            except errors.StaleSessionError:
                raise StaleSessionError(STALE_MESSAGE) from None
        session._storage_update_marker = str(answer["revision"])
        updated = answer.get("updated_at")
        session.last_update_time = _wire.seconds(updated) if updated else event.timestamp
        if answer.get("created") in (0, False) and any(e.id == event.id for e in session.events):
            # The same event delivered again: stored once, applied once (as ADK's services do).
            return event
        return self._commit_event_to_session(session, event)

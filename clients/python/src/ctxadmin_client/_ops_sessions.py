"""Sessions, events, state, the context builder and compaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._base import B, D, L, N, Runners
from ._calls import Call, body, path, query, session_path, user_path

Event = Mapping[str, Any]


class SessionOperations(Runners[D, L, N, B]):
    # ------------------------------------------------------------------ sessions
    def create_session(
        self,
        app: str,
        user_id: str,
        *,
        session_id: str | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> D:
        """Create a session (a taken ``session_id`` is :class:`SessionExistsError`)."""
        return self._one(
            Call(
                "POST",
                user_path(app, user_id, "sessions"),
                json=body(session_id=session_id, state=state),
            )
        )

    def get_session(
        self,
        app: str,
        user_id: str,
        session_id: str,
        *,
        num_recent_events: int | None = None,
        after_timestamp: float | str | None = None,
        include_hidden: bool | None = None,
    ) -> D:
        """The session with its state and (recent) events."""
        params = query(
            num_recent_events=num_recent_events,
            after_timestamp=after_timestamp,
            include_hidden=include_hidden,
        )
        return self._one(Call("GET", session_path(app, user_id, session_id), params=params))

    def list_sessions(
        self,
        app: str,
        *,
        user_id: str | None = None,
        include_state: bool = False,
        order: str | None = None,
        limit: int | None = None,
    ) -> L:
        """Every session of the app (or of ``user_id``), across pages; ``order`` is
        ``asc`` or ``desc``; ``include_state`` adds each session's state."""
        params = query(
            user_id=user_id,
            include="state" if include_state else None,
            order=order,
            limit=limit,
        )
        return self._many(Call("GET", path(app, "sessions"), params=params))

    def list_user_sessions(self, app: str, user_id: str, *, limit: int | None = None) -> L:
        """A user's sessions, newest activity first, across pages."""
        return self._many(
            Call("GET", user_path(app, user_id, "sessions"), params=query(limit=limit))
        )

    def delete_session(self, app: str, user_id: str, session_id: str) -> N:
        return self._none(Call("DELETE", session_path(app, user_id, session_id)))

    # ------------------------------------------------------------------ events and state
    def append_events(
        self,
        app: str,
        user_id: str,
        session_id: str,
        events: Sequence[Event],
        *,
        expected_revision: int | None = None,
        state_remove: Sequence[str] | None = None,
    ) -> D:
        """Append a batch (all or nothing). Retried on transient failures only when every
        event carries an ``event_id`` (the server then answers a repeat with the stored
        events). ``state_remove`` removes state keys (a delta's None is a stored null)."""
        events = list(events)
        remove = None if state_remove is None else list(state_remove)
        return self._one(
            Call(
                "POST",
                session_path(app, user_id, session_id, "events"),
                json=body(events=events, expected_revision=expected_revision, state_remove=remove),
                idempotent=bool(events) and all(e.get("event_id") for e in events),
            )
        )

    def append_event(
        self,
        app: str,
        user_id: str,
        session_id: str,
        event: Event,
        *,
        expected_revision: int | None = None,
        state_remove: Sequence[str] | None = None,
    ) -> D:
        """Append one event (see :meth:`append_events`)."""
        remove = None if state_remove is None else list(state_remove)
        return self._one(
            Call(
                "POST",
                session_path(app, user_id, session_id, "events"),
                json=body(
                    event=dict(event), expected_revision=expected_revision, state_remove=remove
                ),
                idempotent=bool(event.get("event_id")),
            )
        )

    def list_events(
        self, app: str, user_id: str, session_id: str, *, limit: int | None = None, **filters: Any
    ) -> L:
        """The session's events across pages. ``filters`` are the API's query parameters
        (``authors``, ``exclude_authors``, ``invocation_ids``, ``content_types``,
        ``after_timestamp``, ``before_timestamp``, ``final_only``, ``include_hidden``, …);
        lists are sent comma-separated."""
        params = query(limit=limit, **filters)
        return self._many(
            Call("GET", session_path(app, user_id, session_id, "events"), params=params)
        )

    def get_session_state(self, app: str, user_id: str, session_id: str) -> D:
        return self._one(Call("GET", session_path(app, user_id, session_id, "state")))

    def get_user_state(self, app: str, user_id: str) -> D:
        return self._one(Call("GET", user_path(app, user_id, "state")))

    # ------------------------------------------------------------------ context
    def build_context(
        self,
        app: str,
        user_id: str,
        session_id: str,
        *,
        current_input: Mapping[str, Any],
        instructions: str | None = None,
        generation_config: Mapping[str, Any] | None = None,
        tools: Sequence[Any] | None = None,
        policy: Mapping[str, Any] | None = None,
        memory: Mapping[str, Any] | None = None,
        **extra: Any,
    ) -> D:
        """The bounded, secret-free request for the next model call (stores nothing, so it
        is retried on transient failures)."""
        return self._one(
            Call(
                "POST",
                session_path(app, user_id, session_id, "context"),
                json=body(
                    current_input=current_input,
                    instructions=instructions,
                    generation_config=generation_config,
                    tools=None if tools is None else list(tools),
                    policy=policy,
                    memory=memory,
                    **extra,
                ),
                idempotent=True,
            )
        )

    # ------------------------------------------------------------------ compaction
    def request_compaction(
        self,
        app: str,
        user_id: str,
        session_id: str,
        *,
        asynchronous: bool | None = None,
        **fields: Any,
    ) -> D:
        """Request a compaction now. ``asynchronous`` is the body's ``async``; ``fields``
        are the rest (``compaction_id``, ``timeout_ms``, ``expected_head``,
        ``source_event_ids``)."""
        return self._one(
            Call(
                "POST",
                session_path(app, user_id, session_id, "compactions"),
                json=body(**{"async": asynchronous}, **fields),
            )
        )

    def list_compactions(
        self, app: str, user_id: str, session_id: str, *, limit: int | None = None
    ) -> L:
        return self._many(
            Call(
                "GET",
                session_path(app, user_id, session_id, "compactions"),
                params=query(limit=limit),
            )
        )

    def get_compaction(self, app: str, user_id: str, session_id: str, compaction_id: str) -> D:
        return self._one(
            Call("GET", session_path(app, user_id, session_id, "compactions", compaction_id))
        )

    def get_app_compaction_policy(self, app: str) -> D:
        return self._one(Call("GET", path(app, "compaction-policy")))

    def set_app_compaction_policy(self, app: str, **policy: Any) -> D:
        return self._one(Call("PUT", path(app, "compaction-policy"), json=policy))

    def delete_app_compaction_policy(self, app: str) -> N:
        return self._none(Call("DELETE", path(app, "compaction-policy")))

    def get_session_compaction_policy(self, app: str, user_id: str, session_id: str) -> D:
        """The session's effective policy."""
        return self._one(Call("GET", session_path(app, user_id, session_id, "compaction-policy")))

    def set_session_compaction_policy(
        self, app: str, user_id: str, session_id: str, **policy: Any
    ) -> D:
        """Set the session's own override."""
        return self._one(
            Call("PUT", session_path(app, user_id, session_id, "compaction-policy"), json=policy)
        )

    def delete_session_compaction_policy(self, app: str, user_id: str, session_id: str) -> N:
        """Drop the session's override."""
        return self._none(
            Call("DELETE", session_path(app, user_id, session_id, "compaction-policy"))
        )

"""``CtxAdminSession``: the OpenAI Agents SDK's ``Session`` on a ctxadmin session.

The SDK's conversation items are stored one per event, verbatim (see ``_items``), in the
ctxadmin session ``session_id`` of ``user_id`` in ``app``; the session is created by the
first ``add_items``. ``pop_item`` is a compare-and-set: it reads the session's revision with
the newest item and appends the rewind that removes it with ``expected_revision``, so two
concurrent pops never return the same item (the loser reads again). ``clear_session``
deletes the ctxadmin session.

It is also the SDK's ``OpenAIResponsesCompactionAwareSession``: ``run_compaction`` asks
ctxadmin to compact the session with its compaction policy (no OpenAI call), and reads
then answer each of ctxadmin's summaries, as one assistant message, in place of the items
it covers.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from agents.items import TResponseInputItem
from agents.memory import OpenAIResponsesCompactionArgs
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from ctxadmin_client import AsyncClient, errors
from ctxadmin_client.openai_agents import _items

#: The compaction answers that mean "nothing to do now", not a failure.
NOTHING_TO_COMPACT = frozenset({"nothing_to_compact", "ineffective_compaction"})


def _enough(entries: list[_items.Entry], newest: int) -> bool:
    """Whether the history read from the newest events holds its last ``newest`` entries:
    as many, and no summary among them before the first stored item read (a summary whose
    covered span ends before the events read stands before items not read yet)."""
    first_item = next(
        (i for i, entry in enumerate(entries) if entry.event_id is not None), len(entries)
    )
    return len(entries) >= newest and first_item <= len(entries) - newest


class CtxAdminSession:
    """An OpenAI Agents SDK session stored in ctxadmin (the SDK's ``Session`` protocol, and
    its ``OpenAIResponsesCompactionAwareSession``).

    ``CtxAdminSession(session_id, user_id=..., app=..., base_url=..., api_key=...)``, or
    ``client=`` a ready ``ctxadmin_client.AsyncClient`` (left open by :meth:`close`);
    ``app`` defaults to the API key's own app (asked once). It works on any event loop and
    in any thread (``Runner.run``, ``run_streamed`` and ``run_sync``).
    ``compacted_history``: reads answer ctxadmin's compaction summaries in place of the
    items they cover (the default), or every stored item (``False``).
    ``session_settings``: the SDK's settings (``limit``: the default of ``get_items``).
    """

    #: Events appended per request (the API's batch limit); a longer ``add_items`` is sent
    #: in batches, each all or nothing.
    batch_size = 500
    #: The events read per page of a whole session.
    page_size = 200
    #: The fewest newest events a read of the newest items asks for (it asks for twice the
    #: items wanted, and twice as many again while rewinds leave too few).
    read_window = 8
    #: How often a ``pop_item`` that lost a race reads again before giving up.
    pop_attempts = 32

    def __init__(
        self,
        session_id: str,
        *,
        user_id: str,
        app: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncClient | None = None,
        compacted_history: bool = True,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **client_options: Any,
    ) -> None:
        if client is not None:
            if base_url is not None or api_key is not None or client_options:
                raise TypeError("pass either a client or base_url/api_key/options, not both")
            self.client, self._owns_client = client, False
        else:
            self.client = AsyncClient(base_url, api_key, **client_options)
            self._owns_client = True
        self.session_id = session_id
        self.app = app
        self.user_id = user_id
        self.compacted_history = compacted_history
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self._names: dict[str, str] = {}
        self._last_timestamp = 0.0

    def close(self) -> None:
        """Close the client if this session made it; synchronous, as the SDK's sessions
        close (each event loop's connections are closed on that loop)."""
        if self._owns_client:
            self.client.close()

    async def aclose(self) -> None:
        """As :meth:`close`, the running loop's connections closed before it returns."""
        if self._owns_client:
            await self.client.aclose()

    async def __aenter__(self) -> CtxAdminSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ reads

    async def _where(self) -> tuple[str, str, str]:
        if self.app is None:  # the key's own app, asked once
            self.app = (await self.client.whoami())["app"]
        return self.app, self.user_id, self.session_id

    async def _all_events(self) -> list[dict]:
        filters = {} if not self.compacted_history else {"include_hidden": "false"}
        listed = self.client.list_events(*(await self._where()), limit=self.page_size, **filters)
        return [event async for event in listed]

    async def _read(self, newest: int | None) -> tuple[list[_items.Entry], int | None]:
        """The session's history (its last ``newest`` entries, or all) and the revision it
        was read at (``None``: no such session)."""
        window = None if newest is None else max(2 * newest, self.read_window)
        hidden = False if self.compacted_history else None
        while True:
            try:
                doc = await self.client.get_session(
                    *(await self._where()),
                    num_recent_events=window,
                    include_hidden=hidden,
                )
            except errors.NotFoundError:
                return [], None
            events = doc.get("events") or []
            complete = window is None or len(events) < window
            if doc.get("events_complete") is False:
                if window is None or len(events) < window:
                    # Longer than one read returns: read it all, by pages.
                    events, complete = await self._all_events(), True
            entries = _items.history(events, complete=complete, summaries=self.compacted_history)
            if newest is not None and not complete and not _enough(entries, newest):
                window *= 2
                continue
            self._names.update(_items.call_names(entry.item for entry in entries))
            return entries, doc.get("revision")

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The history, oldest first; ``limit``: only the newest ``limit`` items (``None``:
        the settings' limit, else all; 0: none; below 0: all, as the SDK's SQLite session)."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit == 0:
            return []
        newest = limit if limit is not None and limit > 0 else None
        entries, _revision = await self._read(newest)
        if newest is not None:
            entries = entries[-newest:]
        return [entry.item for entry in entries]  # type: ignore[misc]

    # ------------------------------------------------------------------ writes

    def _timestamp(self) -> float:
        """Now, strictly after this session's previous event (whole microseconds, as the
        server keeps them), so a batch's items keep their order in time."""
        now = max(round(time.time(), 6), round(self._last_timestamp + 1e-6, 6))
        self._last_timestamp = now
        return now

    async def _names_for(self, items: list[Mapping[str, Any]]) -> dict[str, str]:
        """The function name of every call an output of ``items`` answers, when known."""
        names = {**self._names, **_items.call_names(items)}
        if _items.unnamed_outputs(items, names):
            # A call added by another session object: the stored history names it.
            entries, _revision = await self._read(None)
            names.update(_items.call_names(entry.item for entry in entries))
        return names

    async def _append(self, events: list[dict], expected_revision: int | None = None) -> dict:
        try:
            return await self.client.append_events(
                *(await self._where()), events, expected_revision=expected_revision
            )
        except errors.NotFoundError:
            if expected_revision is not None:
                raise
        try:
            await self.client.create_session(*(await self._where())[:2], session_id=self.session_id)
        except errors.SessionExistsError:
            pass
        return await self.client.append_events(*(await self._where()), events)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items, in order (each batch of ``batch_size`` all or nothing)."""
        if not items:
            return
        plain = [dict(item) for item in items]  # type: ignore[call-overload]
        names = await self._names_for(plain)
        for start in range(0, len(plain), self.batch_size):
            batch = plain[start : start + self.batch_size]
            events = [_items.item_event(item, names, self._timestamp()) for item in batch]
            await self._append(events)
        self._names = {**self._names, **_items.call_names(plain)}

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and answer it (``None``: the session holds none). A
        compaction summary is not an item: the newest stored item is popped."""
        lost: errors.StaleSessionError | None = None
        for _attempt in range(self.pop_attempts):
            entries, revision = await self._read(1)
            stored = [entry for entry in entries if entry.event_id is not None]
            if revision is None or not stored:
                return None
            newest = stored[-1]
            rewind = _items.pop_event(newest.invocation_id or newest.event_id, self._timestamp())
            try:
                await self.client.append_events(
                    *(await self._where()), [rewind], expected_revision=revision
                )
            except errors.StaleSessionError as error:
                lost = error  # another writer came first: read again
                continue
            except errors.NotFoundError:
                return None
            return newest.item  # type: ignore[return-value]
        assert lost is not None
        raise lost

    async def clear_session(self) -> None:
        """Delete the session and everything it holds."""
        try:
            await self.client.delete_session(*(await self._where()))
        except errors.NotFoundError:
            pass
        self._names = {}

    # ------------------------------------------------------------------ compaction

    async def run_compaction(self, args: OpenAIResponsesCompactionArgs | None = None) -> None:
        """Compact the session with ctxadmin's compaction policy for it.

        A call of your own (``args`` ``None``) or with ``force`` asks ctxadmin for a
        compaction now and waits for it; nothing to compact is not an error. The Runner's
        call after each turn (``force`` false) leaves it to ctxadmin's automatic compaction
        (a policy with ``automatic: true``), which already runs after appends.
        """
        if args is not None and not args.get("force"):
            return
        try:
            await self.client.request_compaction(*(await self._where()))
        except errors.NotFoundError:
            return
        except errors.CtxAdminError as error:
            if error.code not in NOTHING_TO_COMPACT and error.code != "compaction_in_progress":
                raise

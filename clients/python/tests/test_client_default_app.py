"""An API key belongs to one app: the adapters that keep data in an app take the key's own
when none is named (asked once through ``whoami``), and keep it in that app."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from ctxadmin_client import AsyncClient, Client
from ctxadmin_client.langgraph import CtxAdminSaver, CtxAdminStore
from ctxadmin_client.openai_agents import CtxAdminSession

pytestmark = pytest.mark.e2e


def test_the_langgraph_adapters_keep_their_data_in_the_keys_app(app):
    user = f"u-{uuid.uuid4().hex[:8]}"
    with (
        CtxAdminStore(app.base_url, app.key) as store,
        CtxAdminSaver(app.base_url, app.key) as saver,
    ):
        assert store.app == app.name and saver.app == app.name
        store.put((user, "prefs"), "seat", {"text": "window"})
    with Client(app.base_url, app.key) as client:
        stored = list(client.list_memories(app.name, user))
    assert len(stored) == 1 and "window" in stored[0]["content"]


def test_an_adapter_given_only_an_async_client_must_name_its_app(app):
    async def check() -> None:
        async with AsyncClient(app.base_url, app.key) as shared:
            with pytest.raises(TypeError, match="name the ctxadmin app"):
                CtxAdminStore(async_client=shared)

    asyncio.run(check())


def test_an_agents_session_keeps_its_items_in_the_keys_app(app):
    user, sid = f"u-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"

    async def work() -> list:
        session = CtxAdminSession(sid, user_id=user, base_url=app.base_url, api_key=app.key)
        try:
            await session.add_items([{"role": "user", "content": "hello"}])
            return await session.get_items()
        finally:
            await session.aclose()

    items = asyncio.run(work())
    assert [item["content"] for item in items] == ["hello"]
    with Client(app.base_url, app.key) as client:
        assert client.get_session(app.name, user, sid)["session_id"] == sid

"""The OpenAI Agents SDK session on a live ctxadmin stack (the client conftest's module
``app``); tests keep apart by user and session id. Async tests run on anyio's asyncio
backend."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from ctxadmin_client import AsyncClient
from ctxadmin_client.openai_agents import CtxAdminSession


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def async_client(app) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(app.base_url, app.key) as shared:
        yield shared


@pytest.fixture
def make_session(app, async_client) -> Callable[..., CtxAdminSession]:
    """``make_session(session_id=None, user_id=None, **options)``: a session on the shared
    client (a fresh session id and user unless given)."""

    def make(
        session_id: str | None = None, user_id: str | None = None, **options
    ) -> CtxAdminSession:
        return CtxAdminSession(
            session_id or f"s-{uuid.uuid4().hex[:10]}",
            app=app.name,
            user_id=user_id or f"u-{uuid.uuid4().hex[:10]}",
            client=async_client,
            **options,
        )

    return make

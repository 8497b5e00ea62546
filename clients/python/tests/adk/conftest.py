"""The ADK services on a live ctxadmin stack (the client conftest's module ``app``); tests keep
apart by user id. ``app:`` state is app-wide, so the ADK in-memory peer a test compares with
starts from the app state the module's earlier tests left. Async tests run on anyio's
asyncio backend."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from ctxadmin_client import AsyncClient
from ctxadmin_client.adk import (
    CtxAdminArtifactService,
    CtxAdminMemoryService,
    CtxAdminSessionService,
)
from google.adk.sessions import InMemorySessionService


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class AdkServices:
    app: str
    base_url: str
    key: str
    client: AsyncClient
    sessions: CtxAdminSessionService
    memory: CtxAdminMemoryService
    artifacts: CtxAdminArtifactService


@pytest.fixture
async def adk(app):
    """The three services sharing one client on the module's app."""
    client = AsyncClient(app.base_url, app.key)
    services = AdkServices(
        app=app.name,
        base_url=app.base_url,
        key=app.key,
        client=client,
        sessions=CtxAdminSessionService(client=client),
        memory=CtxAdminMemoryService(client=client),
        artifacts=CtxAdminArtifactService(client=client),
    )
    try:
        yield services
    finally:
        await client.aclose()


@pytest.fixture
def other_user() -> str:
    return f"other-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def peer(adk) -> InMemorySessionService:
    """ADK's in-memory session service holding the app state ctxadmin holds now."""
    service = InMemorySessionService()
    answer = await adk.client.get_user_state(adk.app, "nobody")
    app_state = {
        key.removeprefix("app:"): value
        for key, value in (answer.get("state") or {}).items()
        if key.startswith("app:")
    }
    if app_state:
        service.app_state[adk.app] = app_state
    return service

"""The LangGraph adapters on a live ctxadmin stack (the client conftest's module ``app``);
tests keep apart by thread id and user id."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

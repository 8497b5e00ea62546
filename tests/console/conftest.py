"""Fixtures of the console's tests: task messages kept off the broker, a seeded world of two
apps, and a staff session allowed the console's writes."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from caching.adapters import fake_adapter
from tests.console.diagnostics_helpers import World, build_world, operator


@pytest.fixture
def quiet_tasks(monkeypatch, settings):
    """Task messages kept off the broker (the tests run what they need), and the fake
    cache provider reset."""
    from caching.tasks import cleanup
    from memory.tasks import drain_outbox, embed_pending
    from sessions_app.tasks import run_compaction

    for task in (cleanup, drain_outbox, embed_pending, run_compaction):
        monkeypatch.setattr(task, "delay_on_commit", lambda *a, **k: None)
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 0
    settings.CTXADMIN_CACHE_FAKE_FAILURE = ""
    adapter = fake_adapter()
    adapter.reset()
    yield adapter
    adapter.reset()


@pytest.fixture
def world() -> World:
    return build_world()


@pytest.fixture
def staff() -> APIClient:
    client = APIClient()
    client.force_login(operator())
    return client

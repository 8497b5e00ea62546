"""Fixtures of the prefix-cache tests. (The Gemini adapter's tests, in ``gemini/``, have a
``fake`` of their own: a local server speaking Gemini's wire format.)"""

from __future__ import annotations

import pytest

from caching.adapters import fake_adapter
from caching.tasks import cleanup


@pytest.fixture
def fake(settings, monkeypatch):
    """The process's fake provider, reset, with cleanup messages kept off the broker (the
    tests run cleanup themselves)."""
    monkeypatch.setattr(cleanup, "delay_on_commit", lambda *a, **k: None)
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 0
    settings.CTXADMIN_CACHE_FAKE_FAILURE = ""
    adapter = fake_adapter()
    adapter.reset()
    yield adapter
    adapter.reset()

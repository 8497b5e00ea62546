"""Fixtures of the Gemini cache adapter's tests: a local server speaking Gemini's
``cachedContents`` wire format, and the adapter pointed at it."""

from __future__ import annotations

import pytest

from caching.adapters import GeminiCacheAdapter
from ctxadmin.testing.fake_gemini_cache import FakeGeminiCache
from tests.caching.gemini.helpers import KEY


@pytest.fixture
def fake():
    with FakeGeminiCache(api_key=KEY) as server:
        yield server


@pytest.fixture
def adapter(fake) -> GeminiCacheAdapter:
    return GeminiCacheAdapter(fake.base_url, KEY)

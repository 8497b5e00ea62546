"""The adapter for a scope's provider name."""

from __future__ import annotations

import threading

from django.conf import settings

from caching.adapters import CacheAdapter, CachePrefix, CreatedResource, FakeCacheAdapter


class SettingsFakeAdapter(FakeCacheAdapter):
    """The ``fake`` provider of this process: its delay and failure are read from the
    settings at each create (``CTXADMIN_CACHE_FAKE_DELAY_MS``/``_FAILURE``)."""

    def create(
        self, *, model: str, prefix: CachePrefix, ttl_ms: int, tag: str, timeout_s: float
    ) -> CreatedResource:
        self.delay_s = settings.CTXADMIN_CACHE_FAKE_DELAY_MS / 1000
        self.fail = settings.CTXADMIN_CACHE_FAKE_FAILURE or None
        return super().create(
            model=model, prefix=prefix, ttl_ms=ttl_ms, tag=tag, timeout_s=timeout_s
        )

    def reset(self) -> None:
        with self._lock:
            self.creates = self.deletes = 0
            self.resources.clear()


_fake = SettingsFakeAdapter()
_lock = threading.Lock()


def fake_adapter() -> SettingsFakeAdapter:
    return _fake


def get_adapter(provider: str) -> CacheAdapter:
    if provider == "fake":
        return _fake
    if provider == "gemini":
        from caching.gemini import GeminiCacheAdapter

        return GeminiCacheAdapter.from_settings()
    raise LookupError(f"unknown cache provider {provider!r}")

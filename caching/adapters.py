"""What the registry asks of a provider that can cache a request prefix, the adapters that
do it (Gemini over ``ctxadmin.providers.gemini_caches``, and the in-process ``fake``), and
the adapter for a scope's provider name.

An adapter creates a provider-side cache of a prefix, deletes one, and may extend one's TTL
or find the ones it made under a tag (the registry's entry id, so a creator that died after
the provider answered cannot leak a resource). Failures are ``ProviderError`` with a stable
code; their messages carry neither a resource name nor prefix text.

Resource names are opaque to everything but the adapter and ``caching.leases.resolve``:
they are never logged, serialised or shown.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from prometheus_client import Counter

import ctxadmin.providers.gemini_caches as gemini_caches
from ctxadmin.env import Env
from ctxadmin.providers.base import ProviderError
from ctxadmin.providers.gemini_caches import GeminiCaches

PROVIDER_CALLS = Counter(
    "ctxadmin_cache_provider_calls_total",
    "Provider cache calls by operation (create, delete, find) and result (ok or error code).",
    ["operation", "result"],
)


@dataclass(frozen=True)
class CachePrefix:
    """The secret-pruned, stable start of a model request, in Gemini's ``Content`` shape
    (``{"role": "user" | "model", "parts": [...]}``), which the adapters translate."""

    system_instruction: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_config: dict[str, Any] | None = None
    contents: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class CreatedResource:
    """What a create returned. ``name`` is private (see the module docstring)."""

    name: str = field(repr=False)
    expires_at: datetime | None = None
    cached_tokens: int | None = None


class CacheAdapter(Protocol):
    #: The provider's name in a cache scope (``"gemini"``, ``"fake"``).
    provider: str

    def min_prefix_tokens(self, model: str) -> int:
        """The smallest prefix (estimated tokens) the provider caches for ``model``."""

    def create(
        self, *, model: str, prefix: CachePrefix, ttl_ms: int, tag: str, timeout_s: float
    ) -> CreatedResource:
        """Create the provider-side cache; ``tag`` is content-free (the registry's entry id)
        and must be recorded with the resource so ``find`` can return it."""

    def delete(self, name: str, *, timeout_s: float) -> bool:
        """Delete the resource: True when deleted now, False when it was already gone."""

    def update_ttl(self, name: str, ttl_ms: int, *, timeout_s: float) -> datetime | None:
        """Give the resource a new TTL from now; its new expiry when the provider says."""

    def find(self, tag: str, *, timeout_s: float) -> list[str]:
        """The names of resources created with ``tag`` (possibly none)."""


class FakeCacheAdapter:
    """A provider for demos and tests: resources live in this process, creates can be slowed
    down and made to fail. ``creates``/``deletes`` count calls (for tests and demos)."""

    provider = "fake"

    def __init__(
        self,
        *,
        delay_s: float = 0.0,
        fail: str | None = None,
        min_tokens: int = 0,
        token_bytes: int = 4,
    ):
        if fail is not None and fail not in {
            "provider_unavailable",
            "provider_rate_limited",
            "provider_rejected",
            "provider_timeout",
        }:
            raise ValueError(f"unknown fake failure {fail!r}")
        self.delay_s = delay_s
        self.fail = fail
        self.min_tokens = min_tokens
        self.token_bytes = token_bytes
        self.creates = 0
        self.deletes = 0
        self.resources: dict[str, tuple[str, datetime]] = {}  # name -> (tag, expiry)
        self._lock = threading.Lock()

    def min_prefix_tokens(self, model: str) -> int:
        return self.min_tokens

    def create(
        self, *, model: str, prefix: CachePrefix, ttl_ms: int, tag: str, timeout_s: float
    ) -> CreatedResource:
        with self._lock:
            self.creates += 1
        if self.delay_s:
            if self.delay_s > timeout_s:
                time.sleep(timeout_s)
                raise ProviderError("provider_timeout")
            time.sleep(self.delay_s)
        if self.fail:
            raise ProviderError(self.fail, status=None if self.fail == "provider_timeout" else 503)
        name = f"fakeCachedContents/{uuid.uuid4().hex}"
        expires_at = datetime.now(UTC) + timedelta(milliseconds=ttl_ms)
        with self._lock:
            self.resources[name] = (tag, expires_at)
        text = "".join(
            part.get("text", "")
            for content in prefix.contents
            for part in content.get("parts", [])
            if isinstance(part, dict)
        ) + (prefix.system_instruction or "")
        cached = -(-len(text.encode("utf-8")) // self.token_bytes)
        return CreatedResource(name=name, expires_at=expires_at, cached_tokens=cached)

    def delete(self, name: str, *, timeout_s: float) -> bool:
        with self._lock:
            self.deletes += 1
            return self.resources.pop(name, None) is not None

    def update_ttl(self, name: str, ttl_ms: int, *, timeout_s: float) -> datetime | None:
        with self._lock:
            if name not in self.resources:
                raise ProviderError("provider_rejected", status=404)
            expires_at = datetime.now(UTC) + timedelta(milliseconds=ttl_ms)
            self.resources[name] = (self.resources[name][0], expires_at)
            return expires_at

    def find(self, tag: str, *, timeout_s: float) -> list[str]:
        with self._lock:
            return [name for name, (t, _) in self.resources.items() if t == tag]


class GeminiCacheAdapter(GeminiCaches):
    """Explicit caches of the Gemini API (``/v1beta/cachedContents``) as a ``CacheAdapter``:
    the wire calls are ``GeminiCaches``'; this adds the prefix's translation and the
    settings."""

    provider = "gemini"

    @classmethod
    def from_settings(cls) -> GeminiCacheAdapter:
        """The adapter for ``CTXADMIN_GEMINI_BASE_URL``, with the key read now from
        ``CTXADMIN_GEMINI_API_KEY`` (or ``_FILE``), else ``GEMINI_API_KEY``."""
        env = Env()
        key = env.secret("CTXADMIN_GEMINI_API_KEY") or env.secret("GEMINI_API_KEY")
        return cls(settings.CTXADMIN_GEMINI_BASE_URL, key)

    def min_prefix_tokens(self, model: str) -> int:
        """Gemini's smallest cacheable prefix; unknown models get the largest known minimum."""
        return gemini_caches.min_prefix_tokens(model)

    def create(
        self, *, model: str, prefix: CachePrefix, ttl_ms: int, tag: str, timeout_s: float
    ) -> CreatedResource:
        """Create the resource. A timeout does not mean nothing was made: ``find(tag)``
        returns resources whose create the caller gave up on."""
        created = self.create_cache(
            model=model,
            system_instruction=prefix.system_instruction,
            contents=prefix.contents,
            tools=prefix.tools,
            tool_config=prefix.tool_config,
            ttl_ms=ttl_ms,
            tag=tag,
            timeout_s=timeout_s,
        )
        return CreatedResource(
            name=created.name, expires_at=created.expires_at, cached_tokens=created.cached_tokens
        )


# --------------------------------------------------------------------------- by provider name


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


def fake_adapter() -> SettingsFakeAdapter:
    return _fake


def get_adapter(provider: str) -> CacheAdapter:
    if provider == "fake":
        return _fake
    if provider == "gemini":
        return GeminiCacheAdapter.from_settings()
    raise LookupError(f"unknown cache provider {provider!r}")

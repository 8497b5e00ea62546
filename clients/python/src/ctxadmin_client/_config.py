"""What both clients are built from: the base URL and key (arguments or the environment),
the headers every request carries, and the HTTP timeout."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Any

import httpx

from ._retry import RetryPolicy
from ._version import __version__
from .errors import ConfigurationError

ENV_URL = "CTXADMIN_URL"
ENV_API_KEY = "CTXADMIN_API_KEY"
USER_AGENT = (
    f"ctxadmin-client/{__version__} python/{platform.python_version()} httpx/{httpx.__version__}"
)


@dataclass(frozen=True)
class Settings:
    base_url: str
    headers: dict[str, str]
    timeout: httpx.Timeout
    retry: RetryPolicy


def resolve(
    base_url: str | None,
    api_key: str | None,
    *,
    timeout: float | httpx.Timeout | None,
    max_retries: int,
    backoff: float,
    headers: dict[str, str] | None,
) -> Settings:
    url = base_url or os.environ.get(ENV_URL, "")
    key = api_key or os.environ.get(ENV_API_KEY, "")
    if not url:
        raise ConfigurationError(f"no base URL: pass base_url or set {ENV_URL}")
    if not key:
        raise ConfigurationError(f"no API key: pass api_key or set {ENV_API_KEY}")
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigurationError(
            f"the base URL must be http(s)://host[:port][/prefix], not {url!r}"
        )
    try:
        retry = RetryPolicy(max_retries=max_retries, backoff=backoff)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    merged: dict[str, Any] = {
        "User-Agent": USER_AGENT,
        "Accept": "application/json",
        **(headers or {}),
        "Authorization": f"Bearer {key}",
    }
    return Settings(
        base_url=url.rstrip("/"),
        headers=merged,
        timeout=timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout),
        retry=retry,
    )

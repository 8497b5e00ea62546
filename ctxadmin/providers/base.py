"""Model-provider connections, the errors a call can end in, and what a call returns.

Everything here is shared by the wire formats (``gemini``, ``openai_compat``, ``anthropic``)
and the calls over them (``clients.complete_json``, ``generate.generate``, the embedders).

A connection names an endpoint and how to speak to it; its API key is read from the
environment when the connection is built, so the settings (and anything that prints them)
never hold a secret. Errors carry a stable machine code and numbers only: a prompt, a reply
or a key must not reach a log line or an API error through an exception message.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ctxadmin.env import Env

ProviderKind = Literal["gemini", "openai_compatible", "anthropic"]
KINDS: frozenset[str] = frozenset({"gemini", "openai_compatible", "anthropic"})
DEFAULT_MAX_OUTPUT_BYTES = 256 * 1024
MAX_OUTPUT_BYTES_LIMIT = 64 * 1024 * 1024

EMBEDDING_ERROR_CODES: frozenset[str] = frozenset(
    {
        "embedding_timeout",
        "embedding_provider_error",
        "embedding_bad_response",
        "embedding_input_too_large",
        "embedding_rate_limited",
    }
)

ERROR_CODES: frozenset[str] = frozenset(
    {
        "provider_timeout",
        "provider_rate_limited",
        "provider_unavailable",
        "provider_rejected",
        "provider_auth_failed",
        "provider_bad_response",
        "provider_output_too_large",
    }
)


class CodedError(Exception):
    """A call that did not produce a usable reply.

    ``code`` (one of the subclass's ``codes``) is what callers branch on (retry, back off,
    give up). The message is built here from the code, the status and an optional
    ``detail`` that callers fill with sizes or field names only, never with text from
    either side.
    """

    codes: frozenset[str] = frozenset()

    def __init__(
        self,
        code: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        detail: str | None = None,
    ):
        if code not in self.codes:
            raise ValueError(f"unknown {type(self).__name__} code {code!r}")
        self.code = code
        self.status = status
        self.retry_after_s = retry_after_s
        parts = [code]
        if status is not None:
            parts.append(f"status={status}")
        if retry_after_s is not None:
            parts.append(f"retry_after_s={retry_after_s:g}")
        if detail:
            parts.append(detail)
        super().__init__(" ".join(parts))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self})"


@dataclass(frozen=True)
class ProviderConnection:
    """Where a provider answers and how to reach it; ``repr`` leaves the key out."""

    name: str
    kind: ProviderKind
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown provider kind {self.kind!r}; known: {sorted(KINDS)}")
        if isinstance(self.max_output_bytes, bool) or self.max_output_bytes < 1:
            raise ValueError("max_output_bytes must be a positive integer")


@dataclass(frozen=True)
class Completion:
    """A model's reply: its text (JSON, still to be parsed by the caller) and accounting."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    model: str


@dataclass(frozen=True)
class Generation:
    """A model's turn (``generate``): its parts in ctxadmin's event format, and accounting."""

    parts: list[dict]
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    finish_reason: str | None
    model: str


class ProviderError(CodedError):
    """A call that did not produce a usable reply (``code`` is one of ``ERROR_CODES``)."""

    codes = frozenset(ERROR_CODES)


class EmbeddingError(CodedError):
    """Texts that could not be embedded; nothing was returned for any of them.

    ``code`` is one of ``EMBEDDING_ERROR_CODES``. The message is built from the code, the
    status and a ``detail`` holding sizes, counts or field names only.
    """

    codes = frozenset(EMBEDDING_ERROR_CODES)


def embedding_bad(detail: str, status: int | None = None) -> EmbeddingError:
    """An embeddings reply of the wrong shape (``detail``: sizes and field names only)."""
    return EmbeddingError("embedding_bad_response", status=status, detail=detail)


class UnknownConnection(KeyError):
    """No provider connection of that name is configured."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"no provider connection named {self.name!r} in CTXADMIN_PROVIDERS"


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


# --------------------------------------------------------------------------- configuration

_NAME = re.compile(r"[a-z0-9_-]{1,64}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_REQUIRED_KEYS = frozenset({"kind", "base_url"})
_OPTIONAL_KEYS = frozenset({"api_key_env", "max_output_bytes"})


def parse_providers(text: str | None, *, name: str = "CTXADMIN_PROVIDERS") -> dict[str, dict]:
    """The JSON text of ``name`` → validated provider entries (``{}`` when unset)."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"{name} must be a JSON object: {exc.msg} at position {exc.pos}"
        ) from None
    return validate_providers(value, name=name)


def validate_providers(value: Any, *, name: str = "CTXADMIN_PROVIDERS") -> dict[str, dict]:
    """Check every entry strictly, so a typo fails at start-up rather than at the first call.

    Messages name the entry and the field but never repeat a ``base_url``: a URL may carry a
    token in its query string.
    """
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object of name -> connection")
    return {
        entry_name: _validate_entry(entry_name, entry, name=name)
        for entry_name, entry in value.items()
    }


def _validate_entry(entry_name: Any, entry: Any, *, name: str) -> dict:
    if not isinstance(entry_name, str) or not _NAME.fullmatch(entry_name):
        raise ImproperlyConfigured(f"{name}: connection names must match [a-z0-9_-]{{1,64}}")
    where = f"{name}[{entry_name!r}]"
    if not isinstance(entry, dict):
        raise ImproperlyConfigured(f"{where} must be an object")
    missing = _REQUIRED_KEYS - entry.keys()
    if missing:
        raise ImproperlyConfigured(f"{where} is missing {sorted(missing)}")
    unknown = entry.keys() - _REQUIRED_KEYS - _OPTIONAL_KEYS
    if unknown:
        raise ImproperlyConfigured(
            f"{where} has unknown keys {sorted(unknown)}; "
            f"allowed: {sorted(_REQUIRED_KEYS | _OPTIONAL_KEYS)}"
        )
    if entry["kind"] not in KINDS:
        raise ImproperlyConfigured(f"{where}.kind must be one of {sorted(KINDS)}")
    validate_base_url(entry["base_url"], where=where)
    api_key_env = entry.get("api_key_env")
    if api_key_env is not None and (
        not isinstance(api_key_env, str) or not _ENV_NAME.fullmatch(api_key_env)
    ):
        raise ImproperlyConfigured(f"{where}.api_key_env must be an environment variable name")
    limit = entry.get("max_output_bytes", DEFAULT_MAX_OUTPUT_BYTES)
    if (
        not isinstance(limit, int)
        or isinstance(limit, bool)
        or not 1024 <= limit <= MAX_OUTPUT_BYTES_LIMIT
    ):
        raise ImproperlyConfigured(
            f"{where}.max_output_bytes must be an integer from 1024 to {MAX_OUTPUT_BYTES_LIMIT}"
        )
    return dict(entry)


def validate_base_url(url: Any, *, where: str) -> None:
    if not isinstance(url, str):
        raise ImproperlyConfigured(f"{where}.base_url must be a string")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ImproperlyConfigured(f"{where}.base_url is not a valid URL") from None
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ImproperlyConfigured(f"{where}.base_url must be an http(s) URL with a host")
    if parts.fragment:
        raise ImproperlyConfigured(f"{where}.base_url must not have a #fragment")


def connections_from_settings() -> dict[str, ProviderConnection]:
    """Every configured connection, with keys read from the environment now."""
    entries = validate_providers(getattr(settings, "CTXADMIN_PROVIDERS", {}))
    return {name: _connection(name, entry) for name, entry in entries.items()}


def get_connection(name: str) -> ProviderConnection:
    """The connection called ``name``; only its own key variable is read."""
    entries = validate_providers(getattr(settings, "CTXADMIN_PROVIDERS", {}))
    if name not in entries:
        raise UnknownConnection(name)
    return _connection(name, entries[name])


def _connection(name: str, entry: dict) -> ProviderConnection:
    api_key_env = entry.get("api_key_env")
    # ``Env.secret`` also accepts ``<VAR>_FILE``, like SECRET_KEY: keys can live in files.
    api_key = Env().secret(api_key_env) if api_key_env else None
    return ProviderConnection(
        name=name,
        kind=entry["kind"],
        base_url=entry["base_url"],
        api_key=api_key,
        max_output_bytes=entry.get("max_output_bytes", DEFAULT_MAX_OUTPUT_BYTES),
    )

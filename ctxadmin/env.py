"""Strict, typed reading of configuration from the environment.

Every helper raises ``ImproperlyConfigured`` naming the variable when its value is junk:
a deployment with a typo must fail at start-up, not behave differently.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class Env:
    """Reads typed values from a mapping (``os.environ`` by default)."""

    def __init__(self, environ: Mapping[str, str] | None = None):
        self.environ = os.environ if environ is None else environ

    def raw(self, name: str) -> str | None:
        value = self.environ.get(name)
        if value is None or value.strip() == "":
            return None
        return value.strip()

    def str(self, name: str, default: str | None = None) -> str | None:
        value = self.raw(name)
        return default if value is None else value

    def bool(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ImproperlyConfigured(f"{name} must be one of {sorted(_TRUE | _FALSE)}, got {value!r}")

    def int(
        self,
        name: str,
        default: int,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int:
        value = self.raw(name)
        if value is None:
            result = default
        else:
            try:
                result = int(value, 10)
            except ValueError:
                raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
        if minimum is not None and result < minimum:
            raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {result}")
        if maximum is not None and result > maximum:
            raise ImproperlyConfigured(f"{name} must be <= {maximum}, got {result}")
        return result

    def list(self, name: str, default: list[str]) -> list[str]:
        value = self.raw(name)
        if value is None:
            return list(default)
        items = [item.strip() for item in value.split(",")]
        if any(item == "" for item in items):
            raise ImproperlyConfigured(f"{name} has an empty item: {value!r}")
        return items

    def secret(self, name: str) -> str | None:
        """``NAME`` or the contents of the file named by ``NAME_FILE`` (not both)."""
        direct = self.raw(name)
        file_name = self.raw(f"{name}_FILE")
        if direct is not None and file_name is not None:
            raise ImproperlyConfigured(f"set {name} or {name}_FILE, not both")
        if file_name is None:
            return direct
        path = Path(file_name)
        try:
            content = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ImproperlyConfigured(
                f"{name}_FILE={file_name!r} cannot be read: {exc.strerror}"
            ) from None
        if not content:
            raise ImproperlyConfigured(f"{name}_FILE={file_name!r} is empty")
        return content


_PG_SCHEMES = {"postgres", "postgresql", "pgsql"}
_PG_OPTIONS = {
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "application_name",
    "target_session_attrs",
    "options",
}


def parse_database_url(url: str, *, name: str = "DATABASE_URL") -> dict:
    """``postgres://user:password@host:port/dbname?sslmode=...`` → Django DATABASES entry.

    Only PostgreSQL is supported (pgvector is required); unknown query options are rejected.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not a valid URL: {exc}") from None
    if parts.scheme not in _PG_SCHEMES:
        raise ImproperlyConfigured(
            f"{name} must use one of the schemes {sorted(_PG_SCHEMES)} (PostgreSQL with "
            f"pgvector), got {parts.scheme!r}"
        )
    dbname = unquote(parts.path.lstrip("/"))
    if not dbname or "/" in dbname:
        raise ImproperlyConfigured(f"{name} must name exactly one database in its path")
    options: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if key not in _PG_OPTIONS:
            raise ImproperlyConfigured(
                f"{name} has an unsupported option {key!r}; supported: {sorted(_PG_OPTIONS)}"
            )
        options[key] = value
    # A percent-encoded path as the host (``%2Frun%2Fpostgresql``) selects a socket directory.
    host = unquote(parts.hostname or "")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": dbname,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(port) if port else "",
        "OPTIONS": options,
    }


def validate_redis_url(url: str, *, name: str = "REDIS_URL") -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not a valid URL: {exc}") from None
    if parts.scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(
            f"{name} must use redis://, rediss:// or unix://, got {parts.scheme!r}"
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise ImproperlyConfigured(f"{name} must name a host")
    db = parts.path.lstrip("/")
    if db and not db.isdigit():
        raise ImproperlyConfigured(f"{name} database must be a number, got {db!r}")
    return url

"""The API's error envelope ``{"error": {"code", "message", "details"}}`` as exceptions.

Every answer of 400 or above becomes a :class:`CtxAdminError` subclass chosen first by the
envelope's stable ``code`` and then by the HTTP status; network failures and timeouts are
:class:`TransportError`, a missing base URL or key :class:`ConfigurationError`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

__all__ = [
    "AuthenticationError",
    "ConfigurationError",
    "ConflictError",
    "CtxAdminError",
    "EventIdConflictError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitedError",
    "RequestTooLargeError",
    "ServerError",
    "ServiceUnavailableError",
    "SessionExistsError",
    "StaleSessionError",
    "TransportError",
    "ValidationError",
    "error_from_response",
]


class ConfigurationError(Exception):
    """The client cannot be built as asked (no base URL, no API key, a bad value)."""


class TransportError(Exception):
    """The request did not get an answer: connection refused or reset, DNS, a timeout."""


class CtxAdminError(Exception):
    """An error answer of the API, with its envelope's ``code``, ``message`` and ``details``."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str,
        details: dict[str, Any] | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details or {}
        self.request_id = request_id
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments: rebuild through the class (pickling, other processes).
        return (
            _rebuild,
            (
                type(self),
                self.message,
                self.status,
                self.code,
                self.details,
                self.request_id,
                self.retry_after,
            ),
        )


def _rebuild(
    cls: type[CtxAdminError],
    message: str,
    status: int,
    code: str,
    details: dict[str, Any],
    request_id: str | None,
    retry_after: float | None,
) -> CtxAdminError:
    return cls(
        message,
        status=status,
        code=code,
        details=details,
        request_id=request_id,
        retry_after=retry_after,
    )


class ValidationError(CtxAdminError):
    """400 or 422: the request was refused as it stands (``details.field`` names the field)."""


class AuthenticationError(CtxAdminError):
    """401: no key, an unknown key, a revoked or expired key."""


class PermissionDeniedError(CtxAdminError):
    """403: the key lacks the scope (or a tool token the capability)."""


class NotFoundError(CtxAdminError):
    """404: no such object for this key (another tenant's object looks the same)."""


class ConflictError(CtxAdminError):
    """409: the request conflicts with the stored state."""


class StaleSessionError(ConflictError):
    """409 ``stale_session``: ``details["current_revision"]`` is the session's revision."""

    @property
    def current_revision(self) -> int | None:
        value = self.details.get("current_revision")
        return value if isinstance(value, int) else None


class SessionExistsError(ConflictError):
    """409 ``session_exists``: the session id is taken."""


class EventIdConflictError(ConflictError):
    """409 ``event_id_conflict``: an ``event_id`` is stored with other content."""


class RequestTooLargeError(CtxAdminError):
    """413: the body (or an artifact) is over its documented limit."""


class RateLimitedError(CtxAdminError):
    """429: slow down (``retry_after`` seconds when the server said)."""


class ServerError(CtxAdminError):
    """A 5xx answer other than 503."""


class ServiceUnavailableError(ServerError):
    """503: a dependency is down for now (``retry_after`` seconds when the server said)."""


_BY_CODE: dict[str, type[CtxAdminError]] = {
    "stale_session": StaleSessionError,
    "session_exists": SessionExistsError,
    "event_id_conflict": EventIdConflictError,
}
_BY_STATUS: dict[int, type[CtxAdminError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: RequestTooLargeError,
    422: ValidationError,
    429: RateLimitedError,
    503: ServiceUnavailableError,
}


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP date (None if absent
    or unreadable; never negative)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def error_class(status: int, code: str) -> type[CtxAdminError]:
    if code in _BY_CODE:
        return _BY_CODE[code]
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    return CtxAdminError


def error_from_response(response: httpx.Response) -> CtxAdminError:
    """The typed error of an answer of 400 or above (the envelope when there is one; a
    reverse proxy's HTML page still gives a typed error with code ``http_<status>``)."""
    status = response.status_code
    code, message, details = f"http_{status}", response.reason_phrase or "error", {}
    try:
        body = json.loads(response.content) if response.content else None
    except ValueError:
        body = None
    envelope = body.get("error") if isinstance(body, dict) else None
    if isinstance(envelope, dict):
        code = str(envelope.get("code") or code)
        message = str(envelope.get("message") or message)
        if isinstance(envelope.get("details"), dict):
            details = envelope["details"]
    request_id = response.headers.get("X-Request-Id")
    return error_class(status, code)(
        message,
        status=status,
        code=code,
        details=details,
        request_id=request_id,
        retry_after=parse_retry_after(response.headers.get("Retry-After")),
    )

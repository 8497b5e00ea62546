"""The domain error: what services, tasks and commands raise when a request cannot be done.

``ServiceError`` is a plain exception with a stable machine ``code``, a human ``message``, an
HTTP-shaped ``status_code`` and structured ``details``; the API's one exception handler
(``ctxadmin.api.errors``) maps it to the error envelope. Nothing here knows about HTTP
requests or responses, so domain code raises it without importing the web layer.
"""

from __future__ import annotations

import uuid
from typing import Any

from ctxadmin.pruning import echoed


class ServiceError(Exception):
    """A domain error with a stable code, a human message and structured details."""

    status_code = 400

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status_code: int | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        if status_code is not None:
            self.status_code = status_code
        self.details = details or {}
        self.headers = headers or {}

    def __repr__(self) -> str:
        return f"ServiceError({self.code!r}, status_code={self.status_code})"


def invalid(path: str, message: str) -> ServiceError:
    """A 400 ``validation_error`` naming the offending field in ``details.field``."""
    return ServiceError("validation_error", f"{path}: {message}", details={"field": path})


def not_found() -> ServiceError:
    return ServiceError("not_found", "Not found.", status_code=404)


def uuid_or_404(value: str) -> uuid.UUID:
    """A path's UUID; anything else names no object: 404 ``not_found``."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise not_found() from None


def strict_object(body: Any, allowed: frozenset[str] | set[str]) -> dict:
    """``body`` if it is a JSON object with no key outside ``allowed``; else 400 naming the
    first unknown key (or ``body``)."""
    if not isinstance(body, dict):
        raise invalid("body", "must be a JSON object")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise invalid(echoed(unknown[0]), "unknown field")
    return body

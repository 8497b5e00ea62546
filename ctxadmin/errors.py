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


def not_found(kind: str | None = None, ident: str | None = None, *, of: str = "") -> ServiceError:
    """A 404 ``not_found``. With ``kind`` (and ``ident``, the id the caller sent), it names
    what is missing — "Session 's1' of user 'alice' was not found." — from the request alone,
    so another tenant's object reads exactly like a missing one."""
    if kind is None:
        return ServiceError("not_found", "Not found.", status_code=404)
    what = kind.capitalize() if ident is None else f"{kind.capitalize()} {echoed(ident)!r}"
    details = {"kind": kind} if ident is None else {"kind": kind, "id": echoed(ident)}
    return ServiceError(
        "not_found", f"{what}{' ' + of if of else ''} was not found.", status_code=404,
        details=details,
    )


def session_not_found(user_id: str, session_id: str) -> ServiceError:
    return not_found("session", session_id, of=f"of user {echoed(user_id)!r}")


def uuid_or_404(value: str, kind: str | None = None) -> uuid.UUID:
    """A path's UUID; anything else names no object: 404 ``not_found`` (naming ``kind``)."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise not_found(kind, value) from None


def strict_object(body: Any, allowed: frozenset[str] | set[str]) -> dict:
    """``body`` if it is a JSON object with no key outside ``allowed``; else 400 naming the
    first unknown key (or ``body``)."""
    if not isinstance(body, dict):
        raise invalid("body", "must be a JSON object")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise invalid(echoed(unknown[0]), "unknown field")
    return body

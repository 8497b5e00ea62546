"""The one error envelope: ``{"error": {"code", "message", "details"}}``.

Domain code raises ``ctxadmin.errors.ServiceError``; this module is the web side that maps it
(and DRF's and Django's own exceptions) to the envelope.

Every error the API returns goes through ``exception_handler`` (DRF) or ``error_response``
(Django-level 404/500 and middleware), with a stable machine ``code``.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseOperationalError
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

from ctxadmin.errors import ServiceError
from ctxadmin.pruning import looks_like_secret, redact_secret_text

logger = logging.getLogger("ctxadmin.api")


def envelope(code: str, message: str, details: dict[str, Any] | None = None) -> dict:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def error_response(
    status_code: int, code: str, message: str, details: dict[str, Any] | None = None
) -> JsonResponse:
    return JsonResponse(envelope(code, message, details), status=status_code)


MAX_DETAIL_CHARS = 512


def _safe(text: str) -> str:
    """A message DRF wrote, which may quote the value the client sent ('"…" is not a valid
    choice.'): credentials redacted, bounded."""
    if looks_like_secret(text):
        text = redact_secret_text(text)
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"


def _first_field_message(detail: Any, path: str = "") -> tuple[str, str]:
    if isinstance(detail, dict) and detail:
        key, value = next(iter(detail.items()))
        # A list's item (DRF keys it by index) is named as services name it: ``scopes[0]``.
        if isinstance(key, int):
            child = f"{path}[{key}]"
        else:
            child = key if not path else f"{path}.{key}"
        if key == "non_field_errors":
            child = path
        return _first_field_message(value, child)
    if isinstance(detail, list) and detail:
        first = detail[0]
        if isinstance(first, dict | list):
            # A list of nested objects: point at the first failing index.
            for index, item in enumerate(detail):
                if item:
                    return _first_field_message(item, f"{path}[{index}]")
        return path, _safe(str(first))
    return path, _safe(str(detail))


_SIMPLE = {
    exceptions.NotAuthenticated: ("not_authenticated", None),
    exceptions.AuthenticationFailed: ("authentication_failed", None),
    exceptions.PermissionDenied: ("permission_denied", None),
    exceptions.NotFound: ("not_found", "Not found."),
    exceptions.MethodNotAllowed: ("method_not_allowed", None),
    exceptions.NotAcceptable: ("not_acceptable", None),
    exceptions.UnsupportedMediaType: ("unsupported_media_type", None),
    exceptions.ParseError: ("malformed_json", None),
}


def exception_handler(exc: Exception, context: dict) -> Response:
    headers: dict[str, str] = {}
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        exc = request_too_large_error()
    elif isinstance(exc, DatabaseOperationalError | DatabaseInterfaceError):
        logger.warning("database_unavailable", extra={"error": type(exc).__name__})
        exc = ServiceError(
            "database_unavailable",
            "The database is unavailable; retry shortly.",
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "1"},
        )

    if isinstance(exc, ServiceError):
        body = envelope(exc.code, exc.message, exc.details)
        headers.update(exc.headers)
    elif isinstance(exc, exceptions.ValidationError):
        field, message = _first_field_message(exc.detail)
        text = f"{field}: {message}" if field else message
        # The one envelope's shape: the first offending field's path, as services name it.
        body = envelope("validation_error", text, {"field": field or "body"})
    elif isinstance(getattr(exc, "code", None), str) and isinstance(exc, exceptions.APIException):
        # An API exception of our own that carries its stable code (an ended token's 401).
        body = envelope(exc.code, str(exc.detail), getattr(exc, "details", None))
    elif isinstance(exc, exceptions.Throttled):
        body = envelope("throttled", "Too many requests.", {"retry_after_seconds": exc.wait})
    elif isinstance(exc, exceptions.APIException):
        code, message = "error", None
        for kind, (kind_code, kind_message) in _SIMPLE.items():
            if isinstance(exc, kind):
                code, message = kind_code, kind_message
                break
        if isinstance(exc, exceptions.UnsupportedMediaType):
            message = (
                "Send the body as JSON with 'Content-Type: application/json'; "
                "form and other encodings are not read."
            )
        body = envelope(code, message or str(exc.detail))
    else:
        view = context.get("view")
        logger.error(
            "unhandled_api_error",
            extra={"view": type(view).__name__ if view else None, "error": type(exc).__name__},
            exc_info=exc,
        )
        return Response(
            envelope("internal_error", "The server could not complete the request."),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )

    if isinstance(exc, exceptions.APIException):
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
    return Response(body, status=exc.status_code, headers=headers)


def request_too_large_error(limit: int | None = None) -> ServiceError:
    from django.conf import settings

    limit = limit or settings.CTXADMIN_MAX_BODY_BYTES
    return ServiceError(
        "request_too_large",
        f"The request body exceeds the limit of {limit} bytes.",
        status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        details={"limit_bytes": limit},
    )

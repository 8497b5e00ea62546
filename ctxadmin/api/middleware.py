from __future__ import annotations

import io

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.handlers.wsgi import LimitedStream

from ctxadmin.api.errors import error_response
from ctxadmin.api.paths import encoded_slash_error

_API_PREFIXES = ("/api/", "/dev/")


class EncodedSlashMiddleware:
    """A path segment with an encoded ``/`` (``users/a%2Fb/...``) is 400
    ``invalid_path_parameter``, as any segment outside its rule. The WSGI server decodes the
    path before Django routes it, so the segment would otherwise become two: a 404, or
    another route. The path as sent is the server's ``RAW_URI`` (gunicorn) or
    ``REQUEST_URI`` (uWSGI)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        raw = request.META.get("RAW_URI") or request.META.get("REQUEST_URI") or ""
        if request.path.startswith(_API_PREFIXES) and "%" in raw:
            problem = encoded_slash_error(raw)
            if problem is not None:
                name, message = problem
                return error_response(
                    400, "invalid_path_parameter", message, details={"parameter": name}
                )
        return self.get_response(request)


class BodySizeLimitMiddleware:
    """Refuse bodies over ``CTXADMIN_MAX_BODY_BYTES`` with 413 before anything reads them,
    and bodies that end before they should with 400 ``incomplete_body``.

    A declared Content-Length over the limit is refused without reading; a body without one
    (chunked) is read up to the limit plus one byte and refused if it goes past. A body is
    then read whole here: one that ends before its Content-Length (the client stopped
    sending), or a chunked one cut short, would otherwise reach a view shortened — a raw
    artifact stored truncated — or fail it with a 500.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.CTXADMIN_MAX_BODY_BYTES
        declared = request.META.get("CONTENT_LENGTH") or ""
        if declared:
            try:
                length = int(declared)
            except ValueError:
                return error_response(400, "bad_request", "Content-Length is not a number.")
            if length > limit:
                return self._too_large(limit)
            if length > 0:
                try:
                    received = len(request.body)
                except RequestDataTooBig:
                    return self._too_large(limit)
                except OSError:  # the server's read failed: the connection went away
                    received = None
                if received != length:
                    return self._incomplete(length, received)
        elif request.META.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked":
            stream = request.META.get("wsgi.input")
            if stream is not None:
                try:
                    body = stream.read(limit + 1)
                except OSError:  # a chunk cut short, a bad chunk size, no last chunk
                    return self._incomplete(None, None)
                if len(body) > limit:
                    return self._too_large(limit)
                # Django reads only CONTENT_LENGTH bytes: hand it the de-chunked body.
                request.META["CONTENT_LENGTH"] = str(len(body))
                request._stream = LimitedStream(io.BytesIO(body), len(body))
        return self.get_response(request)

    @staticmethod
    def _too_large(limit: int):
        return error_response(
            413,
            "request_too_large",
            f"The request body exceeds the limit of {limit} bytes.",
            {"limit_bytes": limit},
        )

    @staticmethod
    def _incomplete(declared: int | None, received: int | None):
        return error_response(
            400,
            "incomplete_body",
            "The request body ended before it was complete; nothing was done.",
            {"declared_bytes": declared, "received_bytes": received},
        )

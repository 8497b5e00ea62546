from __future__ import annotations

import io

from django.conf import settings
from django.core.handlers.wsgi import LimitedStream

from ctxadmin.api.errors import error_response


class BodySizeLimitMiddleware:
    """Refuse bodies over ``CTXADMIN_MAX_BODY_BYTES`` with 413 before anything reads them.

    A declared Content-Length over the limit is refused without reading; a body without one
    (chunked) is read up to the limit plus one byte and refused if it goes past.
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
        elif request.META.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked":
            stream = request.META.get("wsgi.input")
            if stream is not None:
                body = stream.read(limit + 1)
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

from __future__ import annotations

from django.conf import settings
from rest_framework.parsers import JSONParser

from ctxadmin.api.jsonsafe import JsonInputError, loads_strict
from ctxadmin.errors import ServiceError


class StrictJSONParser(JSONParser):
    """JSON bodies decoded by ``loads_strict``; every rejection is a 400 envelope."""

    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        if not raw:
            raise ServiceError("malformed_json", "the body is empty; send a JSON document")
        try:
            return loads_strict(raw, settings.CTXADMIN_MAX_JSON_DEPTH)
        except JsonInputError as exc:
            raise ServiceError(exc.code, exc.message, details=exc.details) from None

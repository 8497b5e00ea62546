from __future__ import annotations

from django.conf import settings
from django.core import signing
from rest_framework.pagination import Cursor as Position
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from ctxadmin.errors import ServiceError

PAGINATION_QUERY_PARAMS = frozenset({"cursor", "limit"})


class Cursor(CursorPagination):
    """Opaque-cursor pagination: stable under inserts, no COUNT(*), O(page) per request.

    ``limit`` (1..CTXADMIN_MAX_PAGE_SIZE, default CTXADMIN_PAGE_SIZE) sets the page size; a
    bad ``limit`` or a tampered ``cursor`` is a 400, never silently replaced.

    A cursor is signed (``SECRET_KEY``, with its fallbacks) and bound to the list it came
    from: the request path names the app, the user, the session and the list, so a cursor
    only decodes on the list that issued it. Its position is then a value this list wrote
    itself, never one a client made up (an unsigned position reached the database as a
    malformed timestamp: a 500).
    """

    cursor_query_param = "cursor"
    page_size_query_param = "limit"
    ordering = "-created_at"

    def __init__(self):
        # Read per request (a paginator is made per request) so settings can change in tests.
        self.page_size = settings.CTXADMIN_PAGE_SIZE
        self.max_page_size = settings.CTXADMIN_MAX_PAGE_SIZE

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not raw.isdigit() or not 1 <= int(raw) <= self.max_page_size:
            raise ServiceError(
                "invalid_parameter",
                f"limit must be an integer from 1 to {self.max_page_size}",
                details={"parameter": "limit", "maximum": self.max_page_size},
            )
        return int(raw)

    def _salt(self, request) -> str:
        return f"ctxadmin.cursor:{request.path}"

    def decode_cursor(self, request):
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        try:
            tokens = signing.loads(encoded, salt=self._salt(request))
            offset, reverse, position = tokens
            if (
                isinstance(offset, bool)
                or not isinstance(offset, int)
                or not 0 <= offset <= self.offset_cutoff
                or not isinstance(reverse, bool)
                or not (position is None or isinstance(position, str))
            ):
                raise ValueError("not a cursor of this list")
        except (signing.BadSignature, TypeError, ValueError):
            raise ServiceError(
                "invalid_cursor",
                "cursor is not a cursor this list returned",
                details={"parameter": "cursor"},
            ) from None
        return Position(offset=offset, reverse=reverse, position=position)

    def encode_cursor(self, cursor):
        encoded = signing.dumps(
            [cursor.offset, bool(cursor.reverse), cursor.position], salt=self._salt(self.request)
        )
        return replace_query_param(self.base_url, self.cursor_query_param, encoded)

    def get_paginated_response(self, data):
        return Response(
            {"results": data, "next": self.get_next_link(), "previous": self.get_previous_link()}
        )

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["results", "next", "previous"],
            "properties": {
                "results": schema,
                "next": {"type": "string", "nullable": True, "format": "uri"},
                "previous": {"type": "string", "nullable": True, "format": "uri"},
            },
        }

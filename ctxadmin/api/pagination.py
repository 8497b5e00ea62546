from __future__ import annotations

from django.conf import settings
from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response

from ctxadmin.api.errors import ApiError

PAGINATION_QUERY_PARAMS = frozenset({"cursor", "limit"})


class Cursor(CursorPagination):
    """Opaque-cursor pagination: stable under inserts, no COUNT(*), O(page) per request.

    ``limit`` (1..CTXADMIN_MAX_PAGE_SIZE, default CTXADMIN_PAGE_SIZE) sets the page size; a
    bad ``limit`` or a tampered ``cursor`` is a 400, never silently replaced.
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
            raise ApiError(
                "invalid_parameter",
                f"limit must be an integer from 1 to {self.max_page_size}",
                details={"parameter": "limit", "maximum": self.max_page_size},
            )
        return int(raw)

    def decode_cursor(self, request):
        try:
            return super().decode_cursor(request)
        except NotFound:  # DRF's answer to a cursor it cannot decode
            raise ApiError(
                "invalid_cursor",
                "cursor is not a cursor this endpoint returned",
                details={"parameter": "cursor"},
            ) from None

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

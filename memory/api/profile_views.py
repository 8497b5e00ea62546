"""A user's profile over REST: the live keyed memories under chosen key prefixes, as fields
and as one stable block."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response

from memory import profile
from memory.api.views import MemoryScopedView

_FIELDS = inline_serializer(
    "ProfileField",
    {
        "key": serializers.CharField(),
        "value": serializers.CharField(),
        "memory_id": serializers.UUIDField(),
        "since": serializers.DateTimeField(),
    },
    many=True,
)
_PROFILE = inline_serializer(
    "Profile",
    {
        "prefixes": serializers.ListField(child=serializers.CharField()),
        "fields": _FIELDS,
        "text": serializers.CharField(),
        "sha256": serializers.RegexField("^[0-9a-f]{64}$"),
        "bytes": serializers.IntegerField(),
        "truncated": serializers.BooleanField(),
    },
)


class ProfileView(MemoryScopedView):
    tool_capabilities = {"GET": "memory_search"}
    allowed_query_params = frozenset({"prefix", "max_fields", "max_bytes"})
    repeatable_query_params = frozenset({"prefix"})

    @extend_schema(
        operation_id="memory_profile",
        description="The user's profile: the version valid now of each unexpired keyed memory "
        "whose key is a `prefix` or lies under one (segment by segment: `preference` matches "
        "`preference.seat`, not `preferences.x`), in key order, as fields citing their "
        "memory and as one block (`text`, with its `sha256`: the same fields give the same "
        f"bytes). 1 to {profile.MAX_PROFILE_PREFIXES} prefixes; at most `max_fields` "
        f"(default and limit {profile.MAX_PROFILE_FIELDS}) fields and a block of at most "
        f"`max_bytes` (default {profile.DEFAULT_PROFILE_BYTES}, limit "
        f"{profile.MAX_PROFILE_BYTES}); the first field past either ends it (`truncated`).",
        parameters=[
            OpenApiParameter(
                "prefix", str, many=True, required=True, description="a key or key prefix"
            ),
            OpenApiParameter("max_fields", int, description="the most fields"),
            OpenApiParameter("max_bytes", int, description="the most bytes of the block"),
        ],
        responses={200: _PROFILE},
    )
    def get(self, request, app, user):
        query = request.query_params
        numbers = {name: _integer(query.get(name), name) for name in ("max_fields", "max_bytes")}
        wanted = profile.parse_profile_request(
            query.getlist("prefix"),
            numbers["max_fields"],
            numbers["max_bytes"],
            prefixes_name="prefix",
        )
        return Response(profile.user_profile(self.tenant, user, wanted))


def _integer(raw: str | None, name: str) -> int | str | None:
    """A query parameter's integer (the parser refuses anything else, the text included)."""
    if raw is None:
        return None
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else raw

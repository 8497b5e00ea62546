"""User tokens over REST: mint (the token is shown once), list and revoke a user's
least-authority tokens. An API key with the ``admin`` or the ``delegate`` scope only: a
token can never mint another."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.response import Response

from ctxadmin.api.pagination import PAGINATION_QUERY_PARAMS, Cursor
from ctxadmin.api.schema import ref
from ctxadmin.api.views import AppScopedView
from ctxadmin.models import SCOPE_ADMIN, SCOPE_DELEGATE
from sessions_app import user_tokens
from sessions_app.models import ToolToken

JSON = "application/json"


class UserTokenCursor(Cursor):
    ordering = ("-created_at", "-id")


class UserTokenScopedView(AppScopedView):
    required_scopes = {"*": (SCOPE_DELEGATE, SCOPE_ADMIN)}
    queryset = ToolToken.objects.filter(invocation__isnull=True).select_related("app", "session")


class UserTokenListView(UserTokenScopedView):
    allowed_query_params = PAGINATION_QUERY_PARAMS
    pagination_class = UserTokenCursor

    @extend_schema(
        operation_id="user_tokens_list",
        description="The user's tokens, newest first (never their secrets).",
        responses={200: ref("UserTokenPage")},
    )
    def get(self, request, app, user):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([user_tokens.user_token_json(t) for t in page])

    @extend_schema(
        operation_id="user_tokens_mint",
        description="Mint a least-authority token for this user, e.g. for an MCP client or "
        "one agent run: `{capabilities, session_id?, ttl_ms?, label?}`. The token (shown once) "
        "can do only `identity` and the listed capabilities for this user (and only that "
        "session when `session_id` is given), until `ttl_ms` passes (default 3600000, at most "
        "30 days) or it is revoked. 404 for an unknown session; 429 `too_many_user_tokens` "
        "(at most 100 open per user).",
        request={JSON: ref("UserTokenMint")},
        responses={201: ref("UserTokenMinted")},
    )
    def post(self, request, app, user):
        token, raw = user_tokens.mint(self.tenant, user, request.data, request.auth.prefix)
        return Response(
            {"token": raw, **user_tokens.user_token_json(token)}, status=status.HTTP_201_CREATED
        )


class UserTokenDetailView(UserTokenScopedView):
    @extend_schema(operation_id="user_token_get", responses={200: ref("UserToken")})
    def get(self, request, app, user, prefix):
        token = self.get_queryset().filter(prefix=prefix).first()
        if token is None:
            raise exceptions.NotFound()
        return Response(user_tokens.user_token_json(token))

    @extend_schema(operation_id="user_tokens_revoke", responses={204: None})
    def delete(self, request, app, user, prefix):
        user_tokens.revoke(self.tenant, user, prefix, request.auth.prefix)
        return Response(status=status.HTTP_204_NO_CONTENT)

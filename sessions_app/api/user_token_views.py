"""User tokens over REST: mint (the token is shown once), list and revoke a user's
least-authority tokens. An API key with the ``admin`` or the ``delegate`` scope only: a
token can never mint another."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.response import Response

from ctxadmin.api.pagination import PAGINATION_QUERY_PARAMS, Cursor
from ctxadmin.api.paths import path_segment_error
from ctxadmin.api.schema import ref
from ctxadmin.api.views import AppScopedView
from ctxadmin.errors import ServiceError
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
        token, raw = user_tokens.mint(self.tenant, user, request.data, request.auth)
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


def _query_param(request, name: str, check) -> str | None:
    """A filter's value, or None; a bad one is 400 ``invalid_parameter`` naming it."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    problem = check(raw)
    if problem:
        raise ServiceError("invalid_parameter", f"{name} {problem}", details={"parameter": name})
    return raw


def _user_id_problem(raw: str) -> str | None:
    return "must be a user id" if path_segment_error("user", raw) else None


def _minted_by_problem(raw: str) -> str | None:
    return None if user_tokens.KEY_PREFIX_RE.match(raw) else "must be an API key prefix"


def _state_problem(raw: str) -> str | None:
    return None if raw in user_tokens.STATES else f"must be one of {list(user_tokens.STATES)}"


class AppUserTokenListView(UserTokenScopedView):
    allowed_query_params = PAGINATION_QUERY_PARAMS | {"user_id", "minted_by", "state"}
    pagination_class = UserTokenCursor

    @extend_schema(
        operation_id="app_user_tokens_list",
        description="The app's user tokens of every user, newest first (never their secrets), "
        "narrowed by `user_id`, by `minted_by` (the prefix of the API key that minted them) "
        "and by `state`.",
        parameters=[
            OpenApiParameter("user_id", str, description="only this user's tokens"),
            OpenApiParameter(
                "minted_by", str, description="only the tokens this key (by prefix) minted"
            ),
            OpenApiParameter("state", str, enum=list(user_tokens.STATES)),
        ],
        responses={200: ref("UserTokenPage")},
    )
    def get(self, request, app):
        tokens = user_tokens.app_user_tokens(
            self.tenant,
            user_id=_query_param(request, "user_id", _user_id_problem),
            minted_by=_query_param(request, "minted_by", _minted_by_problem),
            state=_query_param(request, "state", _state_problem),
        )
        page = self.paginate_queryset(tokens)
        return self.get_paginated_response([user_tokens.user_token_json(t) for t in page])


class AppUserTokenRevokeView(UserTokenScopedView):
    @extend_schema(
        operation_id="app_user_tokens_revoke",
        description="Revoke every open user token of the app that one API key minted: "
        '`{"minted_by": "<key prefix>"}`; answers how many (0 for a prefix that minted none '
        "here). Revoking or rotating the key itself ends its tokens too.",
        request={JSON: ref("UserTokenRevokeByMinter")},
        responses={200: ref("UserTokensRevoked")},
    )
    def post(self, request, app):
        revoked = user_tokens.revoke_minted_by(self.tenant, request.data, request.auth.prefix)
        return Response({"revoked": revoked})

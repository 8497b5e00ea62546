"""Tool tokens and session state over REST: what an invocation's tools act with."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from ctxadmin.api.schema import ref
from ctxadmin.api.views import AppScopedView
from ctxadmin.errors import not_found
from sessions_app import selectors, tool_tokens, user_tokens
from sessions_app.api.views import SessionsScopedView

JSON = "application/json"


class ToolTokenListView(SessionsScopedView):
    @extend_schema(
        operation_id="tool_tokens_mint",
        description="Mint a least-authority token for a function call the model made in this "
        "invocation: `{tool_name, capabilities, ttl_ms?, function_call_id?}`; the token (shown "
        "once) can do only `identity` and the listed capabilities on this user and session, "
        "until `ttl_ms` passes (default 300000, at most 3600000), it is deleted, or the call's "
        "function response is appended. 422 `no_such_function_call`; 409 "
        "`function_call_answered`; 429 `too_many_tool_tokens`.",
        request={JSON: ref("ToolTokenMint")},
        responses={201: ref("ToolTokenMinted")},
    )
    def post(self, request, app, user, sid, invocation):
        session = self.session_or_404(sid)
        token, raw = tool_tokens.mint(self.tenant, session, invocation, request.data, request.auth)
        return Response(
            {"token": raw, **tool_tokens.token_json(token)}, status=status.HTTP_201_CREATED
        )


class ToolTokenDetailView(SessionsScopedView):
    @extend_schema(operation_id="tool_tokens_revoke", responses={204: None})
    def delete(self, request, app, user, sid, invocation, prefix):
        session = self.session_or_404(sid)
        tool_tokens.revoke(self.tenant, session, invocation, prefix)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ToolTokenIdentityView(AppScopedView):
    """What the calling tool token is bound to (its ``identity`` capability)."""

    tool_capabilities = {"GET": "identity"}

    @extend_schema(operation_id="tool_token_identity", responses={200: ref("ToolTokenInfo")})
    def get(self, request, app):
        if not isinstance(request.auth, tool_tokens.ToolToken):
            raise not_found()
        if request.auth.invocation_id is None:
            return Response(user_tokens.user_token_json(request.auth))
        return Response(tool_tokens.token_json(request.auth))


class SessionStateView(SessionsScopedView):
    """The session's state with the user's ``user:`` and the app's ``app:`` keys."""

    tool_capabilities = {"GET": "state_read"}

    @extend_schema(operation_id="session_state", responses={200: ref("SessionState")})
    def get(self, request, app, user, sid):
        session = selectors.session_with_state(self.tenant, user, sid)
        if session is None:
            raise not_found()
        return Response({"app": app, "user_id": user, "session_id": sid, "state": session["state"]})

"""The runner over REST: building a model call's context, and invocations (one model call
with managed context for a session). Thin: the runner's modules decide."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from ctxadmin.api.schema import ref
from ctxadmin.errors import ServiceError
from ctxadmin.models import SCOPE_MEMORY
from runner import invocations
from runner.context import build_context
from runner.inputs import parse_context_request, parse_invocation_request
from sessions_app.api.views import SessionsScopedView

JSON = "application/json"


class ContextView(SessionsScopedView):
    """Build the bounded, secret-free request for the next model call."""

    @extend_schema(
        operation_id="context_build",
        request={JSON: ref("ContextRequest")},
        responses={200: ref("ContextResponse")},
    )
    def post(self, request, app, user, sid):
        context_request = parse_context_request(request.data)  # before any event is read
        reads_memory = context_request.memory is not None or context_request.profile is not None
        if reads_memory and not request.auth.has_scope(SCOPE_MEMORY):
            raise ServiceError(
                "permission_denied",
                "Memory retrieval and a profile need an API key with the 'memory' scope.",
                status_code=403,
            )
        session = self.session_or_404(sid)
        built = build_context(session, context_request)
        return HttpResponse(built.response_json(), content_type="application/json")


class InvocationListView(SessionsScopedView):
    @extend_schema(
        operation_id="invocations_run",
        description="Append the input, build the context (compacting under token pressure, "
        "preloading memory), reuse the provider's prefix cache, call the model, append its "
        "answer and ingest: 201 with the model's content and content-free accounting; 200 "
        "when the same `invocation_id` and request already completed (the stored answer). "
        "409 `invocation_conflict` (the id was used for another request), "
        "`invocation_in_progress`, `invocation_failed`. Provider failures: 429 "
        "`provider_rate_limited` (Retry-After), 504 `provider_timeout`, 503 "
        "`provider_unavailable`, 502 `provider_rejected` / `provider_auth_failed` / "
        "`provider_bad_response`; the input stays stored.",
        request={JSON: ref("InvocationRequest")},
        responses={201: ref("Invocation"), 200: ref("Invocation")},
    )
    def post(self, request, app, user, sid):
        parsed = parse_invocation_request(request.data)
        if parsed.context.profile is not None and not request.auth.has_scope(SCOPE_MEMORY):
            raise ServiceError(
                "permission_denied",
                "A profile needs an API key with the 'memory' scope.",
                status_code=403,
            )
        session = self.session_or_404(sid)
        body, ran = invocations.run(self.tenant, user, session, parsed)
        return Response(body, status=status.HTTP_201_CREATED if ran else status.HTTP_200_OK)

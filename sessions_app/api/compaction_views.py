"""Compaction over REST: policies (app default, session override), requests and checkpoints."""

from __future__ import annotations

import uuid

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from ctxadmin.api.pagination import PAGINATION_QUERY_PARAMS, Cursor
from ctxadmin.api.schema import ref
from ctxadmin.api.views import AppScopedView
from ctxadmin.errors import ServiceError, invalid, strict_object
from ctxadmin.models import SCOPE_SESSIONS
from ctxadmin.timestamps import iso_timestamp
from sessions_app import history
from sessions_app.api.views import JSON, SessionsScopedView
from sessions_app.compaction import policies, requests
from sessions_app.compaction.policy import DEFAULT_POLICY, LIMITS
from sessions_app.models import Checkpoint

REQUEST_KEYS = frozenset(
    {"compaction_id", "async", "timeout_ms", "expected_head", "source_event_ids"}
)
MAX_SOURCE_IDS = 5000


def checkpoint_json(
    row: Checkpoint, *, with_summary: bool = False, public: dict[str, str] | None = None
) -> dict:
    """A compaction as the API shows it: ids, counts, tokens and fingerprints; the summary
    only on the detail view (to the owning app's key). ``public`` maps checkpoints' own keys
    to their compaction ids (read here when not given)."""
    if public is None:
        public = history.compaction_ids([row.parent_id, row.subsumed_by_id])
    body = {
        "compaction_id": str(row.compaction_id),
        "status": row.status,
        "origin": row.origin,
        "trigger": row.trigger or None,
        "representation": row.representation or None,
        "coverage": None
        if row.first_seq is None
        else {"first_seq": row.first_seq, "last_seq": row.last_seq},
        "source_event_count": len(row.source_event_ids),
        "source_fingerprint": row.source_fingerprint or None,
        "tokens_before": row.tokens_before,
        "tokens_after": row.tokens_after,
        "summarizer": row.summarizer or None,
        "model": row.model or None,
        "usage": row.usage,
        "parent_id": None if row.parent_id is None else public.get(str(row.parent_id)),
        "subsumed_by": None if row.subsumed_by_id is None else public.get(str(row.subsumed_by_id)),
        "summary_event_id": row.summary_event_id or None,
        "projected_event_ids": row.projected_event_ids,
        "purged_events": row.purged_events,
        "error": {"code": row.reason, "message": row.message} if row.status == "failed" else None,
        "duration_ms": row.duration_ms,
        "created_at": iso_timestamp(row.created_at) if row.created_at else None,
        "finished_at": iso_timestamp(row.finished_at) if row.finished_at else None,
    }
    if with_summary:
        body["summary"] = row.summary
    return body


def _policy_json(policy, source: str) -> dict:
    return {"policy": policy.as_dict(), "source": source}


class CompactionCursor(Cursor):
    ordering = ("-created_at", "-id")


class AppCompactionPolicyView(AppScopedView):
    """The app's default compaction policy (sessions without their own use it)."""

    required_scopes = {"*": SCOPE_SESSIONS}
    user_field = None

    @extend_schema(operation_id="app_compaction_policy_get", responses={200: ref("PolicyState")})
    def get(self, request, app):
        policy = policies.app_policy(self.tenant)
        if policy is None:
            return Response(_policy_json(DEFAULT_POLICY, "default"))
        return Response(_policy_json(policy, "app"))

    @extend_schema(
        operation_id="app_compaction_policy_put",
        request={JSON: ref("CompactionPolicy")},
        responses={200: ref("PolicyState")},
    )
    def put(self, request, app):
        return Response(_policy_json(policies.set_app_policy(self.tenant, request.data), "app"))

    @extend_schema(operation_id="app_compaction_policy_delete", responses={204: None})
    def delete(self, request, app):
        policies.clear_app_policy(self.tenant)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SessionCompactionPolicyView(SessionsScopedView):
    """A session's own compaction policy (replacing the app default whole)."""

    @extend_schema(
        operation_id="session_compaction_policy_get", responses={200: ref("PolicyState")}
    )
    def get(self, request, app, user, sid):
        session = self.session_or_404(sid)
        return Response(_policy_json(*policies.effective_policy(session)))

    @extend_schema(
        operation_id="session_compaction_policy_put",
        request={JSON: ref("CompactionPolicy")},
        responses={200: ref("PolicyState")},
    )
    def put(self, request, app, user, sid):
        session = self.session_or_404(sid)
        return Response(_policy_json(policies.set_session_policy(session, request.data), "session"))

    @extend_schema(operation_id="session_compaction_policy_delete", responses={204: None})
    def delete(self, request, app, user, sid):
        policies.clear_session_policy(self.session_or_404(sid))
        return Response(status=status.HTTP_204_NO_CONTENT)


def parse_manual_request(body) -> requests.ManualRequest:
    if body is None:
        body = {}
    strict_object(body, REQUEST_KEYS)
    raw_id = body.get("compaction_id")
    if raw_id is None:
        compaction_id = uuid.uuid4()
    else:
        try:
            compaction_id = uuid.UUID(str(raw_id))
        except ValueError:
            raise invalid("compaction_id", "must be a UUID") from None
    run_async = body.get("async", False)
    if not isinstance(run_async, bool):
        raise invalid("async", "must be true or false")
    timeout = body.get("timeout_ms")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int)
        or not 1 <= timeout <= LIMITS["timeout_ms"]
    ):
        raise invalid("timeout_ms", f"must be an integer from 1 to {LIMITS['timeout_ms']}")
    check_head = "expected_head" in body
    head = body.get("expected_head")
    if head is not None:
        try:
            head = str(uuid.UUID(str(head)))
        except ValueError:
            raise invalid("expected_head", "must be a compaction id or null") from None
    ids = body.get("source_event_ids")
    if ids is not None:
        if (
            not isinstance(ids, list)
            or not 1 <= len(ids) <= MAX_SOURCE_IDS
            or not all(isinstance(i, str) and 0 < len(i) <= 128 for i in ids)
        ):
            raise invalid("source_event_ids", f"must be a list of 1 to {MAX_SOURCE_IDS} event ids")
        ids = tuple(ids)
    return requests.ManualRequest(compaction_id, run_async, timeout, check_head, head, ids)


class CompactionListView(SessionsScopedView):
    """A session's compactions, newest first; ``POST`` requests one."""

    allowed_query_params = PAGINATION_QUERY_PARAMS
    pagination_class = CompactionCursor

    @extend_schema(operation_id="compactions_list", responses={200: ref("CompactionPage")})
    def get(self, request, app, user, sid):
        session = self.session_or_404(sid)
        page = self.paginate_queryset(
            Checkpoint.objects.filter(session=session).defer("summary", "items_json")
        )
        public = history.compaction_ids(
            {key for row in page for key in (row.id, row.parent_id, row.subsumed_by_id)}
        )
        return self.get_paginated_response([checkpoint_json(row, public=public) for row in page])

    @extend_schema(
        operation_id="compactions_request",
        request={JSON: ref("CompactionRequest")},
        responses={
            201: ref("CompactionDetail"),
            200: ref("CompactionDetail"),
            202: ref("CompactionAccepted"),
        },
    )
    def post(self, request, app, user, sid):
        manual = parse_manual_request(request.data)
        session = self.session_or_404(sid)
        row, created = requests.request_manual(session, manual)
        if row.status == Checkpoint.PENDING:
            url = request.build_absolute_uri(f"{request.path}/{row.compaction_id}")
            return Response(
                {"compaction_id": str(row.compaction_id), "status": row.status, "status_url": url},
                status=status.HTTP_202_ACCEPTED,
            )
        if row.status == Checkpoint.FAILED and created:
            details = {
                "compaction_id": str(row.compaction_id),
                **getattr(row, "conflict_details", {}),
            }
            conflict = row.reason in {"stale_head", "compaction_conflict"}
            raise ServiceError(
                row.reason,
                row.message,
                status_code=409 if conflict else 422,
                details=details,
            )
        return Response(
            checkpoint_json(row, with_summary=True),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class CompactionDetailView(SessionsScopedView):
    @extend_schema(operation_id="compactions_get", responses={200: ref("CompactionDetail")})
    def get(self, request, app, user, sid, compaction_id):
        session = self.session_or_404(sid)
        row = requests.get_checkpoint(session, compaction_id)
        return Response(checkpoint_json(row, with_summary=True))

"""Artifacts over REST (thin: ``artifacts.services`` decides)."""

from __future__ import annotations

import base64

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response

from ctxadmin.api.pagination import PAGINATION_QUERY_PARAMS, Cursor
from ctxadmin.api.schema import ref
from ctxadmin.api.views import AppScopedView
from ctxadmin.delegated import DelegatedCredential
from ctxadmin.errors import ServiceError, strict_object
from ctxadmin.models import SCOPE_SESSIONS
from ctxadmin.timestamps import iso_timestamp
from sessions_app import services as session_services
from sessions_app.artifacts import rules, services
from sessions_app.artifacts.models import ArtifactHead
from sessions_app.models import ToolToken

JSON = "application/json"
BINARY = {"type": "string", "format": "binary"}
FORMATS = ("json", "raw")


class NameCursor(Cursor):
    ordering = ("name",)


class VersionCursor(Cursor):
    ordering = ("version",)


class AlwaysJson(DefaultContentNegotiation):
    """Answers (and errors) are JSON whatever ``Accept`` or ``?format=`` say; ``?format=raw``
    is this API's own parameter, answered with the stored bytes."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class ArtifactsScopedView(AppScopedView):
    required_scopes = {"*": SCOPE_SESSIONS}

    def refuse_user_name_for_bound_credential(self, request, name: str) -> None:
        """A delegated credential bound to one session reaches that session only: it writes
        no ``user:`` artifact, which every other session of the user sees (as it writes no
        ``user:`` state)."""
        credential = request.auth
        if (
            isinstance(credential, DelegatedCredential)
            and credential.bound_session_id is not None
            and name.startswith(rules.USER_PREFIX)
        ):
            raise ServiceError(
                "artifact_scope_denied",
                "A credential bound to one session may not write the user's 'user:' "
                "artifacts; save a session artifact or use an API key.",
                status_code=403,
                details={"scope": rules.USER_SCOPE},
            )


def _format(request) -> str:
    value = request.query_params.get("format")  # given once: the base view sees to it
    if value is None:
        return "json"
    if value not in FORMATS:
        raise ServiceError(
            "invalid_parameter",
            f"format must be one of {', '.join(FORMATS)}",
            details={"parameter": "format"},
        )
    return value


def _version(request) -> int | None:
    raw = request.query_params.get("version")
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        raise ServiceError(
            "invalid_parameter",
            "version must be an integer >= 0",
            details={"parameter": "version"},
        )
    return int(raw)


def name_summary(head: ArtifactHead) -> dict:
    return {
        "name": head.name,
        "scope": head.scope,
        "latest_version": head.next_version - 1,
        "created_at": iso_timestamp(head.created_at),
        "updated_at": iso_timestamp(head.updated_at),
    }


class ArtifactListView(ArtifactsScopedView):
    tool_capabilities = {"GET": "artifact_list"}
    allowed_query_params = PAGINATION_QUERY_PARAMS
    pagination_class = NameCursor

    @extend_schema(
        operation_id="artifacts_list",
        description="The session's artifact names with the user's `user:` names, by name. The "
        "session need not exist (then only the user's names are listed).",
        responses={200: ref("ArtifactNamePage")},
    )
    def get(self, request, app, user, sid):
        page = self.paginate_queryset(services.list_artifact_names(self.tenant, user, sid))
        return self.get_paginated_response([name_summary(head) for head in page])


class ArtifactDetailView(ArtifactsScopedView):
    tool_capabilities = {"GET": "artifact_get", "POST": "artifact_put", "DELETE": "artifact_delete"}
    content_negotiation_class = AlwaysJson

    @property
    def allowed_query_params(self) -> frozenset[str]:
        loading = frozenset({"version", "format"})
        return {
            "GET": loading,
            "HEAD": loading,  # answered by get(), without the body
            "POST": frozenset({"format"}),
        }.get(self.request.method, frozenset())

    @extend_schema(
        operation_id="artifacts_load",
        description="The latest version (or `version`) with its bytes: as JSON with "
        "`data_base64`, or with `format=raw` the bytes themselves under their stored mime type "
        "(headers `ETag` = the SHA-256, `X-Artifact-Version`). 404 when there is none.",
        parameters=[
            OpenApiParameter("version", int, description="a given version (default: latest)"),
            OpenApiParameter("format", str, enum=list(FORMATS), description="default json"),
        ],
        responses={
            (200, JSON): ref("ArtifactContent"),
            (200, "application/octet-stream"): BINARY,
        },
    )
    def get(self, request, app, user, sid, name):
        version = _version(request)
        raw = _format(request) == "raw"
        loaded = services.load_artifact(self.tenant, user, sid, name, version)
        if raw:
            response = HttpResponse(loaded.data, content_type=loaded.info.mime_type)
            response["ETag"] = f'"{loaded.info.sha256}"'
            response["X-Artifact-Version"] = str(loaded.info.version)
            response["Content-Disposition"] = f'attachment; filename="{name}"'
            return response
        body = loaded.info.as_json()
        body["data_base64"] = base64.b64encode(loaded.data).decode("ascii")
        return Response(body)

    @extend_schema(
        operation_id="artifacts_save",
        description="Save the next version of the artifact (0 for a new name). A JSON body "
        "(`Content-Type: application/json`) is an `ArtifactSave`; any other body, or any body "
        "with `format=raw`, is the artifact itself and its Content-Type its mime type "
        "(default application/octet-stream). 404 for a session-scoped name of a missing "
        "session; 413 `artifact_too_large`; 409 `artifact_version_limit`.",
        parameters=[
            OpenApiParameter(
                "format", str, enum=list(FORMATS), description="raw: the body is the artifact"
            )
        ],
        request={JSON: ref("ArtifactSave"), "application/octet-stream": BINARY},
        responses={201: ref("ArtifactVersion")},
    )
    def post(self, request, app, user, sid, name):
        self.refuse_user_name_for_bound_credential(request, name)
        raw = _format(request) == "raw"
        content_type = request.META.get("CONTENT_TYPE", "").strip()
        if not raw and content_type.split(";", 1)[0].strip().lower() == JSON:
            try:
                body = rules.parse_save_body(request.data, settings.CTXADMIN_ARTIFACT_MAX_BYTES)
            except rules.RuleError as error:
                raise services.api_error(error) from None
            data, mime_type, metadata = body.data, body.mime_type, body.custom_metadata
            display_name = body.display_name
        else:
            data, metadata, display_name = request.body, None, None
            mime_type = content_type or "application/octet-stream"
        info = services.save_artifact(
            self.tenant, user, sid, name, data, mime_type, metadata, display_name=display_name
        )
        return Response(info.as_json(), status=status.HTTP_201_CREATED)

    @extend_schema(operation_id="artifacts_delete", responses={204: None})
    def delete(self, request, app, user, sid, name):
        self.refuse_user_name_for_bound_credential(request, name)
        services.delete_artifact(self.tenant, user, sid, name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ArtifactVersionListView(ArtifactsScopedView):
    tool_capabilities = {"GET": "artifact_list_versions"}
    allowed_query_params = PAGINATION_QUERY_PARAMS
    pagination_class = VersionCursor

    @extend_schema(
        operation_id="artifacts_versions",
        description="The artifact's versions, oldest first, without their bytes.",
        responses={200: ref("ArtifactVersionPage")},
    )
    def get(self, request, app, user, sid, name):
        versions = services.list_artifact_versions(self.tenant, user, sid, name)
        page = self.paginate_queryset(versions)
        return self.get_paginated_response(
            [services.ArtifactInfo.of(name, row).as_json() for row in page]
        )


class ArtifactAttachView(ArtifactsScopedView):
    tool_capabilities = {"POST": "artifact_attach"}

    @extend_schema(
        operation_id="artifacts_attach",
        description='Attach a stored version (`{"version"?}`, default the latest) to the '
        "conversation: an event whose `actions.artifact_delta` names it is appended to the "
        'session, authored by the calling tool (or `{"author"}` with an API key).',
        request={"application/json": ref("ArtifactAttach")},
        responses={201: ref("ArtifactAttached")},
    )
    def post(self, request, app, user, sid, name):
        body = strict_object(request.data or {}, {"version", "author"})
        version = body.get("version")
        if version is not None and (
            isinstance(version, bool) or not isinstance(version, int) or version < 0
        ):
            raise ServiceError(
                "validation_error", "version: must be an integer >= 0", details={"field": "version"}
            )
        token = request.auth if isinstance(request.auth, ToolToken) else None
        if token is not None and "author" in body:
            raise ServiceError(
                "validation_error",
                "author: a tool token attaches as its tool",
                details={"field": "author"},
            )
        author = token.tool_name if token is not None else body.get("author", "tool")
        info = services.load_artifact(self.tenant, user, sid, name, version).info
        event = {
            "author": author,
            "actions": {"artifact_delta": {name: info.version}},
        }
        if token is not None:
            event["invocation_id"] = token.invocation.invocation_id
        result = session_services.append_events(self.tenant, user, sid, [event], path="event")
        return Response(
            {**info.as_json(), "event_id": result.events[0]["event_id"]},
            status=status.HTTP_201_CREATED,
        )

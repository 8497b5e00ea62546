"""Artifacts in the operator console: read-only and content-free.

Pages show names, scopes, versions, sizes, digests, bare mime types (``type/subtype``) and
times; the bytes column is never loaded and custom metadata is never shown. A mime type's
parameters (``text/plain; name=…``) are the client's text: shown only to operators holding
``ctxadmin.view_content``, on a version's detail page, audit-logged.
"""

from __future__ import annotations

from django.contrib import admin

from ctxadmin.admin import ReadOnlyAdmin
from ctxadmin.content import ContentAdminMixin, render
from sessions_app.artifacts.models import ArtifactHead, ArtifactVersion


@admin.register(ArtifactHead)
class ArtifactAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "app",
        "user_id",
        "session_label",
        "name",
        "scope",
        "versions",
        "created_at",
        "updated_at",
    ]
    list_select_related = ["app", "session"]
    search_fields = ["=user_id", "=name"]

    @admin.display(description="session")
    def session_label(self, obj):
        return obj.session.session_id if obj.session_id else "—"

    @admin.display(description="versions")
    def versions(self, obj):
        return obj.next_version


@admin.register(ArtifactVersion)
class ArtifactVersionAdmin(ContentAdminMixin, ReadOnlyAdmin):
    content_fields = ("full_mime_type",)
    list_display = [
        "id",
        "app",
        "user_id",
        "session_label",
        "name",
        "scope",
        "version",
        "size",
        "sha256",
        "bare_mime_type",
        "created_at",
    ]
    fields = [*list_display, "storage"]
    list_select_related = ["head__app", "head__session"]
    list_filter = ["head__app"]
    search_fields = ["=sha256"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("data", "custom_metadata")

    @admin.display(description="app")
    def app(self, obj):
        return obj.head.app

    @admin.display(description="user id")
    def user_id(self, obj):
        return obj.head.user_id

    @admin.display(description="session")
    def session_label(self, obj):
        return obj.head.session.session_id if obj.head.session_id else "—"

    @admin.display(description="name")
    def name(self, obj):
        return obj.head.name

    @admin.display(description="scope")
    def scope(self, obj):
        return obj.head.scope

    @admin.display(description="mime type")
    def bare_mime_type(self, obj):
        return bare_mime_type(obj.mime_type)

    @admin.display(description="mime type with its parameters (content)")
    def full_mime_type(self, obj):
        return render(obj.mime_type)

    def content_app_id(self, obj):
        return obj.head.app_id


def bare_mime_type(mime_type: str) -> str:
    """``type/subtype`` without the parameters the client wrote after it."""
    return mime_type.split(";", 1)[0].strip()

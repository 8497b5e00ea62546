"""Artifacts in the operator console: read-only and content-free.

Pages show names, scopes, versions, sizes, digests, mime types and times; the bytes column is
never loaded and custom metadata is never shown.
"""

from __future__ import annotations

from django.contrib import admin

from ctxadmin.admin import ReadOnlyAdmin
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
class ArtifactVersionAdmin(ReadOnlyAdmin):
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
        "mime_type",
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

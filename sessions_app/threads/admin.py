"""Graph threads in the operator console: read-only and content-free (ids, namespaces,
counts, sizes and times; never a checkpoint's, blob's or write's bytes or metadata)."""

from __future__ import annotations

from django.contrib import admin

from ctxadmin.admin import ReadOnlyAdmin
from sessions_app.threads.models import GraphThread, ThreadCheckpoint


@admin.register(GraphThread)
class GraphThreadAdmin(ReadOnlyAdmin):
    list_display = ["id", "app", "thread_id", "created_at", "updated_at"]
    search_fields = ["=thread_id"]


@admin.register(ThreadCheckpoint)
class ThreadCheckpointAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "app",
        "thread_label",
        "checkpoint_ns",
        "checkpoint_id",
        "parent_checkpoint_id",
        "size",
        "created_at",
    ]
    list_select_related = ["thread__app"]
    list_filter = ["thread__app"]
    search_fields = ["=checkpoint_id"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("data", "metadata", "channel_versions")

    @admin.display(description="app")
    def app(self, obj):
        return obj.thread.app

    @admin.display(description="thread")
    def thread_label(self, obj):
        return obj.thread.thread_id

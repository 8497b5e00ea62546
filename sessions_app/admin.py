from __future__ import annotations

from django.contrib import admin

from sessions_app.models import Session


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    """Sessions by their numbers only: no state, no events, no content."""

    list_display = [
        "session_id",
        "user_id",
        "app",
        "event_count",
        "total_bytes",
        "token_estimate",
        "revision",
        "updated_at",
    ]
    list_select_related = ["app"]
    list_filter = ["app"]
    ordering = ["-updated_at"]
    fields = [
        "app",
        "user_id",
        "session_id",
        "revision",
        "last_seq",
        "event_count",
        "total_bytes",
        "token_estimate",
        "created_at",
        "updated_at",
    ]
    readonly_fields = fields
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

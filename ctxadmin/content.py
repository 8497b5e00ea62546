"""Conversation content in the console: only for ``ctxadmin.view_content``, only on a detail
page, and audit-logged before the page is rendered."""

from __future__ import annotations

import json

from django.contrib import messages
from django.utils.html import format_html

from ctxadmin.models import AuditLog

PERMISSION = "ctxadmin.view_content"
MAX_SHOWN_CHARS = 100_000


def can_view_content(user) -> bool:
    return bool(user and user.is_active and user.is_staff and user.has_perm(PERMISSION))


def render(value) -> str:
    """Escaped, bounded, pre-formatted text of a JSON value or a string."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
    if len(text) > MAX_SHOWN_CHARS:
        text = text[:MAX_SHOWN_CHARS] + f"\n… ({len(text) - MAX_SHOWN_CHARS} more characters)"
    return format_html('<pre class="ctx-content">{}</pre>', text)


class ContentAdminMixin:
    """Adds ``content_fields`` (display methods that render content) to a detail page for
    operators allowed to see it, recording each such view first. Put it before the admin
    base class. Lists never show content."""

    content_fields: tuple[str, ...] = ()

    def _showing_content(self, request, obj) -> bool:
        return obj is not None and can_view_content(request.user)

    def get_fields(self, request, obj=None):
        fields = list(super().get_fields(request, obj))
        if self._showing_content(request, obj):
            fields += [f for f in self.content_fields if f not in fields]
        return fields

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if self._showing_content(request, obj):
            fields += [f for f in self.content_fields if f not in fields]
        return fields

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if request.method == "GET" and can_view_content(request.user):
            obj = self.get_object(request, object_id)
            if obj is not None:
                AuditLog.objects.create(
                    user=request.user,
                    username=request.user.get_username(),
                    action=AuditLog.VIEW_CONTENT,
                    object_type=obj._meta.label_lower,
                    object_id=str(obj.pk),
                    app_id=self.content_app_id(obj),
                )
                messages.warning(
                    request,
                    "This page shows conversation content. Your view was written to the "
                    "audit log (who, what, when).",
                )
        return super().change_view(request, object_id, form_url, extra_context)

    def content_app_id(self, obj):
        return getattr(obj, "app_id", None)

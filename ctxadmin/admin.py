from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.template.response import TemplateResponse
from django.utils.functional import cached_property

from ctxadmin.models import SCOPES, ApiKey, App, AuditLog
from ctxadmin.services import create_api_key, revoke_api_keys

admin.site.site_header = "ctxadmin"
admin.site.site_title = "ctxadmin console"
admin.site.index_title = "Operations"
# Django's bulk delete bypasses every service (holds, receipts, cascades): never offered.
admin.site.disable_action("delete_selected")


class ConsoleAdmin(admin.ModelAdmin):
    """The console's model pages: an action the operator may not run is refused with 403.
    (Django leaves it out of the menu, but a posted one answers "No action selected" with a
    redirect, or the list page when the operator may run none, as if it were a slip.)
    Its lists keep each column on one line, a clipped value whole in the cell's title."""

    class Media:
        css = {"all": ["ctxadmin/console.css"]}
        js = ["ctxadmin/console.js"]

    def changelist_view(self, request, extra_context=None):
        action = request.POST.get("action") if request.method == "POST" else None
        if action and action not in self.get_actions(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)


class MachineOwnedAdmin(ConsoleAdmin):
    """Rows the service writes (through its own services, with their validation and
    receipts): operators look, never add, edit or delete."""

    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class CappedCountPaginator(Paginator):
    """Counts at most ``cap`` rows (a LIMITed subquery), so no page of a table of millions
    costs a full count; beyond the cap the list ends and reads "more than" the cap."""

    cap = 10_000

    @cached_property
    def counted(self) -> int:
        return self.object_list[: self.cap + 1].count()

    @cached_property
    def count(self) -> int:
        return min(self.counted, self.cap)

    @property
    def capped(self) -> bool:
        return self.counted > self.cap


class ReadOnlyAdmin(MachineOwnedAdmin):
    """Rows that change only through the API's services (validation, retention, holds,
    receipts): by default a page shows its list's columns and nothing else, by app."""

    paginator = CappedCountPaginator
    show_facets = admin.ShowFacets.NEVER
    # Every sortable column but the default ordering would be a sort of the whole table.
    sortable_by = ()
    list_select_related = ["app"]
    list_filter = ["app"]
    ordering = ["-id"]

    def get_fields(self, request, obj=None):
        return self.fields or self.list_display

    def get_readonly_fields(self, request, obj=None):
        return self.get_fields(request, obj)


@admin.register(App)
class AppAdmin(ConsoleAdmin):
    list_display = ["name", "display_name", "active_keys", "created_at"]
    search_fields = ["name"]
    readonly_fields = ["created_at", "updated_at"]

    def get_readonly_fields(self, request, obj=None):
        # The name is in every URL and key binding: fixed once created.
        return [*self.readonly_fields, "name"] if obj else self.readonly_fields

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(_active_keys=Count("api_keys", filter=Q(api_keys__revoked_at__isnull=True)))
        )

    @admin.display(description="active keys", ordering="_active_keys")
    def active_keys(self, obj):
        return obj._active_keys

    def has_delete_permission(self, request, obj=None):
        # Deleting an app would cascade over every session and memory, past holds and receipts.
        return False


class ApiKeyCreateForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=[(scope, scope) for scope in SCOPES], widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = ApiKey
        fields = ["app", "name", "scopes"]


@admin.register(ApiKey)
class ApiKeyAdmin(ConsoleAdmin):
    list_display = ["prefix", "app", "name", "scope_list", "state", "created_at", "last_used_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), "app"]
    list_select_related = ["app"]
    search_fields = ["prefix", "name", "app__name"]
    actions = ["revoke"]
    readonly_fields = [
        "app",
        "name",
        "prefix",
        "scopes",
        "created_at",
        "created_by",
        "revoked_at",
        "last_used_at",
    ]
    show_full_result_count = False

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiKeyCreateForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj else []

    def get_fields(self, request, obj=None):
        return ["app", "name", "scopes"] if obj is None else self.readonly_fields

    def has_change_permission(self, request, obj=None):
        # Keys are immutable; the change page is a read-only view (revoke is an action).
        return False if obj is not None else super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        # A key is revoked (its row stays for the audit trail), never deleted.
        return False

    def save_model(self, request, obj, form, change):
        key, raw = create_api_key(
            form.cleaned_data["app"],
            form.cleaned_data["scopes"],
            name=form.cleaned_data.get("name", ""),
            created_by=request.user,
        )
        obj.__dict__.update(key.__dict__)
        obj._created_secret = raw

    def response_add(self, request, obj, post_url_continue=None):
        # The secret is rendered into this one response and kept nowhere else.
        raw = obj.__dict__.pop("_created_secret")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "key": obj,
            "secret": raw,
            "title": "API key created",
        }
        response = TemplateResponse(request, "admin/ctxadmin/apikey/created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke selected API keys", permissions=["revoke"])
    def revoke(self, request, queryset):
        count = revoke_api_keys(queryset)
        self.message_user(request, f"Revoked {count} API key(s).", messages.SUCCESS)

    def has_revoke_permission(self, request):
        return request.user.has_perm("ctxadmin.change_apikey")

    @admin.display(description="scopes")
    def scope_list(self, obj):
        return ", ".join(obj.scopes)

    @admin.display(description="state", ordering="revoked_at")
    def state(self, obj):
        return "active" if obj.revoked_at is None else "revoked"


@admin.register(AuditLog)
class AuditLogAdmin(MachineOwnedAdmin):
    """Every console page view that showed conversation content: who, what, when."""

    list_display = ["created_at", "username", "action", "object_type", "object_id", "app"]
    fields = list_display
    readonly_fields = fields
    list_select_related = ["app"]
    # Filters and the search lead their indexes (username; object type and id).
    list_filter = ["object_type"]
    search_fields = ["=username", "=object_id"]
    ordering = ["-created_at"]

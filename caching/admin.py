"""The prefix-cache registry in the operator console: content-free, read-only.

No page shows a provider resource name (the column is never loaded) or prefix text (the
registry never stores it). Operators holding ``caching.invalidate_cachescope`` may
invalidate scopes, through the registry as the API does.
"""

from __future__ import annotations

from django.contrib import admin

from caching.invalidate import invalidate
from caching.models import CacheEntry, CacheScope
from ctxadmin.admin import ReadOnlyAdmin


@admin.register(CacheScope)
class CacheScopeAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "app",
        "provider",
        "user_id",
        "model",
        "generation",
        "created_at",
        "invalidated_at",
    ]
    fields = [*list_display, "fingerprint", "policy_fingerprint", "policy", "live_entries"]
    list_filter = ["app", "provider"]
    search_fields = ["=user_id", "=fingerprint"]
    actions = ["invalidate_scopes"]

    @admin.display(description="live entries")
    def live_entries(self, obj):
        return obj.entries.filter(state__in=("creating", "active")).count()

    def has_invalidate_permission(self, request) -> bool:
        return request.user.has_perm("caching.invalidate_cachescope")

    @admin.action(
        description="Invalidate scopes (leases expire; provider deletes queued)",
        permissions=["invalidate"],
    )
    def invalidate_scopes(self, request, queryset):
        entries = 0
        scopes = 0
        for scope in queryset.select_related("app"):
            entries += invalidate(scope.app, scope.fingerprint)["entries_invalidated"]
            scopes += 1
        self.message_user(request, f"{scopes} scope(s) invalidated; {entries} entries to delete.")


@admin.register(CacheEntry)
class CacheEntryAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "app",
        "scope_fingerprint",
        "state",
        "hits",
        "last_hit_at",
        "ttl_ms",
        "generation",
        "prefix_tokens",
        "cached_tokens",
        "waiters",
        "created_at",
        "expires_at",
        "delete_reason",
        "delete_attempts",
        "error_code",
    ]
    fields = [
        *list_display,
        "scope",
        "prefix_fingerprint",
        "installed_at",
        "deadline",
        "create_lease_until",
        "delete_due_at",
    ]
    list_filter = ["app", "state"]
    list_select_related = ["app", "scope"]
    actions = ["invalidate_scopes"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("resource")

    @admin.display(description="scope fingerprint")
    def scope_fingerprint(self, obj):
        return obj.scope.fingerprint

    def has_invalidate_permission(self, request) -> bool:
        return request.user.has_perm("caching.invalidate_cachescope")

    @admin.action(
        description="Invalidate these entries' scopes (leases expire; provider deletes queued)",
        permissions=["invalidate"],
    )
    def invalidate_scopes(self, request, queryset):
        scopes = {entry.scope for entry in queryset.select_related("scope__app")}
        entries = sum(
            invalidate(scope.app, scope.fingerprint)["entries_invalidated"] for scope in scopes
        )
        self.message_user(
            request, f"{len(scopes)} scope(s) invalidated; {entries} entries to delete."
        )

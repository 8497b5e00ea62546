from __future__ import annotations

import json

from django.contrib import admin
from django.db.models import F, OuterRef, Subquery
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from ctxadmin.admin import MachineOwnedAdmin
from ctxadmin.content import ContentAdminMixin, render
from ctxadmin.models import App
from sessions_app.compaction.policy import TRIGGERS
from sessions_app.events import kind_names
from sessions_app.models import (
    AppCompactionPolicy,
    Checkpoint,
    CompactionState,
    Event,
    Invocation,
    Session,
    ToolToken,
)


@admin.register(Session)
class SessionAdmin(MachineOwnedAdmin):
    """Sessions by their numbers only: no state, no events, no content. Read-only: a session
    is deleted through the API's delete service (holds, receipts), never here."""

    list_display = [
        "session_id",
        "user_id",
        "app",
        "event_count",
        "total_bytes",
        "token_estimate",
        "revision",
        "active_checkpoint",
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
        "active_checkpoint",
        "created_at",
        "updated_at",
        "rows",
    ]
    readonly_fields = fields
    show_full_result_count = False

    def get_queryset(self, request):
        # The checkpoint_active partial unique index answers the subquery per row.
        active = Checkpoint.objects.filter(session=OuterRef("pk"), status="active").values("id")
        return super().get_queryset(request).defer("state").annotate(_active=Subquery(active[:1]))

    @admin.display(description="active checkpoint")
    def active_checkpoint(self, obj):
        return _checkpoint_link(obj._active)

    @admin.display(description="its rows")
    def rows(self, obj):
        links = [
            (reverse(f"admin:sessions_app_{model}_changelist"), label)
            for model, label in (
                ("event", "events"),
                ("checkpoint", "checkpoints"),
                ("invocation", "invocations"),
            )
        ]
        return format_html_join(
            " · ",
            '<a href="{}?session__id__exact={}" data-session-rows="{}">{}</a>',
            ((url, obj.pk, label, label) for url, label in links),
        )


def _fixed_choices_filter(field: str, values: tuple[str, ...]) -> type[admin.SimpleListFilter]:
    """A filter over a known set of values (no DISTINCT scan of the table to list them)."""

    class Filter(admin.SimpleListFilter):
        title = field
        parameter_name = field

        def lookups(self, request, model_admin):
            return [(value, value) for value in values]

        def queryset(self, request, queryset):
            value = self.value()
            return queryset.filter(**{field: value}) if value in values else queryset

    Filter.__name__ = f"{field.title()}Filter"
    return Filter


def _checkpoint_link(checkpoint_id) -> str:
    if checkpoint_id is None:
        return "-"
    url = reverse("admin:sessions_app_checkpoint_change", args=[checkpoint_id])
    return format_html('<a href="{}">{}</a>', url, checkpoint_id)


def _session_link(session_pk: int, app_name: str, user_id: str, session_id: str) -> str:
    """A session by its app's name, user and session ids, linked to its page."""
    url = reverse("admin:sessions_app_session_change", args=[session_pk])
    return format_html('<a href="{}">{} / {} / {}</a>', url, app_name, user_id, session_id)


class SessionRowAdmin(MachineOwnedAdmin):
    """Rows of one session, shown by the session's ids (read with the row: no query per
    row)."""

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                _app_id=F("session__app_id"),
                _app_name=F("session__app__name"),
                _user_id=F("session__user_id"),
                _session_id=F("session__session_id"),
            )
        )

    # A session's page links to its rows here (``?session__id__exact=``; indexed by session).
    SESSION_LOOKUP = "session__id__exact"

    def lookup_allowed(self, lookup, value, request=None):
        return lookup == self.SESSION_LOOKUP or super().lookup_allowed(lookup, value, request)

    @admin.display(description="app / user / session", ordering="session_id")
    def session_ref(self, obj):
        return _session_link(obj.session_id, obj._app_name, obj._user_id, obj._session_id)


@admin.register(Checkpoint)
class CheckpointAdmin(ContentAdminMixin, SessionRowAdmin):
    """Compactions by their ids, ranges and numbers. The summary and its items are shown
    only to operators holding ``ctxadmin.view_content``, on this detail page, audit-logged."""

    content_fields = ("summary_content",)

    list_display = [
        "id",
        "compaction_id",
        "session_ref",
        "status",
        "origin",
        "trigger",
        "representation",
        "first_seq",
        "last_seq",
        "tokens_before",
        "tokens_after",
        "savings",
        "duration_ms",
        "reason",
        "created_at",
    ]
    list_filter = [
        "status",
        _fixed_choices_filter("origin", ("automatic", "manual", "overflow")),
        _fixed_choices_filter("trigger", (*TRIGGERS, "manual", "overflow")),
        _fixed_choices_filter("representation", ("summary", "pruned")),
    ]
    ordering = ["-created_at", "-id"]
    fields = [
        "compaction_id",
        "id",
        "session_ref",
        "status",
        "origin",
        "trigger",
        "representation",
        "reason",
        "message",
        "first_seq",
        "last_seq",
        "source_event_ids",
        "source_fingerprint",
        "item_count",
        "items_bytes",
        "tokens",
        "tokens_before",
        "tokens_after",
        "summarizer",
        "model",
        "usage",
        "policy",
        "parent_ref",
        "subsumed_by_ref",
        "high_water_seq",
        "window_end_invocation",
        "projected_event_ids",
        "summary_event_id",
        "purged_events",
        "duration_ms",
        "created_at",
        "finished_at",
    ]
    readonly_fields = fields

    def get_queryset(self, request):
        # The summary and the rendered items are conversation content: never even read.
        return super().get_queryset(request).defer("summary", "items_json")

    @admin.display(description="savings")
    def savings(self, obj):
        if not obj.tokens_before or obj.status not in ("active", "superseded"):
            return "-"
        saved = obj.tokens_before - obj.tokens_after
        return f"{saved} tokens ({100 * saved / obj.tokens_before:.0f}%)"

    @admin.display(description="summary and items (content)")
    def summary_content(self, obj):
        summary, items = (
            Checkpoint.objects.filter(pk=obj.pk).values_list("summary", "items_json").first()
        )
        return render({"summary": summary, "items": json.loads(items) if items else []})

    def content_app_id(self, obj):
        return obj._app_id

    @admin.display(description="parent")
    def parent_ref(self, obj):
        return _checkpoint_link(obj.parent_id)

    @admin.display(description="subsumed by")
    def subsumed_by_ref(self, obj):
        return _checkpoint_link(obj.subsumed_by_id)


@admin.register(CompactionState)
class CompactionStateAdmin(SessionRowAdmin):
    """Automatic-compaction bookkeeping per session: backoff and check counters."""

    list_display = [
        "session_ref",
        "ineffective_streak",
        "backoff_until",
        "checks",
        "last_skip_reason",
        "last_checked_at",
    ]
    ordering = ["-last_checked_at"]
    fields = list_display
    readonly_fields = fields


@admin.register(AppCompactionPolicy)
class AppCompactionPolicyAdmin(MachineOwnedAdmin):
    """Apps' default compaction policies (set through the API, where they are validated)."""

    list_display = ["app", "automatic", "summarizer", "retention", "updated_at"]
    list_select_related = ["app"]
    ordering = ["app__name"]
    fields = ["app", "policy_json", "updated_at"]
    readonly_fields = fields

    @admin.display(description="automatic", boolean=True)
    def automatic(self, obj):
        return obj.policy.get("automatic")

    @admin.display(description="summarizer")
    def summarizer(self, obj):
        return obj.policy.get("summarizer", {}).get("kind")

    @admin.display(description="retention")
    def retention(self, obj):
        return obj.policy.get("retention")

    @admin.display(description="policy")
    def policy_json(self, obj):
        return format_html("<pre>{}</pre>", json.dumps(obj.policy, indent=2, sort_keys=True))


@admin.register(Invocation)
class InvocationAdmin(SessionRowAdmin):
    """Invocations by their numbers: provider, model, cache outcome, tokens, timings, error
    code. The conversation is in the session's events, which these pages never read."""

    list_display = [
        "invocation_id",
        "session_ref",
        "status",
        "provider",
        "model",
        "cache_status",
        "cached_tokens",
        "input_tokens",
        "output_tokens",
        "function_calls",
        "provider_ms",
        "total_ms",
        "error_code",
        "created_at",
    ]
    fields = [
        *list_display,
        "cache_reason",
        "memory_hits",
        "pre_compaction_id",
        "ingestion_job_id",
        "input_event_id",
        "output_event_ids",
        "completed_at",
    ]
    readonly_fields = fields
    list_filter = ["status"]  # the leading column of an index
    ordering = ["-created_at"]
    show_full_result_count = False


@admin.register(ToolToken)
class ToolTokenAdmin(ContentAdminMixin, MachineOwnedAdmin):
    """Tool and user tokens' metadata: whose they are and which key minted them (never the
    token: only its digest is stored, and not shown). A user token's label is the minting
    app's free text: shown only to operators holding ``ctxadmin.view_content``, on this
    detail page, audit-logged."""

    content_fields = ("token_label",)
    list_display = [
        "prefix",
        "app",
        "kind",
        "user_id",
        "created_by_key",
        "tool_name",
        "capabilities",
        "created_at",
        "expires_at",
        "revoked_at",
        "revoked_reason",
        "last_used_at",
    ]
    fields = [*list_display, "function_call_id"]
    readonly_fields = fields
    list_filter = ["app", "revoked_reason"]
    list_select_related = ["app"]
    search_fields = ["=created_by_key"]  # the tooltoken_minter index
    search_help_text = "The prefix of the minting API key, exactly."
    ordering = ["-created_at"]

    @admin.display(description="kind")
    def kind(self, obj):
        return "tool token" if obj.invocation_id is not None else "user token"

    @admin.display(description="label (content)")
    def token_label(self, obj):
        return render(obj.label or "")


class EventAppFilter(admin.SimpleListFilter):
    """Events of one app, by its name (``?app=acme``)."""

    title = "app"
    parameter_name = "app"

    def lookups(self, request, model_admin):
        names = App.objects.order_by("name").values_list("name", flat=True)[:APPS_LISTED]
        return [(name, name) for name in names]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(session__app__name=value) if value else queryset


class EventSessionFilter(admin.SimpleListFilter):
    """Events of one session (a session's page links here): the chosen one and the
    sessions updated last (of the chosen app), never a scan of every session."""

    title = "session"
    parameter_name = SessionRowAdmin.SESSION_LOOKUP

    def lookups(self, request, model_admin):
        sessions = Session.objects.select_related("app").order_by("-updated_at", "-id")
        app = request.GET.get(EventAppFilter.parameter_name)
        if app:
            sessions = sessions.filter(app__name=app)
        chosen = list(sessions.filter(pk=self._pk())) if self._pk() else []
        rows = chosen + [s for s in sessions[:SESSIONS_LISTED] if s not in chosen]
        return [(str(s.pk), f"{s.app.name} / {s.user_id} / {s.session_id}") for s in rows]

    def _pk(self) -> int | None:
        value = self.value()
        return int(value) if value and value.isascii() and value.isdigit() else None

    def queryset(self, request, queryset):
        if self.value() is None:
            return queryset
        return queryset.filter(session_id=self._pk()) if self._pk() else queryset.none()


class EventAuthorFilter(admin.SimpleListFilter):
    """Events by their author: those of the chosen session, or of the latest events (a
    bounded read; any author is filtered with ``?author=``, through the author index)."""

    title = "author"
    parameter_name = "author"

    def lookups(self, request, model_admin):
        events = Event.objects.all()
        session = request.GET.get(EventSessionFilter.parameter_name, "")
        if session.isascii() and session.isdigit():
            events = events.filter(session_id=int(session))
        latest = events.order_by("-id").values("author")[:AUTHOR_SAMPLE]
        authors = sorted({row["author"] for row in latest})
        chosen = self.value()
        if chosen and chosen not in authors:
            authors.insert(0, chosen)
        return [(author, author) for author in authors[:AUTHORS_LISTED]]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(author=value) if value else queryset


APPS_LISTED = 50
SESSIONS_LISTED = 20
AUTHORS_LISTED = 30
AUTHOR_SAMPLE = 1000


@admin.register(Event)
class EventAdmin(ContentAdminMixin, SessionRowAdmin):
    """Events by their metadata: ids, author, kinds, sizes, times. The content, actions and
    metadata are shown only to operators holding ``ctxadmin.view_content``, on this detail
    page, audit-logged. Filtered by app, session and author; searched by exact event id
    (indexes ``event_event_id`` and ``event_author``), never by content."""

    content_fields = ("event_content",)
    list_display = [
        "id",
        "session_ref",
        "seq",
        "event_id",
        "invocation_id",
        "author",
        "kind_words",
        "byte_size",
        "token_estimate",
        "timestamp",
    ]
    fields = [*list_display, "turn_complete", "content_hash", "created_at"]
    readonly_fields = fields
    list_filter = [EventAppFilter, EventSessionFilter, EventAuthorFilter]
    search_fields = ["event_id"]
    search_help_text = "An event's id, exactly as the client gave it."
    # The primary key is the one index that serves an unfiltered ORDER BY … LIMIT here.
    ordering = ["-id"]
    sortable_by = ()

    def get_search_results(self, request, queryset, search_term):
        # Exactly the id (the event_id index), never a LIKE over the table.
        term = search_term.strip()
        return (queryset.filter(event_id=term) if term else queryset), False

    @admin.display(description="kinds")
    def kind_words(self, obj):
        return ", ".join(kind_names(obj.kinds)) or "-"

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .defer("content", "actions", "usage_metadata", "custom_metadata", "context_json")
        )

    @admin.display(description="content, actions and metadata (content)")
    def event_content(self, obj):
        content, actions, usage, custom = (
            Event.objects.filter(pk=obj.pk)
            .values_list("content", "actions", "usage_metadata", "custom_metadata")
            .first()
        )
        return render(
            {"content": content, "actions": actions, "usage": usage, "custom_metadata": custom}
        )

    def content_app_id(self, obj):
        return obj._app_id

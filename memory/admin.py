from __future__ import annotations

import uuid

from django.contrib import admin
from django.core.exceptions import ImproperlyConfigured
from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q
from django.db.models.expressions import RawSQL

from ctxadmin.admin import ReadOnlyAdmin
from ctxadmin.content import ContentAdminMixin, render
from ctxadmin.errors import ServiceError
from memory import erasure, vectors
from memory.embedders import embedder_from_settings
from memory.models import (
    Consent,
    ErasureEpoch,
    ErasureReceipt,
    LegalHold,
    MemoryEntry,
    MemoryPolicy,
    OutboxJob,
    ScopeIndex,
)
from memory.outbox import operations
from memory.scope import scope_fingerprint


class EmbeddedFilter(admin.SimpleListFilter):
    """Embedded, waiting for its vector, or given up on (the embedder refused it as often
    as the embedding task tries)."""

    title = "embedded"
    parameter_name = "embedded"

    def lookups(self, request, model_admin):
        return [("yes", "yes"), ("no", "no"), ("refused", "refused")]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(embedding__isnull=self.value() == "no")
        if self.value() == "refused":
            return queryset.filter(
                embedding__isnull=True, embed_failures__gte=vectors.MAX_EMBED_FAILURES
            )
        return queryset


class EmbeddingModelFilter(admin.SimpleListFilter):
    """The configured embedder's vectors or another model's (what ``reembed`` redoes):
    listing the distinct model names would scan the whole table."""

    title = "embedding model"
    parameter_name = "embedding_model"

    @staticmethod
    def _configured() -> str | None:
        try:
            return embedder_from_settings().name
        except ImproperlyConfigured:
            return None

    def lookups(self, request, model_admin):
        name = self._configured()
        return [] if name is None else [("configured", f"{name} (configured)"), ("other", "other")]

    def queryset(self, request, queryset):
        name = self._configured() if self.value() in ("configured", "other") else None
        if name is None:
            return queryset
        if self.value() == "configured":
            return queryset.filter(embedding_model=name)
        return queryset.filter(embedding__isnull=False).exclude(embedding_model=name)


class VersionFilter(admin.SimpleListFilter):
    """Facts over time: live versions of a key, closed ones, or entries without a key."""

    title = "version"
    parameter_name = "version"

    def lookups(self, request, model_admin):
        return [("live", "live version of a key"), ("closed", "closed version"), ("none", "no key")]

    def queryset(self, request, queryset):
        if self.value() == "live":
            return queryset.filter(key__isnull=False, valid_to__isnull=True)
        if self.value() == "closed":
            return queryset.filter(key__isnull=False, valid_to__isnull=False)
        if self.value() == "none":
            return queryset.filter(key__isnull=True)
        return queryset


class NearDuplicateFilter(admin.SimpleListFilter):
    """Entries flagged, when they were added, as nearly repeating another (``memory.dedup``)."""

    title = "near-duplicate"
    parameter_name = "near_duplicate"

    def lookups(self, request, model_admin):
        return [("yes", "flagged"), ("no", "not flagged")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(near_duplicate_of__isnull=False)
        if self.value() == "no":
            return queryset.filter(near_duplicate_of__isnull=True)
        return queryset


@admin.register(MemoryEntry)
class MemoryEntryAdmin(ContentAdminMixin, ReadOnlyAdmin):
    """Memories by their ids and numbers: never the content, its lexical index or vector,
    the metadata's values or the client's idempotency key (none of them is even read) —
    except for operators holding ``ctxadmin.view_content``, who see the text and metadata
    on the detail page, audit-logged. Operators holding ``memory.erase_memoryentry`` may
    erase entries (each with an erasure receipt, as through the API)."""

    # The fact's key names what the memory is about: content, as the text is.
    content_fields = ("fact_key", "memory_content")
    actions = ["erase_entries"]

    list_display = [
        "id",
        "app",
        "user_id",
        "version",
        "content_bytes",
        "embedding_model",
        "embedded",
        "embed_failures",
        "created_at",
        "expires_at",
        "retain_until",
        "legal_hold",
    ]
    list_filter = ["app", VersionFilter, NearDuplicateFilter, EmbeddedFilter, EmbeddingModelFilter]
    # The primary key is the one index that serves an unfiltered ORDER BY … LIMIT here.
    ordering = ["id"]
    search_fields = ["id"]
    search_help_text = "A memory's id."
    fields = [
        "id",
        "app",
        "user_id",
        "scope",
        "content_bytes",
        "content_sha256",
        "metadata_keys",
        "embedding_model",
        "embedded",
        "embed_failures",
        "session_id",
        "event_id",
        "source_timestamp",
        "version",
        "versions_of_key",
        "valid_from",
        "valid_to",
        "recorded_at",
        "retired_at",
        "successor",
        "near_duplicate",
        "created_at",
        "updated_at",
        "expires_at",
        "retain_until",
        "legal_hold",
    ]

    def get_queryset(self, request):
        computed = (
            "scope",
            "embedded",
            "metadata_keys",
            "legal_hold",
            "version",
            "versions_of_key",
            "successor",
            "near_duplicate",
        )
        return (
            super()
            .get_queryset(request)
            # The page's own columns only: never content, metadata, key, tsvector, vector.
            .only(*(name for name in self.fields if name not in computed))
            .annotate(
                _embedded=ExpressionWrapper(
                    Q(embedding__isnull=False), output_field=BooleanField()
                ),
                # Whether it has a key, never the key itself (content: the detail page's).
                _keyed=ExpressionWrapper(Q(key__isnull=False), output_field=BooleanField()),
                # The names of the metadata's keys, never their values.
                _metadata_keys=RawSQL(
                    "ARRAY(SELECT jsonb_object_keys(memory_memoryentry.metadata) ORDER BY 1)", []
                ),
                _legal_hold=Exists(
                    LegalHold.objects.filter(app_id=OuterRef("app_id"), user_id=OuterRef("user_id"))
                ),
            )
        )

    @admin.display(description="metadata keys")
    def metadata_keys(self, obj):
        return ", ".join(obj._metadata_keys) or "-"

    @admin.display(description="version")
    def version(self, obj):
        if not obj._keyed:
            return "-"
        return "live" if obj.valid_to is None else "closed"

    @admin.display(description="versions of its key")
    def versions_of_key(self, obj):
        """How many versions its key has in the scope (the history's length), by count."""
        if not obj._keyed:
            return "-"
        return MemoryEntry.objects.filter(
            app_id=obj.app_id,
            user_id=obj.user_id,
            key=MemoryEntry.objects.filter(pk=obj.pk).values("key")[:1],
        ).count()

    @admin.display(description="superseded by")
    def successor(self, obj):
        return str(obj.superseded_by_id) if obj.superseded_by_id else "-"

    @admin.display(description="near-duplicate of")
    def near_duplicate(self, obj):
        return str(obj.near_duplicate_of_id) if obj.near_duplicate_of_id else "-"

    @admin.display(description="key (content)")
    def fact_key(self, obj):
        return MemoryEntry.objects.filter(pk=obj.pk).values_list("key", flat=True).first() or "-"

    @admin.display(description="legal hold", boolean=True)
    def legal_hold(self, obj):
        return obj._legal_hold

    @admin.display(description="text and metadata (content)")
    def memory_content(self, obj):
        content, metadata = (
            MemoryEntry.objects.filter(pk=obj.pk).values_list("content", "metadata").first()
        )
        return render({"content": content, "metadata": metadata})

    def has_erase_permission(self, request) -> bool:
        return request.user.has_perm("memory.erase_memoryentry")

    @admin.action(description="Erase entries (with erasure receipts)", permissions=["erase"])
    def erase_entries(self, request, queryset):
        erased, refused = 0, 0
        for entry in queryset.select_related("app"):
            try:
                erasure.erase_entry(entry.app, entry.user_id, str(entry.pk), "console")
                erased += 1
            except ServiceError:  # a legal hold, a retention period, or already gone
                refused += 1
        self.message_user(request, f"{erased} entries erased; {refused} refused.")

    def get_search_results(self, request, queryset, search_term):
        # An exact id only: nothing a client wrote is searchable here.
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(pk=uuid.UUID(term)), False
        except ValueError:
            return queryset.none(), False

    @admin.display(description="embedded", boolean=True)
    def embedded(self, obj):
        return obj._embedded

    @admin.display(description="scope fingerprint")
    def scope(self, obj):
        # What erasure epochs and receipts name this (app, user) scope by.
        return scope_fingerprint(obj.app_id, obj.user_id)


@admin.register(MemoryPolicy)
class MemoryPolicyAdmin(ReadOnlyAdmin):
    """Apps' memory governance (set through the API, where it is validated)."""

    list_display = [
        "app",
        "consent_required",
        "default_ttl_seconds",
        "retention_days",
        "legal_hold",
        "ingestion",
        "updated_at",
        "updated_by",
    ]
    ordering = ["app__name"]


@admin.register(Consent)
class ConsentAdmin(ReadOnlyAdmin):
    list_display = ["id", "app", "user_id", "granted", "updated_at", "updated_by"]


@admin.register(LegalHold)
class LegalHoldAdmin(ReadOnlyAdmin):
    list_display = ["id", "app", "user_id", "created_at", "created_by"]


@admin.register(ErasureEpoch)
class ErasureEpochAdmin(ReadOnlyAdmin):
    list_display = ["id", "app", "scope_fingerprint", "epoch", "updated_at"]
    search_fields = ["scope_fingerprint__exact"]
    search_help_text = "A scope fingerprint (a memory's page shows its scope's)."


@admin.register(ErasureReceipt)
class ErasureReceiptAdmin(ReadOnlyAdmin):
    """Content-free records of erasures: which key, which scope (a fingerprint), how many."""

    list_display = [
        "id",
        "app",
        "kind",
        "scope_fingerprint",
        "erased_by",
        "erasure_epoch",
        "created_at",
    ]
    list_filter = ["app", "kind"]
    ordering = ["-created_at", "-id"]
    search_fields = ["scope_fingerprint__exact", "target_fingerprint__exact"]
    search_help_text = "A scope or target fingerprint."
    fields = [
        "id",
        "app",
        "kind",
        "scope_fingerprint",
        "target_fingerprint",
        "erased_by",
        "counts",
        "erasure_epoch",
        "created_at",
    ]


@admin.register(ScopeIndex)
class ScopeIndexAdmin(ReadOnlyAdmin):
    """Large scopes' own vector indexes (built and dropped by
    ``memory.maintain_scope_indexes``; ``manage.py scope_indexes`` runs it now)."""

    list_display = [
        "id",
        "app",
        "user_id",
        "state",
        "entries",
        "embedding_model",
        "build_seconds",
        "created_at",
        "ready_at",
        "failed_at",
        "error",
        "retry_at",
    ]
    list_filter = ["app", "state"]


@admin.register(OutboxJob)
class OutboxJobAdmin(ReadOnlyAdmin):
    """Ingestion jobs, content-free: never the payload. Operators holding
    ``memory.operate_outbox`` may make waiting jobs due now or cancel active ones (through
    the outbox service, as the API does)."""

    list_display = [
        "id",
        "app",
        "phase",
        "events",
        "cursor",
        "added",
        "duplicates",
        "skipped",
        "attempts",
        "max_attempts",
        "due_at",
        "error_code",
        "created_at",
        "finished_at",
    ]
    fields = [
        *list_display,
        "scope_fingerprint",
        "session_id",
        "erasure_epoch",
        "first_seq",
        "last_seq",
        "batches",
        "redacted",
        "skipped_by_reason",
        "payload_bytes",
        "lease_held",
        "error_message",
        "started_at",
        "updated_at",
    ]
    # Each filter column leads an index (app + phase; the partial index of active jobs).
    list_filter = ["app", "phase"]
    actions = ["retry_now", "cancel_jobs"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("payload")

    @admin.display(boolean=True, description="lease held")
    def lease_held(self, obj):
        return obj.phase == OutboxJob.RUNNING

    def has_operate_permission(self, request) -> bool:
        return request.user.has_perm("memory.operate_outbox")

    @admin.action(description="Make waiting jobs due now", permissions=["operate"])
    def retry_now(self, request, queryset):
        count = operations.retry_now(list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{count} waiting job(s) made due now.")

    @admin.action(description="Cancel active jobs", permissions=["operate"])
    def cancel_jobs(self, request, queryset):
        count = operations.cancel_jobs(list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{count} active job(s) cancelled.")

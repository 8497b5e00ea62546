"""Long-term memory: entries scoped by (app, user), with a lexical index and an embedding."""

from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models.functions import Now
from pgvector.django import HnswIndex, VectorField

from ctxadmin.models import App

# The vector column's dimension. A deployment with another embedder dimension changes this
# through its own migration; a system check compares it with CTXADMIN_EMBEDDING_DIMENSION.
EMBEDDING_DIMENSION = 384


class MemoryEntry(models.Model):
    """One memory of one user of one app. ``search`` is the lexical index (a tsvector
    written with the entry); ``embedding`` is filled by the embedder (at once for small
    synchronous writes, else by a worker), recording which model made it."""

    id = models.UUIDField(primary_key=True)
    # No separate index on app: every index here leads with (app, user_id).
    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="memories", db_index=False)
    user_id = models.CharField(max_length=128)
    content = models.TextField()
    content_sha256 = models.CharField(max_length=64)
    metadata = models.JSONField(default=dict)
    # NULL: no key (the unique index covers keyed entries only).
    idempotency_key = models.CharField(max_length=256, null=True)  # noqa: DJ001
    session_id = models.CharField(max_length=128, blank=True, db_default="")
    event_id = models.CharField(max_length=128, blank=True, db_default="")
    author = models.CharField(max_length=128, blank=True, db_default="")
    source_timestamp = models.DateTimeField(null=True)
    search = SearchVectorField()
    embedding = VectorField(dimensions=EMBEDDING_DIMENSION, null=True)
    embedding_model = models.CharField(max_length=128, blank=True, db_default="")
    content_bytes = models.IntegerField()
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["app", "user_id", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="memory_unique_idempotency_key",
            ),
        ]
        indexes = [
            models.Index(
                "app",
                "user_id",
                models.F("created_at").desc(),
                models.F("id").desc(),
                name="memory_scope_recent",
            ),
            GinIndex(fields=["search"], name="memory_search"),
            GinIndex(fields=["metadata"], name="memory_metadata", opclasses=["jsonb_path_ops"]),
            HnswIndex(
                name="memory_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
            models.Index(
                fields=["created_at"],
                condition=models.Q(embedding__isnull=True),
                name="memory_unembedded",
            ),
        ]

    def __str__(self) -> str:
        return f"memory {self.id}"

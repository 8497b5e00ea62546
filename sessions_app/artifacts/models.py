"""Artifacts: versioned bytes per (app, user, session), or per (app, user) for ``user:`` names.

An ``ArtifactHead`` is one name in its scope; saves lock it and take ``next_version`` (versions
start at 0 and are never reused while the name exists). Each ``ArtifactVersion`` keeps its
bytes where its ``storage`` says (the ``database`` backend: in the row, TOAST-compressed by
PostgreSQL), with their size, SHA-256, mime type and small custom metadata.

The foreign keys to the session and to the head are ``ON DELETE CASCADE`` in the database
(migration 0001): deleting a session deletes its artifacts in the same statement, including
one saved while the delete ran, and no delete ever loads the bytes into Python.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ctxadmin.models import App
from sessions_app.artifacts.rules import SESSION_SCOPE, USER_SCOPE
from sessions_app.models import Session

DATABASE_STORAGE = "database"


class ArtifactHead(models.Model):
    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="artifacts", db_index=False)
    user_id = models.CharField(max_length=128)
    # None for a ``user:`` name (visible from every session of the user).
    session = models.ForeignKey(
        Session,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    name = models.CharField(max_length=256)
    next_version = models.IntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "name"],
                condition=Q(session__isnull=False),
                name="artifacthead_session_name",
            ),
            models.UniqueConstraint(
                fields=["app", "user_id", "name"],
                condition=Q(session__isnull=True),
                name="artifacthead_user_name",
            ),
        ]
        indexes = [
            # Listing a session's names with the user's, by name; and the console's app filter.
            models.Index(fields=["app", "user_id", "name"], name="artifacthead_scope_name"),
        ]

    def __str__(self) -> str:
        return f"artifact {self.pk}"

    @property
    def scope(self) -> str:
        return USER_SCOPE if self.session_id is None else SESSION_SCOPE


class ArtifactVersion(models.Model):
    head = models.ForeignKey(
        ArtifactHead,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="versions",
        db_index=False,
    )
    version = models.IntegerField()
    storage = models.CharField(max_length=32, default=DATABASE_STORAGE)
    # Where a backend other than ``database`` keeps the bytes (empty for ``database``).
    storage_key = models.CharField(max_length=512, blank=True, default="")
    data = models.BinaryField(null=True)
    mime_type = models.CharField(max_length=255)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    custom_metadata = models.JSONField(null=True, blank=True)
    # A name to show for it (ADK's ``Blob.display_name``), kept as given: null is none given,
    # apart from an empty name.
    display_name = models.CharField(max_length=1024, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["head", "version"], name="artifactversion_unique"),
        ]

    def __str__(self) -> str:
        return f"artifact {self.head_id} version {self.version}"

"""Tenancy: apps (tenants) and their API keys; plus the worker round-trip probe."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.validators import RegexValidator
from django.db import models
from django.db.models.functions import Lower, Now

from ctxadmin.api.paths import APP_NAME_PATTERN, APP_NAME_RULE

SCOPE_SESSIONS = "sessions"
SCOPE_MEMORY = "memory"
SCOPE_CACHE = "cache"
SCOPE_DIAGNOSTICS = "diagnostics"
SCOPE_ADMIN = "admin"  # the app's own settings and keys
SCOPE_DELEGATE = "delegate"  # minting, listing and revoking user tokens
SCOPES = (
    SCOPE_SESSIONS,
    SCOPE_MEMORY,
    SCOPE_CACHE,
    SCOPE_DIAGNOSTICS,
    SCOPE_ADMIN,
    SCOPE_DELEGATE,
)

APP_NAME_TAKEN = "An app with this name already exists (names are unique ignoring case)."
app_name_validator = RegexValidator(
    rf"^{APP_NAME_PATTERN}\Z", f"An app name is {APP_NAME_RULE}.", code="invalid_app_name"
)


class App(models.Model):
    """A tenant. Everything an API key can reach belongs to exactly one app. Its name is unique
    ignoring case (``My_App`` and ``my_app`` are one tenant's name); URLs spell it exactly."""

    name = models.CharField(max_length=63, unique=True, validators=[app_name_validator])
    display_name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                Lower("name"),
                name="app_name_unique_ignoring_case",
                violation_error_code="app_name_taken",
                violation_error_message=APP_NAME_TAKEN,
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ApiKeyQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked_at__isnull=True)


class ApiKey(models.Model):
    """A bearer credential bound to one app. Only a SHA-256 digest of the key is stored; the
    key itself is shown once, when it is created."""

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=10, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = ArrayField(models.CharField(max_length=20, choices=[(s, s) for s in SCOPES]))
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"
        indexes = [models.Index(fields=["app", "revoked_at"], name="apikey_app_revoked")]
        constraints = [
            models.CheckConstraint(condition=models.Q(scopes__len__gt=0), name="apikey_has_scope"),
        ]

    def __str__(self) -> str:
        return f"{self.app.name}/{self.prefix}"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes


class WorkerProbe(models.Model):
    """A round trip through the broker to a Celery worker and back to PostgreSQL: the web
    side writes the row and enqueues its id on commit; a worker marks it completed."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(db_default=Now())
    completed_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=255, blank=True)

    class Meta:
        indexes = [models.Index(fields=["created_at"], name="workerprobe_created")]

    def __str__(self) -> str:
        return str(self.pk)


class AuditLog(models.Model):
    """Who saw conversation content in the console, what and when. Only operators holding
    ``ctxadmin.view_content`` see content at all, on a detail page, and every such page
    view writes one row here first."""

    VIEW_CONTENT = "view_content"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    username = models.CharField(max_length=150)  # kept when the account is deleted
    action = models.CharField(max_length=32, choices=[(VIEW_CONTENT, VIEW_CONTENT)])
    object_type = models.CharField(max_length=100)  # app_label.model
    object_id = models.CharField(max_length=64)
    app = models.ForeignKey(App, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["-created_at"], name="auditlog_created"),
            models.Index(fields=["username", "-created_at"], name="auditlog_user"),
            models.Index(fields=["object_type", "object_id"], name="auditlog_object"),
        ]
        permissions = [("view_content", "Can view conversation content (audit-logged)")]

    def __str__(self) -> str:
        return f"{self.username} {self.action} {self.object_type}:{self.object_id}"


class McpCallCount(models.Model):
    """MCP tool calls per app and hour, for the console: one upsert per call (content-free:
    a count)."""

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    hour = models.DateTimeField()
    calls = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["app", "hour"], name="ctxadmin_mcpcallcount_app_hour"),
        ]
        indexes = [models.Index(fields=["hour"], name="ctxadmin_mcpcallcount_hour")]

    def __str__(self) -> str:
        return f"{self.app_id} {self.hour:%Y-%m-%d %H}:00"

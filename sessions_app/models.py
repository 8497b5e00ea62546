"""Sessions, their events, and the app- and user-scoped state (ADK semantics)."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Now

from ctxadmin.models import App


class Session(models.Model):
    """One conversation of one user of one app. ``revision`` is bumped by every append (the
    compare-and-append token); ``last_seq`` is the seq of the newest event."""

    # No separate index on app: the unique (app, user_id, session_id) index leads with it.
    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="sessions", db_index=False)
    user_id = models.CharField(max_length=128)
    session_id = models.CharField(max_length=128)
    state = models.JSONField(default=dict)
    revision = models.BigIntegerField(default=0)
    last_seq = models.BigIntegerField(default=0)
    event_count = models.IntegerField(default=0)
    total_bytes = models.BigIntegerField(default=0)
    token_estimate = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["app", "user_id", "session_id"], name="session_unique_per_user"
            ),
        ]
        indexes = [
            # The list endpoint: one user's sessions, newest activity first, by cursor.
            models.Index(
                "app",
                "user_id",
                models.F("updated_at").desc(),
                models.F("id").desc(),
                name="session_user_activity",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.app_id}/{self.user_id}/{self.session_id}"


class Event(models.Model):
    """One stored event. Never rewritten; the derived columns (``kinds``, ``call_ids``,
    ``response_ids``, ``context_bytes``) let the context builder select without reading
    content."""

    # No separate index on session: the unique (session, seq) index leads with it.
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    seq = models.BigIntegerField()
    event_id = models.CharField(max_length=128)
    invocation_id = models.CharField(max_length=128, blank=True)
    author = models.CharField(max_length=128)
    role = models.CharField(max_length=32, blank=True)
    content = models.JSONField(null=True)
    turn_complete = models.BooleanField(null=True)
    actions = models.JSONField(default=dict)
    usage_metadata = models.JSONField(null=True)
    custom_metadata = models.JSONField(null=True)
    timestamp = models.DateTimeField()
    kinds = models.SmallIntegerField(default=0)
    call_ids = ArrayField(models.CharField(max_length=128), null=True)
    response_ids = ArrayField(models.CharField(max_length=128), null=True)
    byte_size = models.IntegerField()
    context_bytes = models.IntegerField()
    # The event as a context history item, secret-pruned canonical JSON, computed once at
    # append: a build concatenates these instead of decoding, pruning and re-encoding content.
    context_json = models.TextField()
    token_estimate = models.IntegerField()
    content_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="event_unique_seq"),
            models.UniqueConstraint(fields=["session", "event_id"], name="event_unique_id"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq}"


class AppState(models.Model):
    """``app:`` keys, shared by every user and session of the app (stored un-prefixed)."""

    app = models.OneToOneField(App, on_delete=models.CASCADE, related_name="state")
    state = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"app state of {self.app_id}"


class UserState(models.Model):
    """``user:`` keys, shared by every session of one user of the app (stored un-prefixed)."""

    app = models.ForeignKey(
        App, on_delete=models.CASCADE, related_name="user_states", db_index=False
    )
    user_id = models.CharField(max_length=128)
    state = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["app", "user_id"], name="userstate_unique"),
        ]

    def __str__(self) -> str:
        return f"user state of {self.app_id}/{self.user_id}"

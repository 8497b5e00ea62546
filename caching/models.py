"""The prefix-cache registry's rows: scopes (with their lease generation) and entries.

An entry is the registry's record of one provider-side cache. Its life:

    creating ──install──▶ active ──expiry / invalidate──▶ deleting ──provider delete──▶ (row gone)
        │                                                    ▲
        ├── provider error ──▶ failed (kept while a waiter may still read it)
        └── orphan (no waiter within its deadline, scope invalidated, creator lost) ──┘

At most one ``creating`` or ``active`` entry exists per key (a partial unique index): that
row is the single flight every process and host joins. The provider's resource name is
stored encrypted (``caching.crypto``) and never serialised, logged or shown.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models.functions import Now

from ctxadmin.models import App

CREATING = "creating"
ACTIVE = "active"
FAILED = "failed"
DELETING = "deleting"
STATES = (CREATING, ACTIVE, FAILED, DELETING)
LIVE_STATES = (CREATING, ACTIVE)

# Why an entry is being deleted at the provider.
DELETE_REASONS = ("expired", "invalidated", "orphan", "creator_lost", "shutdown", "superseded")


class CacheScope(models.Model):
    """(provider, app, user, model, policy): what ``invalidate`` names. Bumping
    ``generation`` makes every lease issued before it resolve to ``lease_expired``."""

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="cache_scopes")
    fingerprint = models.CharField(max_length=64)
    provider = models.CharField(max_length=32)
    user_id = models.CharField(max_length=128)
    model = models.CharField(max_length=128)
    policy_fingerprint = models.CharField(max_length=64)
    # The normalised policy: numbers, a failure mode and operator labels (no secrets: a
    # policy with a secret-named key is refused before it gets here).
    policy = models.JSONField()
    generation = models.BigIntegerField(default=1)
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    invalidated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["app", "fingerprint"], name="cachescope_app_fp"),
        ]
        indexes = [models.Index(fields=["app", "user_id"], name="cachescope_app_user")]
        permissions = [("invalidate_cachescope", "Can invalidate cache scopes")]

    def __str__(self) -> str:
        return f"{self.app_id}/{self.fingerprint[:12]}"


class CacheEntry(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="cache_entries")
    scope = models.ForeignKey(CacheScope, on_delete=models.CASCADE, related_name="entries")
    key = models.CharField(max_length=64)
    prefix_fingerprint = models.CharField(max_length=64)
    ttl_ms = models.BigIntegerField()
    generation = models.BigIntegerField()
    state = models.CharField(max_length=10, choices=[(s, s) for s in STATES])
    # The creator's random token: only it may install or fail a ``creating`` row.
    creator = models.CharField(max_length=32, blank=True)
    # The latest deadline of the callers waiting for this create (absolute, database clock):
    # a resource that arrives after it is an orphan.
    deadline = models.DateTimeField(null=True, blank=True)
    # When a ``creating`` row whose creator has not reported is presumed dead.
    create_lease_until = models.DateTimeField(null=True, blank=True)
    waiters = models.IntegerField(default=0)
    # Acquires answered with this entry (its create not included), and the latest one.
    hits = models.BigIntegerField(default=0)
    last_hit_at = models.DateTimeField(null=True, blank=True)
    resource = models.TextField(blank=True, editable=False)  # encrypted; never shown
    prefix_tokens = models.IntegerField(default=0)
    cached_tokens = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    installed_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    error_code = models.CharField(max_length=40, blank=True)
    delete_reason = models.CharField(
        max_length=20, blank=True, choices=[(r, r) for r in DELETE_REASONS]
    )
    delete_due_at = models.DateTimeField(null=True, blank=True)
    delete_attempts = models.IntegerField(default=0)

    class Meta:
        verbose_name_plural = "cache entries"
        constraints = [
            models.UniqueConstraint(
                fields=["key"],
                condition=models.Q(state__in=LIVE_STATES),
                name="cacheentry_live_key",
            ),
            models.CheckConstraint(
                condition=models.Q(state__in=STATES), name="cacheentry_state_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["app", "state"], name="cacheentry_app_state"),
            models.Index(fields=["scope", "state"], name="cacheentry_scope_state"),
            models.Index(
                fields=["expires_at"],
                condition=models.Q(state=ACTIVE),
                name="cacheentry_active_expiry",
            ),
            models.Index(
                fields=["create_lease_until"],
                condition=models.Q(state=CREATING),
                name="cacheentry_creating_lease",
            ),
            models.Index(
                fields=["delete_due_at"],
                condition=models.Q(state=DELETING),
                name="cacheentry_delete_due",
            ),
            models.Index(
                fields=["deadline"], condition=models.Q(state=FAILED), name="cacheentry_failed"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.state} {self.pk}"

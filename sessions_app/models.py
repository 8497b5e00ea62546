"""Sessions, their events, and the app- and user-scoped state (ADK semantics)."""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.db.models.functions import Now

from ctxadmin.delegated import DelegatedCredential
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
    # The session's own compaction policy (normalised); None: the app's, else the defaults.
    compaction_policy = models.JSONField(null=True, blank=True)
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
            # The app-wide list: every user's sessions by last update, either way, by cursor.
            models.Index(fields=["app", "updated_at", "id"], name="session_app_activity"),
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
    # ADK's top-level event fields ctxadmin keeps without interpreting (grounding metadata,
    # transcriptions, branch, ...), as the client sent them; None without any. Those nested
    # in content and actions stay there.
    adk_fields = models.JSONField(null=True)
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
        indexes = [
            # The dashboard's events per hour. Rows arrive in created_at order, so a BRIN
            # index finds a recent window for a few pages of index and no cost on append.
            BrinIndex(fields=["created_at"], autosummarize=True, name="event_created_brin"),
            # The console's events list: searched by exact event id, filtered by author.
            models.Index(fields=["event_id"], name="event_event_id"),
            models.Index(fields=["author", "id"], name="event_author"),
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


class AppCompactionPolicy(models.Model):
    """An app's default compaction policy (normalised, as ``CompactionPolicy.as_dict``).
    Automatic compaction runs only where an app or session policy exists and enables it."""

    app = models.OneToOneField(App, on_delete=models.CASCADE, related_name="compaction_policy")
    policy = models.JSONField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "app compaction policies"

    def __str__(self) -> str:
        return f"compaction policy of {self.app_id}"


class Checkpoint(models.Model):
    """A compaction request and, once it succeeds, the checkpoint it made.

    The id is the request id, so a retried request is idempotent. ``active`` is the
    session's head (at most one); a checkpoint a later one replaced is ``superseded``, and
    it still renders in context until a later checkpoint's range contains it
    (``subsumed_by``). ``pending``/``running`` rows are the work in flight: at most one per
    session (a partial unique index). Skipped automatic checks leave no row.
    """

    PENDING, RUNNING, ACTIVE, SUPERSEDED, FAILED = (
        "pending",
        "running",
        "active",
        "superseded",
        "failed",
    )
    STATUSES = [(s, s) for s in (PENDING, RUNNING, ACTIVE, SUPERSEDED, FAILED)]
    COMMITTED = (ACTIVE, SUPERSEDED)

    id = models.UUIDField(primary_key=True)
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="checkpoints", db_index=False
    )
    # The id the API shows and takes: the client's (or a generated one), unique in its app,
    # so a tenant's ids live in its own key space: another app's id is neither taken nor
    # seen. ``id`` is the row's own key (server-made; older rows share it with this one).
    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    compaction_id = models.UUIDField()
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    subsumed_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=16, choices=STATUSES)
    origin = models.CharField(max_length=16)  # automatic | manual | overflow
    trigger = models.CharField(max_length=32, blank=True)
    representation = models.CharField(max_length=16, blank=True)  # summary | pruned
    reason = models.CharField(max_length=64, blank=True)  # the error code of a failure
    message = models.CharField(max_length=500, blank=True)  # content-free
    first_seq = models.BigIntegerField(null=True)
    last_seq = models.BigIntegerField(null=True)
    source_event_ids = ArrayField(models.CharField(max_length=128), default=list)
    source_fingerprint = models.CharField(max_length=64, blank=True)
    summary = models.JSONField(null=True)
    # The history items that replace the range, as a canonical JSON array.
    items_json = models.TextField(blank=True)
    items_bytes = models.IntegerField(default=0)
    item_count = models.IntegerField(default=0)
    tokens = models.IntegerField(default=0)
    tokens_before = models.IntegerField(null=True)
    tokens_after = models.IntegerField(null=True)
    summarizer = models.CharField(max_length=32, blank=True)
    model = models.CharField(max_length=128, blank=True)
    usage = models.JSONField(default=dict)
    policy = models.JSONField(default=dict)
    high_water_seq = models.BigIntegerField(default=0)
    window_end_invocation = models.CharField(max_length=128, blank=True)
    projected_event_ids = ArrayField(models.CharField(max_length=128), default=list)
    summary_event_id = models.CharField(max_length=128, blank=True)
    purged_events = models.IntegerField(default=0)
    # What an asynchronous manual request asked for, applied when the worker runs it.
    timeout_ms = models.IntegerField(null=True)
    check_head = models.BooleanField(default=False, db_default=False)
    expected_head = models.UUIDField(null=True)
    duration_ms = models.FloatField(null=True)
    # A worker's claim on an asynchronous run: the attempt it is (which also fences its
    # commit) and when its lease ends. A run inside a web request has no lease.
    attempts = models.PositiveSmallIntegerField(default=0, db_default=0)
    lease_expires_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["app", "compaction_id"], name="checkpoint_compaction_id_per_app"
            ),
            models.UniqueConstraint(
                fields=["session"],
                condition=models.Q(status__in=["pending", "running"]),
                name="checkpoint_one_in_flight",
            ),
            models.UniqueConstraint(
                fields=["session"],
                condition=models.Q(status="active"),
                name="checkpoint_one_active",
            ),
        ]
        indexes = [
            models.Index(
                "session",
                models.F("created_at").desc(),
                models.F("id").desc(),
                name="checkpoint_session_recent",
            ),
            # What the context builder reads: the visible checkpoints of a session.
            models.Index(
                fields=["session", "first_seq"],
                condition=models.Q(status__in=["active", "superseded"], subsumed_by__isnull=True),
                name="checkpoint_visible",
            ),
            models.Index(
                fields=["status", "created_at"],
                condition=models.Q(status__in=["pending", "running"]),
                name="checkpoint_in_flight",
            ),
            # The dashboard's compactions per hour, every status.
            models.Index(fields=["created_at"], name="checkpoint_created"),
        ]

    def __str__(self) -> str:
        return f"checkpoint {self.compaction_id} of {self.session_id}"

    def save(self, *args, **kwargs):
        # A server-made compaction shows its own key; its app is its session's.
        if self.compaction_id is None:
            self.compaction_id = self.id
        if self.app_id is None:
            self.app_id = Session.objects.values_list("app_id", flat=True).get(pk=self.session_id)
        super().save(*args, **kwargs)


class CompactionState(models.Model):
    """Automatic-compaction bookkeeping of one session: the backoff after ineffective
    results, and content-free counters of the checks made."""

    session = models.OneToOneField(
        Session, on_delete=models.CASCADE, primary_key=True, related_name="compaction_state"
    )
    ineffective_streak = models.IntegerField(default=0)
    backoff_until = models.DateTimeField(null=True)
    checks = models.IntegerField(default=0)
    last_skip_reason = models.CharField(max_length=64, blank=True)
    last_checked_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"compaction state of {self.session_id}"


class Invocation(models.Model):
    """One model call run by ctxadmin for a session (``POST …/invocations``), by the client's
    invocation id: numbers, ids and codes only (the content is in the session's events)."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="invocations")
    invocation_id = models.CharField(max_length=128)
    status = models.CharField(max_length=10, choices=[(s, s) for s in (RUNNING, COMPLETED, FAILED)])
    provider = models.CharField(max_length=64)
    model = models.CharField(max_length=128)
    request_fingerprint = models.CharField(max_length=64)
    input_event_id = models.CharField(max_length=128, blank=True)
    output_event_ids = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    function_calls = models.IntegerField(default=0)
    cache_status = models.CharField(max_length=10, blank=True)  # created, hit, bypass, off
    cache_reason = models.CharField(max_length=32, blank=True)
    cached_tokens = models.IntegerField(null=True, blank=True)
    input_tokens = models.IntegerField(null=True, blank=True)
    output_tokens = models.IntegerField(null=True, blank=True)
    memory_hits = models.IntegerField(default=0)
    pre_compaction_id = models.UUIDField(null=True, blank=True)
    ingestion_job_id = models.UUIDField(null=True, blank=True)
    error_code = models.CharField(max_length=40, blank=True)
    provider_ms = models.FloatField(null=True, blank=True)
    total_ms = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "invocation_id"], name="invocation_unique_per_session"
            ),
        ]
        indexes = [models.Index(fields=["status", "created_at"], name="invocation_status")]

    def __str__(self) -> str:
        return f"{self.session_id}/{self.invocation_id}"


class ToolToken(DelegatedCredential, models.Model):
    """A least-authority credential: it can do only its ``capabilities`` for its (app, user)
    and, when it names one, its session, until it expires or is revoked. One minted for a
    tool call of an invocation (``invocation`` set) also ends when the tool's function
    response is appended or its call is purged; a *user token* (no invocation) is minted for
    an MCP client or one agent run. Every end is stored on the row when it happens. Only the
    SHA-256 digest is stored."""

    CAPABILITIES = (
        "identity",
        "state_read",
        "artifact_put",
        "artifact_get",
        "artifact_list",
        "artifact_list_versions",
        "artifact_delete",
        "artifact_attach",
        "memory_search",
        "memory_add",
        "memory_delete",
        "context_build",
        "session_read",
        "event_append",
        "memory_get",
    )

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="tool_tokens")
    user_id = models.CharField(max_length=256)
    session = models.ForeignKey(
        Session, null=True, blank=True, on_delete=models.CASCADE, related_name="tool_tokens"
    )
    invocation = models.ForeignKey(
        Invocation, null=True, blank=True, on_delete=models.CASCADE, related_name="tool_tokens"
    )
    function_call_id = models.CharField(max_length=128, blank=True)
    # The seq of the event holding the call: its answer can only come after it.
    call_seq = models.BigIntegerField(null=True, blank=True)
    tool_name = models.CharField(max_length=256, blank=True)
    label = models.CharField(max_length=200, blank=True)
    # The prefix of the API key that minted the token: its revocation ends the token.
    created_by_key = models.CharField(max_length=16, blank=True, verbose_name="minted by key")
    capabilities = ArrayField(
        models.CharField(max_length=32, choices=[(c, c) for c in CAPABILITIES])
    )
    prefix = models.CharField(max_length=10, unique=True, editable=False)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    # deleted, answered, purged, rewound, erased (its user), minter_revoked (its minting key)
    revoked_reason = models.CharField(max_length=16, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["invocation", "expires_at"], name="tooltoken_invocation"),
            models.Index(fields=["app", "user_id", "-created_at"], name="tooltoken_user"),
            # The app-wide list of user tokens, newest first, by cursor.
            models.Index(
                "app",
                models.F("created_at").desc(),
                models.F("id").desc(),
                condition=models.Q(invocation__isnull=True),
                name="tooltoken_app_user_tokens",
            ),
            # What a key's revocation ends, and the list's minted_by filter.
            models.Index(fields=["created_by_key", "created_at"], name="tooltoken_minter"),
        ]

    def __str__(self) -> str:
        # Never the label: the minting app's free text is content (the console shows it only
        # with the content permission).
        return f"{self.prefix} ({self.tool_name or 'user token'})"

    @property
    def credential_kind(self) -> str:
        return "tooltoken" if self.invocation_id is not None else "usertoken"

    @property
    def bound_user_id(self) -> str:
        return self.user_id

    @property
    def bound_session_id(self) -> str | None:
        return self.session.session_id if self.session_id is not None else None

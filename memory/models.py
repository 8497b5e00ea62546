"""Long-term memory: entries scoped by (app, user), with a lexical index and an embedding."""

from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import Value
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
    # The SHA-256 of the normalised content (``memory.similarity.normalised``): two unkeyed
    # live entries of a scope never share it (``memory/dedup.py``).
    normalised_sha256 = models.CharField(max_length=64, blank=True, db_default="")
    metadata = models.JSONField(default=dict)
    # NULL: no key (the unique index covers keyed entries only).
    idempotency_key = models.CharField(max_length=256, null=True)  # noqa: DJ001
    session_id = models.CharField(max_length=128, blank=True, db_default="")
    event_id = models.CharField(max_length=128, blank=True, db_default="")
    author = models.CharField(max_length=128, blank=True, db_default="")
    source_timestamp = models.DateTimeField(null=True)
    search = SearchVectorField()
    # Stored in the row (STORAGE PLAIN, migration 0004), never in TOAST.
    embedding = VectorField(dimensions=EMBEDDING_DIMENSION, null=True)
    embedding_model = models.CharField(max_length=128, blank=True, db_default="")
    # How often the embedder refused this entry's content (the embedding task stops at 3).
    embed_failures = models.SmallIntegerField(default=0, db_default=0)
    content_bytes = models.IntegerField()
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    # The entry's own ``ttl_seconds``, else the app's ``default_ttl_seconds``, at write time:
    # invisible from then on, purged later.
    expires_at = models.DateTimeField(null=True)
    # The TTL ``expires_at`` was set from; a touch moves ``expires_at`` to now plus it.
    ttl_seconds = models.PositiveIntegerField(null=True)
    # The app's ``retention_days`` at write time: entry and session erasure refuse before it.
    retain_until = models.DateTimeField(null=True)
    # Facts over time (``memory/facts.py``). ``key``: the fact this entry is a version of
    # (``preference.seat``); NULL: a memory of its own. Valid time: when it was true in the
    # world (``valid_to`` NULL: still true). Record time: when ctxadmin learned it and when
    # it closed the version (set with ``valid_to``).
    key = models.CharField(max_length=128, null=True)  # noqa: DJ001
    valid_from = models.DateTimeField(db_default=Now())
    valid_to = models.DateTimeField(null=True)
    recorded_at = models.DateTimeField(db_default=Now())
    retired_at = models.DateTimeField(null=True)
    # The ends a closed version had before older facts placed inside it cut it short, oldest
    # first, each with ``until`` (the cut's record time): [{"valid_to", "until"}, ...]; NULL
    # while never cut after closing. Readers at an earlier ``known_at`` see the end they knew.
    earlier_ends = models.JSONField(null=True)
    # The next version of the key. The constraint is the migration's own (ON DELETE SET
    # NULL: entries are deleted by SQL, which Django's on_delete never sees).
    superseded_by = models.ForeignKey(
        "self",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=True,
        related_name="+",
    )
    # The entry this one nearly repeats, found when it was added (``memory/dedup.py``): a
    # flag, not a link the entry depends on (ON DELETE SET NULL, the migration's own).
    near_duplicate_of = models.ForeignKey(
        "self",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=True,
        related_name="+",
    )
    # Who wrote it: the API key's or token's prefix ("" for a worker), and the ingestion job
    # when one did.
    written_by = models.CharField(max_length=10, blank=True, db_default="")
    job_id = models.UUIDField(null=True)

    class Meta:
        verbose_name_plural = "memory entries"
        permissions = [("erase_memoryentry", "Can erase memory entries (with receipts)")]
        constraints = [
            models.UniqueConstraint(
                fields=["app", "user_id", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="memory_unique_idempotency_key",
            ),
            # At most one live version per key.
            models.UniqueConstraint(
                fields=["app", "user_id", "key"],
                condition=models.Q(key__isnull=False, valid_to__isnull=True),
                name="memory_live_fact_key",
            ),
        ]
        indexes = [
            # A key's versions in valid-time order: placement and history.
            models.Index(
                fields=["app", "user_id", "key", "valid_from"],
                condition=models.Q(key__isnull=False),
                name="memory_fact_versions",
            ),
            # The same text in a scope (unkeyed entries: a key's versions may repeat a text).
            models.Index(
                fields=["app", "user_id", "normalised_sha256"],
                condition=models.Q(key__isnull=True),
                name="memory_same_text",
            ),
            # Unflagging the entries that nearly repeat a deleted one.
            models.Index(
                fields=["near_duplicate_of"],
                condition=models.Q(near_duplicate_of__isnull=False),
                name="memory_near_duplicates",
            ),
            # A version's predecessor (``supersedes``), and unlinking it when it is deleted.
            models.Index(
                fields=["superseded_by"],
                condition=models.Q(superseded_by__isnull=False),
                name="memory_predecessor",
            ),
            models.Index(
                "app",
                "user_id",
                models.F("created_at").desc(),
                models.F("id").desc(),
                name="memory_scope_recent",
            ),
            # A session's entries in the order they were said: a hit's neighbours (the turns
            # just before and after it) in the context builder's memory slot.
            models.Index(
                "app",
                "user_id",
                "session_id",
                "source_timestamp",
                condition=~models.Q(session_id="") & models.Q(source_timestamp__isnull=False),
                name="memory_session_order",
            ),
            # Searches are scoped: the scope leads (btree_gin), so only its postings are read.
            GinIndex(fields=["app", "user_id", "search"], name="memory_scope_search"),
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
            models.Index(
                fields=["expires_at"],
                condition=models.Q(expires_at__isnull=False),
                name="memory_expiring",
            ),
        ]

    def __str__(self) -> str:
        return f"memory {self.id}"


class ScopeStats(models.Model):
    """How many entries a scope holds and how many distinct lexemes their ``search`` vectors
    hold in all: BM25's N and, divided, its average document length. Written only by the
    database (statement triggers on ``memory_memoryentry``, migration 0003), in the
    transaction that adds or removes the entries; a row is deleted when its scope is empty.
    Counts entries whether or not they are live: an expired entry counts until it is purged."""

    pk = models.CompositePrimaryKey("app_id", "user_id")
    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    user_id = models.CharField(max_length=128)
    entries = models.BigIntegerField()
    lexemes = models.BigIntegerField()

    class Meta:
        verbose_name_plural = "scope statistics"

    def __str__(self) -> str:
        return f"scope statistics of app {self.app_id}"


class TermStats(models.Model):
    """In how many of a scope's entries each lexeme occurs: BM25's document frequency, kept
    by the same triggers as ``ScopeStats`` (a row is deleted when it reaches 0, so erasing a
    scope's entries erases its lexemes too). Lexemes derive from content: never shown."""

    pk = models.CompositePrimaryKey("app_id", "user_id", "lexeme")
    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    user_id = models.CharField(max_length=128)
    lexeme = models.TextField()
    entries = models.IntegerField()

    class Meta:
        verbose_name_plural = "term statistics"

    def __str__(self) -> str:
        return f"term statistics of app {self.app_id}"


class MemoryPolicy(models.Model):
    """An app's memory governance (absent: the defaults, no consent, no TTL, no retention,
    no hold)."""

    app = models.OneToOneField(
        App, on_delete=models.CASCADE, primary_key=True, related_name="memory_policy"
    )
    consent_required = models.BooleanField(default=False)
    default_ttl_seconds = models.PositiveIntegerField(null=True)
    retention_days = models.PositiveIntegerField(null=True)
    legal_hold = models.BooleanField(default=False)
    # "on_success": an append that completes an invocation admits an outbox job for the
    # session's events not yet admitted; "off": only explicit ingestion requests.
    ingestion = models.CharField(max_length=16, db_default="off", default="off")
    # The extractor ingestion uses (``memory.extractors``: a spec's ``as_dict``); empty: none,
    # each turn stored as said.
    extractor = models.JSONField(default=dict, db_default=Value({}, models.JSONField()))
    updated_at = models.DateTimeField(db_default=Now())
    updated_by = models.CharField(max_length=10, blank=True, db_default="")  # key prefix

    class Meta:
        verbose_name_plural = "memory policies"

    def __str__(self) -> str:
        return f"memory policy of app {self.app_id}"


class Consent(models.Model):
    """One user's consent to long-term memory, as the app recorded it. User erasure removes
    it (the app asks again)."""

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    user_id = models.CharField(max_length=128)
    granted = models.BooleanField()
    updated_at = models.DateTimeField(db_default=Now())
    updated_by = models.CharField(max_length=10, blank=True, db_default="")  # key prefix

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["app", "user_id"], name="memory_consent_scope"),
        ]

    def __str__(self) -> str:
        return f"consent {self.pk}"


class LegalHold(models.Model):
    """A legal hold on one user's memory: while the row exists nothing of the scope is
    erased or purged."""

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    user_id = models.CharField(max_length=128)
    created_at = models.DateTimeField(db_default=Now())
    created_by = models.CharField(max_length=10, blank=True, db_default="")  # key prefix

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["app", "user_id"], name="memory_legal_hold_scope"),
        ]

    def __str__(self) -> str:
        return f"legal hold {self.pk}"


class ErasureEpoch(models.Model):
    """The erasure epoch of one (app, user) scope, keyed by the scope's fingerprint (never
    the user id, so it survives the erasure without naming the user). Absent: epoch 0. Each
    user erasure advances it; a write carrying an older epoch is refused."""

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    scope_fingerprint = models.CharField(max_length=64)
    epoch = models.BigIntegerField()
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["app", "scope_fingerprint"], name="memory_erasure_epoch_scope"
            ),
        ]

    def __str__(self) -> str:
        return f"erasure epoch {self.epoch}"


class ErasureReceipt(models.Model):
    """A content-free record that an erasure happened: which key, which scope (as a
    fingerprint), what kind, how many rows, when. No user id, no session id, no content."""

    ENTRY = "entry"
    SESSION = "session"
    USER = "user"
    KINDS = [(ENTRY, ENTRY), (SESSION, SESSION), (USER, USER)]

    id = models.UUIDField(primary_key=True)
    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    kind = models.CharField(max_length=16, choices=KINDS)
    scope_fingerprint = models.CharField(max_length=64)
    # entry: sha256 of {app, user, memory id}; session: of {app, user, session id}; user: "".
    target_fingerprint = models.CharField(max_length=64, blank=True, db_default="")
    erased_by = models.CharField(max_length=10)  # the API key prefix
    counts = models.JSONField(default=dict)
    erasure_epoch = models.BigIntegerField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            models.Index(
                "app", "scope_fingerprint", models.F("created_at").desc(), name="erasure_scope"
            ),
        ]

    def __str__(self) -> str:
        return f"erasure receipt {self.id}"


class OutboxJob(models.Model):
    """One durable ingestion job: a session's events (sanitised at admission) to become one
    user's memories, drained by workers under a lease.

    The id is derived from what the job ingests (adapter, scope, session, the ordered event
    ids, the erasure epoch), so admitting the same request twice finds the same row. The
    payload holds the sanitised events only while the job is active: it is cleared when the
    job ends, whatever the ending. ``due_at`` is when the job may next be claimed: its next
    attempt while pending or retrying, its lease's expiry while running."""

    PENDING = "pending"
    RUNNING = "running"
    RETRY = "retry"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PHASES = [(p, p) for p in (PENDING, RUNNING, RETRY, COMPLETED, FAILED, CANCELLED)]
    ACTIVE = (PENDING, RUNNING, RETRY)
    TERMINAL = (COMPLETED, FAILED, CANCELLED)

    id = models.UUIDField(primary_key=True)
    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    # Blanked (with ``session_id``) when the user is erased; the fingerprint stays.
    user_id = models.CharField(max_length=128)
    scope_fingerprint = models.CharField(max_length=64)
    session_id = models.CharField(max_length=128)
    adapter = models.CharField(max_length=64)
    erasure_epoch = models.BigIntegerField()
    phase = models.CharField(max_length=16, choices=PHASES)
    # [{"event_id", "seq", "author", "role", "text", "timestamp"} | {"event_id", "seq",
    # "skip"}]: the admitted events in order; [] once the job has ended.
    payload = models.JSONField(default=list)
    payload_bytes = models.IntegerField()
    events = models.IntegerField()
    first_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()
    # Index in the payload of the next event to write; batches written so far.
    cursor = models.IntegerField(default=0)
    batches = models.IntegerField(default=0)
    added = models.IntegerField(default=0)
    duplicates = models.IntegerField(default=0)
    skipped = models.IntegerField(default=0)
    redacted = models.IntegerField(default=0)
    skipped_by_reason = models.JSONField(default=dict)
    # An extraction job's extractor (a spec's ``as_dict``; empty for ``session_events.v1``)
    # and its totals: runs, applied, refused, added, updated, retired, unchanged,
    # input_tokens, output_tokens.
    extractor = models.JSONField(default=dict, db_default=Value({}, models.JSONField()))
    extracted = models.JSONField(default=dict, db_default=Value({}, models.JSONField()))
    attempts = models.IntegerField(default=0)
    max_attempts = models.IntegerField()
    due_at = models.DateTimeField()
    owner_token = models.CharField(max_length=32, blank=True, db_default="")
    # A stable code and a fixed message of ours: never an exception's text, never content.
    error_code = models.CharField(max_length=64, blank=True, db_default="")
    error_message = models.CharField(max_length=256, blank=True, db_default="")
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)

    class Meta:
        permissions = [("operate_outbox", "Can make outbox jobs due now or cancel them")]
        indexes = [
            # Claim order and the global admission limits: the active rows by due time.
            models.Index(
                fields=["due_at"],
                include=["payload_bytes"],
                condition=models.Q(phase__in=["pending", "running", "retry"]),
                name="outbox_claimable",
            ),
            # The per-scope admission limits.
            models.Index(
                fields=["app", "user_id"],
                include=["payload_bytes"],
                condition=models.Q(phase__in=["pending", "running", "retry"]),
                name="outbox_active_scope",
            ),
            # Erasure of a scope or a session; where a session's ingestion got to.
            models.Index(fields=["app", "user_id", "session_id"], name="outbox_scope_session"),
            # Pruning, oldest ended first.
            models.Index(
                fields=["finished_at"],
                condition=models.Q(phase__in=["completed", "failed", "cancelled"]),
                name="outbox_terminal",
            ),
            # Per-app statistics by phase.
            models.Index(fields=["app", "phase"], name="outbox_app_phase"),
        ]

    def __str__(self) -> str:
        return f"outbox job {self.id}"


class NearCheck(models.Model):
    """An explicitly added unkeyed memory waiting for the near-duplicate sweep
    (``memory.dedup.sweep_near_duplicates``), queued in the add's transaction: ids only.
    No foreign key: an entry erased first leaves its row to the sweep, which skips it."""

    id = models.BigAutoField(primary_key=True)
    entry_id = models.UUIDField()

    def __str__(self) -> str:
        return f"near-duplicate check {self.id}"


class ExtractionRun(models.Model):
    """One batch of an extraction job: which extractor was asked (its kind, model and prompt
    version), how much it cost, what it answered and what the server decided (``applied``,
    or ``refused`` with the check's code and path). The answer is content: shown only with
    the content right, deleted with its user or session, and with its job when ended jobs
    are pruned."""

    APPLIED = "applied"
    REFUSED = "refused"

    id = models.BigAutoField(primary_key=True)
    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    user_id = models.CharField(max_length=128)
    session_id = models.CharField(max_length=128)
    job = models.ForeignKey(OutboxJob, on_delete=models.CASCADE, related_name="runs")
    batch = models.IntegerField()
    extractor = models.CharField(max_length=32)
    model = models.CharField(max_length=128)
    prompt_version = models.CharField(max_length=32)
    outcome = models.CharField(max_length=16)
    error_code = models.CharField(max_length=64, blank=True, default="")
    error_path = models.CharField(max_length=128, blank=True, default="")
    turns = models.IntegerField()
    candidates = models.IntegerField()
    input_tokens = models.IntegerField(null=True)
    output_tokens = models.IntegerField(null=True)
    added = models.IntegerField(default=0)
    updated = models.IntegerField(default=0)
    retired = models.IntegerField(default=0)
    unchanged = models.IntegerField(default=0)
    answer = models.TextField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [
            models.Index(fields=["app", "user_id", "session_id"], name="extraction_run_scope"),
            models.Index(fields=["app", "created_at"], name="extraction_run_app_time"),
        ]

    def __str__(self) -> str:
        return f"extraction run {self.id}"


class OutboxRows(models.Model):
    """How many outbox rows exist (active and ended): one row, kept by statement triggers on
    ``memory_outboxjob`` (migration 0005) in the transaction that inserts or deletes jobs, so
    the admission cap reads one row instead of counting the table."""

    id = models.SmallIntegerField(primary_key=True)
    total = models.BigIntegerField()

    class Meta:
        verbose_name_plural = "outbox rows"

    def __str__(self) -> str:
        return f"{self.total} outbox rows"


class SearchCount(models.Model):
    """Memory searches per app and hour (the API's and the context builder's), for the
    console: one upsert per search. Rows older than ``SEARCH_COUNT_RETENTION_DAYS`` are
    deleted by ``memory.purge_expired``."""

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    hour = models.DateTimeField()
    searches = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["app", "hour"], name="memory_searchcount_app_hour"),
        ]
        indexes = [models.Index(fields=["hour"], name="memory_searchcount_hour")]

    def __str__(self) -> str:
        return f"{self.app_id} {self.hour:%Y-%m-%d %H}:00"


class ScopeIndex(models.Model):
    """A large scope's own vector index (``memory/scope_index.py``): a partial HNSW index
    over that scope's embedded rows only, named ``memory_scope_vec_<id>``. Searches use it
    once ``state`` is ``ready``; ``memory.maintain_scope_indexes`` builds, and drops, them."""

    class State(models.TextChoices):
        BUILDING = "building"
        READY = "ready"
        # The build failed: no index, and the scope waits until ``retry_at``.
        FAILED = "failed"

    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    user_id = models.CharField(max_length=128)
    # The index covers this model's vectors only (its predicate names it).
    embedding_model = models.CharField(max_length=128)
    state = models.CharField(max_length=16, choices=State.choices, default=State.BUILDING)
    # The scope's entries when its build started, and how long the build took.
    entries = models.BigIntegerField()
    build_seconds = models.FloatField(null=True)
    created_at = models.DateTimeField(db_default=Now())
    ready_at = models.DateTimeField(null=True)
    failed_at = models.DateTimeField(null=True)
    # A failed build's error: its SQLSTATE, or the exception's class (never a message).
    error = models.CharField(max_length=64, blank=True, default="")
    # When a failed build's scope may be tried again (``scope_index.failure``).
    retry_at = models.DateTimeField(null=True)

    class Meta:
        verbose_name_plural = "scope indexes"
        constraints = [
            models.UniqueConstraint(fields=["app", "user_id"], name="memory_scopeindex_scope"),
        ]

    def __str__(self) -> str:
        return self.index_name

    @property
    def index_name(self) -> str:
        return f"memory_scope_vec_{self.pk}"

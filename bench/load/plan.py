"""The load and fault runs' plan: clients, durations, bounds, the request mix, the statuses
expected of each endpoint, service settings and the targets."""

from __future__ import annotations

CLIENTS = 12  # gunicorn serves 3 x 4 = 12 requests at once
WARMUP_SECONDS = 10
LOAD_SECONDS = 60
MAX_REQUESTS = 150_000  # a bound on any one run, whatever the rate
FAULT_SECONDS = 30
FAULT_MAX_REQUESTS = 60_000
USERS = 6
SESSIONS_PER_USER = 2
SEED_EVENTS = 40
SEED_MEMORIES = 30
COMPACTION_TOKENS = 4000  # the sessions' automatic compaction threshold: it runs under load
BATCH_EVENTS = 300  # the large batch appends of the web-worker fault
CLIENT_TIMEOUT_SECONDS = 60
IDLE_SECONDS = 2  # a connection idle this long is replaced before it is used again
BACKOFF_503_SECONDS = 0.1  # a client waits this long after a 503 (it is told Retry-After: 1)
SETTLE_SECONDS = 360  # background work of a run must end within this

WEB_WORKERS = 3
WEB_THREADS = 4
WORKER_CONCURRENCY = 2
OUTBOX_LEASE_SECONDS = 15
OUTBOX_SWEEP_SECONDS = 10  # the service's default
COMPACTION_LEASE_SECONDS = 20

WINDOW_SECONDS = 10  # RSS growth: mean of the first 10 s against the last 10 s
WEB_RSS_MB = 300
CELERY_RSS_MB = 500
GROWTH_PERCENT = 10
GROWTH_MB = 10

PG_DOWN_SECONDS = 5
REDIS_DOWN_SECONDS = 10
WEB_KILLS = 3
BIG_INGEST_EVENTS = 5000
BIG_COMPACT_EVENTS = 4000
RECOVERY_TARGET_SECONDS = 5  # after PostgreSQL is back, every request succeeds within this

MIX = (("append", 40), ("context", 20), ("memory_search", 20), ("memory_add", 10), ("ingest", 10))
BATCH_MIX = (
    ("append_batch", 15),
    ("append", 40),
    ("context", 15),
    ("memory_search", 15),
    ("memory_add", 8),
    ("ingest", 7),
)
ENDPOINTS = ("append", "append_batch", "context", "memory_search", "memory_add", "ingest_admit")
EXPECTED = {
    "append": {200, 201},
    "append_batch": {200, 201},
    "context": {200},
    "memory_search": {200},
    "memory_add": {201},
    "ingest_admit": {200, 202},  # 200: those events were admitted already (deduplicated)
}
CONTEXT_POLICY = {"budgets": {"max_tokens": 8000}, "overflow": "truncate"}
WORDS = (
    "the agent reviewed order status shipping invoice refund customer account balance report "
    "weekly summary database query latency retry cache memory context window budget tool "
    "result document search index ranking passage answer question follow clarify schedule "
    "meeting calendar reminder weather forecast temperature city travel booking flight hotel "
    "confirmation payment method update address preference language hiking paella dentist"
).split()

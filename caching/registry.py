"""The provider prefix-cache registry: acquire, resolve, invalidate, status, cleanup.

Every web and worker process of a deployment shares one registry, kept in PostgreSQL:

- **Single flight.** A miss inserts the key's ``creating`` row (a partial unique index
  allows one ``creating``/``active`` row per key). The inserting caller is the creator; every
  other caller of the key, in any process or host, joins that row as a waiter (bounded per
  key) and is woken by ``NOTIFY`` or, failing that, by polling.
- **Deadlines are absolute.** Each waiter pushes the row's ``deadline`` to its own when it is
  later. The creator runs the provider call on a background thread and returns to its caller
  at the caller's deadline whatever happens; when the resource arrives, it is installed only
  if some waiter's deadline has not passed and the scope was not invalidated meanwhile,
  otherwise it is an orphan and is deleted. A creator that died leaves a ``creating`` row that
  ``cleanup`` resolves after its lease: any resource the provider made under the row's tag is
  found and deleted.
- **Leases are generation-checked.** ``invalidate`` bumps the scope's generation, and TTL
  expiry retires the entry: older leases then resolve to ``lease_expired``. Only ``resolve``
  (a server-side call) returns the provider's resource name.
- **Provider deletes** (invalidated, expired, orphaned, shut down) are rows in ``deleting``,
  worked off by the ``caching.cleanup`` beat task in bounded batches with per-call timeouts
  and retried with backoff.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core import signing
from django.db import connection, connections, transaction
from prometheus_client import Counter

from caching import crypto
from caching.adapters import CachePrefix, CreatedResource
from caching.keys import (
    CacheInputError,
    CacheScope,
    Limits,
    Prefix,
    check_sensitive,
    entry_key,
    parse_prefix,
    parse_scope,
    parse_ttl,
)
from caching.models import CacheEntry
from caching.models import CacheScope as ScopeRow
from caching.providers import get_adapter
from ctxadmin.batches import in_batches
from ctxadmin.errors import ServiceError, not_found
from ctxadmin.models import App
from ctxadmin.providers.base import ProviderError
from ctxadmin.pruning import echoed

logger = logging.getLogger("ctxadmin.cache")

ACQUIRES = Counter(
    "ctxadmin_cache_acquires_total",
    "Prefix-cache acquires by outcome (hit, created, bypass) and bypass reason.",
    ["outcome", "reason"],
)
PROVIDER_CALLS = Counter(
    "ctxadmin_cache_provider_calls_total",
    "Provider cache calls by operation (create, delete, find) and result (ok or error code).",
    ["operation", "result"],
)

CHANNEL = "ctxadmin_cache"
LEASE_SALT = "ctxadmin.cache.lease"
DEFAULT_TIMEOUT_MS = 10_000
MAX_TIMEOUT_MS = 120_000
ACQUIRE_KEYS = frozenset({"scope", "prefix", "ttl_ms", "timeout_ms"})
# The two-key advisory lock serialising new entries of an app against max_entries ("cach").
_ENTRY_LOCK = 0x63616368
# After its deadline and create timeout, a silent creator is presumed dead after this.
CREATOR_GRACE_MS = 5_000
MAX_DELETE_ATTEMPTS = 10
DELETE_BACKOFF_MAX_S = 3600
FIND_TIMEOUT_S = 10.0

BYPASS_REASONS = (
    "below_minimum",
    "registry_full",
    "deadline_exceeded",
    "provider_error",
    "too_many_waiters",
)


def limits() -> Limits:
    return Limits(
        max_ttl_ms=settings.CTXADMIN_CACHE_MAX_TTL_MS,
        max_entries=settings.CTXADMIN_CACHE_MAX_ENTRIES,
        max_waiters=settings.CTXADMIN_CACHE_MAX_WAITERS,
        providers=tuple(settings.CTXADMIN_CACHE_PROVIDERS),
    )


def _api_error(exc: CacheInputError) -> ServiceError:
    return ServiceError(
        exc.code,
        exc.message if exc.code != "validation_error" else str(exc),
        details={"field": exc.path},
    )


@dataclass(frozen=True)
class AcquireRequest:
    scope: CacheScope
    prefix: Prefix
    ttl_ms: int
    timeout_ms: int


def parse_acquire(body: Any, app: App) -> AcquireRequest:
    try:
        check_sensitive(body)
        if not isinstance(body, dict):
            raise CacheInputError("body", "must be a JSON object")
        unknown = sorted(set(body) - ACQUIRE_KEYS)
        if unknown:
            raise CacheInputError(echoed(unknown[0]), "unknown field")
        for required in ("scope", "prefix"):
            if required not in body:
                raise CacheInputError(required, "is required")
        scope = parse_scope(body["scope"], app.name, limits())
        prefix = parse_prefix(body["prefix"])
        ttl_ms = parse_ttl(body.get("ttl_ms"), scope.policy)
        timeout_ms = body.get("timeout_ms", DEFAULT_TIMEOUT_MS)
        if (
            not isinstance(timeout_ms, int)
            or isinstance(timeout_ms, bool)
            or not 1 <= timeout_ms <= MAX_TIMEOUT_MS
        ):
            raise CacheInputError("timeout_ms", f"must be an integer from 1 to {MAX_TIMEOUT_MS}")
    except CacheInputError as exc:
        raise _api_error(exc) from None
    return AcquireRequest(scope, prefix, ttl_ms, timeout_ms)


def parse_scope_body(body: Any, app: App) -> CacheScope | str:
    """``{"scope": {...}}`` or ``{"scope_fingerprint": "<hex>"}`` (exactly one)."""
    try:
        check_sensitive(body)
        if not isinstance(body, dict):
            raise CacheInputError("body", "must be a JSON object")
        unknown = sorted(set(body) - {"scope", "scope_fingerprint"})
        if unknown:
            raise CacheInputError(echoed(unknown[0]), "unknown field")
        if ("scope" in body) == ("scope_fingerprint" in body):
            raise CacheInputError("body", "give exactly one of scope and scope_fingerprint")
        if "scope" in body:
            return parse_scope(body["scope"], app.name, limits())
        value = body["scope_fingerprint"]
        if not isinstance(value, str) or len(value) != 64 or set(value) - set("0123456789abcdef"):
            raise CacheInputError("scope_fingerprint", "must be 64 lowercase hex digits")
        return value
    except CacheInputError as exc:
        raise _api_error(exc) from None


# --------------------------------------------------------------------------- outcomes


@dataclass
class Outcome:
    status: str  # hit, created, bypass
    scope_fingerprint: str
    prefix_fingerprint: str
    ttl_ms: int
    prefix_tokens: int
    reason: str | None = None
    lease: str | None = None
    expires_at: datetime | None = None
    cached_tokens: int | None = None
    generation: int | None = None
    waited: bool = False

    def as_json(self) -> dict:
        return {
            "status": self.status,
            "reason": self.reason,
            "lease": self.lease,
            "scope_fingerprint": self.scope_fingerprint,
            "prefix_fingerprint": self.prefix_fingerprint,
            "ttl_ms": self.ttl_ms,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "cached_tokens": self.cached_tokens,
            "prefix_tokens": self.prefix_tokens,
            "generation": self.generation,
            "waited": self.waited,
        }


def _lease(app: App, entry_id: uuid.UUID, generation: int) -> str:
    return signing.dumps([entry_id.hex, generation, app.pk], salt=LEASE_SALT, compress=False)


def _margin_ms(ttl_ms: int) -> int:
    """A lease is handed out only with this much life left, so the call can still use it."""
    return min(2000, ttl_ms // 10)


# --------------------------------------------------------------------------- acquire


_FIND_SQL = """
SELECT s.id, s.generation, e.id, e.state, e.generation, e.expires_at,
       e.expires_at > now() + make_interval(secs => %s / 1000.0), e.cached_tokens
FROM caching_cachescope s
LEFT JOIN caching_cacheentry e
  ON e.key = %s AND e.state IN ('creating', 'active')
WHERE s.app_id = %s AND s.fingerprint = %s
"""

_INSERT_SCOPE_SQL = """
INSERT INTO caching_cachescope
  (app_id, fingerprint, provider, user_id, model, policy_fingerprint, policy, generation,
   created_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, 1, now())
ON CONFLICT (app_id, fingerprint) DO NOTHING
"""

_INSERT_ENTRY_SQL = """
INSERT INTO caching_cacheentry
  (id, app_id, scope_id, key, prefix_fingerprint, ttl_ms, generation, state, creator,
   deadline, create_lease_until, waiters, hits, resource, prefix_tokens, created_at, error_code,
   delete_reason, delete_attempts)
SELECT %s, %s, s.id, %s, %s, %s, s.generation, 'creating', %s,
       now() + make_interval(secs => %s / 1000.0),
       now() + make_interval(secs => %s / 1000.0), 0, 0, '', %s, now(), '', '', 0
FROM caching_cachescope s WHERE s.id = %s
ON CONFLICT (key) WHERE state IN ('creating', 'active') DO NOTHING
RETURNING generation
"""

_JOIN_SQL = """
UPDATE caching_cacheentry
SET waiters = waiters + 1,
    deadline = GREATEST(deadline, now() + make_interval(secs => %s / 1000.0))
WHERE id = %s AND state = 'creating' AND waiters < %s
RETURNING id
"""


def acquire(app: App, request: AcquireRequest, *, deadline: float | None = None) -> Outcome:
    """A lease on the provider cache of ``request.prefix`` (``hit`` or ``created``), or a
    ``bypass`` with its reason; at the latest at the request's deadline (``timeout_ms`` from
    now), or at ``deadline`` (a ``time.monotonic()`` reading, e.g. an invocation's) when that
    comes first."""
    if connection.in_atomic_block:
        # Creates are installed by other threads and processes: they must see the row.
        raise RuntimeError("acquire must run outside a transaction")
    started = time.monotonic()
    own = started + request.timeout_ms / 1000
    deadline = own if deadline is None else min(own, deadline)
    scope = request.scope
    policy = scope.policy
    adapter = get_adapter(scope.provider)
    prefix_fp = request.prefix.fingerprint
    outcome = Outcome(
        status="bypass",
        scope_fingerprint=scope.fingerprint,
        prefix_fingerprint=prefix_fp,
        ttl_ms=request.ttl_ms,
        prefix_tokens=request.prefix.estimated_tokens(policy.bytes_per_token),
    )
    minimum = max(policy.min_prefix_tokens, adapter.min_prefix_tokens(scope.model))
    if outcome.prefix_tokens < minimum:
        return _finish(app, outcome, "below_minimum", started)
    key = entry_key(scope.fingerprint, prefix_fp, request.ttl_ms)
    margin = _margin_ms(request.ttl_ms)
    waited = False
    while True:
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            return _finish(app, outcome, "deadline_exceeded", started)
        with connection.cursor() as cursor:
            cursor.execute(_FIND_SQL, [margin, key, app.pk, scope.fingerprint])
            row = cursor.fetchone()
            if row is None:
                cursor.execute(
                    _INSERT_SCOPE_SQL,
                    [
                        app.pk,
                        scope.fingerprint,
                        scope.provider,
                        scope.user_id,
                        scope.model,
                        policy.fingerprint,
                        json.dumps(policy.as_json(), sort_keys=True),
                    ],
                )
                continue
        scope_id, scope_generation, entry_id, state, generation, expires_at, fresh, tokens = row
        if state == "active":
            if fresh and generation == scope_generation:
                _count_hit(entry_id)
                outcome.status = "hit"
                outcome.waited = waited
                outcome.lease = _lease(app, entry_id, generation)
                outcome.expires_at = expires_at
                outcome.cached_tokens = tokens
                outcome.generation = generation
                return _finish(app, outcome, None, started)
            _retire(entry_id, "expired" if generation == scope_generation else "invalidated")
            continue
        if state == "creating":
            with connection.cursor() as cursor:
                cursor.execute(_JOIN_SQL, [remaining_ms, entry_id, policy.max_waiters])
                joined = cursor.fetchone() is not None
            if not joined:
                # Full of waiters, or the row moved on since it was read: look again once.
                if _entry_state(entry_id) == "creating":
                    return _finish(app, outcome, "too_many_waiters", started)
                continue
            waited = True
            result = _wait(entry_id, deadline)
            if result is None:
                return _finish(app, outcome, "deadline_exceeded", started)
            if result == "failed":
                return _provider_failure(app, outcome, policy.failure_mode, started, entry_id)
            continue  # installed (the next read hits) or orphaned/retired (try again)
        # No live entry: become the creator.
        entry_id = uuid.uuid4()
        token = secrets.token_hex(16)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, %s)", [_ENTRY_LOCK, app.pk % 2_147_483_648]
            )
            cursor.execute(
                "SELECT count(*) FROM caching_cacheentry WHERE app_id = %s AND "
                "(state = 'creating' OR (state = 'active' AND expires_at > now()))",
                [app.pk],
            )
            if cursor.fetchone()[0] >= policy.max_entries:
                full = True
            else:
                full = False
                create_timeout_ms = settings.CTXADMIN_CACHE_CREATE_TIMEOUT_MS
                cursor.execute(
                    _INSERT_ENTRY_SQL,
                    [
                        entry_id,
                        app.pk,
                        key,
                        prefix_fp,
                        request.ttl_ms,
                        token,
                        remaining_ms,
                        max(remaining_ms, create_timeout_ms) + CREATOR_GRACE_MS,
                        outcome.prefix_tokens,
                        scope_id,
                    ],
                )
                inserted = cursor.fetchone()
        if full:
            return _finish(app, outcome, "registry_full", started)
        if inserted is None:
            continue  # another caller's create won the key: join it
        future = _creators().submit(
            _create_and_install,
            entry_id,
            token,
            scope.provider,
            scope.model,
            request.prefix,
            request.ttl_ms,
        )
        try:
            result = future.result(timeout=max(deadline - time.monotonic(), 0))
        except FutureTimeout:
            return _finish(app, outcome, "deadline_exceeded", started)
        if result == "installed":
            waited = False
            outcome.status = "created"
            row = _installed(entry_id)
            if row is None:  # retired already (a very short TTL)
                continue
            outcome.generation, outcome.expires_at, outcome.cached_tokens = row
            outcome.lease = _lease(app, entry_id, outcome.generation)
            return _finish(app, outcome, None, started)
        if result == "failed":
            return _provider_failure(app, outcome, policy.failure_mode, started, entry_id)
        # Orphaned: the deadline passed or the scope was invalidated meanwhile.
        if result == "orphan_deadline":
            return _finish(app, outcome, "deadline_exceeded", started)


# Hits are counted in the process and written at most once a second (one statement for
# every entry hit since): a hit costs no write of its own. A process that dies loses at most
# its last second of counts; they are diagnostics, not accounting.
HIT_FLUSH_SECONDS = 1.0
_hits: dict[uuid.UUID, int] = {}
_hits_lock = threading.Lock()
_hits_flushed_at = 0.0


def _count_hit(entry_id: uuid.UUID) -> None:
    global _hits_flushed_at
    now = time.monotonic()
    with _hits_lock:
        _hits[entry_id] = _hits.get(entry_id, 0) + 1
        if now - _hits_flushed_at < HIT_FLUSH_SECONDS:
            return
        _hits_flushed_at = now
    flush_hits()


def flush_hits() -> int:
    """Write the hits counted in this process since the last flush; the entries updated."""
    with _hits_lock:
        counts = dict(_hits)
        _hits.clear()
    if not counts:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE caching_cacheentry e SET hits = e.hits + c.n, last_hit_at = now() "
            "FROM unnest(%s::uuid[], %s::bigint[]) AS c(id, n) WHERE e.id = c.id",
            [list(counts), list(counts.values())],
        )
        return cursor.rowcount


def _finish(app: App, outcome: Outcome, reason: str | None, started: float) -> Outcome:
    outcome.reason = reason
    if reason is not None:
        outcome.status = "bypass"
        outcome.lease = None
    ACQUIRES.labels(outcome.status, reason or "").inc()
    logger.info(
        "cache_acquire",
        extra={
            "app": app.name,
            "scope": outcome.scope_fingerprint[:16],
            "prefix": outcome.prefix_fingerprint[:16],
            "outcome": outcome.status,
            "reason": reason,
            "waited": outcome.waited,
            "prefix_tokens": outcome.prefix_tokens,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
        },
    )
    return outcome


def _provider_failure(
    app: App, outcome: Outcome, failure_mode: str, started: float, entry_id: uuid.UUID
) -> Outcome:
    code = CacheEntry.objects.filter(pk=entry_id).values_list("error_code", flat=True).first()
    if failure_mode == "error":
        ACQUIRES.labels("error", "provider_error").inc()
        raise ServiceError(
            "cache_provider_error",
            "The provider could not create the cache.",
            status_code=502,
            details={"provider_code": code or "provider_unavailable"},
        )
    return _finish(app, outcome, "provider_error", started)


def _entry_state(entry_id: uuid.UUID) -> str | None:
    return CacheEntry.objects.filter(pk=entry_id).values_list("state", flat=True).first()


def _installed(entry_id: uuid.UUID):
    return (
        CacheEntry.objects.filter(pk=entry_id, state="active")
        .values_list("generation", "expires_at", "cached_tokens")
        .first()
    )


def _retire(entry_id: uuid.UUID, reason: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE caching_cacheentry SET state = 'deleting', delete_reason = %s, "
            "delete_due_at = now() WHERE id = %s AND state = 'active'",
            [reason, entry_id],
        )
        if cursor.rowcount:
            _publish_cleanup()


def _publish_cleanup() -> None:
    from caching.tasks import cleanup

    cleanup.delay_on_commit()


# --------------------------------------------------------------------------- waiting


def _wait(entry_id: uuid.UUID, deadline: float) -> str | None:
    """Wait for the create this caller joined: ``installed``, ``failed`` or ``gone``
    (orphaned or retired), or None at the deadline. The waiter count is given back."""
    poll_s = settings.CTXADMIN_CACHE_POLL_MS / 1000
    listening = not connection.in_atomic_block
    try:
        if listening:
            with connection.cursor() as cursor:
                cursor.execute(f"LISTEN {CHANNEL}")
        while True:
            state, error_code = (
                CacheEntry.objects.filter(pk=entry_id).values_list("state", "error_code").first()
            ) or (None, "")
            if state == "active":
                return "installed"
            if state == "failed" or (state == "deleting" and error_code):
                return "failed"
            if state != "creating":
                return "gone"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            _sleep(min(poll_s, remaining), listening)
    finally:
        with connection.cursor() as cursor:
            if listening:
                cursor.execute(f"UNLISTEN {CHANNEL}")
            cursor.execute(
                "UPDATE caching_cacheentry SET waiters = waiters - 1 "
                "WHERE id = %s AND state = 'creating' AND waiters > 0",
                [entry_id],
            )


def _sleep(seconds: float, listening: bool) -> None:
    """Until a notification on the channel (any entry: the caller reads its own again) or
    ``seconds``."""
    raw = connection.connection if listening else None
    notifies = getattr(raw, "notifies", None)
    if notifies is None:
        time.sleep(seconds)
        return
    for _ in notifies(timeout=seconds, stop_after=1):
        break


def _notify(cursor, entry_id: uuid.UUID) -> None:
    cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, entry_id.hex])


# --------------------------------------------------------------------------- creating


_executor: ThreadPoolExecutor | None = None
_executor_pid: int | None = None
_executor_lock = threading.Lock()


def _creators() -> ThreadPoolExecutor:
    """This process's pool of creator threads (a forked child builds its own)."""
    global _executor, _executor_pid
    pid = os.getpid()
    if _executor is None or _executor_pid != pid:
        with _executor_lock:
            if _executor is None or _executor_pid != pid:
                _executor = ThreadPoolExecutor(
                    max_workers=settings.CTXADMIN_CACHE_CREATORS, thread_name_prefix="cache-create"
                )
                _executor_pid = pid
    return _executor


def _create_and_install(
    entry_id: uuid.UUID, token: str, provider: str, model: str, prefix: Prefix, ttl_ms: int
) -> str:
    """The provider create and its installation (on a creator thread, with its own
    database connection): ``installed``, ``failed``, ``orphan_deadline``, ``orphan``."""
    try:
        adapter = get_adapter(provider)
        started = time.monotonic()
        try:
            created = adapter.create(
                model=model,
                prefix=CachePrefix(
                    system_instruction=prefix.system_instruction,
                    tools=prefix.tools,
                    tool_config=prefix.tool_config,
                    contents=prefix.contents,
                ),
                ttl_ms=ttl_ms,
                tag=entry_id.hex,
                timeout_s=settings.CTXADMIN_CACHE_CREATE_TIMEOUT_MS / 1000,
            )
        except ProviderError as exc:
            PROVIDER_CALLS.labels("create", exc.code).inc()
            return _fail(entry_id, token, exc.code)
        except Exception as exc:  # an adapter bug must not leave the row for the sweeper
            PROVIDER_CALLS.labels("create", "internal_error").inc()
            logger.error(
                "cache_create_crashed", extra={"entry": str(entry_id), "exc": type(exc).__name__}
            )
            return _fail(entry_id, token, "provider_bad_response")
        PROVIDER_CALLS.labels("create", "ok").inc()
        result = _install(entry_id, token, created)
        logger.info(
            "cache_create",
            extra={
                "entry": str(entry_id),
                "provider": provider,
                "result": result,
                "cached_tokens": created.cached_tokens,
                "duration_ms": round((time.monotonic() - started) * 1000, 1),
            },
        )
        return result
    finally:
        connections.close_all()


def _install(entry_id: uuid.UUID, token: str, created: CreatedResource) -> str:
    sealed = crypto.encrypt(created.name)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.state, e.creator, e.generation, e.deadline >= now(), s.generation, e.ttl_ms "
            "FROM caching_cacheentry e JOIN caching_cachescope s ON s.id = e.scope_id "
            "WHERE e.id = %s FOR UPDATE OF e",
            [entry_id],
        )
        row = cursor.fetchone()
        ours = row is not None and row[0] == "creating" and row[1] == token
        if ours and row[3] and row[2] == row[4]:
            cursor.execute(
                "UPDATE caching_cacheentry SET state = 'active', resource = %s, waiters = 0, "
                "installed_at = now(), cached_tokens = %s, "
                "expires_at = LEAST(COALESCE(%s, 'infinity'::timestamptz), "
                "now() + make_interval(secs => ttl_ms / 1000.0)) WHERE id = %s",
                [sealed, created.cached_tokens, created.expires_at, entry_id],
            )
            _notify(cursor, entry_id)
            return "installed"
        result = "orphan_deadline" if ours and not row[3] else "orphan"
        reason = "orphan" if ours and not row[3] else "invalidated" if ours else "creator_lost"
        if ours:
            cursor.execute(
                "UPDATE caching_cacheentry SET state = 'deleting', resource = %s, "
                "delete_reason = %s, delete_due_at = now(), cached_tokens = %s WHERE id = %s",
                [sealed, reason, created.cached_tokens, entry_id],
            )
            _notify(cursor, entry_id)
        else:
            # The sweeper took the row for a dead creator: record the resource on its own
            # row so it is deleted all the same.
            cursor.execute(
                "INSERT INTO caching_cacheentry (id, app_id, scope_id, key, prefix_fingerprint, "
                "ttl_ms, generation, state, creator, waiters, hits, resource, prefix_tokens, "
                "cached_tokens, created_at, error_code, delete_reason, delete_due_at, "
                "delete_attempts) SELECT %s, app_id, scope_id, key, prefix_fingerprint, ttl_ms, "
                "generation, 'deleting', '', 0, 0, %s, prefix_tokens, %s, now(), '', 'orphan', "
                "now(), 0 FROM caching_cacheentry WHERE id = %s",
                [uuid.uuid4(), sealed, created.cached_tokens, entry_id],
            )
            if cursor.rowcount == 0:
                logger.error("cache_orphan_unrecorded", extra={"entry": str(entry_id)})
        _publish_cleanup()
        return result


def _fail(entry_id: uuid.UUID, token: str, code: str) -> str:
    """A failed create. A timeout may still have made a resource: that row is deleted by tag."""
    state, reason = ("deleting", "creator_lost") if code == "provider_timeout" else ("failed", "")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE caching_cacheentry SET state = %s, error_code = %s, delete_reason = %s, "
            "delete_due_at = CASE WHEN %s = 'deleting' THEN now() END "
            "WHERE id = %s AND state = 'creating' AND creator = %s",
            [state, code, reason, state, entry_id, token],
        )
        _notify(cursor, entry_id)
        if state == "deleting":
            _publish_cleanup()
    logger.warning("cache_create_failed", extra={"entry": str(entry_id), "code": code})
    return "failed"


# --------------------------------------------------------------------------- resolve


class LeaseError(Exception):
    """``code``: ``lease_invalid`` (not a lease of this app) or ``lease_expired``."""

    def __init__(self, code: str):
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class Resolved:
    resource_name: str
    provider: str
    model: str
    expires_at: datetime
    cached_tokens: int | None

    def __repr__(self) -> str:
        return f"Resolved(provider={self.provider!r}, model={self.model!r}, <resource hidden>)"


def resolve(app: App, lease: str) -> Resolved:
    """The provider resource behind a lease, for the invocation runner (never an endpoint)."""
    try:
        entry_hex, generation, app_pk = signing.loads(lease, salt=LEASE_SALT)
        entry_id = uuid.UUID(hex=entry_hex)
    except (signing.BadSignature, ValueError, TypeError):
        raise LeaseError("lease_invalid") from None
    if app_pk != app.pk:
        raise LeaseError("lease_invalid")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.state, e.generation, s.generation, e.expires_at > now(), e.resource, "
            "e.expires_at, e.cached_tokens, s.provider, s.model "
            "FROM caching_cacheentry e JOIN caching_cachescope s ON s.id = e.scope_id "
            "WHERE e.id = %s AND e.app_id = %s",
            [entry_id, app.pk],
        )
        row = cursor.fetchone()
    if row is None or row[0] != "active" or not (row[1] == row[2] == generation) or not row[3]:
        raise LeaseError("lease_expired")
    name = crypto.decrypt(row[4])
    if name is None:
        raise LeaseError("lease_expired")
    return Resolved(name, row[7], row[8], row[5], row[6])


# --------------------------------------------------------------------------- invalidate


def _scope_row(app: App, target: CacheScope | str) -> ScopeRow:
    fp = target if isinstance(target, str) else target.fingerprint
    row = ScopeRow.objects.filter(app=app, fingerprint=fp).first()
    if row is None:
        raise not_found()
    return row


def invalidate(app: App, target: CacheScope | str, reason: str = "invalidated") -> dict:
    """Bump the scope's generation (older leases resolve to ``lease_expired``) and queue the
    provider deletes of its entries; a create in flight becomes an orphan when it lands."""
    row = _scope_row(app, target)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE caching_cachescope SET generation = generation + 1, invalidated_at = now() "
            "WHERE id = %s RETURNING generation",
            [row.pk],
        )
        generation = cursor.fetchone()[0]
        cursor.execute(
            "UPDATE caching_cacheentry SET state = 'deleting', delete_reason = %s, "
            "delete_due_at = now() WHERE scope_id = %s AND state = 'active'",
            [reason, row.pk],
        )
        retired = cursor.rowcount
        cursor.execute(
            "SELECT count(*) FROM caching_cacheentry WHERE scope_id = %s AND state = 'creating'",
            [row.pk],
        )
        in_flight = cursor.fetchone()[0]
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, "invalidate"])
        _publish_cleanup()
    logger.info(
        "cache_invalidate",
        extra={"app": app.name, "scope": row.fingerprint[:16], "entries": retired},
    )
    return {
        "scope_fingerprint": row.fingerprint,
        "generation": generation,
        "entries_invalidated": retired,
        "creates_in_flight": in_flight,
    }


def invalidate_all(app: App | None = None, reason: str = "shutdown") -> int:
    """Invalidate every scope (of ``app``, or of the deployment); the entries retired."""
    scopes = ScopeRow.objects.all() if app is None else ScopeRow.objects.filter(app=app)
    total = 0
    for row in scopes.select_related("app").iterator():
        total += invalidate(row.app, row.fingerprint, reason)["entries_invalidated"]
    return total


def pending_deletes(app: App | None = None) -> int:
    rows = CacheEntry.objects.filter(state="deleting")
    return (rows if app is None else rows.filter(app=app)).count()


# --------------------------------------------------------------------------- status

MAX_STATUS_ENTRIES = 100


def scope_status(app: App, fingerprint: str) -> dict:
    """Content-free: counts, waiters, expiries and the live entries' fingerprints."""
    flush_hits()
    row = _scope_row(app, fingerprint)
    counts = {state: 0 for state in ("active", "creating", "failed", "deleting")}
    waiters = 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state, count(*), COALESCE(sum(waiters), 0) FROM caching_cacheentry "
            "WHERE scope_id = %s GROUP BY state",
            [row.pk],
        )
        for state, count, state_waiters in cursor.fetchall():
            counts[state] = count
            if state == "creating":
                waiters = int(state_waiters)
        cursor.execute(
            "SELECT min(expires_at), max(expires_at) FROM caching_cacheentry "
            "WHERE scope_id = %s AND state = 'active'",
            [row.pk],
        )
        earliest, latest = cursor.fetchone()
    live = (
        CacheEntry.objects.filter(scope=row, state__in=("creating", "active"))
        .order_by("-created_at")
        .values(
            "id",
            "state",
            "prefix_fingerprint",
            "ttl_ms",
            "generation",
            "prefix_tokens",
            "cached_tokens",
            "waiters",
            "hits",
            "created_at",
            "expires_at",
        )[:MAX_STATUS_ENTRIES]
    )
    return {
        "scope_fingerprint": row.fingerprint,
        "provider": row.provider,
        "user_id": row.user_id,
        "model": row.model,
        "policy_fingerprint": row.policy_fingerprint,
        "policy": row.policy,
        "generation": row.generation,
        "created_at": row.created_at,
        "invalidated_at": row.invalidated_at,
        "entries": counts["active"],
        "in_flight": counts["creating"],
        "waiters": waiters,
        "deleting": counts["deleting"],
        "failed": counts["failed"],
        "earliest_expiry": earliest,
        "latest_expiry": latest,
        "live_entries": [{**entry, "id": str(entry["id"])} for entry in live],
    }


# --------------------------------------------------------------------------- cleanup


def expire_batch(limit: int) -> int:
    """Retire active entries past their expiry (their leases already resolve as expired)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE caching_cacheentry SET state = 'deleting', delete_reason = 'expired', "
            "delete_due_at = now() WHERE id IN (SELECT id FROM caching_cacheentry "
            "WHERE state = 'active' AND expires_at <= now() ORDER BY expires_at LIMIT %s "
            "FOR UPDATE SKIP LOCKED)",
            [limit],
        )
        return cursor.rowcount


def sweep_creators_batch(limit: int) -> int:
    """``creating`` rows whose creator is presumed dead (past its lease and every waiter's
    deadline): deleted by tag at the provider, in case the create went through."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE caching_cacheentry SET state = 'deleting', delete_reason = 'creator_lost', "
            "delete_due_at = now() WHERE id IN (SELECT id FROM caching_cacheentry "
            "WHERE state = 'creating' AND create_lease_until < now() AND deadline < now() "
            "ORDER BY create_lease_until LIMIT %s FOR UPDATE SKIP LOCKED)",
            [limit],
        )
        return cursor.rowcount


def purge_failed_batch(limit: int) -> int:
    """Failed creates no waiter can still be reading."""
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM caching_cacheentry WHERE id IN (SELECT id FROM caching_cacheentry "
            "WHERE state = 'failed' AND deadline < now() LIMIT %s FOR UPDATE SKIP LOCKED)",
            [limit],
        )
        return cursor.rowcount


def _delete_backoff_s(attempt: int) -> float:
    return min(DELETE_BACKOFF_MAX_S, 2.0 ** min(attempt, 20))


def delete_batch(limit: int) -> int:
    """Claim up to ``limit`` due deletes, call the provider for them on bounded worker
    threads (each call with its own timeout) and settle them; the rows handled."""
    timeout_s = settings.CTXADMIN_CACHE_DELETE_TIMEOUT_MS / 1000
    claim_s = 2 * (timeout_s + FIND_TIMEOUT_S) + 10
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE caching_cacheentry e SET delete_due_at = now() + make_interval(secs => %s), "
            "delete_attempts = e.delete_attempts + 1 FROM caching_cachescope s "
            "WHERE s.id = e.scope_id AND e.id IN (SELECT id FROM caching_cacheentry "
            "WHERE state = 'deleting' AND delete_due_at <= now() ORDER BY delete_due_at "
            "LIMIT %s FOR UPDATE SKIP LOCKED) "
            "RETURNING e.id, s.provider, e.resource, e.delete_attempts, "
            "COALESCE(e.expires_at < now(), false), e.delete_reason",
            [claim_s, limit],
        )
        claimed = cursor.fetchall()
    if not claimed:
        return 0
    workers = min(settings.CTXADMIN_CACHE_CLEANUP_WORKERS, len(claimed))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cache-delete") as pool:
        results = list(
            pool.map(lambda row: _provider_delete(row[0], row[1], row[2], timeout_s), claimed)
        )
    done = [row[0] for row, error in zip(claimed, results, strict=True) if error is None]
    retry = [(row, error) for row, error in zip(claimed, results, strict=True) if error]
    abandoned = [row[0] for row, _ in retry if row[3] >= MAX_DELETE_ATTEMPTS and row[4]]
    with transaction.atomic():
        if done or abandoned:
            CacheEntry.objects.filter(pk__in=done + abandoned, state="deleting").delete()
        for row, error in retry:
            if row[0] in abandoned:
                logger.warning(
                    "cache_delete_abandoned",
                    extra={"entry": str(row[0]), "attempts": row[3], "code": error},
                )
                continue
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE caching_cacheentry SET error_code = %s, "
                    "delete_due_at = now() + make_interval(secs => %s) WHERE id = %s",
                    [error, _delete_backoff_s(row[3]), row[0]],
                )
    return len(claimed)


def _provider_delete(entry_id: uuid.UUID, provider: str, sealed: str, timeout_s: float):
    """Delete the entry's resource (or, with none recorded, whatever was made under its tag):
    None when nothing is left at the provider, else the error code."""
    try:
        adapter = get_adapter(provider)
    except LookupError:
        return None  # the provider is no longer configured: nothing this deployment can do
    try:
        if sealed:
            name = crypto.decrypt(sealed)
            names = [name] if name else []
        else:
            names = adapter.find(entry_id.hex, timeout_s=FIND_TIMEOUT_S)
            PROVIDER_CALLS.labels("find", "ok").inc()
        for name in names:
            adapter.delete(name, timeout_s=timeout_s)
            PROVIDER_CALLS.labels("delete", "ok").inc()
    except ProviderError as exc:
        PROVIDER_CALLS.labels("delete", exc.code).inc()
        return exc.code
    except NotImplementedError:
        return None
    return None


def cleanup(batch: int | None = None, max_batches: int = 20) -> dict[str, int]:
    """One run of the beat task: expiries, lost creators, stale failures, provider deletes;
    each in bounded batches, each batch its own transaction."""
    size = batch or settings.CTXADMIN_CACHE_CLEANUP_BATCH
    return {
        "expired": in_batches(lambda: expire_batch(size), size, max_batches),
        "creators_lost": in_batches(lambda: sweep_creators_batch(size), size, max_batches),
        "failed_purged": in_batches(lambda: purge_failed_batch(size), size, max_batches),
        "deleted": in_batches(lambda: delete_batch(size), size, max_batches),
    }

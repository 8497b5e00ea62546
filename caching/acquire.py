"""The provider prefix-cache registry's acquire: a lease on the cache of a prefix, or a bypass.

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
import secrets
import time
import uuid
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from prometheus_client import Counter

from caching.adapters import get_adapter
from caching.creators import CHANNEL, create_and_install, creators
from caching.hits import count_hit
from caching.inputs import AcquireRequest
from caching.keys import entry_key
from caching.leases import sign_lease
from caching.models import CacheEntry
from ctxadmin.errors import ServiceError
from ctxadmin.models import App
from ctxadmin.wake import wake

logger = logging.getLogger("ctxadmin.cache")

ACQUIRES = Counter(
    "ctxadmin_cache_acquires_total",
    "Prefix-cache acquires by outcome (hit, created, bypass) and bypass reason.",
    ["outcome", "reason"],
)

# The two-key advisory lock serialising new entries of an app against max_entries ("cach").
_ENTRY_LOCK = 0x63616368
# After its deadline and create timeout, a silent creator is presumed dead after this.
CREATOR_GRACE_MS = 5_000

BYPASS_REASONS = (
    "below_minimum",
    "registry_full",
    "deadline_exceeded",
    "provider_error",
    "too_many_waiters",
)


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
                count_hit(entry_id)
                outcome.status = "hit"
                outcome.waited = waited
                outcome.lease = sign_lease(app, entry_id, generation)
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
        future = creators().submit(
            create_and_install,
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
            outcome.lease = sign_lease(app, entry_id, outcome.generation)
            return _finish(app, outcome, None, started)
        if result == "failed":
            return _provider_failure(app, outcome, policy.failure_mode, started, entry_id)
        # Orphaned: the deadline passed or the scope was invalidated meanwhile.
        if result == "orphan_deadline":
            return _finish(app, outcome, "deadline_exceeded", started)


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
            wake("caching.cleanup")


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

"""MCP calls: the per-credential rate limit that every web process shares, and the console's
hourly call counts.

Both live in Redis and cost one round trip a call (one script: drop the credential's calls
older than the window, refuse or record this one, count it for its app and hour). A beat task
moves the counts into PostgreSQL (``McpCallCount``) every minute and deletes hours older than
``CTXADMIN_MCP_COUNT_RETENTION_DAYS``; the dashboard adds the counts not yet moved.

When Redis does not answer, a call is neither refused nor lost for it: the limit falls back to
one per web process and the count goes straight to PostgreSQL. Content-free throughout: keys
hold a credential's public prefix, an app id and an hour.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from datetime import UTC, datetime, timedelta

import redis
from django.conf import settings
from django.db import DatabaseError, connection, transaction

logger = logging.getLogger("ctxadmin.mcp")

WINDOW_SECONDS = 60.0
# Redis's own clock for every process, so that web processes on several hosts agree.
_ADMIT = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local hour = tonumber(now[1]) - tonumber(now[1]) % 3600
redis.call('HINCRBY', KEYS[2], ARGV[3] .. ':' .. hour, 1)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t - window)
if redis.call('ZCARD', KEYS[1]) >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return tostring(tonumber(oldest[2]) + window - t)
end
redis.call('ZADD', KEYS[1], t, now[1] .. '.' .. now[2] .. '.' .. ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.ceil(window * 1000))
return false
"""
# Take every pending count at once (a call counted meanwhile lands in the next flush).
_TAKE = """
local counts = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
return counts
"""
_UPSERT = (
    "INSERT INTO ctxadmin_mcpcallcount (app_id, hour, calls) "
    "SELECT a.id, v.hour, v.calls FROM (VALUES {rows}) AS v(app_id, hour, calls) "
    "JOIN ctxadmin_app a ON a.id = v.app_id "
    "ON CONFLICT (app_id, hour) DO UPDATE SET calls = ctxadmin_mcpcallcount.calls + "
    "EXCLUDED.calls"
)


class _Connection:
    """The Redis client of this process and the scripts registered on it, made together on
    first use (after any fork) and forgotten together by ``reset``."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self.admit = self.client.register_script(_ADMIT)
        self.take = self.client.register_script(_TAKE)


_connection: _Connection | None = None
_connection_lock = threading.Lock()
_sequence = iter(range(1, 1 << 62))


def _redis() -> _Connection:
    global _connection
    with _connection_lock:
        if _connection is None:
            _connection = _Connection(settings.REDIS_URL)
        return _connection


def reset() -> None:
    """Forget this process's connection and its fallback limits (a changed ``REDIS_URL``)."""
    global _connection, _local
    with _connection_lock:
        _connection = None
        _local = LocalLimiter()


def _key(*parts: str) -> str:
    return ":".join(("ctxadmin", settings.CTXADMIN_DEPLOYMENT, "mcp", *parts))


def counts_key() -> str:
    return _key("calls")


class LocalLimiter:
    """At most ``limit`` calls per credential in any ``window`` seconds in this process
    (a sliding log): the fallback while Redis does not answer."""

    def __init__(self, window: float = WINDOW_SECONDS) -> None:
        self.window = window
        self._calls: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, prefix: str, limit: int) -> float | None:
        now = time.monotonic()
        with self._lock:
            calls = self._calls.setdefault(prefix, deque())
            while calls and calls[0] <= now - self.window:
                calls.popleft()
            if len(calls) >= limit:
                return max(0.0, calls[0] + self.window - now)
            calls.append(now)
            if len(self._calls) > 10_000:  # forget idle credentials
                for key in [k for k, v in self._calls.items() if not v]:
                    del self._calls[key]
            return None


_local = LocalLimiter()
_last_warning = 0.0


def _warn_redis_down() -> None:
    global _last_warning
    now = time.monotonic()
    if now - _last_warning > 60:
        _last_warning = now
        logger.warning("mcp rate limit and counts fall back to this process: redis unavailable")


def _count_in_database(app_id: int) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute(_UPSERT.format(rows="(%s, date_trunc('hour', now()), 1)"), [app_id])
    except DatabaseError:
        logger.warning("mcp call not counted", extra={"app_id": app_id})


def admit(app_id: int, credential_prefix: str, limit: int) -> float | None:
    """Count one call of ``app_id`` and apply the credential's limit: None when the call may
    go on, else the seconds until it may."""
    try:
        wait = _redis().admit(
            keys=[_key("rate", credential_prefix), counts_key()],
            args=[WINDOW_SECONDS, limit, app_id, next(_sequence)],
        )
    except redis.RedisError:
        _warn_redis_down()
        _count_in_database(app_id)
        return _local.retry_after(credential_prefix, limit)
    return None if wait is None else max(0.0, float(wait))


def _parse(raw: list) -> dict[tuple[int, int], int]:
    counts: dict[tuple[int, int], int] = {}
    for field, value in zip(raw[::2], raw[1::2], strict=True):
        app_id, hour = (int(part) for part in field.decode().split(":"))
        counts[(app_id, hour)] = counts.get((app_id, hour), 0) + int(value)
    return counts


def pending() -> dict[tuple[int, int], int]:
    """Counts not yet moved to PostgreSQL, by (app id, hour as a Unix time); empty when
    Redis does not answer."""
    try:
        mapping = _redis().client.hgetall(counts_key())
    except redis.RedisError:
        return {}
    return _parse([item for pair in mapping.items() for item in pair])


def flush() -> int:
    """Move the pending counts into ``McpCallCount``; the number of calls moved. Counts
    that cannot be written go back to Redis for the next flush."""
    try:
        taken = _parse(_redis().take(keys=[counts_key()]))
    except redis.RedisError:
        _warn_redis_down()
        return 0
    if not taken:
        return 0
    rows, params = [], []
    for (app_id, hour), calls in sorted(taken.items()):
        rows.append("(%s, %s, %s)")
        params += [app_id, datetime.fromtimestamp(hour, UTC), calls]
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_UPSERT.format(rows=", ".join(rows)), params)
    except DatabaseError:
        client = _redis().client
        for (app_id, hour), calls in taken.items():
            client.hincrby(counts_key(), f"{app_id}:{hour}", calls)
        raise
    return sum(taken.values())


def prune(now: datetime | None = None) -> int:
    """Delete the hourly counts older than the retention; the number of rows deleted."""
    from ctxadmin.models import McpCallCount

    days = settings.CTXADMIN_MCP_COUNT_RETENTION_DAYS
    before = (now or datetime.now(UTC)) - timedelta(days=days)
    deleted, _ = McpCallCount.objects.filter(hour__lt=before).delete()
    return deleted

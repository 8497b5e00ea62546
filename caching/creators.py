"""The creator side of single flight: the provider create, run on this process's pool of
creator threads, and its installation. A resource that arrives after every waiter's
deadline, or after the scope was invalidated, is an orphan and is queued for deletion.
Installs and failures are announced on the ``NOTIFY`` channel waiters listen on."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connection, connections, transaction

from caching import crypto
from caching.adapters import PROVIDER_CALLS, CachePrefix, CreatedResource, get_adapter
from caching.keys import Prefix
from ctxadmin.providers.base import ProviderError
from ctxadmin.wake import wake

logger = logging.getLogger("ctxadmin.cache")

CHANNEL = "ctxadmin_cache"


def notify(cursor, entry_id: uuid.UUID) -> None:
    cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, entry_id.hex])


_executor: ThreadPoolExecutor | None = None
_executor_pid: int | None = None
_executor_lock = threading.Lock()


def creators() -> ThreadPoolExecutor:
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


def create_and_install(
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
            notify(cursor, entry_id)
            return "installed"
        result = "orphan_deadline" if ours and not row[3] else "orphan"
        reason = "orphan" if ours and not row[3] else "invalidated" if ours else "creator_lost"
        if ours:
            cursor.execute(
                "UPDATE caching_cacheentry SET state = 'deleting', resource = %s, "
                "delete_reason = %s, delete_due_at = now(), cached_tokens = %s WHERE id = %s",
                [sealed, reason, created.cached_tokens, entry_id],
            )
            notify(cursor, entry_id)
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
        wake("caching.cleanup")
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
        notify(cursor, entry_id)
        if state == "deleting":
            wake("caching.cleanup")
    logger.warning("cache_create_failed", extra={"entry": str(entry_id), "code": code})
    return "failed"

"""Hit counts of cache entries, for diagnostics.

Hits are counted in the process and written at most once a second (one statement for every
entry hit since): a hit costs no write of its own. A process that dies loses at most its
last second of counts; they are diagnostics, not accounting.
"""

from __future__ import annotations

import threading
import time
import uuid

from django.db import connection

HIT_FLUSH_SECONDS = 1.0
_hits: dict[uuid.UUID, int] = {}
_hits_lock = threading.Lock()
_hits_flushed_at = 0.0


def count_hit(entry_id: uuid.UUID) -> None:
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

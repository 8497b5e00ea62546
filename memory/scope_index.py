"""Large scopes' own vector indexes.

Vector search is exact in a small scope: a scan of its rows ranks every one of them. A
large scope gets an HNSW index of its own: a partial index over its rows alone
(``WHERE app_id = … AND user_id = … AND embedding_model = …``), on the embedding as
``halfvec`` (half the bytes to read per visited node, ranks unchanged at the printed
precision: a hit's score is still computed from the stored ``vector``), with m = 32 and
ef_construction = 128. The shared index (``memory_embedding_hnsw``) mixes every scope in
one graph, so a filtered walk through it spends most of its candidates on other scopes and
its recall falls as the table grows; a scope's own graph holds only candidates it can
return. Measured on the benchmark's 100,000-entry scope among 90,000 others (hashing
embedder, ``bench/BENCHMARKS.md``): recall@10 against exact search 0.60 at ef_search 100
through the shared index, 0.97 at ef_search 400 through its own.

``maintain`` (the ``memory.maintain_scope_indexes`` task, run by the beat) keeps one index
per scope holding at least ``CTXADMIN_MEMORY_SCOPE_INDEX_MIN_ENTRIES`` entries, largest
scopes first, up to ``CTXADMIN_MEMORY_SCOPE_INDEXES_MAX`` indexes (every partial index costs
each write to the table a predicate check and each query's planning a look at it). It
builds with ``CREATE INDEX CONCURRENTLY`` (writes go on meanwhile; searches use the shared
index until the row is ``ready``) and drops, with ``DROP INDEX CONCURRENTLY``, the index of
a scope that fell below half the threshold, was erased, or whose vectors are another
model's; and any index of this family without a row (a build that died). A build that fails
leaves a ``failed`` row (its SQLSTATE) and no index; its scope is tried again at the next
run when the failure was of the moment (a deadlock with other work on the table, a lock it
could not get, a lost connection), else after ``RETRY_SECONDS`` (its time limit, memory,
disk: it would fail again at once). One maintainer at a time: a session advisory lock.

The predicate names the scope as literals (PostgreSQL uses a partial index only for a
query whose own literals imply its predicate), so the scope search statement carries them
as literals too, quoted by psycopg.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone
from psycopg import Error as DatabaseError
from psycopg import sql

from memory import embedders
from memory.models import ScopeIndex

logger = logging.getLogger("ctxadmin.memory")

INDEX_PREFIX = "memory_scope_vec_"
# pgvector indexes halfvec up to this many dimensions.
HALFVEC_MAX_DIMENSIONS = 4000
M = 32
EF_CONSTRUCTION = 128
# A scope whose build failed for its own sake is tried again after this long.
RETRY_SECONDS = 3600
# SQLSTATEs of failures of the moment: connection exceptions, transaction rollbacks
# (deadlock, serialization), an unavailable lock, a server shutting down or starting.
TRANSIENT_SQLSTATES = ("08", "40", "55P03", "57P01", "57P02", "57P03")
# ef_search is the configured one at this many entries, and never below the minimum.
EF_SEARCH_AT = 100_000
EF_SEARCH_MIN = 100
# ``pg_try_advisory_lock`` key of the maintainer (an arbitrary constant of this module).
LOCK_KEY = 0x6D656D5F73636F70


@dataclass(frozen=True)
class VectorPlan:
    """How one scope's vector search runs: its entry count (0 when it has none) and its own
    index, when one is ready for this embedding model."""

    entries: int
    index_id: int | None


def plan(app_id: int, user_id: str, embedding_model: str) -> VectorPlan:
    """The scope's entries and ready index, in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT (SELECT entries FROM memory_scopestats WHERE app_id = %s AND user_id = %s),
                   (SELECT id FROM memory_scopeindex
                     WHERE app_id = %s AND user_id = %s AND embedding_model = %s
                       AND state = 'ready')
            """,
            [app_id, user_id, app_id, user_id, embedding_model],
        )
        entries, index_id = cursor.fetchone()
    return VectorPlan(entries or 0, index_id)


def ef_search(entries: int, depth: int) -> int:
    """The HNSW candidate list for a search of ``depth`` hits in a scope of ``entries``:
    ``CTXADMIN_MEMORY_SCOPE_INDEX_EF_SEARCH`` at ``EF_SEARCH_AT`` entries, scaled by the
    square root of the scope's share of that below it (a smaller graph finds as much with
    fewer), at least ``EF_SEARCH_MIN`` and twice the depth, at most 1,000. Measured on the
    benchmark's scopes (recall@10 against exact search, ``bench/BENCHMARKS.md``): 0.956 at
    100 candidates and 0.992 at 200 in 10,000 entries; 0.928 at 200 and 0.976 at 400 in
    100,000."""
    scaled = settings.CTXADMIN_MEMORY_SCOPE_INDEX_EF_SEARCH * math.sqrt(
        min(1.0, max(entries, 0) / EF_SEARCH_AT)
    )
    return min(1000, max(EF_SEARCH_MIN, 2 * depth, round(scaled)))


def enabled() -> bool:
    dimension = settings.CTXADMIN_EMBEDDING_DIMENSION
    return settings.CTXADMIN_MEMORY_SCOPE_INDEXES_MAX > 0 and dimension <= HALFVEC_MAX_DIMENSIONS


def literal(value) -> str:
    """``value`` as an SQL literal, quoted by psycopg, ready for a statement that also
    takes ``%s`` parameters (a ``%`` in it is doubled)."""
    return sql.Literal(value).as_string(connection.connection).replace("%", "%%")


def scope_predicate(app_id: int, user_id: str, embedding_model: str) -> str:
    """The rows a scope's index covers, as literals (the index's predicate, and the part of
    a search statement that lets the planner use that index)."""
    return (
        f"app_id = {int(app_id)} AND user_id = {literal(user_id)}"
        f" AND embedding_model = {literal(embedding_model)}"
    )


def halfvec_type() -> str:
    return f"halfvec({int(settings.CTXADMIN_EMBEDDING_DIMENSION)})"


def _create_statement(row: ScopeIndex) -> str:
    return (
        f"CREATE INDEX CONCURRENTLY {row.index_name} ON memory_memoryentry"
        f" USING hnsw ((embedding::{halfvec_type()}) halfvec_cosine_ops)"
        f" WITH (m = {M}, ef_construction = {EF_CONSTRUCTION})"
        f" WHERE {scope_predicate(row.app_id, row.user_id, row.embedding_model)}"
    ).replace("%%", "%")


def _drop(index_name: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index_name}")


def _existing_indexes() -> dict[str, bool]:
    """This family's indexes on the table: name → valid (a concurrent build that died
    leaves an invalid one)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname, i.indisvalid
              FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             WHERE i.indrelid = 'memory_memoryentry'::regclass AND starts_with(c.relname, %s)
            """,
            [INDEX_PREFIX],
        )
        return dict(cursor.fetchall())


def _unwanted(embedding_model: str) -> list[ScopeIndex]:
    """Rows whose index goes: builds that died (no build runs while the caller holds the
    maintainer's lock), another model's, scopes below half the threshold or gone, and the
    smallest scopes' beyond the maximum; and failed builds' rows once their scope may be
    tried again."""
    floor = max(1, settings.CTXADMIN_MEMORY_SCOPE_INDEX_MIN_ENTRIES // 2)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT i.id, i.state, i.embedding_model, coalesce(s.entries, 0),
                   i.retry_at IS NULL OR i.retry_at <= now()
              FROM memory_scopeindex i
              LEFT JOIN memory_scopestats s ON s.app_id = i.app_id AND s.user_id = i.user_id
             ORDER BY coalesce(s.entries, 0) DESC, i.id
            """
        )
        rows = cursor.fetchall()
    unwanted, kept = [], 0
    for index_id, state, model, entries, may_retry in rows:
        if state == ScopeIndex.State.FAILED:
            if may_retry:
                unwanted.append(index_id)
        elif (
            state != ScopeIndex.State.READY
            or model != embedding_model
            or entries < floor
            or kept >= settings.CTXADMIN_MEMORY_SCOPE_INDEXES_MAX
        ):
            unwanted.append(index_id)
        else:
            kept += 1
    return list(ScopeIndex.objects.filter(pk__in=unwanted))


def _next_scope() -> tuple[int, str, int] | None:
    """The largest scope at or above the threshold without an index (nor a recent failed
    build), while there is room."""
    holding = ScopeIndex.objects.exclude(state=ScopeIndex.State.FAILED).count()
    if holding >= settings.CTXADMIN_MEMORY_SCOPE_INDEXES_MAX:
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT s.app_id, s.user_id, s.entries
              FROM memory_scopestats s
             WHERE s.entries >= %s
               AND NOT EXISTS (SELECT 1 FROM memory_scopeindex i
                                WHERE i.app_id = s.app_id AND i.user_id = s.user_id)
             ORDER BY s.entries DESC
             LIMIT 1
            """,
            [settings.CTXADMIN_MEMORY_SCOPE_INDEX_MIN_ENTRIES],
        )
        return cursor.fetchone()


def failure(exc: BaseException) -> tuple[str, int]:
    """A failed build's error, content-free (the database's SQLSTATE, or the exception's
    class), and how many seconds its scope waits before another try: none for a failure of
    the moment (``TRANSIENT_SQLSTATES``, or a database error without a SQLSTATE: the
    connection was lost), ``RETRY_SECONDS`` for any other."""
    cause = exc
    while cause is not None and not isinstance(cause, DatabaseError):
        cause = cause.__cause__
    if cause is None:
        return type(exc).__name__, RETRY_SECONDS
    if cause.sqlstate is None:
        return type(cause).__name__, 0
    return cause.sqlstate, 0 if cause.sqlstate.startswith(TRANSIENT_SQLSTATES) else RETRY_SECONDS


def _build(app_id: int, user_id: str, entries: int, embedding_model: str) -> bool:
    """Build one scope's index; its row is ``ready`` only once the index is valid."""
    row = ScopeIndex.objects.create(
        app_id=app_id, user_id=user_id, embedding_model=embedding_model, entries=entries
    )
    started = time.monotonic()
    limit_ms = settings.CTXADMIN_MEMORY_SCOPE_INDEX_BUILD_SECONDS * 1000
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('maintenance_work_mem', %s, false),"
                " set_config('statement_timeout', %s, false)",
                [f"{settings.CTXADMIN_MEMORY_SCOPE_INDEX_BUILD_MEMORY_MB}MB", str(limit_ms)],
            )
            try:
                cursor.execute(_create_statement(row))
            finally:
                cursor.execute("RESET maintenance_work_mem")
                cursor.execute("RESET statement_timeout")
    except Exception as exc:
        error, wait = failure(exc)
        logger.warning(
            "memory_scope_index_failed",
            extra={
                "app": app_id,
                "index": row.pk,
                "entries": entries,
                "error": error,
                "retry_seconds": wait,
            },
        )
        _drop(row.index_name)
        now = timezone.now()
        ScopeIndex.objects.filter(pk=row.pk).update(
            state=ScopeIndex.State.FAILED,
            build_seconds=round(time.monotonic() - started, 3),
            failed_at=now,
            error=error,
            retry_at=now + timedelta(seconds=wait),
        )
        return False
    seconds = round(time.monotonic() - started, 3)
    ScopeIndex.objects.filter(pk=row.pk).update(
        state=ScopeIndex.State.READY, build_seconds=seconds, ready_at=timezone.now()
    )
    logger.info(
        "memory_scope_index_built",
        extra={"app": app_id, "index": row.pk, "entries": entries, "seconds": seconds},
    )
    return True


def maintain(*, max_builds: int = 1, wait: bool = False) -> dict:
    """Drop the indexes no longer wanted, then build up to ``max_builds`` missing ones.
    ``{"locked": False}`` when another maintainer is running (``wait``: wait for it to
    finish instead); else counts, and ``more``: whether a scope still waits for its index."""
    if connection.in_atomic_block:
        raise RuntimeError("scope indexes are built and dropped outside a transaction")
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_lock(%s), true", [LOCK_KEY])
        else:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        if not cursor.fetchone()[-1]:
            return {"locked": False}
    try:
        embedding_model = embedders.embedder_from_settings().name
        dropped = 0
        for row in _unwanted(embedding_model) if enabled() else ScopeIndex.objects.all():
            name, had_index = row.index_name, row.state != ScopeIndex.State.FAILED
            row.delete()  # searches stop using it first
            if had_index:
                _drop(name)
                dropped += 1
        known = {INDEX_PREFIX + str(pk) for pk in ScopeIndex.objects.values_list("pk", flat=True)}
        for name, valid in _existing_indexes().items():
            if name not in known or not valid:
                _drop(name)
                suffix = name.removeprefix(INDEX_PREFIX)
                if suffix.isdigit():
                    ScopeIndex.objects.filter(pk=int(suffix)).delete()
                dropped += 1
        built = failed = 0
        while enabled() and built + failed < max_builds:
            scope = _next_scope()
            if scope is None:
                break
            if _build(*scope, embedding_model):
                built += 1
            else:
                failed += 1
        more = enabled() and _next_scope() is not None
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
    return {"locked": True, "dropped": dropped, "built": built, "failed": failed, "more": more}

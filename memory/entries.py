"""Memory entries: write, read and delete, always inside one exact (app, user) scope.

Nothing a client sends — metadata, filters, provenance — can widen a scope: every statement
here is bound to ``app_id = %s AND user_id = %s`` by the caller's key and path.
"""

from __future__ import annotations

import hashlib
import uuid

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Now

from ctxadmin.canonical import canonical_json
from ctxadmin.errors import ServiceError, not_found, uuid_or_404
from ctxadmin.models import App
from ctxadmin.pruning import echoed
from ctxadmin.wake import wake
from memory import dedup, embedders, governance
from memory.facts import CURRENT_SQL, CUT_SHORT_SQL, LIVE, Version, place
from memory.inputs import (
    NewMemory,
    parse_epoch,
)
from memory.models import MemoryEntry, ScopeStats
from memory.new_memory import (  # the parsing of an add, which callers also read from here
    in_batch,
)
from memory.scope import check_capacity, check_epoch, lock_scope
from memory.similarity import normalised_sha256
from memory.vectors import embed_one, embedder_is_local, vector_text
from sessions_app.selectors import decode

# What an entry's lexical vector is made of: who said it and the day it was said (from its
# provenance, when it has them) before its content, so "what did Tim say in May" matches.
SEARCH_TEXT = (
    "concat_ws(' ', nullif({author}, ''), "
    "to_char({ts}::timestamptz AT TIME ZONE 'UTC', 'FMDD FMMonth YYYY'), {content})"
)
_SEARCH_TEXT_PARAMS = SEARCH_TEXT.format(author="%s", ts="%s", content="%s")


ENTRY_COLUMNS = (
    "id::text, content, metadata, session_id, event_id, author, "
    "to_json(source_timestamp) #>> '{}', to_json(created_at) #>> '{}', "
    "embedding_model, content_sha256, idempotency_key, "
    "to_json(expires_at) #>> '{}', to_json(retain_until) #>> '{}', key, "
    "to_json(valid_from) #>> '{}', to_json(valid_to) #>> '{}', "
    "to_json(recorded_at) #>> '{}', to_json(retired_at) #>> '{}', superseded_by_id::text, "
    "(SELECT p.id::text FROM memory_memoryentry p "
    "WHERE p.superseded_by_id = memory_memoryentry.id LIMIT 1), near_duplicate_of_id::text"
)


def _entry(row) -> dict:
    (
        entry_id,
        content,
        metadata,
        session_id,
        event_id,
        author,
        source_timestamp,
        created_at,
        model,
        digest,
        key,
        expires_at,
        retain_until,
        fact_key,
        valid_from,
        valid_to,
        recorded_at,
        retired_at,
        superseded_by,
        supersedes,
        near_duplicate_of,
    ) = row
    return {
        "id": entry_id,
        "content": content,
        "metadata": decode(metadata),
        "provenance": {
            "session_id": session_id or None,
            "event_id": event_id or None,
            "author": author or None,
            "timestamp": source_timestamp,
        },
        "idempotency_key": key,
        "sha256": digest,
        "embedding_model": model or None,
        "created_at": created_at,
        "expires_at": expires_at,
        "retain_until": retain_until,
        "key": fact_key,
        "valid_from": valid_from,
        "valid_to": valid_to,
        "recorded_at": recorded_at,
        "retired_at": retired_at,
        "superseded_by": superseded_by,
        "supersedes": supersedes,
        "near_duplicate_of": near_duplicate_of,
    }


# ``replace``: the entry holding the key takes the new write's content and terms, in place
# (its id stays), unless a retention period or a legal hold keeps it (``memory_memoryentry``
# is the row in the way).
_REPLACE = """
    DO UPDATE SET
        content = EXCLUDED.content, content_sha256 = EXCLUDED.content_sha256,
        normalised_sha256 = EXCLUDED.normalised_sha256,
        metadata = EXCLUDED.metadata, session_id = EXCLUDED.session_id,
        event_id = EXCLUDED.event_id, author = EXCLUDED.author,
        source_timestamp = EXCLUDED.source_timestamp, search = EXCLUDED.search,
        embedding = EXCLUDED.embedding, embedding_model = EXCLUDED.embedding_model,
        embed_failures = 0, content_bytes = EXCLUDED.content_bytes, created_at = now(),
        updated_at = now(), expires_at = EXCLUDED.expires_at,
        ttl_seconds = EXCLUDED.ttl_seconds, retain_until = EXCLUDED.retain_until,
        valid_from = EXCLUDED.valid_from, recorded_at = now(), written_by = EXCLUDED.written_by
    WHERE (memory_memoryentry.retain_until IS NULL OR memory_memoryentry.retain_until <= now())
      AND NOT EXISTS (SELECT 1 FROM memory_memorypolicy p
                       WHERE p.app_id = memory_memoryentry.app_id AND p.legal_hold)
      AND NOT EXISTS (SELECT 1 FROM memory_legalhold h
                       WHERE h.app_id = memory_memoryentry.app_id
                         AND h.user_id = memory_memoryentry.user_id)
"""


# What became of an add: a new entry, the live entry holding its text already (or, for a
# keyed add, the key's live version it repeats), or the entry it nearly repeats (merged:
# only when the caller asked, as ingestion does).
CREATED, SAME, NEAR = "created", "same", "near_duplicate"


def add_memory(
    app: App, user_id: str, new: NewMemory, epoch: int | None = None, written_by: str = ""
) -> tuple[dict, bool]:
    """(the entry, created); see ``_add``."""
    entry, outcome, pending = _add(app, user_id, new, epoch, written_by)
    if pending:
        wake("memory.embed_pending")
    return entry, outcome == CREATED


def merge_memory(app: App, user_id: str, new: NewMemory, written_by: str = "") -> tuple[dict, str]:
    """Add ``new`` as ingestion does: a near-duplicate of a live entry is merged into it
    (nothing is written) instead of flagged. (The entry, ``CREATED``, ``SAME`` or
    ``NEAR``.)"""
    entry, outcome, pending = _add(app, user_id, new, written_by=written_by, merge_near=True)
    if pending:
        wake("memory.embed_pending")
    return entry, outcome


def add_memories(
    app: App, user_id: str, news: list[NewMemory], written_by: str = ""
) -> list[tuple[dict, bool]]:
    """Each of ``news`` added as ``add_memory`` adds it, all in one transaction: every add
    lands, or (the first refusal raised, naming its index) none does. Adds are applied in
    the order of their idempotency keys (a stable sort, so two adds of one key keep their
    order and the later wins a ``replace``), so concurrent batches over the same keys lock
    them in one order; the answer is in the request's order. Their texts are locked first,
    all at once, for the same reason (``memory.dedup.lock_texts``)."""
    order = sorted(range(len(news)), key=lambda i: news[i].idempotency_key or "")
    results: list[tuple[dict, bool] | None] = [None] * len(news)
    pending = False
    with transaction.atomic():
        dedup.lock_texts(
            app, user_id, [normalised_sha256(n.content) for n in news if n.key is None]
        )
        for index in order:
            try:
                entry, outcome, waiting = _add(app, user_id, news[index], None, written_by)
            except ServiceError as exc:
                raise in_batch(exc, index) from None
            results[index] = (entry, outcome == CREATED)
            pending = pending or waiting
    if pending:
        wake("memory.embed_pending")
    return results


def _add(
    app: App,
    user_id: str,
    new: NewMemory,
    epoch: int | None = None,
    written_by: str = "",
    merge_near: bool = False,
) -> tuple[dict, str, bool]:
    """(the entry, what became of the add: ``CREATED``, ``SAME`` or ``NEAR``, waiting for
    its embedding). The same idempotency key with the same content is the same entry; with
    other content, 409 ``idempotency_conflict``. Concurrent adds with one key make one entry
    (the unique index decides). An unkeyed add of a text the scope holds already is that
    entry; one that nearly repeats an entry is flagged with it after the add (queued in its
    transaction for the near-duplicate sweep), or with ``merge_near`` is that entry
    (``memory.dedup``).

    With ``new.replace``, the entry holding the key (live or expired) is replaced in place
    by this write, in one statement: concurrent replaces of one key leave one entry, the
    last one's. Replacing an entry is refused as erasing it is: 409 ``legal_hold`` under a
    legal hold, 409 ``memory_retained`` before its ``retain_until``.

    The app's memory policy applies: without the user's consent where it is required, 403
    ``consent_required``; its TTL and retention are stamped on the entry. ``epoch`` (else
    ``new.erasure_epoch``) is the scope's erasure epoch the write was prepared at: older
    than the current one, 409 ``memory_erasure_epoch_stale`` and nothing is written.
    ``written_by``: the writing key's or token's prefix, kept for the history."""
    terms = governance.write_terms(app, user_id, new.ttl_seconds)
    epoch = new.erasure_epoch if epoch is None else parse_epoch(epoch, "epoch")
    if epoch is not None:
        check_epoch(app, user_id, epoch)
    digest = hashlib.sha256(new.content.encode("utf-8")).hexdigest()
    same_text = normalised_sha256(new.content)
    if new.idempotency_key is not None and not new.replace:
        existing = _by_key(app, user_id, new.idempotency_key)
        if existing is not None:
            return _same_or_conflict(existing, digest), SAME, False
        governance.release_expired_key(app, user_id, new.idempotency_key)
    deduplicated = new.key is None and not new.replace
    if deduplicated and merge_near:
        found = dedup.near_duplicate(app, user_id, new.content)
        if found is not None:
            return entries_by_id([found[0]])[0], SAME if found[1] else NEAR, False
    elif deduplicated:
        held = dedup.same_texts(app, user_id, [same_text]).get(same_text)
        if held is not None:
            return entries_by_id([held])[0], SAME, False
    check_capacity(app, user_id)
    embedder = embedders.embedder_from_settings()
    vector = None
    sync = new.embed == "sync" or (new.embed == "auto" and embedder_is_local(embedder))
    if sync:
        vector = embed_one(embedder, new.content)
    entry_id = uuid.uuid4()
    values = [
        entry_id,
        app.pk,
        user_id,
        new.content,
        digest,
        canonical_json(new.metadata).decode("utf-8"),
        new.idempotency_key,
        new.session_id,
        new.event_id,
        new.author,
        new.source_timestamp,
        settings.CTXADMIN_MEMORY_TS_CONFIG,
        new.author,
        new.source_timestamp,
        new.content,
        None if vector is None else vector_text(vector),
        embedder.name if vector is not None else "",
        len(new.content.encode("utf-8")),
        terms.ttl_seconds,
        terms.ttl_seconds,
        terms.retention_days,
        same_text,
        None,  # near_duplicate_of: flagged by the sweep (memory.dedup)
    ]
    if new.key is not None:
        try:
            row = _add_version(
                app, user_id, new, epoch, same_text, values, written_by, terms.ttl_seconds
            )
        except _IdempotencyKeyTaken:
            row = None
    else:
        with transaction.atomic(), connection.cursor() as cursor:
            if epoch is not None or new.replace:
                # Ordered after any erasure of the scope (checked again) and any legal hold
                # being placed on it.
                lock_scope(app, user_id, shared=True)
                if epoch is not None:
                    check_epoch(app, user_id, epoch)
            if new.replace:
                _refuse_replacing_a_version(cursor, app, user_id, new.idempotency_key)
            else:
                # One add of a text at a time: the check holds to the commit.
                held = dedup.locked_same_text(app, user_id, same_text)
                if held is not None:
                    return entries_by_id([held])[0], SAME, False
            fact = [None, new.valid_from, None, None]
            row = _insert(cursor, new.replace, values, fact, entry_id, written_by)
            if row is not None and row[-1] and deduplicated and not merge_near:
                # The near-duplicate sweep flags it (memory.dedup), off the request path.
                cursor.execute("INSERT INTO memory_nearcheck (entry_id) VALUES (%s)", [entry_id])
            if row is None and new.replace:  # a retention period or a legal hold keeps it
                governance.refuse_if_held(app, user_id)
                raise _retained_entry(app, user_id, new.idempotency_key)
    if row is None:  # another request with this key won the race
        existing = _by_key(app, user_id, new.idempotency_key)
        if existing is None:  # the key is held by an expired entry still retained or held
            raise ServiceError(
                "idempotency_conflict",
                "This idempotency key names an expired memory that is still kept.",
                status_code=409,
            )
        return _same_or_conflict(existing, digest), SAME, False
    *columns, created = row
    return _entry(columns), CREATED if created else SAME, vector is None


def _refuse_replacing_a_version(cursor, app: App, user_id: str, idempotency_key: str) -> None:
    """A version of a keyed memory is never rewritten in place: 409 ``memory_keyed``. (Under
    the scope lock, which keyed adds take exclusively: the answer holds to the write.)"""
    cursor.execute(
        "SELECT key FROM memory_memoryentry "
        "WHERE app_id = %s AND user_id = %s AND idempotency_key = %s AND key IS NOT NULL",
        [app.pk, user_id, idempotency_key],
    )
    if cursor.fetchone() is not None:
        raise ServiceError(
            "memory_keyed",
            "This idempotency key names a version of a memory with a key, which is never "
            "replaced in place: add a new version with its key.",
            status_code=409,
        )


class _IdempotencyKeyTaken(Exception):
    """A keyed add lost its idempotency key to a concurrent add: its transaction is undone."""


def _insert(
    cursor, replace: bool, values: list, fact: list, entry_id, written_by: str
) -> tuple | None:
    """Insert one entry (``values`` in the order of the columns below, ``fact``: its key,
    valid_from (NULL: its source event's time, else now; a source time after now is now),
    valid_to and successor); its row and whether it is new, or None when its idempotency
    key is taken (and not replaced)."""
    cursor.execute(
        f"""
        INSERT INTO memory_memoryentry
            (id, app_id, user_id, content, content_sha256, metadata, idempotency_key,
             session_id, event_id, author, source_timestamp, search, embedding,
             embedding_model, content_bytes, created_at, updated_at, expires_at,
             ttl_seconds, retain_until, normalised_sha256, near_duplicate_of_id, key,
             valid_from, valid_to, superseded_by_id, recorded_at, retired_at, written_by)
        VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s,
                memory_search_vector(%s::regconfig, {_SEARCH_TEXT_PARAMS}),
                %s::vector, %s, %s, now(), now(),
                now() + %s::integer * interval '1 second', %s,
                now() + %s::integer * interval '1 day', %s, %s::uuid,
                %s, coalesce(%s::timestamptz, least(coalesce(%s::timestamptz, now()), now())),
                %s::timestamptz, %s::uuid, now(),
                CASE WHEN %s::timestamptz IS NULL THEN NULL ELSE now() END, %s)
        ON CONFLICT (app_id, user_id, idempotency_key)
            WHERE idempotency_key IS NOT NULL {_REPLACE if replace else "DO NOTHING"}
        RETURNING {ENTRY_COLUMNS}, id = %s
        """,  # noqa: S608 - constant clauses
        [*values, fact[0], fact[1], values[10], *fact[2:], fact[2], written_by, entry_id],
    )
    return cursor.fetchone()


def _add_version(
    app: App,
    user_id: str,
    new: NewMemory,
    epoch: int | None,
    same_text: str,
    values: list,
    written_by: str,
    ttl_seconds: int | None,
) -> tuple:
    """Add a version of ``new.key`` where its valid time puts it (``memory.facts.place``),
    cutting short the version it falls inside (its ``supersedes``); its row. The same
    text (``memory.similarity.normalised``), metadata and TTL as the key's live version is
    that version (a change of any of them is a new version)."""
    with transaction.atomic(), connection.cursor() as cursor:
        # One placement at a time per scope: the versions read here stay as read.
        lock_scope(app, user_id)
        if epoch is not None:
            check_epoch(app, user_id, epoch)
        cursor.execute(
            f"SELECT id::text, valid_from, valid_to, superseded_by_id::text, normalised_sha256, "  # noqa: S608
            f"{LIVE}, now(), "
            "metadata = %s::jsonb AND ttl_seconds IS NOT DISTINCT FROM %s::integer "
            "FROM memory_memoryentry WHERE app_id = %s AND user_id = %s AND key = %s",
            [values[5], ttl_seconds, app.pk, user_id, new.key],  # values[5]: the metadata
        )
        rows = cursor.fetchall()
        now = rows[0][6] if rows else None
        for entry_id, _start, end, _next, sha, live, _now, same_terms in rows:
            if end is None and live and sha == same_text and same_terms:
                cursor.execute(
                    f"SELECT {ENTRY_COLUMNS}, false FROM memory_memoryentry WHERE id = %s",  # noqa: S608
                    [entry_id],
                )
                return cursor.fetchone()
        if now is None:
            cursor.execute("SELECT now()")
            now = cursor.fetchone()[0]
        # A source event's time after the add time (a skewed clock) is the add time.
        source = new.source_timestamp
        valid_from = new.valid_from or (min(source, now) if source is not None else now)
        placement = place([Version(r[0], r[1], r[2], r[3]) for r in rows], valid_from)
        if placement.closes is not None:
            cursor.execute(CUT_SHORT_SQL, [valid_from, values[0], placement.closes])
        fact = [new.key, valid_from, placement.valid_to, placement.superseded_by]
        row = _insert(cursor, False, values, fact, values[0], written_by)
        if row is None:
            raise _IdempotencyKeyTaken
        _prune_versions(cursor, app, user_id, new.key)
    return row


def _prune_versions(cursor, app: App, user_id: str, key: str) -> int:
    """Delete the key's oldest closed versions (oldest in valid time first) beyond the newest
    ``CTXADMIN_MEMORY_HISTORY_MAX_VERSIONS`` or past the newest versions whose content holds
    ``CTXADMIN_MEMORY_HISTORY_MAX_BYTES``, except those a retention period or a legal hold
    keeps; how many. The live version is never deleted; the version after a deleted one
    keeps its place."""
    cursor.execute(
        """
        DELETE FROM memory_memoryentry WHERE id IN (
            SELECT id FROM (
                SELECT id, valid_to,
                       count(*) OVER newest AS versions, sum(content_bytes) OVER newest AS bytes
                  FROM memory_memoryentry
                 WHERE app_id = %s AND user_id = %s AND key = %s
                WINDOW newest AS (ORDER BY valid_from DESC, recorded_at DESC, id DESC
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
            ) v
             WHERE valid_to IS NOT NULL AND (versions > %s OR bytes > %s))
          AND (retain_until IS NULL OR retain_until <= now())
          AND NOT EXISTS (SELECT 1 FROM memory_memorypolicy p
                           WHERE p.app_id = memory_memoryentry.app_id AND p.legal_hold)
          AND NOT EXISTS (SELECT 1 FROM memory_legalhold h
                           WHERE h.app_id = memory_memoryentry.app_id
                             AND h.user_id = memory_memoryentry.user_id)
        """,
        [
            app.pk,
            user_id,
            key,
            settings.CTXADMIN_MEMORY_HISTORY_MAX_VERSIONS,
            settings.CTXADMIN_MEMORY_HISTORY_MAX_BYTES,
        ],
    )
    return cursor.rowcount


def _retained_entry(app: App, user_id: str, key: str) -> ServiceError:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT to_json(retain_until) #>> '{}' FROM memory_memoryentry "
            "WHERE app_id = %s AND user_id = %s AND idempotency_key = %s",
            [app.pk, user_id, key],
        )
        row = cursor.fetchone()
    return ServiceError(
        "memory_retained",
        "The app's retention period keeps the memory this would replace.",
        status_code=409,
        details={"retained": 1, "retain_until": None if row is None else row[0]},
    )


def _by_key(app: App, user_id: str, key: str) -> tuple | None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {ENTRY_COLUMNS} FROM memory_memoryentry "  # noqa: S608
            f"WHERE app_id = %s AND user_id = %s AND idempotency_key = %s AND {LIVE}",
            [app.pk, user_id, key],
        )
        return cursor.fetchone()


def _same_or_conflict(row, digest: str) -> dict:
    entry = _entry(row)
    if entry["sha256"] != digest:
        raise ServiceError(
            "idempotency_conflict",
            "This idempotency key names a memory with other content.",
            status_code=409,
            details={"id": entry["id"]},
        )
    return entry


def get_memory(app: App, user_id: str, memory_id: str) -> dict:
    key = uuid_or_404(memory_id, "memory")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {ENTRY_COLUMNS} FROM memory_memoryentry "  # noqa: S608
            f"WHERE app_id = %s AND user_id = %s AND id = %s AND {LIVE}",
            [app.pk, user_id, key],
        )
        row = cursor.fetchone()
    if row is None:
        raise not_found("memory", memory_id, of=f"of user {echoed(user_id)!r}")
    return _entry(row)


def live_entries(app: App, user_id: str, filter_sql: str = "", filter_params=()):
    """The user's unexpired entries (a queryset to page), narrowed by a compiled search
    filter (``memory.filters``; its SQL names only the entry's own columns)."""
    rows = MemoryEntry.objects.filter(app=app, user_id=user_id).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=Now())
    )
    if filter_sql:
        rows = rows.extra(where=[filter_sql], params=list(filter_params))  # noqa: S610
    return rows


def memory_users(app: App):
    """The app's users whose memory holds entries (a queryset to page by ``user_id``)."""
    return ScopeStats.objects.filter(app=app, entries__gt=0).only("user_id")


def entries_by_id(ids: list) -> list[dict]:
    """The entries of ``ids``, in that order (a page the caller has chosen)."""
    if not ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {ENTRY_COLUMNS} FROM memory_memoryentry WHERE id = ANY(%s)",  # noqa: S608
            [list(ids)],
        )
        found = {row[0]: _entry(row) for row in cursor.fetchall()}
    return [found[str(key)] for key in ids if str(key) in found]


def delete_memory(app: App, user_id: str, memory_id: str) -> None:
    key = uuid_or_404(memory_id, "memory")
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM memory_memoryentry WHERE app_id = %s AND user_id = %s AND id = %s",
            [app.pk, user_id, key],
        )
        if cursor.rowcount == 0:
            raise not_found("memory", memory_id, of=f"of user {echoed(user_id)!r}")


def list_memories(app: App, user_id: str, limit: int) -> list[dict]:
    """The user's live memories valid now (the current version of each key), newest first,
    at most ``limit``."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {ENTRY_COLUMNS} FROM memory_memoryentry "  # noqa: S608
            f"WHERE app_id = %s AND user_id = %s AND {LIVE} AND {CURRENT_SQL} "
            "ORDER BY created_at DESC, memory_memoryentry.id LIMIT %s",
            [app.pk, user_id, limit],
        )
        return [_entry(row) for row in cursor.fetchall()]


def touch_memories(app: App, user_id: str, ids: list[str]) -> list[dict]:
    """Refresh the TTL of the user's live entries among ``ids`` that have one:
    ``expires_at`` becomes now plus the entry's ``ttl_seconds``, in one statement (an entry
    that expired meanwhile stays expired). The refreshed entries' ids and new expiry."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE memory_memoryentry
               SET expires_at = now() + ttl_seconds * interval '1 second'
             WHERE app_id = %s AND user_id = %s AND id = ANY(%s::uuid[])
               AND ttl_seconds IS NOT NULL AND {LIVE}
            RETURNING id::text, to_json(expires_at) #>> '{{}}'
            """,  # noqa: S608 - a constant condition
            [app.pk, user_id, list(ids)],
        )
        rows = sorted(cursor.fetchall())
    return [{"id": entry_id, "expires_at": expires_at} for entry_id, expires_at in rows]

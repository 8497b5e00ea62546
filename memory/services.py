"""Memory writes and searches, always inside one exact (app, user) scope.

Nothing a client sends — metadata, filters, provenance — can widen a scope: every statement
here is bound to ``app_id = %s AND user_id = %s`` by the caller's key and path, and the
filter compiler only adds conditions.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from ctxadmin.canonical import canonical_json, canonical_size
from ctxadmin.errors import ServiceError, invalid, not_found, strict_object, uuid_or_404
from ctxadmin.models import App
from ctxadmin.pruning import echoed, is_secret_key, looks_like_secret
from memory import erasure, governance, scope_index
from memory import filters as memory_filters
from sessions_app.events import EventError, parse_timestamp

logger = logging.getLogger("ctxadmin.memory")

REDACTED = "[redacted]"
ADD_KEYS = frozenset(
    {"content", "metadata", "provenance", "idempotency_key", "embed", "erasure_epoch"}
)
PROVENANCE_KEYS = frozenset({"session_id", "event_id", "author", "timestamp"})
SEARCH_KEYS = frozenset({"query", "mode", "filter", "limit", "min_score", "weights"})
MODES = ("lexical", "vector", "hybrid")
MAX_SEARCH_LIMIT = 100
MAX_QUERY_BYTES = 4096
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,255}\Z")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}\Z")
RRF_K = 60
# BM25 (Lucene's formula and default parameters); a lexeme counts once per entry, and an
# entry's length is the number of distinct lexemes in its ``search`` vector.
BM25_K1 = 1.2
BM25_B = 0.75
# A query's rarest lexemes that are looked up (the rest of a very long query is ignored).
MAX_QUERY_TERMS = 64
# How many postings (entries holding a query lexeme) lexical search scores at most, unless
# the query's rarest lexeme alone holds more: beyond it, candidates come from the rarer
# lexemes only (see ``_lexical``).
LEXICAL_MAX_CANDIDATES = 2_000
# How far an iterative HNSW scan may go to fill a small scope's results: pgvector's defaults
# (20,000 tuples, 1 x work_mem) stop short when a scope is a sliver of a large table.
MAX_SCAN_TUPLES = 100_000
# The HNSW candidate list of a vector search (pgvector's default is 40): on the benchmark's
# 100,000-entry scope, 100 found 0.48 of the exact top 10 against 0.37 at 40, for about 3 ms.
HNSW_MIN_EF_SEARCH = 100
# Up to this many entries in a scope without an index of its own (memory/scope_index.py),
# vector search is exact (a scan of the scope's rows is cheaper than an approximate walk
# through the shared index, which holds everyone else's too, and finds all of them).
EXACT_SEARCH_MAX = 20_000
# How many times the embedding task tries an entry the embedder refuses for its content.
MAX_EMBED_FAILURES = 3
# Reads see live entries only: an entry past its ``expires_at`` vanishes at once (the purge
# task deletes it later).
LIVE = "(expires_at IS NULL OR expires_at > now())"


# ----------------------------------------------------------------------------- adding


@dataclass(frozen=True)
class NewMemory:
    content: str
    metadata: dict
    idempotency_key: str | None
    session_id: str
    event_id: str
    author: str
    source_timestamp: Any
    embed: str  # sync | async | auto
    # The scope's erasure epoch the write was prepared at (None: not checked).
    erasure_epoch: int | None = None


def redact_metadata(value: Any) -> Any:
    """Values under secret-named keys become a marker, at any depth."""
    if isinstance(value, dict):
        return {
            key: REDACTED if is_secret_key(key) else redact_metadata(child)
            for key, child in value.items()
        }
    if isinstance(value, list):
        return [redact_metadata(child) for child in value]
    return value


def parse_new_memory(body: Any) -> NewMemory:
    strict_object(body, ADD_KEYS)
    content = body.get("content")
    if not isinstance(content, str) or not content.strip():
        raise invalid("content", "must be a non-empty string")
    limit = settings.CTXADMIN_MEMORY_MAX_CONTENT_BYTES
    if len(content.encode("utf-8")) > limit:
        raise invalid("content", f"must be at most {limit} bytes of UTF-8")
    if "\x00" in content:
        raise invalid("content", "must not contain NUL characters")
    metadata = body.get("metadata", {})
    if not isinstance(metadata, dict):
        raise invalid("metadata", "must be an object")
    for key in metadata:
        if not _KEY.match(key) and not is_secret_key(key):
            raise invalid(
                f"metadata.{echoed(key)}",
                "keys are 1-256 characters, starting with a letter or digit",
            )
    metadata = redact_metadata(metadata)
    metadata_limit = settings.CTXADMIN_MEMORY_MAX_METADATA_BYTES
    if canonical_size(metadata) > metadata_limit:
        raise invalid("metadata", f"must be at most {metadata_limit} bytes")
    provenance = body.get("provenance")
    if provenance is None:
        provenance = {}
    if not isinstance(provenance, dict):
        raise invalid("provenance", "must be an object")
    unknown = sorted(set(provenance) - PROVENANCE_KEYS)
    if unknown:
        raise invalid(f"provenance.{echoed(unknown[0])}", "unknown field")
    ids = {}
    for name in ("session_id", "event_id", "author"):
        value = provenance.get(name)
        if value is None:  # null is absent, as answers show an absent one
            value = ""
        if not isinstance(value, str) or (value and not _ID.match(value)):
            raise invalid(f"provenance.{name}", "must be an identifier of 1-128 characters")
        ids[name] = value
    when = None
    if provenance.get("timestamp") is not None:
        try:
            when = parse_timestamp(provenance["timestamp"], "provenance.timestamp")
        except EventError as exc:
            raise invalid(exc.path, exc.message) from None
    key = body.get("idempotency_key")
    if key is not None and (not isinstance(key, str) or not _KEY.match(key)):
        raise invalid("idempotency_key", "must be 1-256 characters from A-Z a-z 0-9 . _ : @ / -")
    embed = body.get("embed", "auto")
    if embed not in ("auto", "sync", "async"):
        raise invalid("embed", "must be auto, sync or async")
    epoch = erasure.parse_epoch(body.get("erasure_epoch"))
    if looks_like_secret(content):
        raise ServiceError(
            "sensitive_memory_content",
            "The content looks like it carries a credential; it was not stored.",
            status_code=422,
        )
    return NewMemory(
        content=content,
        metadata=metadata,
        idempotency_key=key,
        session_id=ids["session_id"],
        event_id=ids["event_id"],
        author=ids["author"],
        source_timestamp=when,
        embed=embed,
        erasure_epoch=epoch,
    )


def check_capacity(app: App, user_id: str, adding: int = 1) -> None:
    """Refuse (422 ``memory_capacity_exceeded``) ``adding`` more entries where they would
    pass the scope's limit (its statistics row: every entry until it is purged) or the
    deployment's (from PostgreSQL's row estimate)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT coalesce((SELECT entries FROM memory_scopestats
                              WHERE app_id = %s AND user_id = %s), 0),
                   (SELECT greatest(reltuples, 0)::bigint FROM pg_class
                     WHERE oid = 'memory_memoryentry'::regclass)
            """,
            [app.pk, user_id],
        )
        in_scope, total = cursor.fetchone()
    if in_scope + adding > settings.CTXADMIN_MEMORY_MAX_PER_SCOPE:
        raise ServiceError(
            "memory_capacity_exceeded",
            "This user's memory is full.",
            status_code=422,
            details={"limit": "per_scope", "maximum": settings.CTXADMIN_MEMORY_MAX_PER_SCOPE},
        )
    if total + adding > settings.CTXADMIN_MEMORY_MAX_TOTAL:
        raise ServiceError(
            "memory_capacity_exceeded",
            "The deployment's memory is full.",
            status_code=422,
            details={"limit": "total", "maximum": settings.CTXADMIN_MEMORY_MAX_TOTAL},
        )


ENTRY_COLUMNS = (
    "id::text, content, metadata, session_id, event_id, author, "
    "to_json(source_timestamp) #>> '{}', to_json(created_at) #>> '{}', "
    "embedding_model, content_sha256, idempotency_key, "
    "to_json(expires_at) #>> '{}', to_json(retain_until) #>> '{}'"
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
    ) = row
    from sessions_app.store import decode

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
    }


def add_memory(
    app: App, user_id: str, new: NewMemory, epoch: int | None = None
) -> tuple[dict, bool]:
    """(the entry, created). The same idempotency key with the same content is the same
    entry; with other content, 409 ``idempotency_conflict``. Concurrent adds with one key
    make one entry (the unique index decides).

    The app's memory policy applies: without the user's consent where it is required, 403
    ``consent_required``; its TTL and retention are stamped on the entry. ``epoch`` (else
    ``new.erasure_epoch``) is the scope's erasure epoch the write was prepared at: older
    than the current one, 409 ``memory_erasure_epoch_stale`` and nothing is written."""
    from memory import embeddings

    terms = governance.write_terms(app, user_id)
    epoch = new.erasure_epoch if epoch is None else erasure.parse_epoch(epoch, "epoch")
    if epoch is not None:
        erasure.check_epoch(app, user_id, epoch)
    digest = hashlib.sha256(new.content.encode("utf-8")).hexdigest()
    if new.idempotency_key is not None:
        existing = _by_key(app, user_id, new.idempotency_key)
        if existing is not None:
            return _same_or_conflict(existing, digest), False
        governance.release_expired_key(app, user_id, new.idempotency_key)
    check_capacity(app, user_id)
    embedder = embeddings.embedder_from_settings()
    vector = None
    sync = new.embed == "sync" or (new.embed == "auto" and embedder_is_local(embedder))
    if sync:
        vector = _embed_one(embedder, new.content)
    entry_id = uuid.uuid4()
    with transaction.atomic(), connection.cursor() as cursor:
        if epoch is not None:  # ordered after any erasure of the scope, checked again
            erasure.lock_scope(app, user_id, shared=True)
            erasure.check_epoch(app, user_id, epoch)
        cursor.execute(
            f"""
            INSERT INTO memory_memoryentry
                (id, app_id, user_id, content, content_sha256, metadata, idempotency_key,
                 session_id, event_id, author, source_timestamp, search, embedding,
                 embedding_model, content_bytes, created_at, updated_at, expires_at,
                 retain_until)
            VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s,
                    to_tsvector(%s::regconfig, %s), %s::vector, %s, %s, now(), now(),
                    now() + %s::integer * interval '1 second',
                    now() + %s::integer * interval '1 day')
            ON CONFLICT (app_id, user_id, idempotency_key)
                WHERE idempotency_key IS NOT NULL DO NOTHING
            RETURNING {ENTRY_COLUMNS}
            """,  # noqa: S608 - a constant column list
            [
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
                new.content,
                None if vector is None else vector_text(vector),
                embedder.name if vector is not None else "",
                len(new.content.encode("utf-8")),
                terms.ttl_seconds,
                terms.retention_days,
            ],
        )
        row = cursor.fetchone()
    if row is None:  # another request with this key won the race
        existing = _by_key(app, user_id, new.idempotency_key)
        if existing is None:  # the key is held by an expired entry still retained or held
            raise ServiceError(
                "idempotency_conflict",
                "This idempotency key names an expired memory that is still kept.",
                status_code=409,
            )
        return _same_or_conflict(existing, digest), False
    if vector is None:
        from memory.tasks import embed_pending

        embed_pending.delay_on_commit()
    return _entry(row), True


def embedder_is_local(embedder) -> bool:
    return not getattr(embedder, "remote", False)


def _embed_one(embedder, text: str) -> list[float]:
    from memory import embeddings

    try:
        return embeddings.embed_memories(embedder, [text])[0]
    except embeddings.EmbeddingError as exc:
        raise ServiceError(
            exc.code, "The embedder could not embed this memory.", status_code=502
        ) from None


def vector_text(vector: list[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


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
    key = uuid_or_404(memory_id)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {ENTRY_COLUMNS} FROM memory_memoryentry "  # noqa: S608
            f"WHERE app_id = %s AND user_id = %s AND id = %s AND {LIVE}",
            [app.pk, user_id, key],
        )
        row = cursor.fetchone()
    if row is None:
        raise not_found()
    return _entry(row)


def delete_memory(app: App, user_id: str, memory_id: str) -> None:
    key = uuid_or_404(memory_id)
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM memory_memoryentry WHERE app_id = %s AND user_id = %s AND id = %s",
            [app.pk, user_id, key],
        )
        if cursor.rowcount == 0:
            raise not_found()


def _provider_unavailable(exc) -> bool:
    """An embedding failure that says nothing about the texts (a timeout, a rate limit, a
    server error or no connection): every text would fail alike for now."""
    return exc.code in ("embedding_timeout", "embedding_rate_limited") or (
        exc.code == "embedding_provider_error" and (exc.status is None or exc.status >= 500)
    )


def embed_pending_batch(batch_size: int = 128) -> int:
    """Embed up to ``batch_size`` entries that have no vector yet (claimed with SKIP LOCKED,
    so several workers share the backlog); the count of entries handled.

    When the embedder refuses the batch for its content (a 4xx, a malformed reply), each
    entry is embedded on its own: the others get their vector, and the refused one counts a
    failure; after ``MAX_EMBED_FAILURES`` it is no longer tried (it stays searchable
    lexically; ``reembed`` tries again), so one entry never holds back the ones behind it.
    When the provider is unavailable, nothing changes and the error propagates: the beat
    tries again later."""
    from memory import embeddings

    embedder = embeddings.embedder_from_settings()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, content FROM memory_memoryentry "
                "WHERE embedding IS NULL AND embed_failures < %s "
                "ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED",
                [MAX_EMBED_FAILURES, batch_size],
            )
            rows = cursor.fetchall()
        if not rows:
            return 0
        refused: list = []
        try:
            vectors = embeddings.embed_memories(embedder, [content for _id, content in rows])
            embedded = list(zip(rows, vectors, strict=True))
        except embeddings.EmbeddingError as exc:
            if _provider_unavailable(exc):
                raise
            embedded = []
            if len(rows) == 1:  # the batch was this entry: refused already
                refused.append(rows[0][0])
            else:
                for row in rows:
                    try:
                        vector = embeddings.embed_memories(embedder, [row[1]])[0]
                    except embeddings.EmbeddingError as one:
                        if _provider_unavailable(one):
                            raise
                        refused.append(row[0])
                    else:
                        embedded.append((row, vector))
        with connection.cursor() as cursor:
            cursor.executemany(
                "UPDATE memory_memoryentry SET embedding = %s::vector, embedding_model = %s, "
                "updated_at = now() WHERE id = %s",
                [
                    (vector_text(vector), embedder.name, entry_id)
                    for (entry_id, _content), vector in embedded
                ],
            )
            if refused:
                cursor.execute(
                    "UPDATE memory_memoryentry SET embed_failures = embed_failures + 1 "
                    "WHERE id = ANY(%s)",
                    [refused],
                )
    if refused:
        logger.warning(
            "memory_embedding_refused", extra={"entries": len(refused), "batch": len(rows)}
        )
    return len(rows)


# ----------------------------------------------------------------------------- search


@dataclass(frozen=True)
class SearchRequest:
    query: str
    mode: str
    filter_sql: str
    filter_params: list
    limit: int
    min_score: float | None
    weights: dict[str, float] | None


def parse_search(body: Any) -> SearchRequest:
    strict_object(body, SEARCH_KEYS)
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise invalid("query", "must be a non-empty string")
    if len(query.encode("utf-8")) > MAX_QUERY_BYTES or "\x00" in query:
        raise invalid("query", f"must be at most {MAX_QUERY_BYTES} bytes, without NUL")
    mode = body.get("mode", "hybrid")
    if mode not in MODES:
        raise invalid("mode", f"must be one of {list(MODES)}")
    limit = body.get("limit", 10)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise invalid("limit", f"must be an integer from 1 to {MAX_SEARCH_LIMIT}")
    min_score = body.get("min_score")
    if min_score is not None and (
        isinstance(min_score, bool)
        or not isinstance(min_score, int | float)
        or not math.isfinite(min_score)
    ):
        raise invalid("min_score", "must be a number")
    weights = body.get("weights")
    if weights is not None:
        if not isinstance(weights, dict) or set(weights) - {"lexical", "vector"} or not weights:
            raise invalid("weights", "must be an object with lexical and/or vector weights")
        for name, value in weights.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 <= value <= 100
            ):
                raise invalid(f"weights.{name}", "must be a number from 0 to 100")
        if mode != "hybrid":
            raise invalid("weights", "apply to hybrid search only")
        if not any(weights.values()):
            raise invalid("weights", "must not all be 0")
    try:
        sql, params = memory_filters.compile_filter(body.get("filter"))
    except memory_filters.FilterError as exc:
        raise invalid(exc.path, exc.message) from None
    return SearchRequest(query, mode, sql, params, limit, min_score, weights)


_HIT_COLUMNS = (
    "id::text, content, metadata, session_id, event_id, author, "
    "to_json(source_timestamp) #>> '{}', to_json(created_at) #>> '{}'"
)


@dataclass(frozen=True)
class _Term:
    lexeme: str
    df: int
    idf: float


def _query_terms(app: App, user_id: str, query: str) -> tuple[list[_Term], float]:
    """The query's distinct lexemes that occur in the scope, with their BM25 idf, rarest
    first (at most ``MAX_QUERY_TERMS``); and the scope's average document length."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT q.lexeme, t.entries, s.entries, s.lexemes
              FROM unnest(to_tsvector(%s::regconfig, %s)) q
              JOIN memory_scopestats s ON (s.app_id, s.user_id) = (%s, %s)
              JOIN memory_termstats t ON (t.app_id, t.user_id, t.lexeme) = (%s, %s, q.lexeme)
             ORDER BY t.entries, q.lexeme
             LIMIT %s
            """,
            [
                settings.CTXADMIN_MEMORY_TS_CONFIG,
                query,
                app.pk,
                user_id,
                app.pk,
                user_id,
                MAX_QUERY_TERMS,
            ],
        )
        rows = cursor.fetchall()
    if not rows:
        return [], 1.0
    entries, lexemes = rows[0][2], rows[0][3]
    terms = [
        _Term(lexeme, df, math.log(1 + (entries - df + 0.5) / (df + 0.5)))
        for lexeme, df, _entries, _lexemes in rows
    ]
    return terms, max(lexemes / entries, 1.0)


def _tsquery(lexemes: list[str]) -> str:
    """A tsquery matching any of ``lexemes``, as tsquery input (each quoted, so no lexeme
    is parsed or normalised again)."""
    return " | ".join(
        "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'" for lexeme in lexemes
    )


def _bm25(
    app: App,
    user_id: str,
    request: SearchRequest,
    terms: list[_Term],
    avgdl: float,
    matching: list[_Term],
    depth: int,
) -> list[tuple]:
    """The top ``depth`` of the scope's live entries holding any of ``matching``, scored by
    BM25 over all ``terms``, a lexeme counting once per entry (memories are short)."""
    held = " + ".join(["(CASE WHEN search @@ %s::tsquery THEN %s::float8 ELSE 0 END)"] * len(terms))
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT id::text, ({held}) * %s::float8
                   / (1 + %s::float8 * (1 - %s::float8 + %s::float8 * length(search) / %s::float8))
                   AS score
              FROM memory_memoryentry
             WHERE app_id = %s AND user_id = %s AND search @@ %s::tsquery
               AND {LIVE} AND ({request.filter_sql})
             ORDER BY score DESC, created_at DESC
             LIMIT %s
            """,  # noqa: S608 - placeholders only
            [
                *(value for term in terms for value in (_tsquery([term.lexeme]), term.idf)),
                BM25_K1 + 1,
                BM25_K1,
                BM25_B,
                BM25_B,
                avgdl,
                app.pk,
                user_id,
                _tsquery([term.lexeme for term in matching]),
                *request.filter_params,
                depth,
            ],
        )
        return cursor.fetchall()


def _lexical(app: App, user_id: str, request: SearchRequest, depth: int) -> list[tuple]:
    """Full-text search ranked by BM25 with the scope's own statistics.

    Recall-oriented: an entry holding any of the query's lexemes is a candidate (a question
    rarely shares every word with its answer), and rare lexemes weigh more than common ones.
    Candidates are drawn from the rarest lexemes first, up to ``LEXICAL_MAX_CANDIDATES``
    postings: the lexemes left out (the most common ones) still score the candidates that
    hold them, but an entry holding only those is not considered. Each lexeme adds at most
    ``idf * (k1 + 1) / (1 + k1 * (1 - b))`` to a score, so when the left-out lexemes
    together could not lift an entry past the last result, the ranking is still exact
    (logged as ``exact``).
    """
    terms, avgdl = _query_terms(app, user_id, request.query)
    if not terms:
        return []
    matching, postings = terms[:1], terms[0].df
    for term in terms[1:]:
        if postings + term.df > LEXICAL_MAX_CANDIDATES:
            break
        matching.append(term)
        postings += term.df
    rows = _bm25(app, user_id, request, terms, avgdl, matching, depth)
    left_out = terms[len(matching) :]
    if left_out:
        # An entry's score for a lexeme is at most idf * (k1 + 1) / (1 + k1 * (1 - b)).
        ceiling = (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B))
        bound = sum(term.idf for term in left_out) * ceiling
        floor = rows[-1][1] if len(rows) == depth else 0.0
        logger.info(
            "memory_lexical_bounded",
            extra={
                "app": app.pk,
                "terms": len(terms),
                "used": len(matching),
                "postings": postings,
                "exact": bound <= floor,
            },
        )
    return rows


def _vector(
    app: App, user_id: str, request: SearchRequest, depth: int, embedder=None
) -> list[tuple]:
    """Cosine distance inside the scope, among the entries the configured embedder embedded
    (a vector of another model is never compared). Over the scope's own HNSW index once it
    has one (a large scope, ``memory/scope_index.py``); else exact in a small scope; else
    over the shared HNSW index, whose iterative scans keep going until ``depth`` rows of
    this scope are found, however small it is in the table."""
    from memory import embeddings

    embedder = embedder or embeddings.embedder_from_settings()
    try:
        vector = embeddings.embed_all(
            embedder,
            [request.query],
            limits=embeddings.EmbeddingLimits(),
            deadline=time.monotonic() + embeddings.EmbeddingLimits().timeout_s,
        )[0]
    except embeddings.EmbeddingError as exc:
        raise ServiceError(
            exc.code, "The embedder could not embed the query.", status_code=502
        ) from None
    text = vector_text(vector)
    scope = scope_index.plan(app.pk, user_id, embedder.name)
    if scope.index_id is not None:
        ef_search = scope_index.ef_search(scope.entries, depth)
        return _vector_own_index(app, user_id, request, depth, embedder, text, ef_search)
    if scope.entries <= EXACT_SEARCH_MAX:
        # Exact: the distance expression (``+ 0``) is one no index orders by, so the scope's
        # rows are found through its own index and every one of them is ranked. Read in the
        # table's order (a bitmap scan) rather than the scope index's: one visit per page.
        return _under_settings(
            {"enable_indexscan": "off"},
            f"""
            SELECT id::text, 1 - (embedding <=> %s::vector) AS score
              FROM memory_memoryentry
             WHERE app_id = %s AND user_id = %s AND embedding IS NOT NULL
               AND embedding_model = %s AND {LIVE} AND ({request.filter_sql})
             ORDER BY (embedding <=> %s::vector) + 0
             LIMIT %s
            """,  # noqa: S608 - the filter is compiled with placeholders only
            [text, app.pk, user_id, embedder.name, *request.filter_params, text, depth],
        )
    rows = _under_settings(
        _hnsw_settings(max(HNSW_MIN_EF_SEARCH, min(1000, depth * 2))),
        f"""
        SELECT id::text, 1 - (embedding <=> %s::vector) AS score
          FROM memory_memoryentry
         WHERE app_id = %s AND user_id = %s AND embedding IS NOT NULL
           AND embedding_model = %s AND {LIVE} AND ({request.filter_sql})
         ORDER BY embedding <=> %s::vector
         LIMIT %s
        """,  # noqa: S608 - the filter is compiled with placeholders only
        [text, app.pk, user_id, embedder.name, *request.filter_params, text, depth],
    )
    return sorted(rows, key=lambda row: -row[1])  # relaxed order: exact order by score


def _hnsw_settings(ef_search: int) -> dict[str, str]:
    """HNSW scan settings: iterative scans in relaxed order up to ``MAX_SCAN_TUPLES`` (so a
    scope, or a filter, that is a sliver of what the index holds still gets its full depth),
    and ``ef_search`` candidates."""
    return {
        "hnsw.iterative_scan": "relaxed_order",
        "hnsw.max_scan_tuples": str(MAX_SCAN_TUPLES),
        "hnsw.scan_mem_multiplier": "16",
        "hnsw.ef_search": str(ef_search),
    }


def _under_settings(configuration: dict[str, str], statement: str, params: list) -> list[tuple]:
    """The rows of ``statement`` run with ``configuration`` (settings) for it alone, in one
    round trip. Outside a transaction, the settings and the statement are one query string,
    which PostgreSQL runs as one implicit transaction: ``set_config(…, true)`` lasts for that
    transaction alone. Inside a caller's, they run in a savepoint that is rolled back after:
    a release would keep the settings until the caller's commit."""
    configure = "SELECT " + ", ".join(["set_config(%s, %s, true)"] * len(configuration))
    configure_params = [value for pair in configuration.items() for value in pair]
    with connection.cursor() as cursor:
        if not connection.in_atomic_block:
            cursor.execute(f"{configure}; {statement}", [*configure_params, *params])
            cursor.nextset()
            return cursor.fetchall()
        with transaction.atomic():
            cursor.execute(configure, configure_params)
            cursor.execute(statement, params)
            rows = cursor.fetchall()
            transaction.set_rollback(True)
        return rows


def _vector_own_index(
    app: App,
    user_id: str,
    request: SearchRequest,
    depth: int,
    embedder,
    text: str,
    ef_search: int,
) -> list[tuple]:
    """Over the scope's own HNSW index (``memory/scope_index.py``): the scope named by
    literals, which the planner needs to use a partial index, and the distance in
    ``halfvec``, which that index orders by; scores from the stored vectors."""
    halfvec = scope_index.halfvec_type()
    rows = _under_settings(
        _hnsw_settings(ef_search),
        f"""
        SELECT id::text, 1 - (embedding <=> %s::vector) AS score
          FROM memory_memoryentry
         WHERE {scope_index.scope_predicate(app.pk, user_id, embedder.name)}
           AND embedding IS NOT NULL AND {LIVE} AND ({request.filter_sql})
         ORDER BY embedding::{halfvec} <=> %s::{halfvec}
         LIMIT %s
        """,  # noqa: S608 - literals quoted by psycopg, the filter compiled with placeholders
        [text, *request.filter_params, text, depth],
    )
    return sorted(rows, key=lambda row: -row[1])  # relaxed order: exact order by score


@dataclass(frozen=True)
class Fusion:
    """How a hybrid search combines its two rankings: ``fill`` (the lexical ranking, then
    the vector ranking's other entries where it leaves room), ``rrf`` (reciprocal rank
    fusion) or ``weighted`` (each ranking's scores min-max normalised over its top
    ``depth``, then weighted and summed; an entry absent from a ranking scores 0 there)."""

    method: str
    lexical: float = 1.0
    vector: float = 1.0


def fusion_for(request: SearchRequest, embedder=None) -> Fusion:
    """Weighted score fusion with the request's ``weights``; else the embedder's measured
    calibration (``Embedder.fusion_weight``), and reciprocal rank fusion for one not
    measured. A weak embedder weighs less, or only fills: hybrid search is never worse than
    lexical search alone."""
    if request.weights is not None:
        return Fusion("weighted", **{"lexical": 1.0, "vector": 1.0, **request.weights})
    from memory import embeddings

    embedder = embedder or embeddings.embedder_from_settings()
    weight = getattr(embedder, "fusion_weight", None)
    if weight is None:
        return Fusion("rrf")
    if weight == 0:
        return Fusion("fill")
    return Fusion("weighted", lexical=1.0 - weight, vector=weight)


def _normalised(rows: list[tuple]) -> dict[str, float]:
    """Scores mapped onto 0..1 by min-max over the ranking (all 1 when they are equal)."""
    if not rows:
        return {}
    scores = [float(score) for _id, score in rows]
    high, low = max(scores), min(scores)
    span = high - low
    return {entry_id: (float(score) - low) / span if span else 1.0 for entry_id, score in rows}


def _fused(app: App, user_id: str, request: SearchRequest, fusion: Fusion, embedder) -> list[tuple]:
    depth = max(50, request.limit * 3)
    lexical = _lexical(app, user_id, request, depth) if fusion.lexical else []
    vector = _vector(app, user_id, request, depth, embedder) if fusion.vector else []
    fused: dict[str, float] = {}
    if fusion.method == "rrf":
        for weight, rows in ((fusion.lexical, lexical), (fusion.vector, vector)):
            for rank, (entry_id, _score) in enumerate(rows, start=1):
                fused[entry_id] = fused.get(entry_id, 0.0) + weight / (RRF_K + rank)
    else:
        for weight, rows in ((fusion.lexical, lexical), (fusion.vector, vector)):
            for entry_id, score in _normalised(rows).items():
                fused[entry_id] = fused.get(entry_id, 0.0) + weight * score
    # Stable: equal scores keep the lexical ranking's order, then the vector ranking's.
    return sorted(fused.items(), key=lambda item: -item[1])[: request.limit]


def _lexical_then_vector(app: App, user_id: str, request: SearchRequest, embedder) -> list[tuple]:
    """Hybrid search with an embedder that only fills (fusion weight 0): the lexical
    ranking, then, only where it holds fewer than ``limit`` entries, the vector ranking's
    entries it does not hold; scored on the RRF scale, rank by rank."""
    found = [entry_id for entry_id, _score in _lexical(app, user_id, request, request.limit)]
    if len(found) < request.limit:
        held = set(found)
        found += [
            entry_id
            for entry_id, _score in _vector(app, user_id, request, request.limit, embedder)
            if entry_id not in held
        ]
    return [
        (entry_id, 1.0 / (RRF_K + rank))
        for rank, entry_id in enumerate(found[: request.limit], start=1)
    ]


SEARCH_COUNT_RETENTION_DAYS = 30


_COUNT_SEARCH = (
    "INSERT INTO memory_searchcount (app_id, hour, searches) "
    "VALUES (%s, date_trunc('hour', now()), 1) "
    "ON CONFLICT (app_id, hour) DO UPDATE SET searches = memory_searchcount.searches + 1"
)


def _counted(app: App, statement: str = "", params: list | None = None) -> list[tuple]:
    """The rows of ``statement`` (none without one), with one more search of the app this
    hour counted (the console's searches per app) in the same round trip. A count, not a
    record: outside a caller's transaction, the query string's own transaction does not wait
    for the disk at its commit (``synchronous_commit`` off for it alone; a crash may lose
    the count), so a search does not wait on a flush. Inside one, the caller's commit is
    left as is."""
    parts = (
        []
        if connection.in_atomic_block
        else ["SELECT set_config('synchronous_commit', 'off', true)"]
    )
    parts.append(_COUNT_SEARCH)
    if statement:
        parts.append(statement)
    with connection.cursor() as cursor:
        cursor.execute("; ".join(parts), [app.pk, *(params or [])])
        if not statement:
            return []
        for _earlier in parts[1:]:
            cursor.nextset()
        return cursor.fetchall()


def prune_search_counts() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM memory_searchcount WHERE hour < now() - make_interval(days => %s)",
            [SEARCH_COUNT_RETENTION_DAYS],
        )
        return cursor.rowcount


def search(app: App, user_id: str, request: SearchRequest) -> list[dict]:
    """Hits in the scope (live entries only); 403 ``consent_required`` when the app's policy
    requires the user's consent and it is not granted."""
    governance.require_read_consent(app, user_id)
    started = time.perf_counter()
    score_type = {"lexical": "bm25", "vector": "cosine"}.get(request.mode, "")
    if request.mode == "lexical":
        ranked = [
            (entry_id, float(score))
            for entry_id, score in _lexical(app, user_id, request, request.limit)
        ]
    elif request.mode == "vector":
        ranked = [
            (entry_id, float(score))
            for entry_id, score in _vector(app, user_id, request, request.limit)
        ]
    else:
        from memory import embeddings

        embedder = embeddings.embedder_from_settings()  # once: an HTTP one is built per call
        fusion = fusion_for(request, embedder)
        if fusion.method == "fill":
            ranked = _lexical_then_vector(app, user_id, request, embedder)
        else:
            ranked = _fused(app, user_id, request, fusion, embedder)
        score_type = "weighted" if fusion.method == "weighted" else "rrf"
    if request.min_score is not None:
        ranked = [(entry_id, score) for entry_id, score in ranked if score >= request.min_score]
    hits = _hits(app, user_id, ranked, score_type)
    logger.info(
        "memory_search",
        extra={
            "app": app.pk,
            "mode": request.mode,
            "hits": len(hits),
            "ms": round((time.perf_counter() - started) * 1000, 3),
        },
    )
    return hits


def _hits(app: App, user_id: str, ranked: list[tuple[str, float]], score_type: str) -> list[dict]:
    """The ranked entries that are still live, as hits; the search counted with them."""
    statement, params = "", []
    if ranked:
        statement = (
            f"SELECT {_HIT_COLUMNS} FROM memory_memoryentry "  # noqa: S608
            f"WHERE app_id = %s AND user_id = %s AND id = ANY(%s::uuid[]) AND {LIVE}"
        )
        params = [app.pk, user_id, [entry_id for entry_id, _score in ranked]]
    rows = {row[0]: row for row in _counted(app, statement, params)}
    from sessions_app.store import decode

    hits = []
    for entry_id, score in ranked:
        row = rows.get(entry_id)
        if row is None:  # deleted meanwhile
            continue
        _id, content, metadata, session_id, event_id, author, source_ts, created = row
        hits.append(
            {
                "id": entry_id,
                "content": content,
                "score": round(score, 6),
                "score_type": score_type,
                "timestamp": source_ts or created,
                "metadata": decode(metadata),
                "provenance": {
                    "session_id": session_id or None,
                    "event_id": event_id or None,
                    "author": author or None,
                },
            }
        )
    return hits

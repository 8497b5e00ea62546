"""Memory search inside one exact (app, user) scope: lexical (BM25 over the scope's own
statistics), vector (cosine, over the scope's own index, exactly, or over the shared
index), and hybrid (the two fused, ``memory/fusion.py``); live entries only.

The filter compiler (``memory/filters.py``) only adds conditions: every statement here is
bound to ``app_id = %s AND user_id = %s`` by the caller's key and path.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction

from ctxadmin.errors import ServiceError
from ctxadmin.models import App
from memory import embedders, governance, scope_index
from memory.facts import LIVE
from memory.fusion import (
    BM25_B,
    BM25_K1,
    Fusion,
    bm25_ceiling,
    bm25_idf,
    choose,
    cosines_are_evidence,
    evidenced,
    filled,
    fuse,
)
from memory.inputs import SearchRequest
from memory.vectors import vector_text
from sessions_app.selectors import decode

logger = logging.getLogger("ctxadmin.memory")

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
              FROM unnest(memory_search_vector(%s::regconfig, %s, true)) q
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
    terms = [_Term(lexeme, df, bm25_idf(entries, df)) for lexeme, df, _entries, _lexemes in rows]
    return terms, max(lexemes / entries, 1.0)


def tsquery_any(lexemes: list[str]) -> str:
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
                *(value for term in terms for value in (tsquery_any([term.lexeme]), term.idf)),
                BM25_K1 + 1,
                BM25_K1,
                BM25_B,
                BM25_B,
                avgdl,
                app.pk,
                user_id,
                tsquery_any([term.lexeme for term in matching]),
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
        bound = sum(term.idf for term in left_out) * bm25_ceiling()
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
    """The query's nearest entries (``nearest``) among those the configured embedder
    embedded: a vector of another model is never compared."""
    embedder = embedder or embedders.embedder_from_settings()
    try:
        vector = embedders.embed_all(
            embedder,
            [request.query],
            limits=embedders.EmbeddingLimits(),
            deadline=time.monotonic() + embedders.EmbeddingLimits().timeout_s,
        )[0]
    except embedders.EmbeddingError as exc:
        raise ServiceError(
            exc.code, "The embedder could not embed the query.", status_code=502
        ) from None
    return nearest(
        app,
        user_id,
        vector_text(vector),
        depth,
        embedder.name,
        request.filter_sql,
        request.filter_params,
    )


def nearest(
    app: App,
    user_id: str,
    text: str,
    depth: int,
    model: str,
    filter_sql: str = "TRUE",
    filter_params=(),
) -> list[tuple]:
    """The ``depth`` entries of the scope nearest to the vector ``text`` (pgvector text) by
    cosine among those ``model`` embedded and ``filter_sql`` admits, as (id, similarity),
    best first. Over the scope's own HNSW index once it has one (a large scope,
    ``memory/scope_index.py``); else exact in a small scope; else over the shared HNSW
    index, whose iterative scans keep going until ``depth`` rows of this scope are found,
    however small it is in the table."""
    scope = scope_index.plan(app.pk, user_id, model)
    if scope.index_id is not None:
        ef = scope_index.ef_search(scope.entries, depth)
        return _vector_own_index(app, user_id, depth, model, text, ef, filter_sql, filter_params)
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
               AND embedding_model = %s AND {LIVE} AND ({filter_sql})
             ORDER BY (embedding <=> %s::vector) + 0
             LIMIT %s
            """,  # noqa: S608 - the filter is compiled with placeholders only
            [text, app.pk, user_id, model, *filter_params, text, depth],
        )
    rows = _under_settings(
        _hnsw_settings(max(HNSW_MIN_EF_SEARCH, min(1000, depth * 2))),
        f"""
        SELECT id::text, 1 - (embedding <=> %s::vector) AS score
          FROM memory_memoryentry
         WHERE app_id = %s AND user_id = %s AND embedding IS NOT NULL
           AND embedding_model = %s AND {LIVE} AND ({filter_sql})
         ORDER BY embedding <=> %s::vector
         LIMIT %s
        """,  # noqa: S608 - the filter is compiled with placeholders only
        [text, app.pk, user_id, model, *filter_params, text, depth],
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
    depth: int,
    model: str,
    text: str,
    ef_search: int,
    filter_sql: str,
    filter_params,
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
         WHERE {scope_index.scope_predicate(app.pk, user_id, model)}
           AND embedding IS NOT NULL AND {LIVE} AND ({filter_sql})
         ORDER BY embedding::{halfvec} <=> %s::{halfvec}
         LIMIT %s
        """,  # noqa: S608 - literals quoted by psycopg, the filter compiled with placeholders
        [text, *filter_params, text, depth],
    )
    return sorted(rows, key=lambda row: -row[1])  # relaxed order: exact order by score


def fusion_for(request: SearchRequest, embedder=None) -> Fusion:
    """How this hybrid search fuses (``memory.fusion.choose``): by the request's
    ``weights``, else by the embedder's measured calibration (``Embedder.fusion_weight``)."""
    if request.weights is not None:
        return choose(request.weights, None)
    embedder = embedder or embedders.embedder_from_settings()
    return choose(None, getattr(embedder, "fusion_weight", None))


def _fused(app: App, user_id: str, request: SearchRequest, fusion: Fusion, embedder) -> list[tuple]:
    """The two rankings fused; without a ``min_score``, the relevance floor
    (``memory.fusion.evidenced``): nothing unless some entry has a lexical match or the
    embedder's ``min_similarity``, else the entries with a lexical match or its
    ``min_related_similarity``."""
    depth = max(50, request.limit * 3)
    lexical = _lexical(app, user_id, request, depth) if fusion.lexical else []
    vector = _vector(app, user_id, request, depth, embedder) if fusion.vector else []
    if request.min_score is not None:
        return fuse(fusion, lexical, vector, request.limit)
    ranked = fuse(fusion, lexical, vector, len(lexical) + len(vector))
    # A lexical match is evidence even where the lexical ranking weighs nothing.
    matched = lexical if fusion.lexical else _lexical(app, user_id, request, depth)
    held = {entry_id for entry_id, _score in matched}
    cosines = {entry_id: float(score) for entry_id, score in vector}
    if not _cosines_count(request, embedder):
        cosines = {}
    return evidenced(
        ranked, held, cosines, embedder.min_similarity, embedder.min_related_similarity
    )[: request.limit]


def _cosines_count(request: SearchRequest, embedder) -> bool:
    """Whether the relevance floor counts the embedder's cosines as evidence for this query:
    not for a Chinese, Japanese or Korean query when the embedder does not read those
    scripts (``memory.fusion.cosines_are_evidence``); then a hit needs a lexical match."""
    return cosines_are_evidence(request.query, getattr(embedder, "reads_cjk", True))


def _lexical_then_vector(app: App, user_id: str, request: SearchRequest, embedder) -> list[tuple]:
    """Hybrid search with an embedder that only fills (fusion weight 0): the lexical
    ranking, then, only where it holds fewer than ``limit`` entries, the vector ranking's
    entries it does not hold (without a ``min_score``, under the relevance floor,
    ``memory.fusion.evidenced``: a lexical hit is evidence, so with one the others need the
    embedder's ``min_related_similarity``, without one some need its ``min_similarity``);
    scored on the RRF scale, rank by rank."""
    found = _lexical(app, user_id, request, request.limit)
    if len(found) < request.limit:
        held = {entry_id for entry_id, _score in found}
        vector = [
            (entry_id, float(score))
            for entry_id, score in _vector(app, user_id, request, request.limit, embedder)
            if entry_id not in held
        ]
        found = found + vector
        if request.min_score is None:
            found = evidenced(
                found,
                held,
                dict(vector) if _cosines_count(request, embedder) else {},
                embedder.min_similarity,
                embedder.min_related_similarity,
            )
    return filled([entry_id for entry_id, _score in found], request.limit)


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
        embedder = embedders.embedder_from_settings()
        ranked = [
            (entry_id, float(score))
            for entry_id, score in _vector(app, user_id, request, request.limit, embedder)
        ]
        if request.min_score is None:
            # The cosine alone; where it is no evidence for the query, a lexical match.
            counts = _cosines_count(request, embedder)
            depth = max(50, request.limit * 3)
            ranked = evidenced(
                ranked,
                set() if counts else {i for i, _s in _lexical(app, user_id, request, depth)},
                dict(ranked) if counts else {},
                embedder.min_similarity,
                embedder.min_related_similarity,
            )
    else:
        embedder = embedders.embedder_from_settings()  # once: an HTTP one is built per call
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

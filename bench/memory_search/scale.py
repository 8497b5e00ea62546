"""Search at scale: latency through the API (and the service's own time from its log) at
both sizes, HNSW recall@10 against exact search and at other ``ef_search`` values, and
the LangGraph peer over the same entries."""

from __future__ import annotations

import json
import random
import statistics
import time

import psycopg
from psycopg import sql

from bench import langgraph_peer
from bench.memory_search.corpus import (
    Words,
    bulk_load,
    hashing_embedder,
    scope_indexes,
    vector_text,
)
from bench.memory_search.plan import (
    DIMENSION,
    EF_SWEEP,
    EXACT_DEPTH,
    HNSW_QUERIES,
    MAX_SCAN_TUPLES,
    MODES,
    SCAN_MEM_MULTIPLIER,
    memories_url,
)
from bench.timing import percentiles


def server_ms(log, offset: int, app_id: int, mode: str, count: int) -> list[float]:
    """The ``ms`` of the service's ``memory_search`` log lines for the app and mode written
    to ``log`` past byte ``offset`` (waiting a moment for the last of ``count``)."""
    deadline = time.monotonic() + 10
    while True:
        found = []
        with log.open("rb") as handle:
            handle.seek(offset)
            for line in handle:
                if b'"memory_search"' not in line:
                    continue
                try:
                    record = json.loads(line[line.index(b"{") :])
                except ValueError:
                    continue
                if (record.get("event"), record.get("app"), record.get("mode")) == (
                    "memory_search",
                    app_id,
                    mode,
                ):
                    found.append(float(record["ms"]))
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def latency(api, user: str, queries: list[str], log=None, app_id: int | None = None) -> dict:
    """Client-side p50/p95 through the API per mode; with the service's ``log``, also its
    own time for each search (``server``)."""
    url = f"{memories_url(api, user)}/search"
    figures = {}
    for mode in MODES:
        for query in queries[:3]:  # warm-up
            api.post(url, {"query": query, "mode": mode})
        offset = log.stat().st_size if log is not None else 0
        samples, hits = [], []
        for query in queries:
            started = time.perf_counter()
            body = api.post(url, {"query": query, "mode": mode})
            samples.append((time.perf_counter() - started) * 1000)
            hits.append(len(body["hits"]))
        figures[mode] = {**percentiles(samples), "mean_hits": round(statistics.mean(hits), 1)}
        if log is not None:
            server = server_ms(log, offset, app_id, mode, len(queries))
            if len(server) == len(queries):
                figures[mode]["server"] = percentiles(server)
    return figures


def _exact(database_url: str, app_id: int, user: str, vectors: list[str]) -> list[list]:
    """The exact nearest ``EXACT_DEPTH`` (id, cosine similarity) of each vector in the scope,
    with index scans off."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SET enable_indexscan = off")
        conn.execute("SET enable_bitmapscan = off")
        return [
            conn.execute(
                "SELECT id::text, 1 - (embedding <=> %s::vector) FROM memory_memoryentry "
                "WHERE app_id = %s AND user_id = %s AND embedding IS NOT NULL "
                "AND (expires_at IS NULL OR expires_at > now()) "
                "ORDER BY embedding <=> %s::vector LIMIT %s",
                (vector, app_id, user, vector, EXACT_DEPTH),
            ).fetchall()
            for vector in vectors
        ]


def entry_queries(database_url: str, app_id: int, user: str, count: int) -> list[str]:
    """Six consecutive words of ``count`` of the scope's entries (a question about something
    stored, with a clear nearest entry)."""
    rng = random.Random(count)  # noqa: S311 - reproducible choice
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT content FROM memory_memoryentry WHERE app_id = %s AND user_id = %s "
            "ORDER BY content_sha256 LIMIT %s",
            (app_id, user, count),
        ).fetchall()
    queries = []
    for (content,) in rows:
        words = content.split()
        start = rng.randint(0, max(0, len(words) - 6))
        queries.append(" ".join(words[start : start + 6]))
    return queries


def _hnsw_top10(
    database_url: str,
    app_id: int,
    user: str,
    vectors: list[str],
    ef_search: int,
    *,
    force: bool = False,
) -> tuple[list[set], list[float], str]:
    """The service's vector query and settings (``memory.search._vector``: over the
    scope's own index when it has one, else the shared one) with another
    ``hnsw.ef_search``: the top 10 of each vector, the milliseconds each took, and the plan
    the planner chose for the first vector (``own index``, ``shared index`` or ``exact``).
    ``force``: sorting is off, so the planner takes an index whatever it costs."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        own = conn.execute(
            "SELECT id FROM memory_scopeindex WHERE app_id = %s AND user_id = %s "
            "AND state = 'ready'",
            (app_id, user),
        ).fetchone()
        live = "(expires_at IS NULL OR expires_at > now())"  # live entries, as the service
        if own:
            scope = (
                f"app_id = {int(app_id)} AND user_id = {sql.Literal(user).as_string(conn)} "
                f"AND embedding_model = {sql.Literal(hashing_embedder().name).as_string(conn)}"
            )
            half = f"halfvec({DIMENSION})"
            statement = (
                f"SELECT id::text FROM memory_memoryentry WHERE {scope} "  # noqa: S608
                f"AND embedding IS NOT NULL AND {live} "
                f"ORDER BY embedding::{half} <=> %(v)s::{half} LIMIT 10"
            )
        else:
            statement = (
                "SELECT id::text FROM memory_memoryentry "  # noqa: S608
                f"WHERE app_id = {int(app_id)} AND user_id = %(user)s "
                f"AND embedding IS NOT NULL AND {live} "
                "ORDER BY embedding <=> %(v)s::vector LIMIT 10"
            )
        found, samples, plan_name = [], [], "exact"
        for position, vector in enumerate(vectors):
            params = {"v": vector, "user": user}
            started = time.perf_counter()
            with conn.transaction():
                conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                conn.execute(f"SET LOCAL hnsw.max_scan_tuples = {MAX_SCAN_TUPLES}")
                conn.execute(f"SET LOCAL hnsw.scan_mem_multiplier = {SCAN_MEM_MULTIPLIER}")
                conn.execute(f"SET LOCAL hnsw.ef_search = {ef_search}")
                if force:
                    conn.execute("SET LOCAL enable_sort = off")
                rows = conn.execute(statement, params).fetchall()
                samples.append((time.perf_counter() - started) * 1000)
                if position == 0:
                    plan = str(conn.execute(f"EXPLAIN {statement}", params).fetchall())
                    if "memory_scope_vec_" in plan:
                        plan_name = "own index"
                    elif "memory_embedding_hnsw" in plan:
                        plan_name = "shared index"
            found.append({row[0] for row in rows})
    return found, samples, plan_name


def _overlap(found: list[set], exact: list[set]) -> float:
    return round(
        statistics.mean(
            len(got & wanted) / len(wanted) for got, wanted in zip(found, exact, strict=True)
        ),
        4,
    )


def _api_against_exact(api, user: str, queries: list[str], exact: list[list]) -> dict:
    """The API's vector top 10 against the exact one: recall@10, whether the nearest entry
    is among them, and their mean similarity as a share of the exact top 10's."""
    url = f"{memories_url(api, user)}/search"
    shares, nearest, ratios = [], [], []
    for query, ranked in zip(queries, exact, strict=True):
        hits = api.post(url, {"query": query, "mode": "vector", "limit": 10})["hits"]
        wanted = {entry_id for entry_id, _similarity in ranked[:10]}
        shares.append(len({hit["id"] for hit in hits} & wanted) / len(wanted))
        nearest.append(ranked[0][0] in {hit["id"] for hit in hits})
        best = statistics.mean(similarity for _id, similarity in ranked[:10])
        ratios.append(statistics.mean(hit["score"] for hit in hits) / best if hits else 0.0)
    return {
        "recall_at_10": round(statistics.mean(shares), 4),
        "min": round(min(shares), 2),
        "nearest_found": round(statistics.mean(nearest), 4),
        "similarity_ratio": round(statistics.mean(ratios), 4),
        "exact_similarity": {
            f"@{rank}": round(statistics.mean(ranked[rank - 1][1] for ranked in exact), 4)
            for rank in (1, 10, 11, EXACT_DEPTH)
            if all(len(ranked) >= rank for ranked in exact)
        },
        "queries": len(shares),
    }


def hnsw_recall(api, database_url: str, app_id: int, user: str, queries: list[str]) -> dict:
    """The API's vector search against exact search in the scope (no index scans), for the
    generated queries and for words of the scope's own entries; and the service's query in
    SQL at other ``hnsw.ef_search`` values (the API's, for limit 10: ``api_ef_search``)."""
    vectors = [vector_text(query) for query in queries]
    exact = _exact(database_url, app_id, user, vectors)
    results = {"generated": _api_against_exact(api, user, queries, exact)}
    from_entries = entry_queries(database_url, app_id, user, len(queries))
    results["from_entries"] = _api_against_exact(
        api,
        user,
        from_entries,
        _exact(database_url, app_id, user, [vector_text(query) for query in from_entries]),
    )
    top10 = [{entry_id for entry_id, _similarity in ranked[:10]} for ranked in exact]
    sweep = []
    for ef_search in EF_SWEEP:
        found, samples, plan = _hnsw_top10(database_url, app_id, user, vectors, ef_search)
        point = {
            "ef_search": ef_search,
            "plan": plan,
            "recall_at_10": _overlap(found, top10),
            "sql_ms": percentiles(samples),
        }
        if plan == "exact":
            found, samples, _ = _hnsw_top10(
                database_url, app_id, user, vectors, ef_search, force=True
            )
            point["forced_hnsw"] = {
                "recall_at_10": _overlap(found, top10),
                "sql_ms": percentiles(samples),
            }
        sweep.append(point)
    results["ef_search_sweep"] = sweep
    return results


def scale(
    service, api, *, big: int, small: int, others: int, queries: int, langgraph: bool = True
) -> dict:
    """The scale phases; with ``langgraph``, the same vector searches through LangGraph's
    ``PostgresStore`` holding the same entries (``bench/langgraph_peer.py``) in each."""
    database_url = service.database_url
    with psycopg.connect(database_url) as conn:
        app_id = conn.execute("SELECT id FROM ctxadmin_app WHERE name = %s", (api.app,)).fetchone()[
            0
        ]
    words = Words(20240601)
    timed = [words.query() for _ in range(queries)]
    checked = [words.query() for _ in range(HNSW_QUERIES)]
    user = "scale-main"
    phases = []
    plan = [(user, small)] + [(f"scale-other-{i}", small) for i in range(others)]
    peer = None
    if langgraph:
        peer = langgraph_peer.Peer(database_url, app_id)
    try:
        for size in dict.fromkeys((small, big)):  # in order, once each
            if size != small:
                plan = [(user, size - small)]
            load = bulk_load(database_url, app_id, plan, words)
            load.update(scope_indexes(service, app_id, {user for user, _count in plan}))
            phase = {
                "scope_rows": size,
                "other_scopes": others,
                "other_scope_rows": small,
                "load": load,
                "latency_ms": latency(api, user, timed, service.log, app_id),
                "hnsw": hnsw_recall(api, database_url, app_id, user, checked),
            }
            if peer is not None:
                from_entries = entry_queries(database_url, app_id, user, HNSW_QUERIES)
                phase["langgraph"] = peer.phase(user, timed, checked, from_entries)
            phases.append(phase)
        notes = peer.notes() if peer is not None else None
    finally:
        if peer is not None:
            peer.close()
    return {
        "phases": phases,
        "queries": queries,
        "hnsw_queries": HNSW_QUERIES,
        "langgraph": notes,
    }

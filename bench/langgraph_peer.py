"""Peer measurements: LangGraph's ``PostgresStore`` vector search (pgvector) beside ctxadmin's.

The scale part of the memory search benchmark (``bench.memory_bench``) loads the entries it
gives ctxadmin into LangGraph's long-term memory store as well, on the same PostgreSQL
server, in a freshly created database (``PEER_DB``), and times the same vector searches:

* the store is ``PostgresStore.from_conn_string(url, index=...)`` (one connection, as its
  documentation shows it), ``index={"dims": 384, "embed": <ctxadmin's hashing embedder>,
  "fields": ["content"]}``: its default ANN index, HNSW with pgvector's defaults (m = 16,
  ef_construction = 64), cosine distance; ``store.setup()`` creates its tables and index;
* each ctxadmin scope is the namespace ``("app", user)``, each entry one item: key the
  entry's id, value ``{"content": text}``; they go in through the store's own ``batch`` of
  ``PutOp`` (which embeds them), ``PUT_BATCH`` at a time, read back from ctxadmin's table,
  with the HNSW index dropped meanwhile and created again after by the store's own
  migration (as the benchmark rebuilds ctxadmin's), then both tables analyzed;
* latency: ``store.search(("app", user), query=q, limit=10)`` in this process (embedding the
  query, the SQL round trip, decoding the items), p50/p95 over the benchmark's timed
  queries after 3 warm-up calls;
* recall@10 against the exact top 10 of the namespace (its vectors sorted by distance with
  index scans off), for the benchmark's generated queries and for words of the scope's
  entries; the hits returned, and the plan PostgreSQL chose for the store's query;
* the same, with larger HNSW candidate lists (``EF_SWEEP``, set on the store's connection:
  the store has no setting of its own for it), to see at what time, if any, it reaches
  ctxadmin's recall.

LangGraph is imported only when the peer runs (``.[bench]`` installs it).
"""

from __future__ import annotations

import re
import statistics
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

import psycopg

from bench.service import fresh_database
from memory.embedders import HashingEmbedder

if TYPE_CHECKING:
    from langgraph.store.postgres import PostgresStore

PEER_DB = "langgraph_peer_bench"
NAMESPACE = "app"
FIELD = "content"
DIMENSION = 384
LIMIT = 10
PUT_BATCH = 1_000
WARMUP = 3
# hnsw.ef_search values beyond pgvector's default of 40 (the store's own search), up to
# pgvector's largest.
EF_SWEEP = (100, 200, 400, 1000)
INDEX = "store_vectors_embedding_idx"
MAINTENANCE_WORK_MEM = "512MB"  # as the benchmark builds ctxadmin's HNSW index
PLAN_NODES = ("->  Limit", "->  Nested Loop", "->  Index Scan", "->  Seq Scan", "->  Bitmap")
PLAN_NODES += ("->  Hash", "Filter:", "Rows Removed", "Index Cond:")


def _percentiles(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50": round(cuts[49], 2), "p95": round(cuts[94], 2)}


def _rows(plan_line: str) -> float | None:
    found = re.search(r"actual rows=([0-9.]+)", plan_line)
    return float(found.group(1)) if found else None


def _dedent(lines: list[str]) -> list[str]:
    margin = min((len(line) - len(line.lstrip()) for line in lines), default=0)
    return [line[margin:] for line in lines]


def _vector_text(vector: list[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


class Peer:
    """LangGraph's store on the server of ``database_url``, fed from the ctxadmin app
    ``app_id``'s memory entries there."""

    def __init__(self, database_url: str, app_id: int):
        # langgraph: an optional bench extra, imported only when the peer runs.
        from langgraph.store.postgres import PostgresStore

        self.source_url, self.app_id = database_url, app_id
        self.url = fresh_database(database_url, PEER_DB)
        self.embedder = HashingEmbedder(DIMENSION)

        def embed(texts: list[str]) -> list[list[float]]:
            return [self.embedder.vector(text) for text in texts]

        self._exit = ExitStack()
        self.store: PostgresStore = self._exit.enter_context(
            PostgresStore.from_conn_string(
                self.url, index={"dims": DIMENSION, "embed": embed, "fields": [FIELD]}
            )
        )
        started = time.perf_counter()
        self.store.setup()
        self.setup_s = round(time.perf_counter() - started, 2)
        self.loaded_until = datetime(1970, 1, 1, tzinfo=UTC)
        self.loaded = 0

    def close(self) -> None:
        self._exit.close()

    # ------------------------------------------------------------------------- loading

    def load(self) -> dict:
        """Put the app's entries added since the last load; rebuild the index, analyze."""
        # langgraph: an optional bench extra, imported only when the peer runs.
        from langgraph.store.base import PutOp

        timings: dict[str, Any] = {}
        started = time.perf_counter()
        self.store.conn.execute(f"DROP INDEX IF EXISTS {INDEX}")
        added = 0
        with (
            psycopg.connect(self.source_url) as source,
            source.cursor(name="langgraph_peer_entries") as cursor,
        ):
            cursor.itersize = PUT_BATCH
            cursor.execute(
                "SELECT user_id, id::text, content, created_at FROM memory_memoryentry "
                "WHERE app_id = %s AND created_at > %s ORDER BY created_at, id",
                (self.app_id, self.loaded_until),
            )
            while rows := cursor.fetchmany(PUT_BATCH):
                self.store.batch(
                    [
                        PutOp((NAMESPACE, user), key, {FIELD: content})
                        for user, key, content, _created in rows
                    ]
                )
                added += len(rows)
                self.loaded_until = max(self.loaded_until, max(row[3] for row in rows))
        self.loaded += added
        mark = time.perf_counter()
        timings["put_s"] = round(mark - started, 1)
        timings["puts_per_s"] = round(added / (mark - started), 1) if added else None
        timings["index_build_s"] = self._rebuild_index()
        mark = time.perf_counter()
        self.store.conn.execute("ANALYZE store")
        self.store.conn.execute("ANALYZE store_vectors")
        timings["analyze_s"] = round(time.perf_counter() - mark, 1)
        timings["rows"] = added
        timings["table_rows"] = self.store.conn.execute(
            "SELECT count(*) AS n FROM store_vectors"
        ).fetchone()["n"]
        timings["total_s"] = round(time.perf_counter() - started, 1)
        timings["embedding_max_abs_diff"] = self._embedding_check()
        return timings

    def _rebuild_index(self) -> float:
        """Create the HNSW index again with the store's own migration (``setup`` runs the
        migrations it has not recorded as done)."""
        migrations = self.store.VECTOR_MIGRATIONS
        number = next(n for n, m in enumerate(migrations) if INDEX in m.sql)
        started = time.perf_counter()
        self.store.conn.execute(f"SET maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
        self.store.conn.execute("DELETE FROM vector_migrations WHERE v >= %s", (number,))
        self.store.setup()
        self.store.conn.execute("RESET maintenance_work_mem")
        return round(time.perf_counter() - started, 1)

    def _embedding_check(self, sample: int = 200) -> float:
        """The largest difference between a vector the store wrote and ctxadmin's for the
        same entry, over ``sample`` entries (0: the same embedding function)."""
        rows = self.store.conn.execute(
            "SELECT key, embedding::text AS e FROM store_vectors ORDER BY md5(key) LIMIT %s",
            (sample,),
        ).fetchall()
        theirs = {row["key"]: row["e"] for row in rows}
        with psycopg.connect(self.source_url) as source:
            ours = dict(
                source.execute(
                    "SELECT id::text, embedding::text FROM memory_memoryentry "
                    "WHERE id = ANY(%s::uuid[])",
                    (list(theirs),),
                ).fetchall()
            )
        worst = 0.0
        for key, text in theirs.items():
            a = [float(x) for x in text.strip("[]").split(",")]
            b = [float(x) for x in ours[key].strip("[]").split(",")]
            worst = max(worst, max(abs(x - y) for x, y in zip(a, b, strict=True)))
        return worst

    # ------------------------------------------------------------------------- searching

    def _search(self, user: str, query: str) -> list:
        return self.store.search((NAMESPACE, user), query=query, limit=LIMIT)

    def latency(self, user: str, queries: list[str]) -> dict:
        for query in queries[:WARMUP]:
            self._search(user, query)
        samples, hits = [], []
        for query in queries:
            started = time.perf_counter()
            items = self._search(user, query)
            samples.append((time.perf_counter() - started) * 1000)
            hits.append(len(items))
        return {**_percentiles(samples), "mean_hits": round(statistics.mean(hits), 1)}

    def _exact(self, user: str, queries: list[str]) -> list[list[str]]:
        """The keys of the exact nearest ``LIMIT`` items of the namespace, index scans off."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SET enable_indexscan = off")
            conn.execute("SET enable_bitmapscan = off")
            return [
                [
                    key
                    for (key,) in conn.execute(
                        "SELECT key FROM store_vectors WHERE prefix = %s "
                        "ORDER BY embedding <=> %s::vector LIMIT %s",
                        (
                            f"{NAMESPACE}.{user}",
                            _vector_text(self.embedder.vector(query)),
                            LIMIT,
                        ),
                    ).fetchall()
                ]
                for query in queries
            ]

    def recall(self, user: str, queries: list[str], exact: list[list[str]] | None = None) -> dict:
        exact = exact if exact is not None else self._exact(user, queries)
        shares, nearest, hits = [], [], []
        for query, wanted in zip(queries, exact, strict=True):
            found = {item.key for item in self._search(user, query)}
            shares.append(len(found & set(wanted)) / len(wanted))
            nearest.append(wanted[0] in found)
            hits.append(len(found))
        return {
            "recall_at_10": round(statistics.mean(shares), 4),
            "min": round(min(shares), 2),
            "nearest_found": round(statistics.mean(nearest), 4),
            "mean_hits": round(statistics.mean(hits), 1),
            "queries": len(shares),
        }

    def ef_sweep(self, user: str, timed: list[str], generated: list[str]) -> list[dict]:
        """The store's search with each ``EF_SWEEP`` candidate list, set on its connection
        for the session and reset after: in-process p50/p95 over the timed queries and
        recall@10 for the generated ones."""
        exact = self._exact(user, generated)
        points = []
        try:
            for ef_search in EF_SWEEP:
                self.store.conn.execute(f"SET hnsw.ef_search = {int(ef_search)}")
                points.append(
                    {
                        "ef_search": ef_search,
                        "latency_ms": self.latency(user, timed),
                        "recall": self.recall(user, generated, exact),
                    }
                )
        finally:
            self.store.conn.execute("RESET hnsw.ef_search")
        return points

    def plan(self, user: str, query: str) -> dict:
        """The store's search statement for ``query`` (built by the store itself), run under
        ``EXPLAIN ANALYZE``, and the HNSW settings it runs with."""
        # langgraph: an optional bench extra, imported only when the peer runs.
        from langgraph.store.base import SearchOp
        from langgraph.store.postgres.base import PLACEHOLDER

        op = SearchOp((NAMESPACE, user), None, LIMIT, 0, query, True)  # search()'s defaults
        [(sql, params)], _requests = self.store._prepare_batch_search_queries([(0, op)])
        vector = self.embedder.vector(query)
        params = [vector if param is PLACEHOLDER else param for param in params]
        with psycopg.connect(self.url, autocommit=True) as conn:
            lines = [
                row[0]
                for row in conn.execute(
                    f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {sql}", params
                ).fetchall()
            ]
            settings = {
                name: conn.execute("SELECT current_setting(%s, true)", (name,)).fetchone()[0]
                for name in ("hnsw.ef_search", "hnsw.iterative_scan")
            }
        lines = [re.sub(r"'\[[^']*\]'::vector", "'[...]'::vector", line.rstrip()) for line in lines]
        names = [line.strip() for line in lines]
        start = names.index("CTE search_results") if "CTE search_results" in names else 0
        end = names.index("CTE updated") if "CTE updated" in names else len(lines)
        search = lines[start:end]  # the search itself, not the TTL refresh after it
        # From its nearest-vectors subquery on (above it: removing duplicates, the order).
        scored = [n for n, line in enumerate(search) if "Subquery Scan on scored" in line]
        search = search[scored[0] :] if scored else search
        index_rows = next((_rows(line) for line in search if INDEX in line), None)
        joined_rows = next((_rows(line) for line in search if "Nested Loop" in line), None)
        return {
            "uses_hnsw": index_rows is not None,
            "index_rows": index_rows,  # the candidates the index scan gave
            "namespace_rows": joined_rows,  # those left after the namespace filter
            "settings": settings,
            "search_plan": _dedent(
                [line for line in search if line.strip().startswith(PLAN_NODES)]
            ),
            "explain": lines,
        }

    def phase(
        self, user: str, timed: list[str], generated: list[str], from_entries: list[str]
    ) -> dict:
        """Load what ctxadmin holds that the store does not yet, then measure ``user``'s
        namespace."""
        load = self.load()
        return {
            "load": load,
            "latency_ms": self.latency(user, timed),
            "recall": {
                "generated": self.recall(user, generated),
                "from_entries": self.recall(user, from_entries),
            },
            "plan": self.plan(user, timed[0]),
            "ef_sweep": self.ef_sweep(user, timed, generated),
        }

    def notes(self) -> dict:
        return {
            "langgraph_checkpoint_postgres": version("langgraph-checkpoint-postgres"),
            "langgraph_checkpoint": version("langgraph-checkpoint"),
            "psycopg": version("psycopg"),
            "setup_s": self.setup_s,
            "items": self.loaded,
        }

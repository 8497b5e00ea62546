"""The scale runs' data: words drawn from a Zipf distribution over LoCoMo's vocabulary and a
long tail, loaded directly with ``COPY`` as the service writes entries (tsvector, hashing
embedding), and the scopes' own HNSW indexes waited for."""

from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing
import random
import re
import time
from collections import Counter
from functools import lru_cache

import psycopg

from bench import locomo
from bench.memory_search.plan import (
    CHUNK,
    DIMENSION,
    HNSW_INDEX,
    MAINTAINER_LOCK,
    TS_CONFIG,
    VOCABULARY,
)
from bench.memory_search.recall import turns
from memory.embedders import HashingEmbedder


def vocabulary(rng: random.Random) -> tuple[list[str], list[float]]:
    """LoCoMo's words by frequency, then made-up words up to ``VOCABULARY``; cumulative
    Zipf-Mandelbrot weights (1 / (rank + 2.7))."""
    counts: Counter[str] = Counter()
    for sample in json.loads(locomo.DATA.read_text()):
        for turn in turns(sample):
            counts.update(re.findall(r"[a-z]+", turn["text"].lower()))
    words = [word for word, _count in counts.most_common()]
    seen = set(words)
    syllables = [a + b for a in "bcdfghklmnprstvz" for b in "aeiou"]
    while len(words) < VOCABULARY:
        word = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    cumulative = list(itertools.accumulate(1.0 / (rank + 2.7) for rank in range(len(words))))
    return words, cumulative


class Words:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)  # noqa: S311 - reproducible filler text
        self.words, self.cumulative = vocabulary(self.rng)

    def text(self, low: int, high: int) -> str:
        count = self.rng.randint(low, high)
        return " ".join(self.rng.choices(self.words, cum_weights=self.cumulative, k=count))

    def content(self) -> str:
        return self.text(8, 60)

    def query(self) -> str:
        return self.text(3, 8)


@lru_cache(maxsize=1)
def hashing_embedder():
    return HashingEmbedder(DIMENSION)


def vector_text(text: str) -> str:
    """As the service sends a vector (``memory.vectors.vector_text``)."""
    return "[" + ",".join(repr(float(x)) for x in hashing_embedder().vector(text)) + "]"


def _prepared(rows: list[tuple[str, str]]) -> list[tuple[str, str, str, int, str]]:
    """(user, content) → (user, content, sha256, bytes, embedding), in a pool worker."""
    prepared = []
    for user, content in rows:
        data = content.encode("utf-8")
        prepared.append(
            (user, content, hashlib.sha256(data).hexdigest(), len(data), vector_text(content))
        )
    return prepared


def _chunks(words: Words, plan: list[tuple[str, int]]):
    chunk: list[tuple[str, str]] = []
    for user, count in plan:
        for _ in range(count):
            chunk.append((user, words.content()))
            if len(chunk) == CHUNK:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def bulk_load(database_url: str, app_id: int, plan: list[tuple[str, int]], words: Words) -> dict:
    """Insert ``plan``'s (user, count) rows as the service would write them, with the HNSW
    index dropped meanwhile and built again after; seconds per step. The load holds the
    scope-index maintainer's lock, so the beat builds no scope's index from a scope half
    loaded (nor one whose build would wait for, or deadlock with, the shared index's)."""
    timings: dict[str, float] = {}
    started = time.perf_counter()
    # Forked before the connection is opened: the workers only hash and embed.
    with (
        multiprocessing.get_context("fork").Pool(2) as pool,
        psycopg.connect(database_url, autocommit=True) as conn,
    ):
        conn.execute("SELECT pg_advisory_lock(%s)", (MAINTAINER_LOCK,))
        conn.execute("DROP INDEX IF EXISTS memory_embedding_hnsw")
        # The loaded scopes' own indexes too: built again after the load
        # (``scope_indexes``), as the beat's maintainer would.
        for (index_id,) in conn.execute(
            "DELETE FROM memory_scopeindex WHERE app_id = %s AND user_id = ANY(%s) RETURNING id",
            (app_id, sorted({user for user, _count in plan})),
        ).fetchall():
            conn.execute(f"DROP INDEX IF EXISTS memory_scope_vec_{int(index_id)}")
        conn.execute(
            "CREATE TEMP TABLE bench_stage (user_id text, content text, sha text, bytes int, "
            "embedding text)"
        )
        with (
            conn.cursor() as cursor,
            cursor.copy("COPY bench_stage FROM STDIN") as copy,
        ):
            for rows in pool.imap(_prepared, _chunks(words, plan)):
                for row in rows:
                    copy.write_row(row)
        mark = time.perf_counter()
        timings["generate_embed_copy_s"] = round(mark - started, 1)
        conn.execute(
            """
            INSERT INTO memory_memoryentry
                (id, app_id, user_id, content, content_sha256, metadata, search, embedding,
                 embedding_model, content_bytes, created_at, updated_at)
            SELECT gen_random_uuid(), %s, user_id, content, sha, '{}'::jsonb,
                   memory_search_vector(%s::regconfig, content), embedding::vector, %s, bytes,
                   now(), now()
              FROM bench_stage
            """,
            (app_id, TS_CONFIG, hashing_embedder().name),
        )
        conn.execute("DROP TABLE bench_stage")
        timings["insert_s"] = round(time.perf_counter() - mark, 1)
        mark = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute(HNSW_INDEX)
        timings["hnsw_build_s"] = round(time.perf_counter() - mark, 1)
        mark = time.perf_counter()
        # What autovacuum does after a bulk load: statistics, the visibility map, and the
        # text index's pending list merged into the index.
        conn.execute("VACUUM (ANALYZE) memory_memoryentry")
        timings["analyze_s"] = round(time.perf_counter() - mark, 1)
        timings["rows"] = sum(count for _user, count in plan)
        timings["table_rows"] = conn.execute("SELECT count(*) FROM memory_memoryentry").fetchone()[
            0
        ]
        conn.execute("SELECT pg_advisory_unlock(%s)", (MAINTAINER_LOCK,))
    timings["total_s"] = round(time.perf_counter() - started, 1)
    return timings


def scope_indexes(service, app_id: int, users: set[str]) -> dict:
    """Build the loaded scopes' own vector indexes now (``manage.py scope_indexes``, waiting
    for the beat's maintainer if it is running): how many, their build seconds in all and
    the largest scope's."""
    started = time.perf_counter()
    report = json.loads(service.manage("scope_indexes", "--wait"))
    elapsed = time.perf_counter() - started
    with psycopg.connect(service.database_url) as conn:
        rows = conn.execute(
            "SELECT entries, build_seconds FROM memory_scopeindex "
            "WHERE app_id = %s AND user_id = ANY(%s) AND state = 'ready' ORDER BY entries DESC",
            (app_id, sorted(users)),
        ).fetchall()
    if report["more"]:
        raise RuntimeError("scope indexes: a scope still waits for its index")
    return {
        "scope_indexes": len(rows),
        "scope_index_build_s": round(sum(seconds for _entries, seconds in rows), 1),
        "largest_scope_index_build_s": round(rows[0][1], 1) if rows else 0,
        "scope_indexes_wall_s": round(elapsed, 1),
    }

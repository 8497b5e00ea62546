"""Long-term memory search: LoCoMo evidence recall, search latency at scale, HNSW recall.

A section of ``make bench``, or on its own (its own service in ``var/bench-memory``)::

    .venv/bin/python -m bench.memory_bench [--big 100000] [--small 10000] [--others 9]
                                           [--queries 50] [--skip-locomo] [--skip-scale]
                                           [--skip-langgraph]

1. **LoCoMo evidence recall.** Every turn of each of the three LoCoMo dev conversations
   (``../shared/data/locomo_dev.json``) is added through the API as one memory of one user,
   "Speaker: text" (``metadata``: its ``dia_id`` and speaker; ``idempotency_key``: the
   ``dia_id``; embedded
   synchronously). Each question is then searched lexically, by vector and hybrid (top 25),
   and evidence recall@k is the share of the question's evidence turns among the top k,
   averaged over questions: categories 1-4 together, 5 (adversarial) apart. The baseline is
   BM25 (``bm25s``, Lucene scoring, its English stopwords and Snowball stemmer) over the same
   turns in this process. Hybrid search is also run with the ``weights``
   ``{"lexical": 1 - w, "vector": w}`` for each w of ``SWEEP``, to check the embedder's fusion
   weight. With the ``local`` extra installed, all of it is run again against a second
   service started with ``CTXADMIN_EMBEDDER=local`` (all-MiniLM-L6-v2, its own ``var``
   folder), beside two more baselines in this process with the same model: dense MiniLM
   (cosine over the conversation's turns) and the RRF (k = 60) of BM25 and dense MiniLM.
2. **Latency at scale.** One user's scope holds ``small`` and then ``big`` entries, beside
   ``others`` scopes of ``small`` entries, loaded directly with ``COPY`` (words drawn from a
   Zipf distribution over LoCoMo's vocabulary and a long tail of made-up words; tsvector and
   hashing embedding as the service writes them; the HNSW index rebuilt after each load).
   Then p50/p95 through the API of lexical, vector and hybrid search (limit 10) over
   ``queries`` distinct queries each, and the service's own time for each search (the
   ``ms`` of its ``memory_search`` log lines, read from its log).
3. **HNSW recall@10** of the API's vector search against the exact top 10 (PostgreSQL with
   index scans off) in the same scope, at both sizes, for generated queries and for words
   of the scope's own entries; and of the service's vector query in SQL at other
   ``hnsw.ef_search`` values.
4. **The peer: LangGraph's ``PostgresStore``** (``bench/langgraph_peer.py``) on the same
   PostgreSQL server, holding the same entries in one namespace per scope, embedded by the
   same hashing embedder, with its default pgvector HNSW index: at both sizes, the same
   vector searches timed in-process (p50/p95) and their recall@10 against the exact top 10,
   beside ctxadmin's server-side time and recall (``--skip-langgraph``: not run).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import multiprocessing
import random
import re
import shutil
import statistics
import time
from collections import Counter
from functools import lru_cache

import psycopg
from psycopg import sql

from bench import locomo

KS = (5, 10, 25)
DEPTH = max(KS)
SWEEP = (0, 0.1, 0.2, 0.3, 0.5, 0.75)
# What the service's hybrid search fuses (``memory.services``): the top max(50, 3 * limit)
# of each ranking, by reciprocal rank fusion with k = 60.
FUSION_DEPTH = max(50, 3 * DEPTH)
RRF_K = 60
MODES = ("lexical", "vector", "hybrid")
GROUPS = ("1-4", "5")
DIMENSION = 384
TS_CONFIG = "english"
VOCABULARY = 50_000
HNSW_QUERIES = 50
# The service's HNSW settings (``memory.services``): over a scope's own index, its
# ef_search for a limit of 10 is API_EF_SEARCH (CTXADMIN_MEMORY_SCOPE_INDEX_EF_SEARCH's
# default) at 100,000 entries, scaled by the square root below (``api_ef_search``), and an
# iterative scan may visit up to MAX_SCAN_TUPLES tuples.
API_EF_SEARCH = 400
MAX_SCAN_TUPLES = 100_000
SCAN_MEM_MULTIPLIER = 16
EF_SWEEP = (40, 100, 200, 400, 800)
# The scope-index maintainer's advisory lock (``memory.scope_index.LOCK_KEY``).
MAINTAINER_LOCK = 0x6D656D5F73636F70
HYBRID_P95_TARGET_MS = 30
EXACT_DEPTH = 50
CHUNK = 2_000
HNSW_INDEX = (
    "CREATE INDEX memory_embedding_hnsw ON memory_memoryentry "
    "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
)


def memories_url(api, user: str) -> str:
    return f"/api/v1/apps/{api.app}/users/{user}/memories"


# ----------------------------------------------------------------------------- LoCoMo


def turns(sample: dict) -> list[dict]:
    """The conversation's turns in order, each with its ``memory``: the text as it is
    remembered, "Speaker: text" (who said a thing is part of what is recalled, and questions
    name the speaker; the published LoCoMo retrieval figures index turns the same way)."""
    conversation = sample["conversation"]
    numbers = sorted(
        int(key.split("_")[1])
        for key in conversation
        if re.fullmatch(r"session_\d+", key) and conversation[key]
    )
    return [
        {**turn, "memory": f"{turn['speaker']}: {turn['text']}"}
        for number in numbers
        for turn in conversation[f"session_{number}"]
    ]


def questions(sample: dict, known: set[str]) -> tuple[list[dict], int]:
    """The questions with evidence among the conversation's turns (as a set of dia_ids),
    and how many were left out for having none."""
    kept, left_out = [], 0
    for qa in sample["qa"]:
        wanted = {
            part for entry in qa.get("evidence", []) for part in re.split(r"[;,\s]+", entry) if part
        } & known
        if not wanted:
            left_out += 1
            continue
        group = "5" if qa["category"] == 5 else "1-4"
        kept.append({"question": qa["question"], "group": group, "evidence": wanted})
    return kept, left_out


def index_conversation(api, user: str, sample_turns: list[dict]) -> dict:
    url = memories_url(api, user)
    refused: list[str] = []
    model = None
    started = time.perf_counter()
    for turn in sample_turns:
        status, body = api.request(
            "POST",
            url,
            {
                "content": turn["memory"],
                "metadata": {"dia_id": turn["dia_id"], "speaker": turn["speaker"]},
                "idempotency_key": turn["dia_id"],
                "embed": "sync",
            },
        )
        if status in (200, 201):
            model = body.get("embedding_model") or model
        elif status == 422:
            refused.append(f"{turn['dia_id']}: {body.get('error', body)}")
        else:
            raise RuntimeError(f"adding {turn['dia_id']} failed: {status} {str(body)[:300]}")
    seconds = time.perf_counter() - started
    return {
        "turns": len(sample_turns),
        "added": len(sample_turns) - len(refused),
        "refused": refused,
        "adds_per_s": round(len(sample_turns) / seconds, 1),
        "embedding_model": model,
    }


def api_ranking(api, user: str, query: str, mode: str, weights: dict | None = None) -> list:
    body: dict = {"query": query, "mode": mode, "limit": DEPTH}
    if weights is not None:
        body["weights"] = weights
    hits = api.post(f"{memories_url(api, user)}/search", body)["hits"]
    return [hit["metadata"].get("dia_id") for hit in hits]


def bm25_rankings(
    sample_turns: list[dict], texts: list[str], depth: int = DEPTH
) -> list[list[str]]:
    """BM25 (bm25s defaults: Lucene, k1 = 1.5, b = 0.75; English stopwords, Snowball
    stemmer) over the turns, ``depth`` deep; documents scoring 0 (no query term) are not
    retrieved."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    corpus = [turn["memory"] for turn in sample_turns]
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    tokens = bm25s.tokenize(
        texts, stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False
    )
    found = retriever.retrieve(tokens, k=min(depth, len(corpus)), show_progress=False)
    rankings = []
    for documents, scores in zip(found.documents, found.scores, strict=True):
        rankings.append(
            [
                sample_turns[int(doc)]["dia_id"]
                for doc, score in zip(documents, scores, strict=True)
                if score > 0
            ]
        )
    return rankings


def minilm_rankings(
    embedder, sample_turns: list[dict], texts: list[str], depth: int = FUSION_DEPTH
) -> list[list[str]]:
    """Dense retrieval with all-MiniLM-L6-v2 in this process (the local embedder, the same
    model and vectors as the service's ``local``): the turns by cosine similarity to each
    text, ``depth`` deep."""
    import numpy as np

    from memory.embedders import embed_all

    deadline = time.monotonic() + 3600
    corpus = np.array(
        embed_all(embedder, [turn["memory"] for turn in sample_turns], deadline=deadline)
    )
    queries = np.array(embed_all(embedder, texts, deadline=deadline))
    rankings = []
    for similarities in queries @ corpus.T:
        best = np.argsort(-similarities, kind="stable")[:depth]
        rankings.append([sample_turns[int(i)]["dia_id"] for i in best])
    return rankings


def rrf(*rankings: list[str], depth: int = DEPTH) -> list[str]:
    """Reciprocal rank fusion (k = 60, equal weights, ranks from 1), as the service fuses."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1 / (RRF_K + rank)
    return sorted(fused, key=lambda item: -fused[item])[:depth]


def variants() -> dict[str, dict | None]:
    """Name → the hybrid weights (``None``: the mode's default)."""
    named: dict[str, dict | None] = {mode: None for mode in MODES}
    for weight in SWEEP:
        named[f"hybrid_w{weight:g}"] = {"lexical": 1 - weight, "vector": weight}
    return named


def recall(ranking: list[str], evidence: set[str], k: int) -> float:
    return len(set(ranking[:k]) & evidence) / len(evidence)


def locomo_conversations() -> list[dict]:
    """Each LoCoMo dev conversation: its turns and its questions with evidence among them."""
    prepared = []
    for sample in json.loads(locomo.DATA.read_text()):
        sample_turns = turns(sample)
        asked, left_out = questions(sample, {turn["dia_id"] for turn in sample_turns})
        prepared.append(
            {
                "sample_id": sample["sample_id"],
                "turns": sample_turns,
                "asked": asked,
                "left_out": left_out,
            }
        )
    return prepared


def service_rankings(api, prepared: list[dict]) -> tuple[list[dict], dict[str, list]]:
    """Each conversation added to a service (one user each), then every question searched
    with each of ``variants()``: per conversation its figures, per variant the rankings of
    all questions in order."""
    conversations = []
    rankings: dict[str, list] = {name: [] for name in variants()}
    for conversation in prepared:
        user = f"recall-{conversation['sample_id']}"
        asked = conversation["asked"]
        info = index_conversation(api, user, conversation["turns"])
        info.update(
            sample_id=conversation["sample_id"],
            questions=len(asked),
            left_out=conversation["left_out"],
        )
        started = time.perf_counter()
        for name, weights in variants().items():
            mode = "hybrid" if name.startswith("hybrid") else name
            rankings[name] += [api_ranking(api, user, q["question"], mode, weights) for q in asked]
        info["searches_per_s"] = round(
            len(asked) * len(variants()) / (time.perf_counter() - started), 1
        )
        conversations.append(info)
    return conversations, rankings


def local_service_rankings(prepared: list[dict]) -> tuple[list[dict], dict[str, list]]:
    """``service_rankings`` on a second service started with ``CTXADMIN_EMBEDDER=local``
    (the embedder is a setting of the whole process), in its own ``var`` folder."""
    from bench.__main__ import bench_client, bench_service
    from ctxadmin import stack

    var = stack.var_dir() / "bench-memory-local"
    shutil.rmtree(var, ignore_errors=True)
    service = bench_service(var, extra_env={"CTXADMIN_EMBEDDER": "local"})
    try:
        api = bench_client(service, "bench-memory-local", "memory")
        return service_rankings(api, prepared)
    finally:
        _code, alive = service.stop()
        for process in alive:
            process.kill()


def default_fusion_weight(model: str | None) -> float | None:
    """The vector weight the service's hybrid search gives the embedder named ``model``."""
    from memory.embedders import HashingEmbedder, LocalEmbedder

    if model and model.startswith("hashing"):
        return HashingEmbedder.fusion_weight
    if model == LocalEmbedder.name:
        return LocalEmbedder.fusion_weight
    return None


def locomo_recall(api, *, local: bool = True) -> dict:
    """Evidence recall of the service behind ``api`` and of BM25; with ``local`` (and the
    ``local`` extra installed), also of dense MiniLM and BM25 + MiniLM RRF in this process
    and of a second service with the local embedder (rows ``local_<variant>``)."""
    prepared = locomo_conversations()
    asked = [q for conversation in prepared for q in conversation["asked"]]
    conversations, rankings = service_rankings(api, prepared)
    texts = [[q["question"] for q in conversation["asked"]] for conversation in prepared]
    rankings["bm25"] = [
        ranking
        for conversation, questions_ in zip(prepared, texts, strict=True)
        for ranking in bm25_rankings(conversation["turns"], questions_)
    ]
    local_info: dict = {}
    if local:
        from django.core.exceptions import ImproperlyConfigured

        from memory.embedders import LocalEmbedder

        try:
            embedder = LocalEmbedder()
        except ImproperlyConfigured as exc:
            local_info["skipped"] = str(exc)
        else:
            deep_bm25, dense = [], []
            for conversation, questions_ in zip(prepared, texts, strict=True):
                deep_bm25 += bm25_rankings(conversation["turns"], questions_, FUSION_DEPTH)
                dense += minilm_rankings(embedder, conversation["turns"], questions_)
            rankings["minilm"] = [ranking[:DEPTH] for ranking in dense]
            rankings["bm25_minilm_rrf"] = [
                rrf(lexical, vector) for lexical, vector in zip(deep_bm25, dense, strict=True)
            ]
            local_conversations, local_rankings = local_service_rankings(prepared)
            for name, found in local_rankings.items():
                rankings[f"local_{name}"] = found
            model = next(
                (c["embedding_model"] for c in local_conversations if c["embedding_model"]), None
            )
            local_info = {
                "conversations": local_conversations,
                "embedding_model": model,
                "default_vector_weight": default_fusion_weight(model),
            }
    table = {
        name: {
            group: {
                f"@{k}": round(
                    statistics.mean(
                        recall(ranking, q["evidence"], k)
                        for q, ranking in zip(asked, found, strict=True)
                        if q["group"] == group
                    ),
                    4,
                )
                for k in KS
            }
            for group in GROUPS
        }
        for name, found in rankings.items()
    }
    model = next((c["embedding_model"] for c in conversations if c["embedding_model"]), None)

    def at_least(name: str, other: str, group: str) -> bool:
        return all(table[name][group][f"@{k}"] >= table[other][group][f"@{k}"] for k in KS)

    checks = {}
    for group in GROUPS:
        checks[group] = {
            "lexical_ge_bm25": at_least("lexical", "bm25", group),
            "hybrid_ge_lexical": at_least("hybrid", "lexical", group),
            "passing_vector_weights": [
                w for w in SWEEP if at_least(f"hybrid_w{w:g}", "lexical", group)
            ],
        }
        if "local_hybrid" in table:
            checks[group].update(
                local_hybrid_ge_rrf=at_least("local_hybrid", "bm25_minilm_rrf", group),
                local_hybrid_ge_lexical=at_least("local_hybrid", "local_lexical", group),
                local_passing_vector_weights=[
                    w for w in SWEEP if at_least(f"local_hybrid_w{w:g}", "local_lexical", group)
                ],
                local_vector_weights_ge_rrf=[
                    w for w in SWEEP if at_least(f"local_hybrid_w{w:g}", "bm25_minilm_rrf", group)
                ],
            )
    return {
        "conversations": conversations,
        "questions": {group: sum(q["group"] == group for q in asked) for group in GROUPS},
        "embedding_model": model,
        "default_vector_weight": default_fusion_weight(model),
        "local": local_info or None,
        "recall": table,
        "checks": checks,
    }


# ----------------------------------------------------------------------------- scale


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
def _embedder():
    from memory.embedders import HashingEmbedder

    return HashingEmbedder(DIMENSION)


def vector_text(text: str) -> str:
    """As the service sends a vector (``memory.services.vector_text``)."""
    return "[" + ",".join(repr(float(x)) for x in _embedder().vector(text)) + "]"


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
                   to_tsvector(%s::regconfig, content), embedding::vector, %s, bytes,
                   now(), now()
              FROM bench_stage
            """,
            (app_id, TS_CONFIG, _embedder().name),
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
    from bench.__main__ import percentiles

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


def api_ef_search(entries: int) -> int:
    """The service's ef_search for limit 10 over a scope's own index of ``entries``
    (``memory.scope_index.ef_search`` with the default setting)."""
    return max(100, round(API_EF_SEARCH * math.sqrt(min(1.0, entries / 100_000))))


def _hnsw_top10(
    database_url: str,
    app_id: int,
    user: str,
    vectors: list[str],
    ef_search: int,
    *,
    force: bool = False,
) -> tuple[list[set], list[float], str]:
    """The service's vector query and settings (``memory.services._vector``: over the
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
                f"AND embedding_model = {sql.Literal(_embedder().name).as_string(conn)}"
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
    from bench.__main__ import percentiles

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
        from bench import langgraph_peer

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


# ----------------------------------------------------------------------------- section


def measure(
    service,
    api,
    *,
    big: int = 100_000,
    small: int = 10_000,
    others: int = 9,
    queries: int = 50,
    skip_locomo: bool = False,
    skip_scale: bool = False,
    skip_langgraph: bool = False,
) -> dict:
    """The memory search figures (the API key needs the ``memory`` scope)."""
    results: dict = {}
    if not skip_locomo:
        results["locomo"] = locomo_recall(api)
    if not skip_scale:
        results["scale"] = scale(
            service,
            api,
            big=big,
            small=small,
            others=others,
            queries=queries,
            langgraph=not skip_langgraph,
        )
    return results


LABELS = {
    "bm25": "BM25 (bm25s, outside the database)",
    "minilm": "MiniLM dense (cosine, outside the database)",
    "bm25_minilm_rrf": "BM25 + MiniLM, RRF k = 60 (outside the database)",
    "lexical": "lexical (full text, BM25 with the scope's statistics)",
    "vector": "vector (cosine), {model}",
    "hybrid": "hybrid (the embedder's default fusion), {model}",
    "local_vector": "vector (cosine), {local}",
    "local_hybrid": "hybrid (the embedder's default fusion), {local}",
}


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _recall_cells(table: dict, name: str, group: str) -> str:
    return " | ".join(f"{table[name][group][f'@{k}']:.3f}" for k in KS)


def _sweep_rows(table: dict, prefix: str, default: float | None, passing: list) -> list[str]:
    """One row per weight of ``SWEEP``: recall per group, then whether it passes each list
    of ``passing`` (``{group: [weights]}``)."""
    rows = []
    for weight in SWEEP:
        mark = " (default)" if default and weight == default else ""
        cells = " | ".join(
            _recall_cells(table, f"{prefix}hybrid_w{weight:g}", group)
            + "".join(f" | {_met(weight in weights[group])}" for weights in passing)
            for group in GROUPS
        )
        rows.append(f"| {weight:g}{mark} | {cells} |")
    return rows


def _locomo_report(results: dict) -> str:
    table, checks = results["recall"], results["checks"]
    default = results["default_vector_weight"]
    local = results.get("local") or {}
    has_local = "local_hybrid" in table
    names = {
        "model": f"`{results['embedding_model']}`",
        "local": f"`{local.get('embedding_model')}`",
    }
    rows = [
        f"| {LABELS[name].format(**names)} | "
        + " | ".join(_recall_cells(table, name, group) for group in GROUPS)
        + " |"
        for name in LABELS
        if name in table
    ]
    sweep = _sweep_rows(
        table, "", default, [{g: checks[g]["passing_vector_weights"] for g in GROUPS}]
    )
    count = results["questions"]
    conversations = results["conversations"]
    refused = sum(len(c["refused"]) for c in conversations)
    adds = statistics.median(c["adds_per_s"] for c in conversations)
    searches = statistics.median(c["searches_per_s"] for c in conversations)
    targets = []
    for group in GROUPS:
        label = "categories 1-4" if group == "1-4" else f"category {group}"
        found = checks[group]
        targets.append(
            f"| {label}: lexical >= BM25 at every k | {_met(found['lexical_ge_bm25'])} |"
        )
        targets.append(
            f"| {label}: hybrid (default fusion) >= lexical at every k | "
            f"{_met(found['hybrid_ge_lexical'])} |"
        )
        targets.append(
            f"| {label}: vector weights whose hybrid >= lexical at every k | "
            f"{', '.join(f'{w:g}' for w in found['passing_vector_weights']) or 'none'} |"
        )
        if has_local:
            targets.append(
                f"| {label}: hybrid with local (default fusion) >= BM25 + MiniLM RRF at "
                f"every k | {_met(found['local_hybrid_ge_rrf'])} |"
            )
            targets.append(
                f"| {label}: hybrid with local (default fusion) >= lexical at every k | "
                f"{_met(found['local_hybrid_ge_lexical'])} |"
            )
            for key, other in (
                ("local_passing_vector_weights", "lexical"),
                ("local_vector_weights_ge_rrf", "BM25 + MiniLM RRF"),
            ):
                targets.append(
                    f"| {label}: vector weights whose hybrid with local >= {other} at every k | "
                    f"{', '.join(f'{w:g}' for w in found[key]) or 'none'} |"
                )
    default_text = "the embedder's own" if default is None else f"{default:g}"
    if default == 0:
        default_text += " (its vector ranking only fills what the lexical ranking leaves empty)"
    if has_local:
        local_weight = local["default_vector_weight"]
        weight_text = "the embedder's own" if local_weight is None else f"{local_weight:g}"
        local_conversations = local["conversations"]
        local_adds = statistics.median(c["adds_per_s"] for c in local_conversations)
        local_searches = statistics.median(c["searches_per_s"] for c in local_conversations)
        local_refused = sum(len(c["refused"]) for c in local_conversations)
        local_text = f"""The same run against a second service started with
`CTXADMIN_EMBEDDER=local` (its own database): embedder `{local["embedding_model"]}`,
all-MiniLM-L6-v2 in the service's processes, fused by default by weighted score fusion
with vector weight {weight_text} ({local_adds} adds/s, {local_searches} searches/s;
{local_refused} turns refused). Its lexical search is the same as the first service's. Two
baselines use the same model in this process: dense MiniLM (the question's cosine
similarity with every turn of its conversation) and BM25 + MiniLM, reciprocal rank fusion
(k = {RRF_K}, equal weights) of the top {FUSION_DEPTH} of each."""
        passing = [
            {group: checks[group][key] for group in GROUPS}
            for key in ("local_passing_vector_weights", "local_vector_weights_ge_rrf")
        ]
        head = ["w"] + [
            f"{group} {column}"
            for group in GROUPS
            for column in (*(f"@{k}" for k in KS), ">= lexical", ">= RRF")
        ]
        local_sweep = f"""
Hybrid with the local embedder and `weights` `{{"lexical": 1 - w, "vector": w}}` (weighted
score fusion; ">= lexical",
">= RRF": recall at every k at least lexical's, at least BM25 + MiniLM RRF's):

| {" | ".join(head)} |
|{" --- |" * len(head)}
{chr(10).join(_sweep_rows(table, "local_", local_weight, passing))}
"""
    else:
        reason = local.get("skipped", "not run").rstrip(".")
        local_text = f"The local embedder's rows and the MiniLM baselines are skipped: {reason}."
        local_sweep = ""
    return f"""### LoCoMo evidence recall

Each turn of the three LoCoMo dev conversations is one memory of one user, "Speaker: text"
(added through the API, one request each, embedded synchronously: {adds} adds/s, median of
the conversations; {refused} turns refused). Every question with evidence
({count["1-4"]} of categories 1-4, {count["5"]} of category 5) is searched with each mode
(limit {DEPTH}); evidence recall@k is the share of its evidence turns among the top k,
averaged over the questions
({searches} searches/s). Embedder: `{results["embedding_model"]}`, whose default vector
weight in hybrid fusion is {default_text}. BM25 runs on the same turns in this process (`bm25s`:
Lucene scoring, k1 = 1.5, b = 0.75, its English stopwords and the Snowball stemmer; turns
scoring 0 are not retrieved).

{local_text}

| search | 1-4 @5 | 1-4 @10 | 1-4 @25 | 5 @5 | 5 @10 | 5 @25 |
| --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}

Hybrid with `weights` `{{"lexical": 1 - w, "vector": w}}` (weighted score fusion), embedder
`{results["embedding_model"]}` (w = 0 is lexical alone; "passes": recall at every k at least
lexical's):

| w | 1-4 @5 | 1-4 @10 | 1-4 @25 | 1-4 passes | 5 @5 | 5 @10 | 5 @25 | 5 passes |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(sweep)}
{local_sweep}
| target | met |
| --- | --- |
{chr(10).join(targets)}
"""


def _scale_report(results: dict) -> str:
    rows, loads, recalls, efs = [], [], [], []
    largest = max(results["phases"], key=lambda phase: phase["scope_rows"])
    for phase in results["phases"]:
        size = f"{phase['scope_rows']:,}"
        for mode, figures in phase["latency_ms"].items():
            server = figures.get("server") or {"p50": "—", "p95": "—"}
            rows.append(
                f"| {size} | {mode} | {figures['p50']} | {figures['p95']} | "
                f"{server['p50']} | {server['p95']} | {figures['mean_hits']} |"
            )
        load = phase["load"]
        loads.append(
            f"| {load['rows']:,} | {load['table_rows']:,} | {load['generate_embed_copy_s']} | "
            f"{load['insert_s']} | {load['hnsw_build_s']} | {load['analyze_s']} | "
            f"{load['total_s']} | {load['scope_indexes']} | {load['scope_index_build_s']} | "
            f"{load['largest_scope_index_build_s']} |"
        )
        hnsw = phase["hnsw"]
        for kind, label in (("generated", "generated"), ("from_entries", "words of an entry")):
            figures = hnsw[kind]
            similarity = " / ".join(f"{v:.3f}" for v in figures["exact_similarity"].values())
            recalls.append(
                f"| {size} | {label} | {figures['recall_at_10']:.3f} (lowest {figures['min']}) "
                f"| {figures['nearest_found']:.2f} | {figures['similarity_ratio']:.3f} | "
                f"{similarity} | {_met(figures['recall_at_10'] >= 0.95)} |"
            )
        for point in hnsw["ef_search_sweep"]:
            forced = point.get("forced_hnsw")
            forced_cell = (
                "= | ="
                if forced is None
                else f"{forced['recall_at_10']:.3f} | {forced['sql_ms']['p50']}"
            )
            efs.append(
                f"| {size} | {point['ef_search']} | {point['plan']} | "
                f"{point['recall_at_10']:.3f} | "
                f"{point['sql_ms']['p50']} | {point['sql_ms']['p95']} | {forced_cell} |"
            )
    first = results["phases"][0]
    api_efs = " and ".join(
        f"{api_ef_search(phase['scope_rows'])} at {phase['scope_rows']:,} entries"
        for phase in results["phases"]
    )
    return f"""### Search latency at scale

One user's scope, beside {first["other_scopes"]} other scopes of
{first["other_scope_rows"]:,} entries each, loaded directly with `COPY` as the service writes
entries (`to_tsvector('{TS_CONFIG}', content)`, the hashing embedding computed in Python),
with the shared HNSW index (m = 16, ef_construction = 64) and the loaded scopes' own indexes
dropped during each load and built again after (every scope here holds at least 10,000
entries, so each has its own index: `memory/scope_index.py`, built by `manage.py
scope_indexes` as the beat's maintainer would). Text: 8-60 words drawn from a Zipf
distribution over LoCoMo's vocabulary and a long tail of made-up words ({VOCABULARY:,}
words); queries: 3-8 words of the same. Latency is the client's, through the API (limit 10,
{results["queries"]} distinct queries per mode, after 3 warm-up calls), and the service's
own time for the same searches ("server": the `ms` of its `memory_search` log lines, from
embedding the query to the hits' rows).

| scope entries | mode | p50 ms | p95 ms | server p50 ms | server p95 ms | mean hits |
| --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(rows)}

| target | met |
| --- | --- |
| hybrid p95 through the API <= {HYBRID_P95_TARGET_MS} ms at {largest["scope_rows"]:,} entries \
({largest["latency_ms"]["hybrid"]["p95"]} ms) | \
{_met(largest["latency_ms"]["hybrid"]["p95"] <= HYBRID_P95_TARGET_MS)} |

Loads (seconds):

{
        _table_head(
            "rows added",
            "rows after",
            "text, embedding, COPY",
            "tsvector, write",
            "shared HNSW build",
            "VACUUM",
            "total",
            "scope indexes built",
            "their build time",
            "the largest's",
        )
    }
{chr(10).join(loads)}

Each load holds the maintainer's lock (as the beat's maintainer holds it while it builds),
so no scope's index is built from a scope half loaded, and the scope indexes are built
after the load, by `manage.py scope_indexes --wait`.

HNSW recall@10 of the API's vector search against the exact top 10 of the scope (index scans
off; target >= 0.95), for {results["hnsw_queries"]} generated queries and for six consecutive
words of as many of the scope's entries; with the share of queries whose nearest entry is
among the 10, the mean cosine similarity of the 10 as a share of the exact 10's, and the exact
similarity at ranks 1 / 10 / 11 / {EXACT_DEPTH} (how far apart the neighbours are):

| scope entries | queries | recall@10 | nearest found | similarity ratio | exact similarity | met |
| --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(recalls)}

The same vector query in SQL, as the service sends it (over the scope's own index: the
scope as literals, the distance in `halfvec`), with its settings (iterative scan, relaxed
order, up to {MAX_SCAN_TUPLES:,} tuples) but other `hnsw.ef_search` values (the API's for
limit 10: {api_efs}); the plan PostgreSQL chose ("own index", "shared index", or
"exact": the scope's rows sorted by distance), recall@10 against the exact top 10, and the
statement's time; where the planner chose the exact plan, also an index forced
(`enable_sort = off`; "=": the plan was an index already):

| scope entries | ef_search | plan | recall@10 | p50 ms | p95 ms | forced: recall@10 | p50 ms |
| --- | --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(efs)}
{_langgraph_report(results)}"""


def _table_head(*names: str) -> str:
    return f"| {' | '.join(names)} |\n|{' --- |' * len(names)}"


def _langgraph_report(results: dict) -> str:
    """LangGraph's PostgresStore beside ctxadmin's vector search, phase by phase."""
    notes = results.get("langgraph")
    if not notes:
        return ""
    rows, kinds, loads, plans, targets, sweeps = [], [], [], [], [], []
    for phase in results["phases"]:
        size = f"{phase['scope_rows']:,}"
        peer = phase["langgraph"]
        ours, theirs = phase["latency_ms"]["vector"].get("server"), peer["latency_ms"]
        ours_recall = phase["hnsw"]["generated"]["recall_at_10"]
        theirs_recall = peer["recall"]["generated"]["recall_at_10"]
        if ours:
            ratio = " / ".join(f"{theirs[p] / ours[p]:.2f}x" for p in ("p50", "p95"))
            faster = _met(ours["p50"] <= theirs["p50"] and ours["p95"] <= theirs["p95"])
            ours_cell = f"{ours['p50']} / {ours['p95']}"
        else:
            ratio, faster, ours_cell = "—", "—", "—"
        rows.append(
            f"| {size} | {ours_cell} | {ours_recall:.3f} | {theirs['p50']} / {theirs['p95']} | "
            f"{theirs_recall:.3f} | {theirs['mean_hits']} | {ratio} |"
        )
        for kind, label in (("generated", "generated"), ("from_entries", "words of an entry")):
            mine, other = phase["hnsw"][kind], peer["recall"][kind]
            kinds.append(
                f"| {size} | {label} | {mine['recall_at_10']:.3f} | {mine['nearest_found']:.2f} | "
                f"{other['recall_at_10']:.3f} (lowest {other['min']}) | "
                f"{other['nearest_found']:.2f} | {other['mean_hits']} |"
            )
        for point in peer.get("ef_sweep", []):
            sweep_recall = point["recall"]
            sweeps.append(
                f"| {size} | {point['ef_search']} | {sweep_recall['recall_at_10']:.3f} | "
                f"{sweep_recall['mean_hits']} | {point['latency_ms']['p50']} / "
                f"{point['latency_ms']['p95']} |"
            )
        load = peer["load"]
        loads.append(
            f"| {load['rows']:,} | {load['table_rows']:,} | {load['put_s']} | "
            f"{load['puts_per_s']} | {load['index_build_s']} | {load['analyze_s']} | "
            f"{load['total_s']} | {load['embedding_max_abs_diff']:g} |"
        )
        plan = peer["plan"]
        scan = "no HNSW index scan"
        if plan["uses_hnsw"]:
            scan = f"the HNSW index scan gave {plan['index_rows']:g} candidates"
            if plan["namespace_rows"] is not None:
                scan += f", {plan['namespace_rows']:g} of them in the namespace"
        plans.append(
            f"- {size}: {scan} (`hnsw.ef_search` = {plan['settings']['hnsw.ef_search']}, "
            f"`hnsw.iterative_scan` = {plan['settings']['hnsw.iterative_scan']}):\n\n"
            + "\n".join(f"      {line}" for line in plan["search_plan"])
        )
        targets.append(
            f"| {size}: ctxadmin vector search (server-side) at least as fast as LangGraph's "
            f"(in-process), p50 and p95 | {faster} |"
        )
        targets.append(
            f"| {size}: ctxadmin recall@10 higher than LangGraph's | "
            f"{_met(ours_recall > theirs_recall)} |"
        )
    first = results["phases"][0]
    compared_head = _table_head(
        "scope entries",
        "ctxadmin vector, server-side p50 / p95 ms",
        "ctxadmin recall@10",
        "LangGraph in-process p50 / p95 ms",
        "LangGraph recall@10",
        "LangGraph mean hits",
        "ratio LangGraph / ctxadmin (p50 / p95)",
    )
    sweep_head = _table_head(
        "scope entries",
        "ef_search",
        "LangGraph recall@10",
        "LangGraph mean hits",
        "LangGraph in-process p50 / p95 ms",
    )
    kinds_head = _table_head(
        "scope entries",
        "queries",
        "ctxadmin recall@10",
        "ctxadmin nearest found",
        "LangGraph recall@10",
        "LangGraph nearest found",
        "LangGraph mean hits",
    )
    return f"""
### LangGraph's PostgresStore, the same vector searches

LangGraph's long-term memory store (`langgraph-checkpoint-postgres`
{notes["langgraph_checkpoint_postgres"]}, `langgraph-checkpoint` {notes["langgraph_checkpoint"]})
on the same PostgreSQL server, in a database of its own, holding the same entries: one
namespace `("app", user)` per scope ({first["other_scopes"]} others of
{first["other_scope_rows"]:,}), key the entry's id, value `{{"content": text}}`;
`PostgresStore.from_conn_string(url, index={{"dims": {DIMENSION}, "embed": <ctxadmin's hashing
embedder>, "fields": ["content"]}})`, so its default index: HNSW (m = 16, ef_construction =
64), cosine. Entries went in through the store's own `batch` of `PutOp` (which embeds them),
with its index dropped meanwhile and created again after by its own migration, then both of
its tables analyzed. Its searches are `store.search(("app", user), query=q, limit=10)`,
timed in this process (embedding the query, the SQL round trip, decoding the items) for the
same {results["queries"]} queries as ctxadmin's, after 3 warm-up calls; ctxadmin's time is the
service's own for its vector searches above (server-side). Recall@10 is against the exact top
10 of the scope or namespace (index scans off), for the same {results["hnsw_queries"]}
generated queries on both sides.

{compared_head}
{chr(10).join(rows)}

| target | met |
| --- | --- |
{chr(10).join(targets)}

LangGraph's store with larger HNSW candidate lists (`SET hnsw.ef_search` on its connection,
as the store has no setting of its own for it; pgvector's largest is 1,000): its recall@10
for the same generated queries and the hits it returned, and its in-process time for the
same timed queries. Beside ctxadmin's vector search above (server-side, and its SQL at each
`ef_search` in the table before), this is what the store would take to come near the same
recall.

{sweep_head}
{chr(10).join(sweeps)}

Recall@10 by kind of query, with the share of queries whose nearest entry is among the hits,
and the hits LangGraph returned (asked for 10):

{kinds_head}
{chr(10).join(kinds)}

LangGraph's loads (seconds; the last column: the largest difference between a vector it wrote
and ctxadmin's for the same entry, over 200 entries, 0 when the embedding is the same):

| rows added | items after | put | puts/s | HNSW build | ANALYZE | total | vector difference |
| --- | --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(loads)}

The plan PostgreSQL chose for the store's search statement (built by the store; `EXPLAIN
ANALYZE` of the first timed query; its main nodes, without the TTL refresh that follows):

{chr(10).join(plans)}
"""


def report(results: dict) -> str:
    """The section of BENCHMARKS.md."""
    parts = ["## Memory search\n"]
    if "locomo" in results:
        parts.append(_locomo_report(results["locomo"]))
    if "scale" in results:
        parts.append(_scale_report(results["scale"]))
    return "\n".join(parts)


def main() -> None:
    from bench.__main__ import bench_client, bench_service
    from ctxadmin import stack

    parser = argparse.ArgumentParser(description="ctxadmin memory search benchmark")
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--others", type=int, default=9)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--skip-locomo", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-langgraph", action="store_true")
    args = parser.parse_args()
    if not 0 < args.small <= args.big:
        parser.error("--small must be from 1 to --big")

    var = stack.var_dir() / "bench-memory"
    shutil.rmtree(var, ignore_errors=True)  # a fresh database: sizes are exact
    service = bench_service(var)
    try:
        api = bench_client(service, "bench-memory", "memory")
        results = measure(
            service,
            api,
            big=args.big,
            small=args.small,
            others=args.others,
            queries=args.queries,
            skip_locomo=args.skip_locomo,
            skip_scale=args.skip_scale,
            skip_langgraph=args.skip_langgraph,
        )
    finally:
        _code, alive = service.stop()
        for process in alive:
            process.kill()
    print(json.dumps(results, indent=2))
    print(report(results))


if __name__ == "__main__":
    main()

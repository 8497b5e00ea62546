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
import json
import shutil

from bench.memory_search.recall import locomo_recall
from bench.memory_search.report import report
from bench.memory_search.scale import scale
from bench.service import bench_client, bench_service, stop_service
from ctxadmin import stack


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


def main() -> None:
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
        stop_service(service)
    print(json.dumps(results, indent=2))
    print(report(results))


if __name__ == "__main__":
    main()

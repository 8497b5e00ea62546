"""LangGraph's backends through the Python client, beside LangGraph's own Postgres backends.

``CtxAdminSaver`` and ``CtxAdminStore`` (``ctxadmin_client.langgraph``, over HTTP to the
service) and LangGraph's ``PostgresSaver`` and ``PostgresStore`` (psycopg, in process, one
connection each, as their documentation shows them) run the same calls on the same
PostgreSQL server, the peers in a fresh database of their own (created as the memory
benchmark's peer creates its own, ``bench.service.fresh_database``), the store with
the same ``index`` (ctxadmin's hashing embedder, 384 dimensions, the ``text`` field):

* saver: ``put`` of a checkpoint whose message channel grows by one message of about 300
  bytes and whose step counter changes (the two new blobs travel), ``put_writes`` of two
  writes, ``get_tuple`` of the latest checkpoint, ``list`` of the thread's newest 10;
* store: ``put`` of a ``{"text"}`` item, ``get``, ``search`` of a namespace with a value
  filter, and ``search`` with a query (limit 10);
* concurrency: ``CONCURRENT`` ``aput``s of distinct items started at once
  (``asyncio.gather``) and the same puts as one ``abatch``, wall seconds until all have
  landed, beside LangGraph's ``InMemoryStore`` and ``AsyncPostgresStore`` (which gathers
  concurrent calls into batches of its own).

Each call is timed alone, ``REPS`` times after a warm-up; p50 milliseconds, and their ratio
(ctxadmin / LangGraph's Postgres backend): the adapter's cost per call, HTTP and the
service's own checks included.

``make bench`` runs it against its service; alone, ``python -m bench.langgraph_client_bench``
starts a service of its own (in ``var/bench-langgraph``) and rewrites the "LangGraph
backends through the client" section of ``bench/BENCHMARKS.md``.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.alone import run_alone
from bench.service import bench_client, fresh_database
from memory.embedders import HashingEmbedder

SECTION = "## LangGraph backends through the client"
PEER_DB = "langgraph_client_bench"
REPS = 100
#: Puts started at once in the concurrency rows.
CONCURRENT = 10_000
DIMENSION = 384
MESSAGE = "the agent checked the booking and the seat map for the return flight " * 4


def _p50(samples: list[float]) -> float:
    return round(statistics.median(samples), 2)


def _timed(call: Callable[[int], Any], reps: int = REPS) -> float:
    call(-1)  # warm-up
    samples = []
    for index in range(reps):
        started = time.perf_counter()
        call(index)
        samples.append((time.perf_counter() - started) * 1000)
    return _p50(samples)


def _saver_workload(saver) -> dict[str, float]:
    # langgraph: the bench extra, imported only when this benchmark runs.
    from langgraph.checkpoint.base import empty_checkpoint

    thread = f"bench-{uuid.uuid4().hex[:8]}"
    config: dict = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    state = {"messages": [], "step": 0}
    versions: dict[str, Any] = {}

    def put(index: int) -> None:
        nonlocal config
        state["messages"] = [*state["messages"], f"{index}: {MESSAGE}"][-20:]
        state["step"] = index
        checkpoint = empty_checkpoint()
        new = {}
        for channel in ("messages", "step"):
            versions[channel] = saver.get_next_version(versions.get(channel), None)
            new[channel] = versions[channel]
        checkpoint["channel_values"] = dict(state)
        checkpoint["channel_versions"] = dict(versions)
        config = saver.put(config, checkpoint, {"source": "loop", "step": index}, new)

    def put_writes(index: int) -> None:
        saver.put_writes(config, [("messages", f"write {index}"), ("step", index)], f"task-{index}")

    latest = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    thread_config = {"configurable": {"thread_id": thread}}
    return {
        "put_ms": _timed(put),
        "put_writes_ms": _timed(put_writes),
        "get_tuple_ms": _timed(lambda _i: saver.get_tuple(latest)),
        "list_ms": _timed(lambda _i: list(saver.list(thread_config, limit=10))),
    }


def _store_workload(store) -> dict[str, float]:
    user = f"bench-{uuid.uuid4().hex[:8]}"
    space = (user, "memories")

    def put(index: int) -> None:
        store.put(space, f"k{index % 50}", {"text": f"note {index}: {MESSAGE}", "n": index})

    return {
        "put_ms": _timed(put),
        "get_ms": _timed(lambda i: store.get(space, f"k{abs(i) % 50}")),
        "search_filter_ms": _timed(
            lambda _i: store.search(space, filter={"n": {"$gte": 50}}, limit=10)
        ),
        "search_query_ms": _timed(
            lambda _i: store.search(space, query="return flight seat map", limit=10)
        ),
    }


def _concurrent_puts(store, *, batched: bool) -> dict[str, float]:
    """Wall seconds of ``CONCURRENT`` puts of distinct items started at once (or as one
    ``abatch``), and how many items are there afterwards."""
    from langgraph.store.base import PutOp

    user = f"bench-{uuid.uuid4().hex[:8]}"
    space = (user, "burst")

    async def run() -> float:
        ops = [PutOp(space, f"k{i}", {"text": f"note {i}", "n": i}) for i in range(CONCURRENT)]
        started = time.perf_counter()
        if batched:
            await store.abatch(ops)
        else:
            await asyncio.gather(*(store.aput(op.namespace, op.key, op.value) for op in ops))
        seconds = time.perf_counter() - started
        landed = await store.asearch(space, limit=CONCURRENT + 1)
        assert len(landed) == CONCURRENT, len(landed)
        return round(seconds, 2)

    return {"seconds": asyncio.run(run())}


def _concurrency(service, api, url: str, index: dict) -> dict[str, Any]:
    from ctxadmin_client import AsyncClient
    from ctxadmin_client.langgraph import CtxAdminStore
    from langgraph.store.base import PutOp
    from langgraph.store.memory import InMemoryStore
    from langgraph.store.postgres.aio import AsyncPostgresStore

    def ctxadmin(batched: bool) -> dict[str, float]:
        client = AsyncClient(service.base_url, api.key)
        try:
            return _concurrent_puts(
                CtxAdminStore(app=api.app, async_client=client), batched=batched
            )
        finally:
            client.close()

    async def postgres() -> float:
        async with AsyncPostgresStore.from_conn_string(url, index=index) as store:
            await store.setup()
            user = f"bench-{uuid.uuid4().hex[:8]}"
            ops = [
                PutOp((user, "burst"), f"k{i}", {"text": f"note {i}"}) for i in range(CONCURRENT)
            ]
            started = time.perf_counter()
            await asyncio.gather(*(store.aput(op.namespace, op.key, op.value) for op in ops))
            seconds = time.perf_counter() - started
            landed = await store.asearch((user, "burst"), limit=CONCURRENT + 1)
            assert len(landed) == CONCURRENT, len(landed)
            return round(seconds, 2)

    return {
        "ctxadmin_aput": ctxadmin(False)["seconds"],
        "ctxadmin_abatch": ctxadmin(True)["seconds"],
        "memory_aput": _concurrent_puts(InMemoryStore(), batched=False)["seconds"],
        "postgres_aput": asyncio.run(postgres()),
    }


def measure(service) -> dict[str, Any]:
    """Run against a started bench service (its own app and key)."""
    # langgraph: the bench extra, imported only when this benchmark runs.
    from ctxadmin_client.langgraph import CtxAdminSaver, CtxAdminStore
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    api = bench_client(service, "langgraph", "sessions", "memory")
    embedder = HashingEmbedder(DIMENSION)

    def embed(texts: list[str]) -> list[list[float]]:
        return [embedder.vector(text) for text in texts]

    results: dict[str, Any] = {}
    with CtxAdminSaver(service.base_url, api.key, app=api.app) as saver:
        results["saver"] = _saver_workload(saver)
    with CtxAdminStore(service.base_url, api.key, app=api.app) as store:
        results["store"] = _store_workload(store)
    url = fresh_database(service.database_url, PEER_DB)
    with PostgresSaver.from_conn_string(url) as peer_saver:
        peer_saver.setup()
        results["peer_saver"] = _saver_workload(peer_saver)
    index = {"dims": DIMENSION, "embed": embed, "fields": ["text"]}
    with PostgresStore.from_conn_string(url, index=index) as peer_store:
        peer_store.setup()
        results["peer_store"] = _store_workload(peer_store)
    results["concurrency"] = _concurrency(service, api, url, index)
    return results


SAVER_ROWS = (
    ("`put` (two new blobs)", "put_ms"),
    ("`put_writes` (two writes)", "put_writes_ms"),
    ("`get_tuple` (latest)", "get_tuple_ms"),
    ("`list` (newest 10)", "list_ms"),
)
STORE_ROWS = (
    ("`put`", "put_ms"),
    ("`get`", "get_ms"),
    ("`search`, value filter", "search_filter_ms"),
    ("`search`, query", "search_query_ms"),
)


def _rows(ours: dict[str, float], peer: dict[str, float], rows) -> str:
    return "\n".join(
        f"| {label} | {ours[key]} | {peer[key]} | {ours[key] / peer[key]:.2f} |"
        for label, key in rows
    )


def report(results: dict[str, Any]) -> str:
    return f"""{SECTION}

`ctxadmin_client.langgraph`'s `CtxAdminSaver` and `CtxAdminStore` (HTTP to the service) beside
LangGraph's `PostgresSaver` and `PostgresStore` (psycopg in process, one connection) on the
same PostgreSQL server, the same calls one at a time, p50 ms of {REPS}. Ratio = ctxadmin /
LangGraph (above 1: the adapter costs more per call).

| saver call | CtxAdminSaver | PostgresSaver | ratio |
| --- | --- | --- | --- |
{_rows(results["saver"], results["peer_saver"], SAVER_ROWS)}

| store call | CtxAdminStore | PostgresStore | ratio |
| --- | --- | --- | --- |
{_rows(results["store"], results["peer_store"], STORE_ROWS)}

{CONCURRENT:,} `aput`s of distinct items started at once (`asyncio.gather`), wall seconds until
every one has landed (each store then finds all {CONCURRENT:,}). `CtxAdminStore` keeps at most
the `AsyncClient`'s `max_in_flight` (32) requests in flight; as one `abatch`, its puts travel
100 to a request. `AsyncPostgresStore` gathers concurrent calls into batches of its own.

| {CONCURRENT:,} concurrent puts | seconds |
| --- | --- |
| `CtxAdminStore`, `aput` each | {results["concurrency"]["ctxadmin_aput"]} |
| `CtxAdminStore`, one `abatch` | {results["concurrency"]["ctxadmin_abatch"]} |
| `InMemoryStore`, `aput` each | {results["concurrency"]["memory_aput"]} |
| `AsyncPostgresStore`, `aput` each | {results["concurrency"]["postgres_aput"]} |
"""


def main() -> None:
    run_alone(
        "langgraph_client_bench",
        "bench-langgraph",
        SECTION,
        measure,
        report,
        "\n\n`ctxadmin_client",
    )


if __name__ == "__main__":
    main()

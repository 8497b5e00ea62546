"""Many concurrent calls of ``CtxAdminStore``: the ``AsyncClient`` keeps at most
``max_in_flight`` requests in flight on a loop and every call lands; a batch's puts of one
user travel together, up to 100 a request, and leave what LangGraph's ``InMemoryStore``
leaves. The requests are counted by an httpx transport in front of the real one."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import httpx
import pytest
from ctxadmin_client import AsyncClient, Client, ValidationError
from ctxadmin_client.langgraph import CtxAdminStore
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore


class Counted(httpx.AsyncBaseTransport):
    """httpx's own transport, with the requests in flight and sent counted."""

    def __init__(self) -> None:
        self._real = httpx.AsyncHTTPTransport()
        self.now = self.peak = 0
        self.sent: Counter[tuple[str, str]] = Counter()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.now += 1
        self.peak = max(self.peak, self.now)
        self.sent[(request.method, request.url.path.rsplit("/", 1)[-1])] += 1
        try:
            response = await self._real.handle_async_request(request)
            await response.aread()
            return response
        finally:
            self.now -= 1

    async def aclose(self) -> None:
        await self._real.aclose()


class CountedSync(httpx.BaseTransport):
    def __init__(self) -> None:
        self._real = httpx.HTTPTransport()
        self.sent: Counter[tuple[str, str]] = Counter()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent[(request.method, request.url.path.rsplit("/", 1)[-1])] += 1
        return self._real.handle_request(request)

    def close(self) -> None:
        self._real.close()


def stored(app, user: str) -> dict[str, str]:
    with Client(app.base_url, app.key) as client:
        return {m["metadata"]["lg.key"]: m["content"] for m in client.list_memories(app.name, user)}


def test_concurrent_aputs_stay_within_the_bound_and_all_land(app):
    user = f"u-{uuid.uuid4().hex[:12]}"
    counted = Counted()

    async def run() -> None:
        client = AsyncClient(app.base_url, app.key, transport=counted, max_in_flight=6)
        async with CtxAdminStore(app=app.name, async_client=client) as store:
            await asyncio.gather(*(store.aput((user, "n"), f"k{i}", {"i": i}) for i in range(600)))
            items = await store.asearch((user,), limit=1000)
        await client.aclose()
        assert sorted(item.value["i"] for item in items) == list(range(600))

    asyncio.run(run())
    assert counted.peak == 6  # the bound, reached and never passed
    assert counted.sent[("POST", "memories")] == 600
    assert len(stored(app, user)) == 600


def test_the_bound_is_per_loop_and_checked(app):
    with pytest.raises(ValueError, match="max_in_flight"):
        AsyncClient(app.base_url, app.key, max_in_flight=0)
    with pytest.raises(TypeError, match="max_in_flight"):
        AsyncClient(app.base_url, app.key, max_in_flight=2.5)
    counted = Counted()
    client = AsyncClient(app.base_url, app.key, transport=counted, max_in_flight=3)
    user = f"u-{uuid.uuid4().hex[:12]}"

    async def burst(start: int) -> None:
        store = CtxAdminStore(app=app.name, async_client=client)
        await asyncio.gather(*(store.aput((user,), f"k{start + i}", {"v": i}) for i in range(30)))

    asyncio.run(burst(0))
    asyncio.run(burst(30))  # a second loop: places of its own
    assert counted.peak == 3
    assert len(stored(app, user)) == 60
    client.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_batchs_puts_travel_together_and_leave_what_the_in_memory_store_leaves(app, mode):
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    ops = [PutOp((alice, "n"), f"k{i}", {"i": i}) for i in range(230)]
    ops += [PutOp((alice, "n"), "k3", {"i": "again"}), PutOp((bob,), "only", {"v": 1})]
    ops += [PutOp(("a%b",), "x", {"v": 2}), PutOp((alice, "n"), "k4", None)]
    reference = InMemoryStore()
    reference.batch(ops)
    if mode == "sync":
        counted = CountedSync()
        with CtxAdminStore(
            app=app.name, client=Client(app.base_url, app.key, transport=counted)
        ) as store:
            store.batch(ops)
            items = store.search((), limit=1000)
    else:
        counted = Counted()

        async def run():
            client = AsyncClient(app.base_url, app.key, transport=counted)
            async with CtxAdminStore(app=app.name, async_client=client) as store:
                await store.abatch(ops)
                found = await store.asearch((), limit=1000)
            await client.aclose()
            return found

        items = asyncio.run(run())
    # alice's 229 values in three requests (100, 100, 29), bob's and the default user's one.
    assert counted.sent[("POST", "batch")] == 3
    assert counted.sent[("POST", "memories")] == 2
    want = {(i.namespace, i.key, str(i.value)) for i in reference.search((), limit=1000)}
    mine = {(i.namespace, i.key, str(i.value)) for i in items}
    assert {m for m in mine if m[0][0] in (alice, bob, "a%b")} == want


def test_a_batch_request_lands_whole_or_not_at_all(app):
    user = f"u-{uuid.uuid4().hex[:12]}"
    ops = [PutOp((user,), f"k{i}", {"i": i}) for i in range(5)]
    ops.append(PutOp((user,), "bad", {"note": "my api_key=sk-live-abcdefghijklmnopqrstuvwx"}))
    with CtxAdminStore(app.base_url, app.key, app=app.name) as store:
        with pytest.raises(ValidationError) as refused:
            store.batch(ops)
        assert refused.value.code == "sensitive_memory_content"
        assert refused.value.details["index"] == 5
        assert store.search((user,)) == []
        store.batch(ops[:5])
        assert len(store.search((user,))) == 5

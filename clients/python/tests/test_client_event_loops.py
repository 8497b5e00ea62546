"""One ``AsyncClient`` on any event loop and in any thread: each loop gets its own HTTP
connections, closed as that loop ends (or when the client is closed), and a loop that is
gone leaves nothing behind."""

from __future__ import annotations

import asyncio
import gc
import threading
import uuid
import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from ctxadmin_client import AsyncClient


def connections_to(base_url: str) -> int:
    """This process's open TCP connections to the server."""
    port = int(base_url.rsplit(":", 1)[1])
    return sum(
        1
        for conn in psutil.Process().net_connections(kind="tcp")
        if conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_ESTABLISHED
    )


def test_one_client_serves_consecutive_asyncio_runs(app, user):
    client = AsyncClient(app.base_url, app.key)
    sid = f"s-{uuid.uuid4().hex[:8]}"

    async def create() -> str:
        return (await client.create_session(app.name, user, session_id=sid))["session_id"]

    async def read() -> str:
        return (await client.get_session(app.name, user, sid))["session_id"]

    assert asyncio.run(create()) == sid
    assert asyncio.run(read()) == sid
    assert asyncio.run(read()) == sid
    client.close()


def test_a_loop_that_ends_closes_its_connections(app, user):
    client = AsyncClient(app.base_url, app.key)
    loops: list[weakref.ref] = []

    async def listed() -> list:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        return [s async for s in client.list_sessions(app.name, user_id=user)]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert asyncio.run(listed()) == []
            assert connections_to(app.base_url) == 0
        gc.collect()
    assert [ref() for ref in loops] == [None, None, None]
    assert not [w for w in caught if issubclass(w.category, ResourceWarning | RuntimeWarning)]
    client.close()


def test_a_loop_closed_without_shutdown_is_forgotten(app, user):
    client = AsyncClient(app.base_url, app.key)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(client.get_user_state(app.name, user))
    loop.close()
    gone = weakref.ref(loop)
    del loop

    async def state() -> dict:
        return await client.get_user_state(app.name, user)

    assert asyncio.run(state())["state"] == {}
    gc.collect()
    assert gone() is None
    client.close()


def test_calls_from_many_threads_at_once(app, user):
    client = AsyncClient(app.base_url, app.key)
    start = threading.Barrier(8)

    def worker(n: int) -> list[str]:
        async def run() -> list[str]:
            start.wait()
            made = [
                (await client.create_session(app.name, user, session_id=f"t{n}-{i}"))["session_id"]
                for i in range(3)
            ]
            await asyncio.gather(*(client.get_session(app.name, user, sid) for sid in made))
            return made

        return asyncio.run(run())

    with ThreadPoolExecutor(8) as pool:
        made = [sid for sids in pool.map(worker, range(8)) for sid in sids]

    async def all_sessions() -> set[str]:
        return {s["session_id"] async for s in client.list_sessions(app.name, user_id=user)}

    assert asyncio.run(all_sessions()) == set(made) and len(made) == 24
    client.close()


def test_one_loop_shares_its_connections_across_tasks(app, user):
    async def run() -> int:
        async with AsyncClient(app.base_url, app.key) as client:
            await asyncio.gather(*(client.get_user_state(app.name, user) for _ in range(20)))
            await client.get_user_state(app.name, user)
            return connections_to(app.base_url)

    assert 1 <= asyncio.run(run()) <= 20
    assert connections_to(app.base_url) == 0


def test_closing_from_another_thread_closes_on_the_loop_that_made_it(app, user):
    client = AsyncClient(app.base_url, app.key)
    used, closed = threading.Event(), threading.Event()

    async def serve() -> int:
        await client.get_user_state(app.name, user)
        used.set()
        while not closed.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the closing scheduled on this loop runs
        return connections_to(app.base_url)

    with ThreadPoolExecutor(1) as pool:
        remaining = pool.submit(asyncio.run, serve())
        try:
            assert used.wait(10)
            client.close()
        finally:
            closed.set()
        assert remaining.result(10) == 0

    async def after() -> None:
        await client.get_user_state(app.name, user)

    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(after())

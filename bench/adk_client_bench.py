"""ADK's session service through the Python client, beside ADK's ``DatabaseSessionService``.

``CtxAdminSessionService`` (``ctxadmin_client.adk``, over HTTP to the service) and ADK's
``DatabaseSessionService`` (asyncpg, in process) run the same workload on the same PostgreSQL
server, in one event loop: sequential appends to one session, reading that session back,
and listing one user's sessions. The client's own cost per call is the same request through
``AsyncClient`` and through a bare ``httpx.AsyncClient`` on the same kept-alive connection.

``make bench`` runs it against its service; alone, ``python -m bench.adk_client_bench``
starts a service of its own (in ``var/bench-adk-client``) and rewrites the "ADK services
through the client" section of ``bench/BENCHMARKS.md``.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.alone import run_alone
from bench.service import bench_client, fresh_async_database

SECTION = "## ADK services through the client"
PEER_DB = "adk_client_bench"
APP = "adk-client-bench"
EVENTS = 400
SESSIONS = 200
GET_REPS = 20
LIST_REPS = 10
OVERHEAD_REPS = 200


def _event(index: int, invocation: str):
    # google-adk: the bench extra, imported only when this benchmark runs.
    from google.adk.events import Event, EventActions
    from google.genai import types

    author = "user" if index % 2 == 0 else "bench_agent"
    role = "user" if author == "user" else "model"
    text = f"message {index}: " + "the agent reviewed the order status and the invoice " * 6
    actions = EventActions(
        state_delta={"turn": index, "user:seen": index} if index % 10 == 9 else {}
    )
    return Event(
        invocation_id=invocation,
        author=author,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
        actions=actions,
    )


async def _sample_ms(call: Callable[[], Awaitable[Any]], reps: int) -> list[float]:
    await call()  # warm-up
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _p50(samples: list[float]) -> float:
    return round(statistics.median(samples), 2)


async def _workload(service, app_name: str) -> dict[str, float]:
    """Appends per second, and p50 milliseconds of get_session and list_sessions."""
    session = await service.create_session(app_name=app_name, user_id="u-seq")
    started = time.perf_counter()
    for index in range(EVENTS):
        await service.append_event(session, _event(index, f"inv-{index // 4}"))
    append_eps = EVENTS / (time.perf_counter() - started)

    async def get_full() -> None:
        got = await service.get_session(app_name=app_name, user_id="u-seq", session_id=session.id)
        assert got is not None and len(got.events) == EVENTS

    gate = asyncio.Semaphore(8)

    async def create(i: int) -> None:
        async with gate:
            await service.create_session(app_name=app_name, user_id="u-list", state={"n": i})

    await asyncio.gather(*(create(i) for i in range(SESSIONS)))

    async def list_all() -> None:
        listed = await service.list_sessions(app_name=app_name, user_id="u-list")
        assert len(listed.sessions) == SESSIONS

    return {
        "append_eps": round(append_eps, 1),
        "get_session_ms": _p50(await _sample_ms(get_full, GET_REPS)),
        "list_sessions_ms": _p50(await _sample_ms(list_all, LIST_REPS)),
    }


async def _overhead(base_url: str, key: str, app: str) -> dict[str, float]:
    """p50 of one GET of a session (no events) and one append, through ``AsyncClient`` and
    through bare httpx, alternating so both see the same server."""
    import httpx
    from ctxadmin_client import AsyncClient

    user, sid = "u-overhead", "s-overhead"
    headers = {"Authorization": f"Bearer {key}"}
    path = f"/api/v1/apps/{app}/users/{user}/sessions/{sid}"
    async with (
        AsyncClient(base_url, key) as client,
        httpx.AsyncClient(base_url=base_url, headers=headers) as raw,
    ):
        await client.create_session(app, user, session_id=sid)
        counter = iter(range(10**9))

        def event() -> dict:
            return {
                "author": "user",
                "content": {"role": "user", "parts": [{"text": "ping"}]},
                "event_id": f"ov-{next(counter)}",
            }

        async def client_get() -> None:
            await client.get_session(app, user, sid, num_recent_events=0)

        async def raw_get() -> None:
            response = await raw.get(path, params={"num_recent_events": 0})
            response.raise_for_status()
            response.json()

        async def client_append() -> None:
            await client.append_event(app, user, sid, event())

        async def raw_append() -> None:
            response = await raw.post(f"{path}/events", json={"event": event()})
            response.raise_for_status()
            response.json()

        results = {}
        for name, ours, bare in (
            ("get", client_get, raw_get),
            ("append", client_append, raw_append),
        ):
            ours_ms, bare_ms = [], []
            for _ in range(OVERHEAD_REPS):
                ours_ms += await _sample_ms(ours, 1)
                bare_ms += await _sample_ms(bare, 1)
            results[f"{name}_client_ms"] = _p50(ours_ms)
            results[f"{name}_httpx_ms"] = _p50(bare_ms)
            results[f"{name}_overhead_ms"] = round(_p50(ours_ms) - _p50(bare_ms), 2)
        return results


async def _measure(base_url: str, key: str, app: str, database_url: str) -> dict[str, Any]:
    from ctxadmin_client.adk import CtxAdminSessionService
    from google.adk.sessions import DatabaseSessionService

    async with CtxAdminSessionService(base_url, key) as ours:
        client = await _workload(ours, app)
    peer_service = DatabaseSessionService(fresh_async_database(database_url, PEER_DB))
    try:
        peer = await _workload(peer_service, "bench_app")
    finally:
        await peer_service.close()
    return {"client": client, "peer": peer, "overhead": await _overhead(base_url, key, app)}


def measure(service) -> dict[str, Any]:
    """Run against a started bench service (its own app and key)."""
    api = bench_client(service, "adkclient", "sessions")
    return asyncio.run(_measure(service.base_url, api.key, api.app, service.database_url))


def report(results: dict[str, Any]) -> str:
    ours, peer, over = results["client"], results["peer"], results["overhead"]
    rows = "\n".join(
        f"| {label} | {ours[key]} | {peer[key]} | {ours[key] / peer[key]:.2f} |"
        for label, key in (
            (f"append, events/s (one session, {EVENTS} sequential)", "append_eps"),
            (f"get_session of {EVENTS} events, p50 ms", "get_session_ms"),
            (f"list_sessions of {SESSIONS} sessions, p50 ms", "list_sessions_ms"),
        )
    )
    return f"""{SECTION}

`ctxadmin_client.adk.CtxAdminSessionService` (HTTP to the service, which appends with its
own checks, derived columns and state scopes) beside ADK's `DatabaseSessionService`
(SQLAlchemy + asyncpg in process) on the same PostgreSQL server, one asyncio loop, the same
ADK events (every 10th with a state delta). Ratio = client / ADK (above 1 is more events/s
or more milliseconds).

| measure | client | ADK DatabaseSessionService | ratio |
| --- | --- | --- | --- |
{rows}

The client's own cost per call: the same request through `AsyncClient` and through a bare
`httpx.AsyncClient` ({OVERHEAD_REPS} of each, alternating), p50 ms.

| request | AsyncClient | httpx | overhead |
| --- | --- | --- | --- |
{_overhead_row("`GET` session (`num_recent_events=0`)", over, "get")}
{_overhead_row("`POST` one event", over, "append")}
"""


def _overhead_row(label: str, over: dict[str, float], name: str) -> str:
    cells = (over[f"{name}_client_ms"], over[f"{name}_httpx_ms"], over[f"{name}_overhead_ms"])
    return f"| {label} | " + " | ".join(str(cell) for cell in cells) + " |"


def main() -> None:
    run_alone(
        "adk_client_bench", "bench-adk-client", SECTION, measure, report, "\n\n`ctxadmin_client"
    )


if __name__ == "__main__":
    main()

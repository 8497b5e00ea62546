"""The OpenAI Agents SDK's session protocol on ctxadmin, beside the SDK's own backends.

``CtxAdminSession`` (``ctxadmin_client.openai_agents``, over HTTP to the service) and the
SDK's ``SQLAlchemySession`` (asyncpg, in process, on the same PostgreSQL server, a database
of its own) run the same calls in one event loop: ``add_items`` of one item and of a turn's
four items, ``get_items`` of a whole session and of its newest 20 items, and ``pop_item``.
The SDK's ``SQLiteSession`` on a file runs them too, as the SDK's default; the three take
turns call by call, so each sees the same load of the machine. Each figure is
the p50 milliseconds per call; the ratio is ctxadmin / SQLAlchemy (above 1: ctxadmin is
slower by that factor).

``make bench`` runs it against its service; alone, ``python -m bench.openai_agents_bench``
starts a service of its own (in ``var/bench-openai-agents``) and rewrites the "OpenAI
Agents SDK session" section of ``bench/BENCHMARKS.md``.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench.alone import run_alone
from bench.service import bench_client, fresh_async_database

SECTION = "## OpenAI Agents SDK session"
PEER_DB = "openai_agents_bench"
#: Items in the session the reads read (50 turns of four items).
HISTORY = 200
REPS = 60
NEWEST = 20


def _turn(n: int) -> list[dict[str, Any]]:
    """One turn as the SDK's Runner stores it: the user's message, a tool call, its output
    and the answer."""
    return [
        {"role": "user", "content": f"Question {n}: what is the status of order {n}?"},
        {
            "type": "function_call",
            "call_id": f"call_{n}",
            "name": "order_status",
            "arguments": f'{{"order": {n}}}',
            "id": f"fc_{n}",
            "status": "completed",
        },
        {
            "type": "function_call_output",
            "call_id": f"call_{n}",
            "output": f"order {n}: shipped, " + "tracking details and the carrier's notes " * 4,
        },
        {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": f"Order {n} has shipped.", "annotations": []}
            ],
        },
    ]


def _p50(samples: list[float]) -> float:
    return round(statistics.median(samples), 2)


async def _timed(call: Callable[[], Awaitable[Any]], into: list[float]) -> None:
    started = time.perf_counter()
    await call()
    into.append((time.perf_counter() - started) * 1000)


async def _workload(backends: dict[str, Callable[[str], Any]]) -> dict[str, dict[str, float]]:
    """p50 ms of each call on the sessions each backend's ``make(session_id)`` returns, the
    backends taking turns call by call so that each sees the same load of the machine."""
    counter = iter(range(10**9))
    names = list(backends)
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    sessions = {
        name: {kind: make(f"bench-{kind}") for kind in ("writes", "pops", "reads")}
        for name, make in backends.items()
    }

    async def each(measure: str, call: Callable[[Any], Awaitable[Any]], kind: str) -> None:
        for name in names:
            await call(sessions[name][kind])  # warm-up
        for _ in range(REPS):
            for name in names:
                session = sessions[name][kind]
                await _timed(partial(call, session), samples[name].setdefault(measure, []))

    await each("add_one_ms", lambda s: s.add_items(_turn(next(counter))[:1]), "writes")
    await each("add_turn_ms", lambda s: s.add_items(_turn(next(counter))), "writes")

    # Each pop after an add of one item (not timed): every pop finds one.
    for name in names:
        await sessions[name]["pops"].add_items(_turn(0))
    for _ in range(REPS):
        for name in names:
            session = sessions[name]["pops"]
            await session.add_items(_turn(next(counter))[:1])
            await _timed(session.pop_item, samples[name].setdefault("pop_ms", []))

    for name in names:
        for n in range(HISTORY // 4):
            await sessions[name]["reads"].add_items(_turn(n))

    async def read_all(session) -> None:
        assert len(await session.get_items()) == HISTORY

    async def read_newest(session) -> None:
        assert len(await session.get_items(NEWEST)) == NEWEST

    await each("get_all_ms", read_all, "reads")
    await each("get_newest_ms", read_newest, "reads")
    return {
        name: {measure: _p50(values) for measure, values in samples[name].items()} for name in names
    }


async def _measure(base_url: str, key: str, app: str, database_url: str) -> dict[str, Any]:
    # openai-agents: the client's openai-agents extra, imported only when this runs.
    from agents.extensions.memory import SQLAlchemySession
    from agents.memory import SQLiteSession
    from ctxadmin_client import AsyncClient
    from ctxadmin_client.openai_agents import CtxAdminSession
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(fresh_async_database(database_url, PEER_DB))
    opened: list[SQLiteSession] = []
    try:
        with tempfile.TemporaryDirectory() as folder:

            def sqlite(sid: str) -> SQLiteSession:
                opened.append(SQLiteSession(sid, Path(folder) / "sessions.db"))
                return opened[-1]

            async with AsyncClient(base_url, key) as client:
                return await _workload(
                    {
                        "ctxadmin": lambda sid: CtxAdminSession(
                            sid, app=app, user_id="bench", client=client
                        ),
                        "sqlalchemy": lambda sid: SQLAlchemySession(
                            sid, engine=engine, create_tables=True
                        ),
                        "sqlite": sqlite,
                    }
                )
    finally:
        for session in opened:
            session.close()
        await engine.dispose()


def measure(service) -> dict[str, Any]:
    """Run against a started bench service (its own app and key)."""
    api = bench_client(service, "oaiagents", "sessions")
    return asyncio.run(_measure(service.base_url, api.key, api.app, service.database_url))


def report(results: dict[str, Any]) -> str:
    ours, peer, local = results["ctxadmin"], results["sqlalchemy"], results["sqlite"]
    rows = "\n".join(
        f"| {label} | {ours[key]} | {peer[key]} | {local[key]} | {ours[key] / peer[key]:.2f} |"
        for label, key in (
            ("`add_items`, one item", "add_one_ms"),
            ("`add_items`, a turn of four items", "add_turn_ms"),
            (f"`get_items()`, {HISTORY} items", "get_all_ms"),
            (f"`get_items({NEWEST})` of {HISTORY} items", "get_newest_ms"),
            ("`pop_item`", "pop_ms"),
        )
    )
    return f"""{SECTION}

`ctxadmin_client.openai_agents.CtxAdminSession` (HTTP to the service; an item is one
ADK-shaped event, `pop_item` a read and a compare-and-set rewind) beside the SDK's
`SQLAlchemySession` (asyncpg, in process) on the same PostgreSQL server, and the SDK's
`SQLiteSession` on a local file; one asyncio loop, the same items (turns of a user message,
a function call, its output and the answer), the three taking turns call by call. p50 ms
per call over {REPS} calls of each; ratio = ctxadmin / SQLAlchemy (above 1: ctxadmin takes
that many times longer per call).

| call | ctxadmin | SQLAlchemy (PostgreSQL) | SQLite (file) | ratio |
| --- | --- | --- | --- | --- |
{rows}

The absolute figures move with the load of this shared machine from run to run; the
ratios, taken call by call under the same load, move less.
"""


def main() -> None:
    run_alone(
        "openai_agents_bench",
        "bench-openai-agents",
        SECTION,
        measure,
        report,
        "\n\n`ctxadmin_client",
    )


if __name__ == "__main__":
    main()

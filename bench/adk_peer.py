"""Peer measurements: Google ADK's ``DatabaseSessionService`` on PostgreSQL (asyncpg).

Runs the session workloads ctxadmin is benchmarked on against ADK's own storage layer,
in-process through its async API, and returns the figures as a plain dict:

* ``append_sequential_eps``: one session, ``events`` appends one after the other.
* ``append_concurrent_4_eps``: four sessions appended at once, ``events // 4`` each.
* ``get_session_2000_ms``: ``get_session`` of the ``events``-long session.
* ``get_session_recent_50_ms``: the same with ``GetSessionConfig(num_recent_events=50)``.
* ``list_sessions_5000_ms``: ``list_sessions`` of one user holding ``sessions`` sessions.
* ``contents_2000_ms``: ``get_session`` plus building the model request contents from its
  events with the function ADK's LLM flow uses.

Each run works in a freshly created database (``PEER_DB``) on the server named by the URL,
so runs are comparable. ADK and SQLAlchemy are imported only when the benchmark runs.

    .venv/bin/python bench/adk_peer.py            # starts an embedded PostgreSQL 18
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxadmin.stack import EmbeddedPostgres

if TYPE_CHECKING:
    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService, Session

PEER_DB = "adk_peer_bench"
APP = "bench_app"
AGENT = "bench_agent"
TOOLS = ("search_docs", "get_weather", "lookup_order", "run_query")
CONCURRENT_SESSIONS = 4
ROUNDS = 3  # throughput figures are the median of this many runs
RECENT_EVENTS = 50
GET_REPS = 20
RECENT_REPS = 50
LIST_REPS = 10
CONTENTS_REPS = 20
# Concurrent create_session calls while filling the list_sessions user; below ADK's
# default pool size plus overflow (5 + 10), so no call waits for a connection.
CREATE_CONCURRENCY = 8

_WORDS = (
    "the agent reviewed order status shipping invoice refund customer account balance "
    "report weekly summary database query latency error retry timeout cache memory "
    "context window token budget tool call result document search index ranking "
    "relevant passage answer question follow up clarify request schedule meeting "
    "calendar reminder weather forecast temperature city travel booking flight hotel "
    "confirmation number payment method update address preference language setting"
).split()


# --------------------------------------------------------------------------- events


def _text(rng: random.Random, low: int = 200, high: int = 600) -> str:
    target = rng.randint(low, high)
    words: list[str] = []
    size = 0
    while size < target:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:target]


def _conversation(rng: random.Random, count: int, tag: str) -> Iterator[Event]:
    """Yield ``count`` events of a plausible agent conversation.

    Turns alternate between ``user, call, response, model`` and ``user, model``: four text
    events per tool unit. Events are built lazily so each carries the time it is appended.
    Every tenth event carries a small state delta with session and ``user:`` keys.
    """
    # google-adk: an optional bench extra, imported only when the peer runs.
    from google.adk.events import Event, EventActions
    from google.genai import types

    pattern = ("user", "call", "response", "model", "user", "model")
    invocation = ""
    call: types.FunctionCall | None = None
    for index in range(count):
        kind = pattern[index % len(pattern)]
        if kind == "call" and index == count - 1:
            kind = "model"  # never leave a call without its response at the end
        if kind == "user":
            invocation = f"e-{uuid.uuid4()}"  # each user message starts an invocation
            author, role, part = "user", "user", types.Part(text=_text(rng))
        elif kind == "model":
            author, role, part = AGENT, "model", types.Part(text=_text(rng))
        elif kind == "call":
            call = types.FunctionCall(
                id=f"call-{uuid.uuid4().hex[:16]}",
                name=rng.choice(TOOLS),
                args={"query": _text(rng, 30, 80), "limit": rng.randint(3, 10)},
            )
            author, role, part = AGENT, "model", types.Part(function_call=call)
        else:
            assert call is not None
            response = types.FunctionResponse(
                id=call.id, name=call.name, response={"result": _text(rng)}
            )
            # ADK records a tool's result as an event of the calling agent in the user role.
            author, role, part = AGENT, "user", types.Part(function_response=response)
        content = types.Content(role=role, parts=[part])

        actions = EventActions()
        if index % 10 == 9:
            actions = EventActions(
                state_delta={
                    "turn": index,
                    "last_author": author,
                    "topic": f"{tag}-{rng.choice(_WORDS)}",
                    "user:events_seen": index + 1,
                }
            )
        yield Event(invocation_id=invocation, author=author, content=content, actions=actions)


# --------------------------------------------------------------------------- timing


def _percentiles(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50": round(cuts[49], 2), "p95": round(cuts[94], 2)}


async def _sample_ms(
    call: Callable[[], Awaitable[object]], reps: int, warmup: int = 1
) -> dict[str, float]:
    for _ in range(warmup):
        await call()
    samples: list[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1000)
    return _percentiles(samples)


async def _append_all(
    service: DatabaseSessionService, session: Session, events: Iterator[Event]
) -> int:
    appended = 0
    for event in events:
        await service.append_event(session, event)
        appended += 1
    return appended


# --------------------------------------------------------------------------- database


def _urls(database_url: str) -> tuple[str, str]:
    """The asyncpg DSN of the server's ``postgres`` database and ADK's SQLAlchemy URL."""
    # sqlalchemy: a bench extra (with google-adk), imported only when the peer runs.
    from sqlalchemy.engine import make_url

    # Query options such as libpq's sslmode are not asyncpg connect arguments.
    base = make_url(database_url).set(query={})
    admin = base.set(drivername="postgresql", database="postgres")
    adk = base.set(drivername="postgresql+asyncpg", database=PEER_DB)
    return admin.render_as_string(hide_password=False), adk.render_as_string(hide_password=False)


async def _fresh_database(admin_dsn: str) -> None:
    # asyncpg: a bench extra (with google-adk), imported only when the peer runs.
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{PEER_DB}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{PEER_DB}"')
    finally:
        await conn.close()


# --------------------------------------------------------------------------- workloads


async def _run(database_url: str, events: int, sessions: int) -> dict[str, Any]:
    # google-adk: an optional bench extra, imported only when the peer runs.
    from google.adk.flows.llm_flows.contents import _get_contents
    from google.adk.sessions import DatabaseSessionService
    from google.adk.sessions.base_session_service import GetSessionConfig

    admin_dsn, adk_url = _urls(database_url)
    await _fresh_database(admin_dsn)
    rng = random.Random(20240601)  # noqa: S311 - reproducible filler text, not secrets
    started = time.perf_counter()

    # ADK's defaults: SQLAlchemy QueuePool (5 + 10 overflow) with pool_pre_ping.
    service = DatabaseSessionService(adk_url)
    try:
        await service.prepare_tables()

        # Sequential appends to one session; the median of ROUNDS sessions (a noisy machine).
        sequential: list[float] = []
        for round_number in range(ROUNDS):
            session = await service.create_session(app_name=APP, user_id="u-seq")
            start = time.perf_counter()
            await _append_all(service, session, _conversation(rng, events, "seq"))
            sequential.append(events / (time.perf_counter() - start))
            if round_number == 0:
                long_session = session
        append_sequential_eps = statistics.median(sequential)

        # Four sessions (four users, so user-state rows are not shared) at once; median too.
        per_session = events // CONCURRENT_SESSIONS
        concurrent: list[float] = []
        for round_number in range(ROUNDS):
            parallel = [
                await service.create_session(app_name=APP, user_id=f"u-conc-{i}")
                for i in range(CONCURRENT_SESSIONS)
            ]
            streams = [
                _conversation(rng, per_session, f"conc{round_number}-{i}")
                for i in range(len(parallel))
            ]
            start = time.perf_counter()
            counts = await asyncio.gather(
                *(_append_all(service, s, e) for s, e in zip(parallel, streams, strict=True))
            )
            concurrent.append(sum(counts) / (time.perf_counter() - start))
        append_concurrent_eps = statistics.median(concurrent)

        # Reading the long session back, whole and its most recent events.
        async def get_full() -> Session:
            session = await service.get_session(
                app_name=APP, user_id="u-seq", session_id=long_session.id
            )
            assert session is not None and len(session.events) == events
            return session

        async def get_recent() -> None:
            session = await service.get_session(
                app_name=APP,
                user_id="u-seq",
                session_id=long_session.id,
                config=GetSessionConfig(num_recent_events=RECENT_EVENTS),
            )
            assert session is not None and len(session.events) == min(RECENT_EVENTS, events)

        get_session_ms = await _sample_ms(get_full, GET_REPS)
        recent_ms = await _sample_ms(get_recent, RECENT_REPS)

        # What an LLM turn pays before calling the model: load + build the contents.
        async def load_and_build() -> None:
            session = await get_full()
            contents = _get_contents(None, session.events, AGENT)
            assert contents

        contents_ms = await _sample_ms(load_and_build, CONTENTS_REPS)
        loaded = await get_full()
        built = _get_contents(None, loaded.events, AGENT)
        text_events = sum(1 for e in loaded.events if e.content and e.content.parts[0].text)
        tool_units = sum(1 for e in loaded.events if e.content and e.content.parts[0].function_call)
        average_bytes = statistics.fmean(
            len(e.model_dump_json(exclude_none=True)) for e in loaded.events
        )

        # One user with many sessions, created through ADK's own API.
        gate = asyncio.Semaphore(CREATE_CONCURRENCY)

        async def create(i: int) -> None:
            async with gate:
                await service.create_session(
                    app_name=APP, user_id="u-list", state={"title": f"conversation {i}"}
                )

        start = time.perf_counter()
        await asyncio.gather(*(create(i) for i in range(sessions)))
        create_seconds = time.perf_counter() - start

        async def list_all() -> None:
            response = await service.list_sessions(app_name=APP, user_id="u-list")
            assert len(response.sessions) == sessions

        list_ms = await _sample_ms(list_all, LIST_REPS)
    finally:
        await service.close()

    notes = [
        f"google-adk {version('google-adk')}, google-genai {version('google-genai')}, "
        f"SQLAlchemy {version('sqlalchemy')}, asyncpg {version('asyncpg')}; "
        "DatabaseSessionService(db_url) with ADK's engine defaults "
        "(QueuePool 5+10, pool_pre_ping=True), one process, one event loop.",
        f"Fresh database {PEER_DB!r} per run; ADK created its own tables (schema v1, "
        "events stored as one JSONB document each).",
        f"Events: {text_events} text and {tool_units} tool units (function_call event + "
        f"function_response event) in the {events}-event session, average serialized event "
        f"{average_bytes:.0f} bytes; every 10th event carries a state_delta with 3 session "
        "keys and 1 user: key.",
        "append_event is one transaction per event: session row SELECT ... FOR UPDATE, "
        "app and user state reads, event INSERT, session UPDATE, COMMIT.",
        f"append_concurrent_4: {CONCURRENT_SESSIONS} sessions of {CONCURRENT_SESSIONS} users, "
        f"{per_session} events each, sequential within a session, asyncio.gather across.",
        f"Latencies: 1 warm-up, then {GET_REPS} (get_session), {RECENT_REPS} (recent "
        f"{RECENT_EVENTS}), {CONTENTS_REPS} (contents), {LIST_REPS} (list_sessions) runs.",
        "contents: google.adk.flows.llm_flows.contents._get_contents(current_branch=None, "
        f"events=session.events, agent_name={AGENT!r}), the call ADK's contents request "
        f"processor makes; it produced {len(built)} contents from {len(loaded.events)} events.",
        f"list_sessions: {sessions} sessions created with create_session, "
        f"{CREATE_CONCURRENCY} in flight, in {create_seconds:.1f} s "
        f"({sessions / create_seconds:.0f} sessions/s); list_sessions returns all of them "
        "(no pagination) without events.",
        f"Peer run took {time.perf_counter() - started:.1f} s.",
    ]
    return {
        "adk_version": version("google-adk"),
        "append_sequential_eps": round(append_sequential_eps, 1),
        "append_sequential_eps_runs": [round(value, 1) for value in sequential],
        "append_concurrent_4_eps": round(append_concurrent_eps, 1),
        "append_concurrent_4_eps_runs": [round(value, 1) for value in concurrent],
        "get_session_2000_ms": get_session_ms,
        "get_session_recent_50_ms": recent_ms,
        "list_sessions_5000_ms": list_ms,
        "contents_2000_ms": contents_ms,
        "notes": notes,
    }


def run(database_url: str, *, events: int = 2000, sessions: int = 5000) -> dict:
    """Measure ADK's DatabaseSessionService on the PostgreSQL server of ``database_url``.

    ``database_url`` is libpq style (``postgres://user:password@host:port/db``); the user must
    be allowed to create databases, since the run drops and recreates ``PEER_DB`` there.
    The key names keep the default sizes (2000 events, 5000 sessions) whatever is passed.
    """
    if events < 2 * CONCURRENT_SESSIONS or sessions < 1:
        raise ValueError("events must be at least 8 and sessions at least 1")
    return asyncio.run(_run(database_url, events, sessions))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=5000)
    args = parser.parse_args()

    data_dir = Path("/tmp/adkbench/pgdata")  # noqa: S108 - a throwaway benchmark cluster
    pg = EmbeddedPostgres(data_dir, preferred_port=55499, db_name="adk_bench")
    url = pg.start()
    try:
        print(json.dumps(run(url, events=args.events, sessions=args.sessions), indent=2))
    finally:
        if pg.started_here:
            pg.stop()


if __name__ == "__main__":
    main()

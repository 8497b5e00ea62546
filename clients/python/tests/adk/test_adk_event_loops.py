"""The ADK services and the context plugin on any event loop: ADK's synchronous
``Runner.run`` (a new loop in a new thread for every turn) over several turns, consecutive
``asyncio.run`` calls on one service object, and many threads creating, appending and
reading at once, as ADK's own thread-safety tests drive its services."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncGenerator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ctxadmin_client.adk import (
    CtxAdminArtifactService,
    CtxAdminContextPlugin,
    CtxAdminMemoryService,
    CtxAdminSessionService,
)
from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools import ToolContext
from google.genai import types

TURNS = 5


class TurnModel(BaseLlm):
    """Each turn: a call of ``note`` with the user's words, then a reply naming them."""

    model: str = "scripted"
    seen: list[list[str]] = []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        said = [p.text for c in llm_request.contents for p in c.parts or () if p.text]
        self.seen.append(said)
        last = llm_request.contents[-1].parts[0]
        if last.function_response is not None:
            reply = types.Part(text=f"Noted ({last.function_response.response['version']}).")
        else:
            words = last.text or ""
            reply = types.Part(function_call=types.FunctionCall(name="note", args={"text": words}))
        yield LlmResponse(content=types.Content(role="model", parts=[reply]))


async def note(text: str, tool_context: ToolContext) -> dict:
    """Keep a note."""
    version = await tool_context.save_artifact("notes.txt", types.Part(text=text))
    found = await tool_context.search_memory(text)
    return {"version": version, "memories": len(found.memories)}


def user_says(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def said(sid: str, n: int, text: str) -> Event:
    return Event(
        id=f"{sid}-e{n}",
        invocation_id=f"{sid}-i{n}",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
    )


def test_a_synchronous_runner_over_several_turns(make_app, user):
    app = make_app(name=f"loops-{user[-8:]}", scopes=("sessions", "memory"))
    sessions = CtxAdminSessionService(app.base_url, app.key)
    memory = CtxAdminMemoryService(app.base_url, app.key)
    artifacts = CtxAdminArtifactService(app.base_url, app.key)
    plugin = CtxAdminContextPlugin(app.base_url, app.key, memory={"on_error": "omit"})
    model = TurnModel(seen=[])
    agent = LlmAgent(name="keeper", model=model, instruction="Keep notes.", tools=[note])
    runner = Runner(
        app=App(name=app.name, root_agent=agent, plugins=[plugin]),
        session_service=sessions,
        memory_service=memory,
        artifact_service=artifacts,
    )
    session = asyncio.run(sessions.create_session(app_name=app.name, user_id=user))
    replies = []
    for turn in range(TURNS):
        events = list(
            runner.run(user_id=user, session_id=session.id, new_message=user_says(f"note {turn}"))
        )
        replies.append(events[-1].content.parts[0].text)
    assert replies == [f"Noted ({turn})." for turn in range(TURNS)]
    # Every model call was built by ctxadmin from the stored history: the last saw every turn.
    assert [f"note {turn}" for turn in range(TURNS)] == [
        text for text in model.seen[-1] if text.startswith("note ")
    ]

    async def stored() -> tuple[Any, list[int]]:
        found = await sessions.get_session(app_name=app.name, user_id=user, session_id=session.id)
        versions = await artifacts.list_versions(
            app_name=app.name, user_id=user, session_id=session.id, filename="notes.txt"
        )
        await memory.add_session_to_memory(found)
        return found, versions

    found, versions = asyncio.run(stored())
    assert len(found.events) == 4 * TURNS and versions == list(range(TURNS))
    hits = asyncio.run(memory.search_memory(app_name=app.name, user_id=user, query="note 3"))
    assert hits.memories
    asyncio.run(runner.close())


def test_one_runner_and_plugin_from_threads_at_once(make_app, user):
    app = make_app(name=f"thr-{user[-8:]}", scopes=("sessions", "memory"))
    sessions = CtxAdminSessionService(app.base_url, app.key)
    plugin = CtxAdminContextPlugin(app.base_url, app.key)
    agent = LlmAgent(name="keeper", model=TurnModel(seen=[]), tools=[note])
    runner = Runner(
        app=App(name=app.name, root_agent=agent, plugins=[plugin]),
        session_service=sessions,
        memory_service=CtxAdminMemoryService(app.base_url, app.key),
        artifact_service=CtxAdminArtifactService(app.base_url, app.key),
    )
    start = threading.Barrier(4)

    def worker(n: int) -> list[str]:
        sid = asyncio.run(sessions.create_session(app_name=app.name, user_id=user)).id
        start.wait()
        replies = []
        for turn in range(2):
            message = user_says(f"thread {n} turn {turn}")
            events = list(runner.run(user_id=user, session_id=sid, new_message=message))
            replies.append(events[-1].content.parts[0].text)
        return replies

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(worker, range(4)))
    assert answers == [["Noted (0).", "Noted (1)."]] * 4
    asyncio.run(runner.close())


def test_each_service_on_one_object_across_asyncio_runs(app, user):
    sid = f"runs-{uuid.uuid4().hex[:8]}"
    base_url, key, app = app.base_url, app.key, app.name
    # Each service holds its own client, as the README's Runner does.
    sessions = CtxAdminSessionService(base_url, key)
    memory = CtxAdminMemoryService(base_url, key)
    artifacts = CtxAdminArtifactService(base_url, key)

    async def create():
        return await sessions.create_session(app_name=app, user_id=user, session_id=sid)

    async def get():
        return await sessions.get_session(app_name=app, user_id=user, session_id=sid)

    async def append(session, n: int):
        return await sessions.append_event(session, said(sid, n, f"line {n}"))

    asyncio.run(create())
    for n in range(3):
        asyncio.run(append(asyncio.run(get()), n))
    session = asyncio.run(get())
    assert [e.content.parts[0].text for e in session.events] == ["line 0", "line 1", "line 2"]

    asyncio.run(memory.add_session_to_memory(session))
    found = asyncio.run(memory.search_memory(app_name=app, user_id=user, query="line 2"))
    assert found.memories

    def save(n: int) -> int:
        return asyncio.run(
            artifacts.save_artifact(
                app_name=app,
                user_id=user,
                session_id=sid,
                filename="a.txt",
                artifact=types.Part(text=f"v{n}"),
            )
        )

    assert [save(n) for n in range(3)] == [0, 1, 2]
    part = asyncio.run(
        artifacts.load_artifact(app_name=app, user_id=user, session_id=sid, filename="a.txt")
    )
    assert part.text == "v2"
    for service in (sessions, memory, artifacts):
        asyncio.run(service.close())


def test_many_threads_create_append_and_read_at_once(app, user):
    sessions = CtxAdminSessionService(app.base_url, app.key)
    memory = CtxAdminMemoryService(app.base_url, app.key)
    artifacts = CtxAdminArtifactService(app.base_url, app.key)
    start = threading.Barrier(10)

    def worker(n: int) -> tuple[list[str], str, int]:
        sid = f"th-{n}"

        async def run() -> tuple[list[str], str, int]:
            start.wait()
            session = await sessions.create_session(app_name=app.name, user_id=user, session_id=sid)
            for i in range(3):
                await sessions.append_event(session, said(sid, i, f"thread {n} line {i}"))
            await memory.add_session_to_memory(session)
            version = await artifacts.save_artifact(
                app_name=app.name,
                user_id=user,
                session_id=sid,
                filename="t.txt",
                artifact=types.Part(text=str(n)),
            )
            read = await sessions.get_session(app_name=app.name, user_id=user, session_id=sid)
            loaded = await artifacts.load_artifact(
                app_name=app.name, user_id=user, session_id=sid, filename="t.txt"
            )
            return [e.content.parts[0].text for e in read.events], loaded.text, version

        return asyncio.run(run())

    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(worker, range(10)))
    assert answers == [([f"thread {n} line {i}" for i in range(3)], str(n), 0) for n in range(10)]

    async def listed():
        listing = await sessions.list_sessions(app_name=app.name, user_id=user)
        found = await memory.search_memory(app_name=app.name, user_id=user, query="thread 7 line 2")
        return {s.id for s in listing.sessions}, found

    ids, found = asyncio.run(listed())
    assert ids == {f"th-{n}" for n in range(10)} and found.memories
    for service in (sessions, memory, artifacts):
        asyncio.run(service.close())

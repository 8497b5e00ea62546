"""``CtxAdminSession`` on any event loop: the SDK's ``Runner.run_sync`` over several turns
(the thread's default loop, its async generators shut down after each run), consecutive
``asyncio.run`` calls and ``Runner.run_streamed`` on one session object, and threads using
one session at once; ``close`` is synchronous, as the SDK's sessions close."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
import uuid
import warnings
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from ctxadmin_client import AsyncClient
from ctxadmin_client.openai_agents import CtxAdminSession
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseOutputMessage,
    ResponseOutputText,
)


def reply(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{uuid.uuid4().hex[:8]}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class EchoModel(Model):
    """Answers how many user messages it was sent; records each input."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []

    def _answer(self, input: Any) -> ResponseOutputMessage:
        self.inputs.append(json.loads(json.dumps(input, default=str)))
        asked = [item for item in input if item.get("role") == "user"]
        return reply(f"{len(asked)} questions so far")

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
        return ModelResponse(output=[self._answer(input)], usage=Usage(), response_id=None)

    async def stream_response(self, system_instructions, input, *args, **kwargs) -> AsyncIterator:
        response = Response(
            id=f"resp_{uuid.uuid4().hex[:8]}",
            created_at=time.time(),
            model="scripted",
            object="response",
            output=[self._answer(input)],
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
        )
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=0
        )


@pytest.fixture
def session_args(app) -> dict[str, Any]:
    return {
        "session_id": f"s-{uuid.uuid4().hex[:10]}",
        "app": app.name,
        "user_id": f"u-{uuid.uuid4().hex[:10]}",
        "base_url": app.base_url,
        "api_key": app.key,
    }


def agent(model: EchoModel) -> Agent:
    set_tracing_disabled(True)
    return Agent(name="counter", instructions="Count.", model=model)


def test_run_sync_over_several_turns(session_args):
    model = EchoModel()
    session = CtxAdminSession(**session_args)
    answers = [
        Runner.run_sync(agent(model), f"Question {n}?", session=session).final_output
        for n in range(5)
    ]
    assert answers == [f"{n + 1} questions so far" for n in range(5)]
    assert len(asyncio.run(session.get_items())) == 10
    session.close()


def test_run_streamed_and_asyncio_runs_on_one_session(session_args):
    model = EchoModel()
    session = CtxAdminSession(**session_args)

    async def streamed(question: str) -> str:
        result = Runner.run_streamed(agent(model), question, session=session)
        async for _event in result.stream_events():
            pass
        return result.final_output

    answers = [asyncio.run(streamed(f"Question {n}?")) for n in range(3)]
    answers.append(asyncio.run(Runner.run(agent(model), "Last?", session=session)).final_output)
    assert answers == [f"{n + 1} questions so far" for n in range(4)]
    popped = asyncio.run(session.pop_item())
    assert popped["content"][0]["text"] == "4 questions so far"
    assert len(asyncio.run(session.get_items())) == 7
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    session.close()


def test_threads_add_and_read_one_session_at_once(session_args):
    session = CtxAdminSession(**session_args)
    start = threading.Barrier(8)

    def worker(n: int) -> int:
        async def run() -> int:
            start.wait()
            await session.add_items([{"role": "user", "content": f"from thread {n}"}])
            return len(await session.get_items())

        async def bounded() -> int:  # a client bound to another loop can hang
            return await asyncio.wait_for(run(), 60)

        return asyncio.run(bounded())

    with ThreadPoolExecutor(8) as pool:
        seen = list(pool.map(worker, range(8)))
    assert all(1 <= count <= 8 for count in seen)
    items = asyncio.run(session.get_items())
    assert sorted(item["content"] for item in items) == sorted(f"from thread {n}" for n in range(8))
    session.close()


def test_close_is_synchronous_and_leaves_no_coroutine_unawaited(session_args, app):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = CtxAdminSession(**session_args)
        asyncio.run(session.add_items([{"role": "user", "content": "hello"}]))
        assert session.close() is None
        # On a running loop too, and a client passed in stays open.
        shared = AsyncClient(app.base_url, app.key)

        async def inside() -> list:
            own = CtxAdminSession(**session_args)
            await own.get_items()
            own.close()
            borrowed = CtxAdminSession(
                session_args["session_id"],
                app=app.name,
                user_id=session_args["user_id"],
                client=shared,
            )
            borrowed.close()
            return await borrowed.get_items()

        assert asyncio.run(inside()) == [{"role": "user", "content": "hello"}]
        shared.close()
        del session
        gc.collect()
    unawaited = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert unawaited == []

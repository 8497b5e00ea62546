"""A real OpenAI Agents SDK ``Runner.run`` on ``CtxAdminSession``: two turns, each a tool
call and an answer from a scripted model (no network), the second turn on a new session
object as after a restart. The same script on the SDK's ``SQLiteSession`` must leave the
same items, and the model must see the same input on both."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.memory import SQLiteSession
from agents.models.interface import Model
from agents.usage import Usage
from ctxadmin_client.openai_agents import CtxAdminSession
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

pytestmark = pytest.mark.anyio


def call(n: int, city: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{n}",
        call_id=f"call_{n}",
        name="get_weather",
        arguments=json.dumps({"city": city}),
        type="function_call",
        status="completed",
    )


def say(n: int, text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{n}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ScriptedModel(Model):
    """Answers each call with the next output of its script and records the input it got."""

    def __init__(self, script: list[list[Any]]) -> None:
        self.script = list(script)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
        self.inputs.append(json.loads(json.dumps(input, default=str)))
        # A response id, as the Responses API answers: the Runner then offers each turn to a
        # compaction-aware session's run_compaction.
        response_id = f"resp_{len(self.inputs)}"
        return ModelResponse(output=self.script.pop(0), usage=Usage(), response_id=response_id)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


SCRIPT = [
    [call(1, "Lisbon")],
    [say(1, "Sunny in Lisbon, 24 C.")],
    [call(2, "Porto")],
    [say(2, "Rain in Porto, 17 C.")],
]


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return {"Lisbon": "sunny, 24 C", "Porto": "rain, 17 C"}[city]


async def two_turns(make_session) -> tuple[list, ScriptedModel]:
    set_tracing_disabled(True)
    model = ScriptedModel(SCRIPT)
    agent = Agent(
        name="forecaster", instructions="Answer briefly.", model=model, tools=[get_weather]
    )
    first = await Runner.run(agent, "Weather in Lisbon?", session=make_session())
    assert first.final_output == "Sunny in Lisbon, 24 C."
    session = make_session()  # a new object on the same stored session
    second = await Runner.run(agent, "And in Porto?", session=session)
    assert second.final_output == "Rain in Porto, 17 C."
    assert not model.script
    return await session.get_items(), model


async def test_two_runner_turns_on_ctxadmin_keep_what_sqlite_keeps(app, async_client):
    session_id, user_id = f"s-{uuid.uuid4().hex[:10]}", f"u-{uuid.uuid4().hex[:10]}"
    compactions: list[Any] = []

    class Recorded(CtxAdminSession):
        async def run_compaction(self, args=None) -> None:
            compactions.append(args)
            await super().run_compaction(args)

    ours, our_model = await two_turns(
        lambda: Recorded(session_id, app=app.name, user_id=user_id, client=async_client)
    )
    # The Runner offered each turn's last response for compaction, not forced: ctxadmin's
    # automatic compaction decides (no policy here, so none ran).
    assert [(a["response_id"], a["force"]) for a in compactions] == [
        ("resp_2", False),
        ("resp_4", False),
    ]
    reference = SQLiteSession(session_id)
    try:
        theirs, their_model = await two_turns(lambda: reference)
    finally:
        reference.close()

    assert ours == theirs
    assert our_model.inputs == their_model.inputs
    assert [item.get("type", "message") for item in ours] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    # The second turn's first model call saw the whole first turn from ctxadmin.
    assert our_model.inputs[2][:4] == ours[:4]
    outputs = [item["output"] for item in ours if item.get("type") == "function_call_output"]
    assert outputs == ["sunny, 24 C", "rain, 17 C"]

    # ctxadmin's own context of the session reads as the conversation, calls paired.
    built = await async_client.build_context(
        app.name,
        user_id,
        session_id,
        current_input={"role": "user", "parts": [{"text": "And tomorrow?"}]},
    )
    history = built["envelope"]["history"]
    assert [h["content"]["role"] for h in history] == ["user", "model", "user", "model"] * 2
    calls = [
        p["function_call"] for h in history for p in h["content"]["parts"] if "function_call" in p
    ]
    responses = [
        p["function_response"]
        for h in history
        for p in h["content"]["parts"]
        if "function_response" in p
    ]
    assert [(c["id"], c["name"], c["args"]) for c in calls] == [
        ("call_1", "get_weather", {"city": "Lisbon"}),
        ("call_2", "get_weather", {"city": "Porto"}),
    ]
    assert [(r["id"], r["name"]) for r in responses] == [
        ("call_1", "get_weather"),
        ("call_2", "get_weather"),
    ]


async def test_ctxadmins_automatic_compaction_shortens_what_the_next_turn_sends(app, async_client):
    """With an automatic compaction policy on the session, ctxadmin's worker compacts after
    the turns; the next turn's model input starts with its summary instead of the items."""
    set_tracing_disabled(True)
    session_id, user_id = f"s-{uuid.uuid4().hex[:10]}", f"u-{uuid.uuid4().hex[:10]}"
    await async_client.create_session(app.name, user_id, session_id=session_id)
    await async_client.set_session_compaction_policy(
        app.name,
        user_id,
        session_id,
        event_threshold=6,
        retain_recent_exchanges=1,
        min_reclaim_tokens=0,
        automatic=True,
    )
    session = CtxAdminSession(session_id, app=app.name, user_id=user_id, client=async_client)
    model = ScriptedModel([[say(n, f"Answer {n}.")] for n in range(5)])
    agent = Agent(name="assistant", instructions="Answer briefly.", model=model)
    for n in range(4):
        await Runner.run(agent, f"Question {n}?", session=session)

    deadline = time.monotonic() + 60
    while not any(c["status"] == "active" for c in await _compactions(async_client, app, session)):
        assert time.monotonic() < deadline, "no automatic compaction within 60 s"
        await asyncio.sleep(0.2)

    await Runner.run(agent, "Question 4?", session=session)
    sent = model.inputs[-1]
    assert sent[0]["role"] == "assistant"
    assert sent[0]["content"].startswith("[Summary of earlier conversation")
    assert len(sent) < 2 * 4 + 1  # fewer than every earlier item and the new question
    assert sent[-1] == {"role": "user", "content": "Question 4?"}
    # Every item is still stored.
    every = CtxAdminSession(
        session_id, app=app.name, user_id=user_id, client=async_client, compacted_history=False
    )
    assert len(await every.get_items()) == 2 * 5


async def _compactions(client, app, session) -> list[dict]:
    listed = client.list_compactions(app.name, session.user_id, session.session_id)
    return [c async for c in listed]

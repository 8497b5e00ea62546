"""A real ADK Runner on ctxadmin across a restart, event for event the session ADK's own
InMemorySessionService keeps.

Two LlmAgents (a concierge that transfers to a booker) answer through a scripted model (no
network): a tool call, an agent transfer, a tool that requires confirmation (still pending
after the restart), a long-running call, ADK's own sliding-window compaction with a scripted
summarizer, and a rewind. After each turn the Runner and the services are made anew, reading
the session from storage, as a process restart would. The same script on ADK's in-memory
services must leave an identical session: ``Session.model_dump`` equal field by field, apart
from ``last_update_time`` (ctxadmin's ``updated_at``, the server's clock, where the in-memory
service keeps the last event's timestamp).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest
from ctxadmin_client.adk import CtxAdminArtifactService, CtxAdminSessionService
from google.adk.agents import LlmAgent
from google.adk.apps.app import App, EventsCompactionConfig
from google.adk.apps.base_events_summarizer import BaseEventsSummarizer
from google.adk.artifacts import InMemoryArtifactService
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.platform import time as adk_time
from google.adk.platform import uuid as adk_uuid
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools import FunctionTool, LongRunningFunctionTool, ToolContext
from google.genai import types

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.0
SESSION = "trip-1"


# ------------------------------------------------------------------ the scripted parts


def call(name: str, **args: Any) -> LlmResponse:
    return LlmResponse(
        content=types.Content(
            role="model", parts=[types.Part(function_call=types.FunctionCall(name=name, args=args))]
        )
    )


def say(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


# What the model answers, call after call, across the whole conversation.
SCRIPT = [
    call("find_trains", city="Oslo"),  # turn 1, concierge
    call("transfer_to_agent", agent_name="booker"),
    call("book_seat", train="IC-42"),  # booker: needs confirmation, the turn ends
    call("request_payment", amount=89),  # turn 2, after the seat is booked: long-running
    say("The payment is pending with your bank."),
    say("Paid: your ticket for IC-42 is confirmed."),  # turn 3 (the long call's result)
    say("Anything else for your trip?"),  # turn 4 (rewound afterwards)
]


class ScriptedLlm(BaseLlm):
    """Answers each request with the script's next response."""

    model: str = "scripted"
    responses: list[LlmResponse]
    seen: list[LlmRequest] = []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.seen.append(llm_request)
        yield self.responses.pop(0).model_copy(deep=True)


class ScriptedSummarizer(BaseEventsSummarizer):
    """ADK's compaction event, with a summary naming the events it covers."""

    async def maybe_summarize_events(self, *, events: list[Event]) -> Event | None:
        if not events:
            return None
        summary = (
            f"Summary of {len(events)} events by {', '.join(sorted({e.author for e in events}))}"
        )
        return Event(
            author="user",
            actions=EventActions(
                compaction=EventCompaction(
                    start_timestamp=events[0].timestamp,
                    end_timestamp=events[-1].timestamp,
                    compacted_content=types.Content(role="model", parts=[types.Part(text=summary)]),
                )
            ),
        )


def find_trains(city: str) -> dict:
    """Trains to a city."""
    return {"trains": ["IC-42", "RE-7"], "city": city}


def book_seat(train: str, tool_context: ToolContext) -> dict:
    """Book a seat (asks the user first)."""
    tool_context.state["booked"] = train
    tool_context.state["user:trips"] = 1
    tool_context.state["temp:scratch"] = "never stored"
    return {"seat": "12A", "train": train}


def request_payment(amount: int) -> dict:
    """Ask the bank for a payment (answers later)."""
    return {"status": "pending", "amount": amount}


def build_app(model: ScriptedLlm) -> App:
    booker = LlmAgent(
        name="booker",
        model=model,
        instruction="Book what the traveller chose.",
        tools=[
            FunctionTool(book_seat, require_confirmation=True),
            LongRunningFunctionTool(request_payment),
        ],
    )
    concierge = LlmAgent(
        name="concierge",
        model=model,
        instruction="Find trains, then hand over to the booker.",
        tools=[find_trains],
        sub_agents=[booker],
    )
    return App(
        name="travel",
        root_agent=concierge,
        events_compaction_config=EventsCompactionConfig(
            summarizer=ScriptedSummarizer(), compaction_interval=2, overlap_size=0
        ),
    )


# ------------------------------------------------------------------ the conversation


def user_text(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def function_answer(name: str, call_id: str, response: dict) -> types.Content:
    return types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(id=call_id, name=name, response=response)
            )
        ],
    )


def pending_calls(session, name: str) -> list[types.FunctionCall]:
    """The calls of ``name`` in the session that no function response answers yet."""
    answered = {r.id for e in session.events for r in e.get_function_responses()}
    return [
        c
        for e in session.events
        for c in e.get_function_calls()
        if c.name == name and c.id not in answered
    ]


async def converse(make_services: Callable[[], tuple[Any, Any]], app_name: str, user: str):
    """The whole script, a new Runner (and services) for each turn; returns the final session
    and what was seen pending after each restart. Ids and times come from ADK's platform
    providers, one per call, so both runs give the same ones; the session is created before
    they are set (ADK's in-memory service reads the clock there, ctxadmin's server does)."""
    sessions, _ = make_services()
    await sessions.create_session(
        app_name=app_name, user_id=user, session_id=SESSION, state={"user:name": "Ada"}
    )
    ids = (f"id-{n:04d}" for n in itertools.count())
    ticks = (T0 + n / 64 for n in itertools.count())
    adk_uuid.set_id_provider(lambda: next(ids))
    adk_time.set_time_provider(lambda: next(ticks))
    model = ScriptedLlm(responses=[r.model_copy(deep=True) for r in SCRIPT])
    observed: dict[str, Any] = {}
    try:

        async def turn(message: types.Content) -> list[Event]:
            sessions, artifacts = make_services()
            runner = Runner(
                app=build_app(model),
                app_name=app_name,
                session_service=sessions,
                artifact_service=artifacts,
            )
            try:
                return [
                    event
                    async for event in runner.run_async(
                        user_id=user, session_id=SESSION, new_message=message
                    )
                ]
            finally:
                await runner.close()

        await turn(user_text("Find me a train to Oslo and book it."))
        sessions, _ = make_services()
        reloaded = await sessions.get_session(app_name=app_name, user_id=user, session_id=SESSION)
        confirmations = pending_calls(reloaded, "adk_request_confirmation")
        observed["pending_confirmations"] = len(confirmations)
        observed["requested"] = [
            sorted(e.actions.requested_tool_confirmations)
            for e in reloaded.events
            if e.actions.requested_tool_confirmations
        ]

        await turn(
            function_answer("adk_request_confirmation", confirmations[0].id, {"confirmed": True})
        )
        sessions, _ = make_services()
        reloaded = await sessions.get_session(app_name=app_name, user_id=user, session_id=SESSION)
        # A long-running call answers "pending" at once; its result comes later, by its id.
        payments = [
            c
            for e in reloaded.events
            if e.long_running_tool_ids
            for c in e.get_function_calls()
            if c.name == "request_payment"
        ]
        observed["long_running"] = [
            sorted(e.long_running_tool_ids) for e in reloaded.events if e.long_running_tool_ids
        ]

        await turn(
            function_answer("request_payment", payments[0].id, {"status": "paid", "amount": 89})
        )
        await turn(user_text("Thanks!"))

        sessions, artifacts = make_services()
        reloaded = await sessions.get_session(app_name=app_name, user_id=user, session_id=SESSION)
        last_turn = [e for e in reloaded.events if e.author == "user" and e.content][-1]
        runner = Runner(
            app=build_app(model),
            app_name=app_name,
            session_service=sessions,
            artifact_service=artifacts,
        )
        await runner.rewind_async(
            user_id=user, session_id=SESSION, rewind_before_invocation_id=last_turn.invocation_id
        )
        await runner.close()

        sessions, _ = make_services()
        final = await sessions.get_session(app_name=app_name, user_id=user, session_id=SESSION)
        observed["model_calls"] = len(model.seen)
        return final, observed
    finally:
        adk_uuid.reset_id_provider()
        adk_time.reset_time_provider()


def dump(session) -> dict:
    data = session.model_dump(mode="json")
    data.pop("last_update_time")
    return data


async def test_a_runner_on_ctxadmin_keeps_the_session_adk_keeps(make_app, user):
    app = make_app(name=f"travel-{user[-8:]}", scopes=("sessions",))
    clients: list = []

    def ours():
        sessions = CtxAdminSessionService(app.base_url, app.key)
        artifacts = CtxAdminArtifactService(app.base_url, app.key)
        clients.extend([sessions, artifacts])
        return sessions, artifacts

    in_memory = (InMemorySessionService(), InMemoryArtifactService())
    try:
        got, seen = await converse(ours, app.name, user)
    finally:
        for service in clients:
            await service.close()
    expected, expected_seen = await converse(lambda: in_memory, app.name, user)

    assert seen == expected_seen
    assert seen["pending_confirmations"] == 1
    assert seen["long_running"] and seen["model_calls"] == len(SCRIPT)
    ours, theirs = dump(got), dump(expected)
    assert [e["id"] for e in ours.pop("events")] == [e["id"] for e in theirs.pop("events")]
    for mine, peer in zip(got.events, expected.events, strict=True):
        assert mine.model_dump(mode="json") == peer.model_dump(mode="json"), mine.id
    assert ours == theirs
    authors = {event.author for event in got.events}
    assert {"user", "concierge", "booker"} <= authors
    assert any(event.actions.transfer_to_agent == "booker" for event in got.events)
    assert any(event.actions.compaction for event in got.events)
    assert any(event.actions.rewind_before_invocation_id for event in got.events)
    assert got.state["booked"] == "IC-42" and got.state["user:trips"] == 1
    assert "temp:scratch" not in got.state

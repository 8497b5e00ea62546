"""``CtxAdminSession`` against the SDK's own ``SQLiteSession``: the same operations, the same
answers; then what only ctxadmin adds (concurrent pops, the built context, other tenants)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from agents.memory import Session, SQLiteSession, is_openai_responses_compaction_aware_session
from ctxadmin_client import AsyncClient, errors
from ctxadmin_client.openai_agents import CtxAdminSession
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# ------------------------------------------------------------------ the SDK's item shapes
# Text as a JSON document carries it: no NUL (PostgreSQL's JSON has none) and no lone
# surrogate (not UTF-8).
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=40)
IDS = st.sampled_from(["call_1", "call_2", "call_a.b:c", "tool-9"])
NAMES = st.sampled_from(["get_weather", "book", "lookup.city"])
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def user_messages():
    easy = st.builds(lambda text: {"role": "user", "content": text}, TEXT)
    typed = st.builds(
        lambda texts, role: {
            "type": "message",
            "role": role,
            "content": [{"type": "input_text", "text": t} for t in texts],
        },
        st.lists(TEXT, min_size=1, max_size=3),
        st.sampled_from(["user", "system", "developer"]),
    )
    return easy | typed


def assistant_messages():
    return st.builds(
        lambda n, text, refusal: {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]
            + ([{"type": "refusal", "refusal": refusal}] if refusal else []),
        },
        st.integers(0, 999),
        TEXT,
        st.none() | TEXT,
    )


def function_calls():
    arguments = st.dictionaries(TEXT, JSON_VALUES, max_size=3).map(json.dumps) | TEXT
    return st.builds(
        lambda call_id, name, args: {
            "type": "function_call",
            "call_id": call_id,
            "name": name,
            "arguments": args,
        },
        IDS | TEXT,
        NAMES,
        arguments,
    )


def function_outputs():
    return st.builds(
        lambda call_id, output: {
            "type": "function_call_output",
            "call_id": call_id,
            "output": output,
        },
        IDS | TEXT,
        TEXT | st.lists(st.builds(lambda t: {"type": "input_text", "text": t}, TEXT), max_size=2),
    )


def others():
    reasoning = st.builds(
        lambda n, texts: {
            "type": "reasoning",
            "id": f"rs_{n}",
            "summary": [{"type": "summary_text", "text": t} for t in texts],
        },
        st.integers(0, 999),
        st.lists(TEXT, max_size=2),
    )
    search = st.builds(
        lambda n, query: {
            "type": "web_search_call",
            "id": f"ws_{n}",
            "status": "completed",
            "action": {"type": "search", "query": query},
        },
        st.integers(0, 999),
        TEXT,
    )
    return reasoning | search


def items():
    return user_messages() | assistant_messages() | function_calls() | function_outputs() | others()


# One operation of the protocol: ("add", items) | ("get", limit) | ("pop",) | ("clear",).
OPERATIONS = st.one_of(
    st.tuples(st.just("add"), st.lists(items(), max_size=4)),
    st.tuples(st.just("get"), st.none() | st.integers(-1, 6)),
    st.tuples(st.just("pop")),
    st.tuples(st.just("clear")),
)


async def _apply(session: Session, operation: tuple) -> object:
    match operation:
        case ("add", batch):
            return await session.add_items(list(batch))
        case ("get", limit):
            return await session.get_items(limit)
        case ("pop",):
            return await session.pop_item()
        case ("clear",):
            return await session.clear_session()
    raise AssertionError(operation)


async def _side_by_side(app, operations: list[tuple], limit: int | None) -> None:
    session_id = f"s-{uuid.uuid4().hex[:12]}"
    reference = SQLiteSession(session_id, session_settings={"limit": limit})
    async with AsyncClient(app.base_url, app.key) as client:
        ours = CtxAdminSession(
            session_id,
            app=app.name,
            user_id="hypothesis",
            client=client,
            session_settings={"limit": limit},
        )
        ours.read_window = 1  # reads of the newest items start small and grow
        try:
            for step, operation in enumerate(operations):
                expected = await _apply(reference, operation)
                answered = await _apply(ours, operation)
                assert answered == expected, (step, operation)
            assert await ours.get_items() == await reference.get_items()
            # A new session object (another process) reads the same history.
            again = CtxAdminSession(session_id, app=app.name, user_id="hypothesis", client=client)
            assert await again.get_items() == await reference.get_items(-1)
        finally:
            reference.close()


def test_protocol_answers_as_the_sdks_sqlite_session(app):
    @settings(
        max_examples=40,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(st.lists(OPERATIONS, max_size=12), st.none() | st.integers(1, 3))
    def check(operations, limit):
        asyncio.run(_side_by_side(app, operations, limit))

    check()


@pytest.mark.anyio
async def test_is_the_sdks_session_and_compaction_aware(make_session):
    session = make_session()
    assert isinstance(session, Session)
    assert is_openai_responses_compaction_aware_session(session)


@pytest.mark.anyio
async def test_items_are_kept_verbatim_and_read_as_adk_events(make_session, async_client, app):
    session = make_session()
    stored = [
        {"role": "user", "content": "Weather in Lisbon?"},
        {
            "type": "function_call",
            "call_id": "call_7",
            "name": "get_weather",
            "arguments": '{"city": "Lisbon", "days": 2.5}',
            "id": "fc_1",
            "status": "completed",
        },
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e" * 40},
        {"type": "function_call_output", "call_id": "call_7", "output": "sunny, 24 C"},
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Sunny, 24 C.", "annotations": []}],
        },
    ]
    await session.add_items(stored[:2])
    await session.add_items(stored[2:])  # the output's call came in an earlier call
    assert await session.get_items() == stored
    assert await session.get_items(2) == stored[-2:]

    events = [
        e async for e in async_client.list_events(app.name, session.user_id, session.session_id)
    ]
    assert [e["output"] for e in events] == stored
    assert [e["author"] for e in events] == [
        "user",
        "assistant",
        "assistant",
        "assistant",
        "assistant",
    ]
    assert events[0]["content"] == {"role": "user", "parts": [{"text": "Weather in Lisbon?"}]}
    assert events[1]["content"]["parts"] == [
        {
            "function_call": {
                "id": "call_7",
                "name": "get_weather",
                "args": {"city": "Lisbon", "days": 2.5},
            }
        }
    ]
    assert "content" not in events[2] or events[2]["content"] is None
    assert events[3]["content"] == {
        "role": "user",
        "parts": [
            {
                "function_response": {
                    "id": "call_7",
                    "name": "get_weather",
                    "response": {"output": "sunny, 24 C"},
                }
            }
        ],
    }
    assert events[4]["content"] == {"role": "model", "parts": [{"text": "Sunny, 24 C."}]}


@pytest.mark.anyio
async def test_the_built_context_reads_as_the_conversation_without_popped_items(
    make_session, async_client, app
):
    session = make_session()
    await session.add_items(
        [
            {"role": "user", "content": "Weather in Lisbon?"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Lisbon"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "a message taken back"},
        ]
    )
    assert await session.pop_item() == {"role": "user", "content": "a message taken back"}
    built = await async_client.build_context(
        app.name,
        session.user_id,
        session.session_id,
        current_input={"role": "user", "parts": [{"text": "And tomorrow?"}]},
    )
    history = built["envelope"]["history"]
    assert [h["content"]["role"] for h in history] == ["user", "model", "user", "model"]
    flat = str(history)
    assert "get_weather" in flat and "It is sunny." in flat
    assert "a message taken back" not in flat


@pytest.mark.anyio
async def test_concurrent_pops_each_take_another_item(make_session):
    session = make_session()
    stored = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    await session.add_items(stored)
    peers = [make_session(session.session_id, session.user_id) for _ in range(4)]
    popped = await asyncio.gather(*(peer.pop_item() for peer in peers))
    assert sorted(item["content"] for item in popped) == ["m2", "m3", "m4", "m5"]
    assert await session.get_items() == stored[:2]


@pytest.mark.anyio
async def test_an_item_over_the_limit_is_refused_whole(make_session):
    session = make_session()
    await session.add_items([{"role": "user", "content": "kept"}])
    too_big = {"type": "function_call_output", "call_id": "c1", "output": "x" * (300 * 1024)}
    with pytest.raises(Exception) as raised:
        await session.add_items([{"role": "user", "content": "not kept"}, too_big])
    assert getattr(raised.value, "status", None) == 400
    assert await session.get_items() == [{"role": "user", "content": "kept"}]


@pytest.mark.anyio
async def test_another_apps_key_finds_no_such_session(make_session, make_app):
    session = make_session()
    await session.add_items([{"role": "user", "content": "private"}])
    other = make_app()
    async with AsyncClient(other.base_url, other.key) as client:
        stranger = CtxAdminSession(
            session.session_id, app=session.app, user_id=session.user_id, client=client
        )
        assert await stranger.get_items() == []
        assert await stranger.pop_item() is None
        with pytest.raises(errors.NotFoundError):
            await stranger.add_items([{"role": "user", "content": "intruder"}])
        await stranger.clear_session()
    assert await session.get_items() == [{"role": "user", "content": "private"}]


@pytest.mark.anyio
async def test_run_compaction_reads_ctxadmins_summary_in_place_of_the_covered_items(
    make_session, async_client, app
):
    session = make_session()
    exchanges = []
    for n in range(6):
        exchanges += [
            {"role": "user", "content": f"Question {n}: where is flight {n}?"},
            {"role": "assistant", "content": f"Flight {n} is at gate {n}."},
        ]
    await session.add_items(exchanges)
    await async_client.set_session_compaction_policy(
        app.name,
        session.user_id,
        session.session_id,
        token_threshold=100000,
        retain_recent_exchanges=1,
        min_reclaim_tokens=0,
    )
    # The Runner's call after a turn leaves it to ctxadmin's automatic compaction.
    await session.run_compaction({"response_id": "resp_1", "force": False})
    assert await session.get_items() == exchanges
    await session.run_compaction()
    items = await session.get_items()
    summary, retained = items[0], items[1:]
    assert (
        summary["role"] == "assistant" and "Summary of earlier conversation" in summary["content"]
    )
    assert retained == exchanges[-len(retained) :] and len(retained) < len(exchanges)
    assert await session.get_items(len(retained)) == retained
    session.read_window = 1  # the newest events read first hold no summary: it reads back
    assert await session.get_items(len(items)) == items
    assert await session.get_items(len(items) + 5) == items
    everything = make_session(session.session_id, session.user_id, compacted_history=False)
    assert await everything.get_items() == exchanges
    # The newest stored item pops, whatever summary stands before it.
    assert await session.pop_item() == exchanges[-1]
    assert (await session.get_items())[-1] == exchanges[-2]

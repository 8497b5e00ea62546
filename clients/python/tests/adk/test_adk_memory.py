"""CtxAdminMemoryService keeps ADK's BaseMemoryService contract, beside ADK's
InMemoryMemoryService: sessions, event deltas and explicit entries become memories that a
search of the same user finds, and another user's search never does."""

from __future__ import annotations

import pytest
from google.adk.events.event import Event
from google.adk.memory import InMemoryMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session
from google.genai import types

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.0


def said(n: int, author: str, text: str) -> Event:
    return Event(
        id=f"mem-ev-{n}",
        invocation_id="inv-m",
        author=author,
        timestamp=T0 + n,
        content=types.Content(
            role="user" if author == "user" else "model", parts=[types.Part(text=text)]
        ),
    )


def conversation(app: str, user: str, sid: str) -> Session:
    return Session(
        id=sid,
        app_name=app,
        user_id=user,
        events=[
            said(1, "user", "My sister Ingrid lives in Trondheim."),
            said(2, "helper", "Noted: Ingrid lives in Trondheim."),
            said(3, "user", "I am allergic to hazelnuts."),
            Event(id="mem-ev-4", invocation_id="inv-m", author="helper", timestamp=T0 + 4),
        ],
    )


def texts(response: SearchMemoryResponse) -> list[str]:
    return [part.text for entry in response.memories for part in entry.content.parts]


async def test_a_session_in_memory_is_found_by_its_user_as_adk_finds_it(adk, user):
    peer = InMemoryMemoryService()
    session = conversation(adk.app, user, "m-1")
    answers = []
    for service in (adk.memory, peer):
        await service.add_session_to_memory(session)
        found = await service.search_memory(app_name=adk.app, user_id=user, query="hazelnuts")
        answers.append(found)
    ours, theirs = answers
    assert texts(ours)[0] == texts(theirs)[0] == "I am allergic to hazelnuts."
    best, their_best = ours.memories[0], theirs.memories[0]
    assert (best.author, best.timestamp, best.content.role) == (
        their_best.author,
        their_best.timestamp,
        their_best.content.role,
    )
    assert best.custom_metadata == their_best.custom_metadata == {}
    assert best.id  # ctxadmin's memory id (ADK's in-memory service uses the event id)


async def test_adding_a_session_again_adds_nothing_twice(adk, user):
    session = conversation(adk.app, user, "m-2")
    await adk.memory.add_session_to_memory(session)
    await adk.memory.add_session_to_memory(session)
    found = texts(await adk.memory.search_memory(app_name=adk.app, user_id=user, query="Trondheim"))
    assert found.count("My sister Ingrid lives in Trondheim.") == 1
    assert found.count("Noted: Ingrid lives in Trondheim.") == 1


async def test_another_users_memory_is_never_found(adk, user, other_user):
    await adk.memory.add_session_to_memory(conversation(adk.app, user, "m-3"))
    found = await adk.memory.search_memory(
        app_name=adk.app, user_id=other_user, query="hazelnuts Trondheim Ingrid"
    )
    assert found.memories == []


async def test_event_deltas_are_added_with_or_without_a_session(adk, user):
    peer = InMemoryMemoryService()
    for service in (adk.memory, peer):
        await service.add_events_to_memory(
            app_name=adk.app,
            user_id=user,
            events=[said(10, "user", "The spare key is under the blue flowerpot.")],
            session_id="m-4",
        )
        await service.add_events_to_memory(
            app_name=adk.app,
            user_id=user,
            events=[said(11, "user", "The blue bicycle needs new brakes.")],
        )
    ours = await adk.memory.search_memory(app_name=adk.app, user_id=user, query="flowerpot")
    theirs = await peer.search_memory(app_name=adk.app, user_id=user, query="flowerpot")
    assert texts(ours)[0] == texts(theirs)[0] == "The spare key is under the blue flowerpot."
    bikes = await adk.memory.search_memory(app_name=adk.app, user_id=user, query="bicycle brakes")
    assert texts(bikes)[0] == "The blue bicycle needs new brakes."


async def test_explicit_entries_keep_their_text_author_and_metadata(adk, user):
    entry = MemoryEntry(
        id="fact-1",
        content=types.Content(role="user", parts=[types.Part(text="Prefers aisle seats.")]),
        author="user",
        custom_metadata={"kind": "preference"},
    )
    await adk.memory.add_memory(
        app_name=adk.app, user_id=user, memories=[entry], custom_metadata={"origin": "profile"}
    )
    await adk.memory.add_memory(app_name=adk.app, user_id=user, memories=[entry])  # same id
    found = await adk.memory.search_memory(app_name=adk.app, user_id=user, query="aisle seats")
    assert texts(found) == ["Prefers aisle seats."]
    hit = found.memories[0]
    assert hit.author == "user" and hit.content.role == "user"
    assert hit.custom_metadata == {"origin": "profile", "kind": "preference"}


async def test_delete_memory_removes_one_entry_and_ignores_unknown_ids(adk, user):
    await adk.memory.add_session_to_memory(conversation(adk.app, user, "m-5"))
    found = await adk.memory.search_memory(app_name=adk.app, user_id=user, query="hazelnuts")
    await adk.memory.delete_memory(app_name=adk.app, user_id=user, memory_id=found.memories[0].id)
    again = await adk.memory.search_memory(app_name=adk.app, user_id=user, query="hazelnuts")
    assert "I am allergic to hazelnuts." not in texts(again)
    await adk.memory.delete_memory(app_name=adk.app, user_id=user, memory_id=found.memories[0].id)
    await adk.memory.delete_memory(app_name=adk.app, user_id=user, memory_id=None)


async def test_a_blank_query_finds_nothing(adk, user):
    await adk.memory.add_session_to_memory(conversation(adk.app, user, "m-6"))
    found = await adk.memory.search_memory(app_name=adk.app, user_id=user, query="   ")
    assert found == SearchMemoryResponse()


async def test_event_memories_carry_the_calls_custom_metadata(adk, user):
    await adk.memory.add_events_to_memory(
        app_name=adk.app,
        user_id=user,
        events=[said(20, "user", "Call me after six on weekdays.")],
        session_id="m-7",
        custom_metadata={"channel": "sms"},
    )
    found = await adk.memory.search_memory(app_name=adk.app, user_id=user, query="weekdays")
    assert texts(found) == ["Call me after six on weekdays."]
    assert found.memories[0].custom_metadata == {"channel": "sms"}
    assert found.memories[0].content.role == "user"


async def test_a_search_finds_the_current_version_of_a_fact_only(adk, user):
    """A fact with a key that changed: ADK's search finds what is true now, not the version
    it superseded (which stays in the key's history)."""
    first = await adk.client.add_memory(
        adk.app,
        user,
        "Prefers aisle seats.",
        key="preference.seat",
        valid_from="2026-01-01T00:00:00Z",
    )
    await adk.client.add_memory(
        adk.app,
        user,
        "Prefers window seats.",
        key="preference.seat",
        valid_from="2026-06-01T00:00:00Z",
    )
    found = await adk.memory.search_memory(app_name=adk.app, user_id=user, query="prefers seats")
    assert texts(found) == ["Prefers window seats."]
    history = await adk.client.memory_history(adk.app, user, first["id"])
    assert [v["content"] for v in history["versions"]] == [
        "Prefers aisle seats.",
        "Prefers window seats.",
    ]

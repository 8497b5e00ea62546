"""A session id padded with whitespace (``'order-42\\n'``) is the id without it, on every call
of every ADK service, as ADK's own in-memory session service takes it."""

from __future__ import annotations

import pytest
from google.adk.events.event import Event
from google.adk.sessions.session import Session
from google.genai import types

pytestmark = pytest.mark.anyio

PADDED = " order-42\n"
PLAIN = "order-42"


def said(n: int, text: str) -> Event:
    return Event(
        id=f"pad-ev-{n}",
        invocation_id=f"pad-inv-{n}",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
    )


async def test_every_session_call_strips_a_padded_id(adk, peer, user):
    for service in (adk.sessions, peer):
        made = await service.create_session(app_name=adk.app, user_id=user, session_id=PADDED)
        assert made.id == PLAIN
        got = await service.get_session(app_name=adk.app, user_id=user, session_id=PADDED)
        assert got is not None and got.id == PLAIN
        await service.append_event(got, said(1, "hello"))
        read = await service.get_session(app_name=adk.app, user_id=user, session_id=PADDED)
        assert [e.id for e in read.events] == ["pad-ev-1"]
        await service.delete_session(app_name=adk.app, user_id=user, session_id=PADDED)
        assert await service.get_session(app_name=adk.app, user_id=user, session_id=PLAIN) is None


async def test_a_session_object_under_a_padded_id_appends_to_its_session(adk, user):
    made = await adk.sessions.create_session(app_name=adk.app, user_id=user, session_id=PLAIN)
    padded = made.model_copy(update={"id": PADDED})
    await adk.sessions.append_event(padded, said(1, "hello"))
    await adk.sessions.append_event(padded, said(2, "again"))
    read = await adk.sessions.get_session(app_name=adk.app, user_id=user, session_id=PLAIN)
    assert [e.id for e in read.events] == ["pad-ev-1", "pad-ev-2"]


async def test_every_artifact_call_strips_a_padded_session_id(adk, user):
    await adk.sessions.create_session(app_name=adk.app, user_id=user, session_id=PLAIN)
    where = {"app_name": adk.app, "user_id": user}
    art = adk.artifacts
    for text in ("v0", "v1"):
        await art.save_artifact(
            **where, session_id=PADDED, filename="a.txt", artifact=types.Part(text=text)
        )
    loaded = await art.load_artifact(**where, session_id=PLAIN, filename="a.txt")
    assert loaded.text == "v1"
    loaded = await art.load_artifact(**where, session_id=PADDED, filename="a.txt", version=0)
    assert loaded.text == "v0"
    assert await art.list_artifact_keys(**where, session_id=PADDED) == ["a.txt"]
    assert await art.list_versions(**where, session_id=PADDED, filename="a.txt") == [0, 1]
    versions = await art.list_artifact_versions(**where, session_id=PADDED, filename="a.txt")
    assert [v.version for v in versions] == [0, 1]
    assert f"/sessions/{PLAIN}/artifacts/a.txt" in versions[0].canonical_uri
    found = await art.get_artifact_version(**where, session_id=PADDED, filename="a.txt")
    assert found.version == 1
    await art.delete_artifact(**where, session_id=PADDED, filename="a.txt")
    assert await art.list_artifact_keys(**where, session_id=PLAIN) == []


async def test_memory_of_a_padded_session_id_is_the_sessions(adk, user):
    session = Session(id=PADDED, app_name=adk.app, user_id=user, events=[said(1, "kiwi jam")])
    await adk.memory.add_session_to_memory(session)
    # The same events under the plain id are the same memories: nothing is added twice.
    await adk.memory.add_events_to_memory(
        app_name=adk.app, user_id=user, session_id=PLAIN, events=session.events
    )
    found = await adk.memory.search_memory(app_name=adk.app, user_id=user, query="kiwi jam")
    assert [p.text for m in found.memories for p in m.content.parts] == ["kiwi jam"]

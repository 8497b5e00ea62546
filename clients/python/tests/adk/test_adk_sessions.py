"""CtxAdminSessionService keeps ADK's BaseSessionService contract: each behaviour runs on
ctxadmin and on ADK's InMemorySessionService, and the two answers are compared."""

from __future__ import annotations

import pytest
from ctxadmin_client.adk import CtxAdminSessionService
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.0  # multiples of 1/64 s are exact in microseconds and in floats


def text_event(n: int, text: str, *, author: str = "user", state=None, invocation="inv-1"):
    role = "user" if author == "user" else "model"
    return Event(
        id=f"ev-{n}",
        invocation_id=invocation,
        author=author,
        timestamp=T0 + n / 64,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=state or {}),
    )


def own(state: dict) -> dict:
    """A state without its ``app:`` keys (the module's other tests write some too)."""
    return {key: value for key, value in state.items() if not key.startswith("app:")}


def comparable(session) -> dict:
    """A session's dump without the time the store assigns (``last_update_time``)."""
    dump = session.model_dump(mode="json")
    dump.pop("last_update_time")
    return dump


async def test_create_merges_the_app_and_user_scopes_and_drops_temp(adk, peer, user):
    state = {"app:plan": "gold", "user:lang": "fr", "topic": "trains", "temp:scratch": 1}
    ours = await adk.sessions.create_session(
        app_name=adk.app, user_id=user, state=state, session_id="s-1"
    )
    theirs = await peer.create_session(
        app_name=adk.app, user_id=user, state=state, session_id="s-1"
    )
    assert comparable(ours) == comparable(theirs)
    assert ours.state["app:plan"] == "gold"
    assert own(ours.state) == {"user:lang": "fr", "topic": "trains"}
    assert ours.last_update_time > 0


async def test_scopes_reach_other_sessions_as_adk_says(adk, peer, user, other_user):
    answers = []
    for service in (adk.sessions, peer):
        first = await service.create_session(app_name=adk.app, user_id=user, session_id="a")
        await service.append_event(
            first,
            text_event(1, "hi", state={"app:v": 1, "user:u": 2, "own": 3, "temp:t": 4}),
        )
        second = await service.create_session(app_name=adk.app, user_id=user, session_id="b")
        stranger = await service.create_session(
            app_name=adk.app, user_id=other_user, session_id="c"
        )
        reread = await service.get_session(app_name=adk.app, user_id=user, session_id="a")
        answers.append((second.state, stranger.state, reread.state, first.state))
    assert answers[0] == answers[1]
    second_state, stranger_state, reread_state, in_memory_state = answers[0]
    assert second_state["app:v"] == stranger_state["app:v"] == reread_state["app:v"] == 1
    assert own(second_state) == {"user:u": 2}
    assert own(stranger_state) == {}
    assert own(reread_state) == {"user:u": 2, "own": 3}
    assert in_memory_state["temp:t"] == 4  # the caller's session keeps temp for the invocation


async def test_an_existing_id_is_adks_already_exists_error(adk, peer, user):
    await adk.sessions.create_session(app_name=adk.app, user_id=user, session_id="dup")
    with pytest.raises(AlreadyExistsError):
        await adk.sessions.create_session(app_name=adk.app, user_id=user, session_id="dup")
    await peer.create_session(app_name=adk.app, user_id=user, session_id="dup")
    with pytest.raises(AlreadyExistsError):
        await peer.create_session(app_name=adk.app, user_id=user, session_id="dup")


async def test_a_generated_id_when_none_is_given(adk, user):
    session = await adk.sessions.create_session(app_name=adk.app, user_id=user)
    assert session.id
    again = await adk.sessions.get_session(app_name=adk.app, user_id=user, session_id=session.id)
    assert again is not None and again.id == session.id


async def test_missing_sessions_are_none_and_deleting_one_is_quiet(adk, peer, user):
    for service in (adk.sessions, peer):
        assert await service.get_session(app_name=adk.app, user_id=user, session_id="no") is None
        await service.delete_session(app_name=adk.app, user_id=user, session_id="no")


async def test_delete_then_get_and_append(adk, peer, user):
    for service in (adk.sessions, peer):
        session = await service.create_session(app_name=adk.app, user_id=user, session_id="gone")
        await service.delete_session(app_name=adk.app, user_id=user, session_id="gone")
        assert await service.get_session(app_name=adk.app, user_id=user, session_id="gone") is None
        with pytest.raises(SessionNotFoundError):
            await service.append_event(session, text_event(1, "late"))


async def test_append_trims_temp_skips_partial_and_stores_the_rest(adk, peer, user):
    results = []
    for service in (adk.sessions, peer):
        session = await service.create_session(app_name=adk.app, user_id=user, session_id="ap")
        partial = text_event(1, "typing", author="agent")
        partial.partial = True
        returned_partial = await service.append_event(session, partial)
        event = text_event(2, "done", author="agent", state={"k": "v", "temp:x": 1})
        returned = await service.append_event(session, event)
        stored = await service.get_session(app_name=adk.app, user_id=user, session_id="ap")
        results.append(
            (
                returned_partial is partial,
                returned.actions.state_delta,
                [e.id for e in session.events],
                session.state,
                comparable(stored),
            )
        )
    assert results[0] == results[1]
    assert results[0][1] == {"k": "v"}
    assert results[0][2] == ["ev-2"]
    assert own(results[0][3]) == {"k": "v", "temp:x": 1}
    assert "temp:x" not in results[0][4]["state"]


async def test_get_session_config_as_adk_reads_it(adk, peer, user):
    configs = [
        None,
        GetSessionConfig(num_recent_events=0),
        GetSessionConfig(num_recent_events=2),
        GetSessionConfig(num_recent_events=50),
        GetSessionConfig(after_timestamp=T0 + 3 / 64),  # inclusive
        GetSessionConfig(after_timestamp=T0 + 100),
        GetSessionConfig(num_recent_events=1, after_timestamp=T0 + 2 / 64),
    ]
    answers = []
    for service in (adk.sessions, peer):
        session = await service.create_session(app_name=adk.app, user_id=user, session_id="cfg")
        for n in range(1, 6):
            await service.append_event(session, text_event(n, f"message {n}"))
        ids = []
        for config in configs:
            got = await service.get_session(
                app_name=adk.app, user_id=user, session_id="cfg", config=config
            )
            ids.append([event.id for event in got.events])
        answers.append(ids)
    assert answers[0] == answers[1]
    assert answers[0][1] == [] and answers[0][2] == ["ev-4", "ev-5"]
    assert answers[0][4] == ["ev-3", "ev-4", "ev-5"]


async def test_negative_num_recent_events_is_refused_by_adks_config():
    with pytest.raises(ValueError):
        GetSessionConfig(num_recent_events=-1)


async def test_list_sessions_for_one_user_and_across_users(adk, peer, user, other_user):
    answers = []
    for service in (adk.sessions, peer):
        for owner, sid, state in (
            (user, "l1", {"user:name": "ada", "n": 1}),
            (user, "l2", {"n": 2}),
            (other_user, "l3", {"app:shared": True}),
        ):
            session = await service.create_session(
                app_name=adk.app, user_id=owner, session_id=sid, state=state
            )
            await service.append_event(session, text_event(len(sid) + int(sid[1]), "hello"))
        mine = await service.list_sessions(app_name=adk.app, user_id=user)
        everyone = [
            s
            for s in (await service.list_sessions(app_name=adk.app)).sessions
            if s.user_id in (user, other_user)
        ]
        nobody = await service.list_sessions(app_name=adk.app, user_id="nobody-at-all")
        answers.append(
            (
                [(s.user_id, s.id, s.state, s.events) for s in mine.sessions],
                sorted((s.user_id, s.id, tuple(sorted(s.state.items()))) for s in everyone),
                nobody.sessions,
            )
        )
    assert answers[0] == answers[1]
    assert [sid for _, sid, _, _ in answers[0][0]] == ["l1", "l2"]  # oldest update first
    assert answers[0][0][0][2]["app:shared"] is True
    assert own(answers[0][0][0][2]) == {"user:name": "ada", "n": 1}
    assert len(answers[0][1]) == 3


async def test_list_sessions_is_ordered_by_last_update(adk, user):
    for sid in ("o1", "o2", "o3"):
        await adk.sessions.create_session(app_name=adk.app, user_id=user, session_id=sid)
    first = await adk.sessions.get_session(app_name=adk.app, user_id=user, session_id="o1")
    await adk.sessions.append_event(first, text_event(1, "newest activity"))
    listed = await adk.sessions.list_sessions(app_name=adk.app, user_id=user)
    assert [s.id for s in listed.sessions] == ["o2", "o3", "o1"]
    times = [s.last_update_time for s in listed.sessions]
    assert times == sorted(times)


async def test_a_stale_writer_gets_adks_stale_session_error_and_writes_nothing(adk, user):
    await adk.sessions.create_session(app_name=adk.app, user_id=user, session_id="race")
    one = await adk.sessions.get_session(app_name=adk.app, user_id=user, session_id="race")
    two = await adk.sessions.get_session(app_name=adk.app, user_id=user, session_id="race")
    await adk.sessions.append_event(one, text_event(1, "first writer"))
    with pytest.raises(StaleSessionError):
        await adk.sessions.append_event(two, text_event(2, "second writer", state={"x": 1}))
    stored = await adk.sessions.get_session(app_name=adk.app, user_id=user, session_id="race")
    assert [e.id for e in stored.events] == ["ev-1"] and "x" not in stored.state
    # The writer that kept its session keeps appending; a reload lets the other one in.
    await adk.sessions.append_event(one, text_event(3, "still current"))
    fresh = await adk.sessions.get_session(app_name=adk.app, user_id=user, session_id="race")
    await adk.sessions.append_event(fresh, text_event(4, "after reload"))
    stored = await adk.sessions.get_session(app_name=adk.app, user_id=user, session_id="race")
    assert [e.id for e in stored.events] == ["ev-1", "ev-3", "ev-4"]


async def test_the_created_session_can_append_at_once(adk, user):
    session = await adk.sessions.create_session(app_name=adk.app, user_id=user, session_id="c0")
    await adk.sessions.append_event(session, text_event(1, "no reload needed"))
    await adk.sessions.append_event(session, text_event(2, "nor here"))
    stored = await adk.sessions.get_session(app_name=adk.app, user_id=user, session_id="c0")
    assert len(stored.events) == 2
    assert session.last_update_time == stored.last_update_time


async def test_get_user_state_is_the_unprefixed_user_scope(adk, peer, user):
    answers = []
    for service in (adk.sessions, peer):
        assert await service.get_user_state(app_name=adk.app, user_id=user) == {}
        await service.create_session(
            app_name=adk.app, user_id=user, state={"user:tier": 3, "app:x": 1, "y": 2}
        )
        answers.append(await service.get_user_state(app_name=adk.app, user_id=user))
    assert answers[0] == answers[1] == {"tier": 3}


async def test_an_event_of_every_adk_field_round_trips(adk, user):
    session = await adk.sessions.create_session(app_name=adk.app, user_id=user, session_id="rt")
    call = types.FunctionCall(id="call-1", name="lookup", args={"q": "x", "n": [1, 2]})
    event = Event(
        id="rich-1",
        invocation_id="inv-rich",
        author="planner",
        branch="root.planner",
        timestamp=T0 + 1 / 64,
        content=types.Content(
            role="model",
            parts=[types.Part(text="thinking", thought=True), types.Part(function_call=call)],
        ),
        long_running_tool_ids={"call-1"},
        turn_complete=True,
        finish_reason=types.FinishReason.STOP,
        model_version="scripted-1",
        custom_metadata={"trace": {"step": 1}},
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=10, candidates_token_count=2, total_token_count=12
        ),
        actions=EventActions(
            state_delta={"k": [1, {"a": None}]},
            artifact_delta={"report.txt": 0},
            transfer_to_agent="helper",
            escalate=False,
            skip_summarization=True,
        ),
    )
    sent = event.model_dump(mode="json", exclude_none=True)
    await adk.sessions.append_event(session, event)
    stored = await adk.sessions.get_session(app_name=adk.app, user_id=user, session_id="rt")
    assert stored.events[0].model_dump(mode="json", exclude_none=True) == sent


async def test_an_event_delivered_twice_is_stored_and_applied_once(adk, peer, user):
    answers = []
    for service in (adk.sessions, peer):
        session = await service.create_session(app_name=adk.app, user_id=user, session_id="twice")
        event = text_event(1, "once", state={"count": 1})
        await service.append_event(session, event)
        await service.append_event(session, event.model_copy(deep=True))
        stored = await service.get_session(app_name=adk.app, user_id=user, session_id="twice")
        answers.append(([e.id for e in session.events], [e.id for e in stored.events]))
    assert answers[0] == answers[1] == (["ev-1"], ["ev-1"])


async def test_a_server_compaction_is_not_another_writer(adk, user):
    session = await adk.sessions.create_session(app_name=adk.app, user_id=user, session_id="cp")
    words = "the traveller compared the morning and the evening trains to the coast "
    for n in range(1, 9):
        author = "user" if n % 2 else "guide"
        await adk.sessions.append_event(
            session, text_event(n, f"turn {n}: {words * 4}", author=author, invocation=f"i{n}")
        )
    await adk.client.set_session_compaction_policy(
        adk.app, user, "cp", retain_recent_exchanges=1, automatic=False
    )
    compaction = await adk.client.request_compaction(adk.app, user, "cp")
    # The session object was read before the summary was stored; its next append goes on.
    await adk.sessions.append_event(session, text_event(9, "and a return ticket", invocation="i9"))
    summaries = [event for event in session.events if event.actions.compaction]
    assert len(summaries) == 1, compaction
    stored = await adk.sessions.get_session(app_name=adk.app, user_id=user, session_id="cp")
    assert [e.id for e in stored.events] == [e.id for e in session.events]
    assert stored.events[-2].actions.compaction.compacted_content.parts[0].text


async def test_the_service_takes_a_url_and_key_or_a_client_and_maps_app_names(adk, user):
    by_key = CtxAdminSessionService(adk.base_url, adk.key)
    by_client = CtxAdminSessionService(adk.client)
    mapped = CtxAdminSessionService(client=adk.client, app=adk.app)
    try:
        made = await by_key.create_session(app_name=adk.app, user_id=user, session_id="k")
        seen = await by_client.get_session(app_name=adk.app, user_id=user, session_id="k")
        assert seen is not None and seen.id == made.id
        # Another ADK app name, stored in the one ctxadmin app the service names.
        other = await mapped.create_session(app_name="Travel_Desk", user_id=user, session_id="m")
        assert other.app_name == "Travel_Desk"
        assert (await adk.client.get_session(adk.app, user, "m"))["session_id"] == "m"
    finally:
        await by_key.close()
        await by_client.close()  # a client passed in stays open
    assert (await adk.client.get_session(adk.app, user, "k"))["session_id"] == "k"
    with pytest.raises(TypeError):
        CtxAdminSessionService(adk.base_url, adk.key, client=adk.client)

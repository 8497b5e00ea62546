"""The context builder, compaction, invocations and tool tokens through both clients."""

from __future__ import annotations

import uuid

import pytest
from ctxadmin_client import AuthenticationError, Client

pytestmark = pytest.mark.e2e


def say(author: str, text: str, event_id: str, invocation_id: str) -> dict:
    return {
        "event_id": event_id,
        "invocation_id": invocation_id,
        "author": author,
        "content": {"role": "user" if author == "user" else "model", "parts": [{"text": text}]},
    }


def conversation(turns: int) -> list[dict]:
    events = []
    for turn in range(turns):
        events.append(say("user", f"question {turn} about the trip", f"u-{turn}", f"i-{turn}"))
        events.append(say("agent", f"answer {turn} about the trip", f"a-{turn}", f"i-{turn}"))
    return events


def test_a_context_is_built_from_the_history(client, app, user):
    sid = client.create_session(app.name, user)["session_id"]
    client.append_events(app.name, user, sid, conversation(2))
    built = client.build_context(
        app.name,
        user,
        sid,
        current_input={"role": "user", "parts": [{"text": "and now?"}]},
        instructions="Be brief.",
    )
    assert len(built["envelope"]["history"]) == 4
    assert built["envelope"]["instructions"] == "Be brief."
    assert len(built["context_fingerprint"]) == 64
    again = client.build_context(
        app.name,
        user,
        sid,
        current_input={"role": "user", "parts": [{"text": "and now?"}]},
        instructions="Be brief.",
    )
    assert again["context_fingerprint"] == built["context_fingerprint"]


def test_a_compaction_is_requested_listed_and_read(client, app, user):
    sid = client.create_session(app.name, user)["session_id"]
    client.append_events(app.name, user, sid, conversation(8))
    policy = client.set_session_compaction_policy(
        app.name, user, sid, token_threshold=100000, retain_recent_exchanges=1, min_reclaim_tokens=0
    )
    assert policy["source"] == "session"
    assert client.get_session_compaction_policy(app.name, user, sid)["source"] == "session"

    compaction_id = str(uuid.uuid4())
    made = client.request_compaction(app.name, user, sid, compaction_id=compaction_id)
    assert made["compaction_id"] == compaction_id
    listed = list(client.list_compactions(app.name, user, sid))
    assert [c["compaction_id"] for c in listed] == [compaction_id]
    detail = client.get_compaction(app.name, user, sid, compaction_id)
    assert detail["compaction_id"] == compaction_id and "summary" in detail

    assert client.delete_session_compaction_policy(app.name, user, sid) is None
    assert client.get_session_compaction_policy(app.name, user, sid)["source"] in ("app", "default")


def test_the_app_compaction_policy_is_set_read_and_dropped(client, app):
    set_to = client.set_app_compaction_policy(app.name, token_threshold=12345)
    assert set_to["policy"]["token_threshold"] == 12345 and set_to["source"] == "app"
    assert client.get_app_compaction_policy(app.name)["policy"]["token_threshold"] == 12345
    assert client.delete_app_compaction_policy(app.name) is None
    assert client.get_app_compaction_policy(app.name)["source"] == "default"


def test_an_invocation_with_the_fake_model_and_a_tool_token(client, app, user):
    sid = client.create_session(app.name, user)["session_id"]
    agent = {
        "provider": "fake",
        "model": "fake-1",
        "name": "trip_agent",
        "instructions": "Help with trips.",
        "declarations": [{"name": "lookup_booking", "parameters": {"type": "object"}}],
    }
    answered = client.invoke(
        app.name,
        user,
        sid,
        invocation_id="turn-1",
        input={"role": "user", "parts": [{"text": 'call:lookup_booking {"ref": "AB12"}'}]},
        agent=agent,
        cache="off",
    )
    assert answered["invocation_id"] == "turn-1"
    [call] = answered["function_calls"]
    assert call["name"] == "lookup_booking" and call["args"] == {"ref": "AB12"}

    minted = client.mint_tool_token(
        app.name,
        user,
        sid,
        "turn-1",
        tool_name="lookup_booking",
        capabilities=["state_read"],
        function_call_id=call["id"],
    )
    assert minted["token"].startswith("ctt_")
    with Client(app.base_url, minted["token"]) as tool:
        identity = tool.get_tool_token_identity(app.name)
        assert identity["invocation_id"] == "turn-1" and identity["tool_name"] == "lookup_booking"
        assert tool.get_session_state(app.name, user, sid)["session_id"] == sid
        assert client.revoke_tool_token(app.name, user, sid, "turn-1", minted["prefix"]) is None
        with pytest.raises(AuthenticationError) as revoked:
            tool.get_tool_token_identity(app.name)
        assert revoked.value.status == 401

    stored = [e["event_id"] for e in client.list_events(app.name, user, sid)]
    assert stored[:2] == ["turn-1.input", "turn-1.model"]

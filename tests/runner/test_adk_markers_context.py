"""A client's own compaction and rewind events in a built context, as ADK's contents
processor reads them; beside ctxadmin's own compaction."""

from __future__ import annotations

import pytest

from sessions_app.models import Event
from tests.sessions_helpers import call, response, sessions_url, text, user_input

pytestmark = pytest.mark.django_db
SESSION = f"{sessions_url('acme')}/s"


@pytest.fixture
def api(owner):
    client = owner.client()
    assert client.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    return client


def seed(api, *events):
    result = api.post(f"{SESSION}/events", {"events": list(events)}, format="json")
    assert result.status_code == 201, result.content


def build(api) -> dict:
    result = api.post(f"{SESSION}/context", {"current_input": user_input()}, format="json")
    assert result.status_code == 200, result.content
    return result.json()


def history(api) -> list[str]:
    """Each history item as its event id and its first part's text (or tool id)."""
    out = []
    for item in build(api)["envelope"]["history"]:
        part = item["content"]["parts"][0]
        out.append(part.get("text") or next(iter(part)) + ":" + next(iter(part.values()))["id"])
    return out


def at(seconds: float, event: dict, invocation: str = "") -> dict:
    return {**event, "timestamp": seconds, **({"invocation_id": invocation} if invocation else {})}


def compaction(start: float, end: float, summary: str, stamp: float, **extra) -> dict:
    return {
        "author": "user",
        "timestamp": stamp,
        "actions": {
            "compaction": {
                "start_timestamp": start,
                "end_timestamp": end,
                "compacted_content": {"role": "model", "parts": [{"text": summary}]},
            }
        },
        **extra,
    }


def test_a_client_compaction_hides_its_span_and_stands_in_its_place(api):
    seed(
        api,
        at(100, text("user", "one")),
        at(101, text("agent", "two")),
        at(102, text("user", "three")),
        compaction(100, 101, "summary of one and two", 103),
        at(104, text("agent", "four")),
    )
    assert history(api) == ["summary of one and two", "three", "four"]
    body = build(api)
    assert body["accounting"]["events"]["hidden_by_compaction"] == 2
    summary = next(
        i for i in body["envelope"]["history"] if i["content"]["parts"][0]["text"].startswith("sum")
    )
    assert summary["timestamp"].startswith("1970-01-01T00:01:41")  # its end timestamp
    # Stored as sent, listed like any event.
    listed = api.get(f"{SESSION}/events").json()["results"]
    assert listed[3]["actions"]["compaction"]["start_timestamp"] == 100


def test_a_contained_compaction_is_subsumed_and_overlapping_ones_both_stay(api):
    seed(
        api,
        at(100, text("user", "a")),
        at(101, text("agent", "b")),
        at(102, text("user", "c")),
        compaction(100, 101, "S1", 103),
        compaction(100, 102, "S2", 104),  # contains S1
        at(105, text("agent", "d")),
        at(106, text("user", "e")),
        compaction(102, 105, "S3", 107),  # overlaps S2
    )
    assert history(api) == ["S2", "S3", "e"]


def test_a_response_whose_call_was_compacted_gets_its_call_back(api):
    seed(
        api,
        at(100, text("user", "go")),
        at(101, call("c1")),
        compaction(100, 101, "S", 102),
        at(103, response("c1")),
    )
    assert history(api) == ["S", "function_call:c1", "function_response:c1"]


def test_a_rewind_hides_the_rewound_invocations(api):
    seed(
        api,
        at(100, text("user", "keep"), "inv-1"),
        at(101, text("user", "undo me"), "inv-2"),
        at(102, text("agent", "and me"), "inv-2"),
        at(103, text("user", "me too"), "inv-3"),
        at(104, {"author": "user", "actions": {"rewind_before_invocation_id": "inv-2"}}, "inv-4"),
        at(105, text("user", "after"), "inv-5"),
    )
    assert history(api) == ["keep", "after"]
    assert Event.objects.count() == 6  # nothing is deleted


def test_a_rewound_compaction_no_longer_hides_anything(api):
    seed(
        api,
        at(100, text("user", "a"), "inv-1"),
        at(101, text("agent", "b"), "inv-1"),
        at(102, compaction(100, 101, "S", 102), "inv-2"),
        at(103, {"author": "user", "actions": {"rewind_before_invocation_id": "inv-2"}}, "inv-3"),
    )
    assert history(api) == ["a", "b"]


def test_credentials_inside_kept_fields_are_pruned_from_the_context_only(api):
    secret = "sk-live-0123456789abcdef0123456789abcdef"
    seed(
        api,
        {
            "author": "agent",
            "event_id": "e-1",
            "content": {
                "role": "model",
                "parts": [{"text": "hi", "part_metadata": {"api_key": secret, "ok": 1}}],
            },
            "actions": {"agent_state": {"password": secret, "step": 2}},
        },
    )
    [item] = build(api)["envelope"]["history"]
    assert secret not in str(item)
    assert item["content"]["parts"][0]["part_metadata"]["ok"] == 1
    assert item["actions"]["agent_state"]["step"] == 2
    [stored] = api.get(f"{SESSION}/events").json()["results"]
    assert stored["content"]["parts"][0]["part_metadata"]["api_key"] == secret
    assert stored["actions"]["agent_state"]["password"] == secret


def test_thought_signatures_stay_in_the_context(api):
    part = {"function_call": {"id": "c1", "name": "f", "args": {}}, "thought_signature": "c2ln"}
    seed(api, {"author": "agent", "content": {"role": "model", "parts": [part]}})
    [item] = build(api)["envelope"]["history"]
    assert item["content"]["parts"][0]["thought_signature"] == "c2ln"

"""A client's own compaction events beside ctxadmin's compaction engine."""

from __future__ import annotations

import pytest

from sessions_app.models import Checkpoint, Event
from tests.sessions_helpers import sessions_url, text

pytestmark = pytest.mark.django_db
SESSION = f"{sessions_url('acme')}/s"


@pytest.fixture
def api(owner):
    client = owner.client()
    assert client.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    return client


def post(api, path, body, status):
    result = api.post(f"{SESSION}/{path}", body, format="json")
    assert result.status_code == status, result.content
    return result.json()


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def client_compaction(event_id: str, start: float, end: float) -> dict:
    return {
        "event_id": event_id,
        "author": "user",
        "timestamp": end + 0.5,
        "actions": {
            "compaction": {
                "start_timestamp": start,
                "end_timestamp": end,
                "compacted_content": {"role": "model", "parts": [{"text": "client summary"}]},
            }
        },
    }


def test_ctxadmin_compaction_never_summarises_nor_purges_a_client_compaction(api):
    put = api.put(
        f"{SESSION}/compaction-policy",
        {"token_threshold": 10, "retain_recent_exchanges": 1, "retention": "purge"},
        format="json",
    )
    assert put.status_code == 200, put.content
    events = []
    for turn in range(1, 6):
        events.append(
            text("user", words(40, f"ask{turn}-"), event_id=f"u{turn}", timestamp=turn * 10)
        )
        events.append(
            text("agent", words(40, f"re{turn}-"), event_id=f"m{turn}", timestamp=turn * 10 + 1)
        )
        if turn == 2:
            events.append(client_compaction("client-c", 10, 21))
    post(api, "events", {"events": events}, 201)
    marker = Event.objects.get(event_id="client-c")
    assert marker.kinds == 64 and marker.context_json  # its compacted content, ready to send
    done = post(api, "compactions", {}, 201)
    checkpoint = Checkpoint.objects.get(compaction_id=done["compaction_id"])
    assert "client-c" not in checkpoint.source_event_ids
    assert {"u1", "m1", "u2", "m2"} <= set(checkpoint.source_event_ids)
    assert Event.objects.filter(event_id="client-c").exists()  # never purged
    listed = api.get(f"{SESSION}/events", {"include_hidden": "true"}).json()["results"]
    assert "client-c" in [e["event_id"] for e in listed]
    # ctxadmin's own summary event is told apart from the client's.
    own = Event.objects.get(event_id=done["summary_event_id"])
    assert own.kinds == 32 and own.actions["compaction"]


def test_ctxadmin_compaction_never_summarises_rewound_events(api):
    put = api.put(
        f"{SESSION}/compaction-policy",
        {"token_threshold": 10, "retain_recent_exchanges": 1},
        format="json",
    )
    assert put.status_code == 200, put.content
    events = []
    for turn in range(1, 7):
        inv = {"invocation_id": f"inv-{turn}"}
        events.append(text("user", words(40, f"ask{turn}-"), event_id=f"u{turn}", **inv))
        events.append(text("agent", words(40, f"re{turn}-"), event_id=f"m{turn}", **inv))
        if turn == 3:
            rewind = {"rewind_before_invocation_id": "inv-2"}
            events.append({"event_id": "rw", "author": "user", "actions": rewind})
    post(api, "events", {"events": events}, 201)
    done = post(api, "compactions", {}, 201)
    sources = set(Checkpoint.objects.get(compaction_id=done["compaction_id"]).source_event_ids)
    assert {"u1", "m1", "u4", "m4"} <= sources
    assert not sources & {"u2", "m2", "u3", "m3", "rw"}
    assert Event.objects.filter(event_id__in=["u2", "m3", "rw"]).count() == 3

"""ADK's fields beside ctxadmin's: kept as given, bounded, unknown keys still refused."""

from __future__ import annotations

import pytest

from sessions_app.models import Event
from tests.sessions_helpers import sessions_url, text

pytestmark = pytest.mark.django_db
EVENTS = f"{sessions_url('acme')}/s/events"


@pytest.fixture
def api(owner):
    client = owner.client()
    assert client.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    return client


def post(api, event, status):
    result = api.post(EVENTS, {"event": event}, format="json")
    assert result.status_code == status, result.content
    return result.json()


def model_event(**extra) -> dict:
    return {"author": "agent", "content": {"role": "model", "parts": [{"text": "hi"}]}, **extra}


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (model_event(grounding_metadta={}), "event.grounding_metadta"),
        (model_event(id="e-1"), "event.id"),
        (model_event(actions={"escalate": True, "escalated": True}), "event.actions.escalated"),
        (
            {"author": "a", "content": {"parts": [{"text": "x", "thought_sig": "AA=="}]}},
            "event.content.parts[0].thought_sig",
        ),
        (
            {"author": "a", "content": {"parts": [{"executable_code": {"code": "1", "lang": 1}}]}},
            "event.content.parts[0].executable_code.lang",
        ),
        (
            {
                "author": "a",
                "content": {
                    "parts": [{"function_call": {"id": "c", "name": "f", "will_cont": True}}]
                },
            },
            "event.content.parts[0].function_call.will_cont",
        ),
        (
            model_event(grounding_metadata={"grounding_chunks": [{"web": {"uri": "u", "x": 1}}]}),
            "event.grounding_metadata.grounding_chunks[0].web.x",
        ),
        (
            model_event(
                actions={"requested_tool_confirmations": {"c1": {"hint": "h", "extra": 1}}}
            ),
            "event.actions.requested_tool_confirmations.c1.extra",
        ),
        (model_event(usage_metadata={"traffic_kind": "x"}), "event.usage_metadata.traffic_kind"),
        (model_event(citation_metadata={"citations": {}}), "event.citation_metadata.citations"),
        (
            model_event(actions={"compaction": {"start_timestamp": 1, "end_timestamp": 2}}),
            "event.actions.compaction.compacted_content",
        ),
        (
            {"author": "a", "content": {"parts": [{"text": "a", "inline_data": {}}]}},
            "event.content.parts[0]",
        ),
    ],
)
def test_keys_outside_adk_models_are_refused_by_path(api, event, field):
    body = post(api, event, 400)
    assert body["error"]["code"] == "validation_error"
    assert body["error"]["details"]["field"] == field
    assert not Event.objects.exists()


def test_parts_with_only_adk_data_and_contents_without_role_or_parts_are_valid(api):
    events = [
        {"author": "a", "content": {"parts": [{"thought_signature": "c2ln"}]}},
        {"author": "a", "content": {"parts": [{"executable_code": {"code": "print(1)"}}]}},
        {"author": "a", "content": {"role": "model", "parts": []}},
        {"author": "a", "content": {}},
        {"author": "a"},
        {
            "author": "a",
            "content": {"parts": [{"text": "t", "thought": True, "thought_signature": "c2ln"}]},
        },
    ]
    stored = [post(api, event, 201)["events"][0] for event in events]
    assert [e["content"] for e in stored] == [e.get("content") for e in events]
    listed = api.get(EVENTS).json()["results"]
    assert [e["content"] for e in listed] == [e.get("content") for e in events]


def test_kept_fields_come_back_in_their_places(api):
    event = model_event(
        event_id="e-kept",
        branch="root.child",
        long_running_tool_ids=["c9"],
        grounding_metadata={"web_search_queries": ["q"]},
        actions={"transfer_to_agent": "helper", "escalate": True, "end_of_agent": True},
        usage_metadata={"prompt_token_count": 3, "traffic_type": "ON_DEMAND"},
    )
    event["content"]["parts"][0]["thought_signature"] = "c2lnbmF0dXJl"
    post(api, event, 201)
    [stored] = api.get(EVENTS).json()["results"]
    assert stored["branch"] == "root.child" and stored["long_running_tool_ids"] == ["c9"]
    assert stored["grounding_metadata"] == {"web_search_queries": ["q"]}
    assert stored["actions"] == event["actions"]
    assert stored["usage_metadata"] == event["usage_metadata"]
    assert stored["content"]["parts"][0]["thought_signature"] == "c2lnbmF0dXJl"
    row = Event.objects.get()
    assert row.adk_fields == {
        "branch": "root.child",
        "long_running_tool_ids": ["c9"],
        "grounding_metadata": {"web_search_queries": ["q"]},
    }


def test_the_kept_fields_are_bounded(api, settings):
    big = "x" * (256 * 1024)
    body = post(api, model_event(error_message=big), 400)
    assert body["error"]["details"]["field"] == "event"
    assert "262144 bytes" in body["error"]["message"]
    post(api, model_event(error_message="x" * 1000), 201)


def test_a_resend_compares_the_kept_fields(api):
    event = model_event(event_id="e-1", branch="a", actions={"escalate": True})
    first = post(api, event, 201)["events"][0]
    again = api.post(EVENTS, {"event": event}, format="json")
    assert again.status_code == 200 and again.json()["events"][0] == first
    for changed in (
        {**event, "branch": "b"},
        {**event, "actions": {"escalate": False}},
        {**event, "interrupted": True},
    ):
        conflict = api.post(EVENTS, {"event": changed}, format="json")
        assert conflict.status_code == 409, conflict.content
        assert conflict.json()["error"]["code"] == "event_id_conflict"
    assert Event.objects.count() == 1


def test_urlsafe_base64_inline_data_is_accepted_as_sent(api):
    part = {"inline_data": {"mime_type": "image/png", "data": "-__-Pw==", "display_name": "p"}}
    stored = post(api, {"author": "user", "content": {"role": "user", "parts": [part]}}, 201)
    assert stored["events"][0]["content"]["parts"][0] == part


def test_a_text_event_stores_no_kept_fields(api):
    post(api, text("user", "hello"), 201)
    assert Event.objects.get().adk_fields is None

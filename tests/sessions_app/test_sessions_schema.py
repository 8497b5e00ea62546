"""Real requests and responses validate against the committed OpenAPI document, so the
documented shapes and the pure validators cannot drift apart."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from ctxadmin import stack
from tests.sessions_helpers import call, response, sessions_url, text, user_input

DOCUMENT = yaml.safe_load((Path(stack.PROJECT_DIR) / "docs" / "openapi.yaml").read_text())


def _convert(node):
    """OpenAPI 3.0 → JSON Schema 2020-12: ``nullable`` and component ``$ref``s."""
    if isinstance(node, list):
        return [_convert(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _convert(value) for key, value in node.items()}
    if "$ref" in node:
        node["$ref"] = node["$ref"].replace("#/components/schemas/", "#/$defs/")
    if node.pop("nullable", False):
        return {"anyOf": [node, {"type": "null"}]}
    return node


DEFS = {name: _convert(schema) for name, schema in DOCUMENT["components"]["schemas"].items()}


def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$defs": DEFS, "$ref": f"#/$defs/{name}"})


def check(name: str, instance) -> None:
    errors = sorted(validator(name).iter_errors(copy.deepcopy(instance)), key=str)
    assert not errors, f"{name}: {errors[0].message} at {list(errors[0].absolute_path)}"


@pytest.mark.django_db
def test_flow_matches_the_document(owner):
    api = owner.client()
    base = sessions_url("acme")
    create_body = {"session_id": "s", "state": {"user:lang": "fr"}}
    check("SessionCreate", create_body)
    created = api.post(base, create_body, format="json")
    check("Session", created.json())

    append_body = {
        "events": [
            text(
                "user",
                "hi",
                timestamp="2026-01-01T00:00:00Z",
                usage_metadata={"prompt_token_count": 3},
            ),
            call("c1", args={"q": 1}),
            response(
                "c1",
                {"ok": True},
                actions={"state_delta": {"temp:x": 1}, "artifact_delta": {"f.txt": 1}},
            ),
            {
                "author": "model",
                "partial": True,
                "content": {"role": "model", "parts": [{"text": "…"}]},
            },
        ],
        "expected_revision": 0,
    }
    check("AppendRequest", append_body)
    appended = api.post(f"{base}/s/events", append_body, format="json")
    assert appended.status_code == 201
    check("AppendResponse", appended.json())

    check("Session", api.get(f"{base}/s").json())
    check("SessionPage", api.get(base).json())
    check("EventPage", api.get(f"{base}/s/events?limit=2").json())
    check("UserState", api.get("/api/v1/apps/acme/users/alice/state").json())

    context_body = {
        "current_input": user_input(),
        "instructions": "Be brief.",
        "tools": [{"name": "lookup"}],
        "policy": {
            "filters": {
                "authors": {"include": ["all"]},
                "content_types": {"exclude": ["multimodal"]},
            },
            "budgets": {"max_tokens": 1000, "bytes_per_token": 4},
            "overflow": "truncate",
        },
    }
    check("ContextRequest", context_body)
    context = api.post(f"{base}/s/context", context_body, format="json")
    assert context.status_code == 200
    check("ContextResponse", context.json())

    error = api.post(
        f"{base}/s/context", {"current_input": user_input(), "policy": {"x": 1}}, format="json"
    )
    check("Error", error.json())


@pytest.mark.parametrize(
    ("name", "instance"),
    [
        ("AppendRequest", {"events": [{"author": "u", "colour": 1}]}),
        (
            "EventInput",
            {"author": "u", "content": {"role": "user", "parts": [{"text": "a", "file_data": {}}]}},
        ),
        (
            "ContextRequest",
            {"current_input": user_input(), "policy": {"budgets": {"max_bytes": 0}}},
        ),
        ("ContextRequest", {"policy": {}}),
    ],
)
def test_the_document_rejects_what_the_server_rejects(name, instance):
    assert list(validator(name).iter_errors(instance))


@pytest.mark.django_db
def test_compaction_flow_matches_the_document(owner):
    api = owner.client()
    base = sessions_url("acme")
    api.post(base, {"session_id": "s"}, format="json")
    session = f"{base}/s"
    events = []
    for turn in range(6):
        events += [
            text("user", f"question {turn} " * 20, event_id=f"u{turn}"),
            text("agent", f"answer {turn} " * 20, event_id=f"m{turn}"),
        ]
    api.post(f"{session}/events", {"events": events}, format="json")
    policy = {"token_threshold": 10, "retain_recent_exchanges": 1, "retention": "audit"}
    check("CompactionPolicy", policy)
    state = api.put(f"{session}/compaction-policy", policy, format="json")
    check("PolicyState", state.json())
    check("PolicyState", api.get("/api/v1/apps/acme/compaction-policy").json())
    request = {"compaction_id": "0d8e2d3c-5b0a-4b7e-9d6f-3f1c2a4b5c6d", "timeout_ms": 5000}
    check("CompactionRequest", request)
    done = api.post(f"{session}/compactions", request, format="json")
    assert done.status_code == 201
    check("CompactionDetail", done.json())
    check("CompactionPage", api.get(f"{session}/compactions").json())
    failed = api.post(f"{session}/compactions", {"source_event_ids": ["m5"]}, format="json")
    assert failed.status_code == 409
    check("Compaction", api.get(f"{session}/compactions?limit=1").json()["results"][0])
    accepted = api.post(f"{session}/compactions", {"async": True}, format="json")
    assert accepted.status_code == 202
    check("CompactionAccepted", accepted.json())
    built = api.post(
        f"{session}/context", {"current_input": user_input(), "policy": {}}, format="json"
    )
    check("ContextResponse", built.json())


@pytest.mark.django_db
def test_adk_events_with_kept_fields_match_the_document(owner):
    api = owner.client()
    base = sessions_url("acme")
    assert api.post(base, {"session_id": "s"}, format="json").status_code == 201
    event = {
        "event_id": "e-adk",
        "author": "agent",
        "branch": "root.helper",
        "grounding_metadata": {"web_search_queries": ["q"]},
        "long_running_tool_ids": ["c1"],
        "content": {
            "parts": [
                {"text": "t", "thought": True, "thought_signature": "c2ln"},
                {"executable_code": {"code": "print(1)", "language": "PYTHON"}},
                {"function_call": {"id": "c1", "name": "f", "will_continue": False}},
            ]
        },
        "actions": {
            "escalate": True,
            "requested_tool_confirmations": {"c1": {"hint": "ok?", "confirmed": False}},
            "compaction": {
                "start_timestamp": 1.5,
                "end_timestamp": 2.5,
                "compacted_content": {"role": "model", "parts": [{"text": "s"}]},
            },
        },
        "usage_metadata": {"prompt_token_count": 1, "traffic_type": "ON_DEMAND"},
    }
    check("AppendRequest", {"event": event})
    appended = api.post(f"{base}/s/events", {"event": event}, format="json")
    assert appended.status_code == 201, appended.content
    check("AppendResponse", appended.json())
    check("EventPage", api.get(f"{base}/s/events").json())
    check("Session", api.get(f"{base}/s").json())
    errors = list(validator("AppendRequest").iter_errors({"event": {**event, "colour": 1}}))
    assert errors  # the document refuses what the API refuses

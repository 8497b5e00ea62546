"""Least-authority tool tokens: minted for a model's function call, bound to (app, user,
session, invocation), limited to their capabilities, refused once expired, deleted or
answered."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from sessions_app.models import ToolToken
from tests.conftest import make_tenant
from tests.test_sessions_schema import check

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "/api/v1/apps/acme/users/alice"
AGENT = {
    "provider": "fake",
    "model": "fake-1",
    "declarations": [{"name": "lookup_booking"}, {"name": "send_mail"}],
}


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    from memory.tasks import drain_outbox
    from sessions_app.tasks import run_compaction

    for task in (drain_outbox, run_compaction):
        monkeypatch.setattr(task, "delay_on_commit", lambda *a, **k: None)


@pytest.fixture
def acme():
    tenant = make_tenant("acme")
    api = tenant.client()
    for user in ("alice", "bob"):
        api.post(f"/api/v1/apps/acme/users/{user}/sessions", {"session_id": "s1"}, format="json")
    api.post(f"{BASE}/sessions", {"session_id": "s2"}, format="json")
    api.post(f"{BASE}/memories", {"content": "Alice flies on Tuesdays"}, format="json")
    api.post("/api/v1/apps/acme/users/bob/memories", {"content": "Bob flies"}, format="json")
    return tenant


def _call(tenant, invocation_id="inv-1", text='call:lookup_booking {"ref": "A1"}') -> dict:
    answer = tenant.client().post(
        f"{BASE}/sessions/s1/invocations",
        {
            "invocation_id": invocation_id,
            "input": {"role": "user", "parts": [{"text": text}]},
            "agent": AGENT,
            "cache": "off",
        },
        format="json",
    )
    assert answer.status_code == 201, answer.content
    return answer.json()


def _mint(tenant, capabilities, invocation_id="inv-1", **extra):
    return tenant.client().post(
        f"{BASE}/sessions/s1/invocations/{invocation_id}/tool-tokens",
        {"tool_name": "lookup_booking", "capabilities": capabilities, **extra},
        format="json",
    )


def _as(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_a_memory_search_token_searches_and_can_do_nothing_else(acme):
    _call(acme)
    minted = _mint(acme, ["memory_search"])
    assert minted.status_code == 201, minted.content
    check("ToolTokenMinted", minted.json())
    token = minted.json()["token"]
    assert minted.json()["capabilities"] == ["identity", "memory_search"]
    tool = _as(token)
    found = tool.post(
        f"{BASE}/memories/search", {"query": "Tuesdays", "mode": "lexical"}, format="json"
    )
    assert found.status_code == 200 and found.json()["hits"]
    memory_id = found.json()["hits"][0]["id"]
    denied = [
        tool.post(f"{BASE}/memories", {"content": "planted"}, format="json"),
        tool.delete(f"{BASE}/memories/{memory_id}"),
        tool.delete(f"{BASE}/memories?session_id=s1"),
        tool.get(f"{BASE}/sessions/s1/state"),
        tool.get(f"{BASE}/state"),
        tool.get(f"{BASE}/sessions/s1"),
        tool.get(f"{BASE}/sessions/s1/events"),
        tool.post(f"{BASE}/sessions/s1/events", {"event": {"author": "x"}}, format="json"),
        tool.get("/api/v1/apps/acme/key"),
        tool.get("/api/v1/apps/acme/"),
    ]
    for answer in denied:
        assert answer.status_code == 403, answer.request["PATH_INFO"]
        assert answer.json()["error"]["code"] == "capability_denied"
    identity = tool.get("/api/v1/apps/acme/tool-token")
    assert identity.status_code == 200
    check("ToolTokenInfo", identity.json())
    assert identity.json()["session_id"] == "s1" and token not in identity.content.decode()


def test_a_token_reaches_only_its_own_user_session_and_app(acme):
    _call(acme)
    tool = _as(_mint(acme, ["memory_search", "state_read"]).json()["token"])
    assert tool.get(f"{BASE}/sessions/s1/state").status_code == 200
    assert tool.get(f"{BASE}/sessions/s2/state").status_code == 404
    search = {"query": "flies", "mode": "lexical"}
    other_user = tool.post("/api/v1/apps/acme/users/bob/memories/search", search, format="json")
    assert other_user.status_code == 404
    make_tenant("globex")
    assert tool.get("/api/v1/apps/globex/tool-token").status_code == 404


def test_add_and_delete_capabilities(acme):
    _call(acme)
    tool = _as(_mint(acme, ["memory_add", "memory_delete"]).json()["token"])
    added = tool.post(f"{BASE}/memories", {"content": "Alice likes tea"}, format="json")
    assert added.status_code == 201
    assert tool.delete(f"{BASE}/memories/{added.json()['id']}").status_code == 204
    assert tool.post(f"{BASE}/memories/search", {"query": "tea"}, format="json").status_code == 403


def test_expired_deleted_and_answered_tokens_are_refused(acme):
    called = _call(acme)
    expired = _mint(acme, ["memory_search"]).json()
    ToolToken.objects.filter(prefix=expired["prefix"]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    deleted = _mint(acme, ["memory_search"]).json()
    gone = acme.client().delete(
        f"{BASE}/sessions/s1/invocations/inv-1/tool-tokens/{deleted['prefix']}"
    )
    assert gone.status_code == 204
    answered = _mint(acme, ["memory_search"]).json()
    assert _as(answered["token"]).get("/api/v1/apps/acme/tool-token").status_code == 200
    call = called["function_calls"][0]
    response = {
        "role": "user",
        "parts": [
            {"function_response": {"id": call["id"], "name": call["name"], "response": {"ok": 1}}}
        ],
    }
    again = acme.client().post(
        f"{BASE}/sessions/s1/invocations",
        {"invocation_id": "inv-2", "input": response, "agent": AGENT, "cache": "off"},
        format="json",
    )
    assert again.status_code == 201
    for token in (expired, deleted, answered):
        answer = _as(token["token"]).get("/api/v1/apps/acme/tool-token")
        assert answer.status_code == 401, token["prefix"]
    assert ToolToken.objects.get(prefix=answered["prefix"]).revoked_reason == "answered"
    late = _mint(acme, ["memory_search"])
    assert late.status_code == 409 and late.json()["error"]["code"] == "function_call_answered"


def test_tokens_are_only_minted_for_calls_the_model_made(acme):
    _call(acme, text="just chatting")
    no_call = _mint(acme, ["memory_search"])
    assert no_call.status_code == 422
    assert no_call.json()["error"]["code"] == "no_such_function_call"
    _call(acme, "inv-2")
    wrong_tool = acme.client().post(
        f"{BASE}/sessions/s1/invocations/inv-2/tool-tokens",
        {"tool_name": "send_mail", "capabilities": []},
        format="json",
    )
    assert wrong_tool.status_code == 422
    for body, field in (
        ({"tool_name": "lookup_booking", "capabilities": ["root"]}, "capabilities"),
        ({"tool_name": "lookup_booking", "ttl_ms": 10}, "ttl_ms"),
        ({"tool_name": "lookup_booking", "scope": "all"}, "scope"),
    ):
        answer = acme.client().post(
            f"{BASE}/sessions/s1/invocations/inv-2/tool-tokens", body, format="json"
        )
        assert answer.status_code == 400 and answer.json()["error"]["details"]["field"] == field
    assert _mint(acme, [], invocation_id="nope").status_code == 404
    globex = make_tenant("globex")
    outsider = acme.client(globex.key).post(
        f"{BASE}/sessions/s1/invocations/inv-2/tool-tokens",
        {"tool_name": "lookup_booking"},
        format="json",
    )
    assert outsider.status_code == 404
    assert ToolToken.objects.count() == 0


def test_only_the_digest_is_stored(acme):
    _call(acme)
    minted = _mint(acme, ["memory_search"]).json()
    row = ToolToken.objects.get()
    assert minted["token"] not in (row.token_hash, row.prefix)
    assert minted["token"].startswith(f"ctt_{row.prefix}_")


def test_artifact_capabilities_and_attaching_a_version(acme):
    _call(acme)
    base = f"{BASE}/sessions/s1/artifacts"
    writer = _as(_mint(acme, ["artifact_put", "artifact_attach"]).json()["token"])
    saved = writer.post(
        f"{base}/report.txt",
        {"data_base64": "aGVsbG8=", "mime_type": "text/plain"},
        format="json",
    )
    assert saved.status_code == 201, saved.content
    attached = writer.post(f"{base}/report.txt/attach", {}, format="json")
    assert attached.status_code == 201, attached.content
    check("ArtifactAttached", attached.json())
    from sessions_app.models import Event

    event = Event.objects.get(event_id=attached.json()["event_id"])
    assert event.author == "lookup_booking" and event.invocation_id == "inv-1"
    assert event.actions == {"artifact_delta": {"report.txt": 0}}
    for answer in (
        writer.get(f"{base}/report.txt"),
        writer.get(base),
        writer.get(f"{base}/report.txt/versions"),
        writer.delete(f"{base}/report.txt"),
    ):
        assert answer.status_code == 403
        assert answer.json()["error"]["code"] == "capability_denied"
    reader = _as(
        _mint(acme, ["artifact_get", "artifact_list", "artifact_list_versions"]).json()["token"]
    )
    assert reader.get(f"{base}/report.txt").json()["data_base64"] == "aGVsbG8="
    assert [n["name"] for n in reader.get(base).json()["results"]] == ["report.txt"]
    assert reader.get(f"{base}/report.txt/versions").status_code == 200
    assert (
        reader.post(
            f"{base}/x.txt", {"data_base64": "", "mime_type": "text/plain"}, format="json"
        ).status_code
        == 403
    )
    assert reader.get(f"{BASE}/sessions/s2/artifacts").status_code == 404

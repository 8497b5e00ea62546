"""Least-authority tool tokens: minted for a model's function call, bound to (app, user,
session, invocation), limited to their capabilities, refused once expired, deleted or
answered."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from sessions_app.models import ToolToken
from tests.conftest import make_tenant
from tests.sessions_app.test_sessions_schema import check

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
        # The message names what was missing.
        needed = answer.json()["error"]["details"]["needed"]
        message = answer.json()["error"]["message"]
        assert (repr(needed) in message) if needed else ("use an API key" in message)
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


def _answer(tenant, call: dict, session_path: str = f"{BASE}/sessions/s1") -> None:
    appended = tenant.client().post(
        f"{session_path}/events",
        {
            "event": {
                "author": "user",
                "content": {
                    "role": "user",
                    "parts": [
                        {
                            "function_response": {
                                "id": call["id"],
                                "name": call["name"],
                                "response": {"ok": 1},
                            }
                        }
                    ],
                },
            }
        },
        format="json",
    )
    assert appended.status_code == 201, appended.content


def _turns(tenant, count: int) -> None:
    for number in range(count):
        for author, role in (("user", "user"), ("agent", "model")):
            appended = tenant.client().post(
                f"{BASE}/sessions/s1/events",
                {
                    "event": {
                        "author": author,
                        "turn_complete": role == "model",
                        "content": {"role": role, "parts": [{"text": f"turn {number} " * 30}]},
                    }
                },
                format="json",
            )
            assert appended.status_code == 201, appended.content


def test_the_answer_ends_a_token_when_it_is_stored_not_when_the_token_is_next_used(acme):
    called = _call(acme)
    token = _mint(acme, ["memory_search"]).json()
    _answer(acme, called["function_calls"][0])
    stored = ToolToken.objects.get(prefix=token["prefix"])
    assert stored.revoked_at is not None and stored.revoked_reason == "answered"


def test_a_token_stays_dead_after_a_purge_compaction_removes_its_call(acme):
    called = _call(acme)
    token = _mint(acme, ["memory_search", "state_read"]).json()
    _answer(acme, called["function_calls"][0])
    _turns(acme, 4)
    policy = acme.client().put(
        f"{BASE}/sessions/s1/compaction-policy",
        {"token_threshold": 10, "retain_recent_exchanges": 1, "retention": "purge"},
        format="json",
    )
    assert policy.status_code == 200, policy.content
    compacted = acme.client().post(f"{BASE}/sessions/s1/compactions", {}, format="json")
    assert compacted.status_code == 201, compacted.content
    assert compacted.json()["purged_events"] > 0
    from sessions_app.models import Event

    assert not Event.objects.filter(
        session__session_id="s1", response_ids__contains=[called["function_calls"][0]["id"]]
    ).exists()
    tool = _as(token["token"])
    assert tool.get("/api/v1/apps/acme/tool-token").status_code == 401
    assert tool.get(f"{BASE}/sessions/s1/state").status_code == 401


def test_an_open_call_survives_a_purge_compaction_and_so_does_its_token(acme):
    called = _call(acme)
    token = _mint(acme, ["memory_search"]).json()
    _turns(acme, 4)
    acme.client().put(
        f"{BASE}/sessions/s1/compaction-policy",
        {"token_threshold": 10, "retain_recent_exchanges": 1, "retention": "purge"},
        format="json",
    )
    compacted = acme.client().post(f"{BASE}/sessions/s1/compactions", {}, format="json")
    # An unanswered call is an obligation compaction never summarises away: nothing after it
    # can be compacted either, so there is nothing worth a checkpoint.
    assert compacted.status_code == 422, compacted.content
    assert compacted.json()["error"]["code"] == "ineffective_compaction"
    from sessions_app.models import Event

    assert Event.objects.filter(
        session__session_id="s1", call_ids__contains=[called["function_calls"][0]["id"]]
    ).exists()
    assert _as(token["token"]).get("/api/v1/apps/acme/tool-token").status_code == 200


def test_purging_the_event_of_a_call_ends_its_tokens(acme):
    """Whatever deletes a call's event through ``purge`` ends the call's tokens with it."""
    from sessions_app.compaction import commit
    from sessions_app.models import Checkpoint, Event

    _call(acme)
    token = _mint(acme, ["memory_search"]).json()
    _turns(acme, 2)
    row = ToolToken.objects.get(prefix=token["prefix"])
    first_text = Event.objects.filter(session=row.session, kinds=1).order_by("seq").first()
    assert first_text is not None
    ToolToken.objects.filter(pk=row.pk).update(call_seq=first_text.seq)
    checkpoint = Checkpoint.objects.create(
        id=uuid.uuid4(), session=row.session, status=Checkpoint.ACTIVE, origin="manual"
    )
    commit.purge_events(row.session_id, checkpoint, [first_text.event_id])
    row.refresh_from_db()
    assert row.revoked_reason == "purged" and row.revoked_at is not None
    assert _as(token["token"]).get("/api/v1/apps/acme/tool-token").status_code == 401


def test_an_answer_on_the_locking_path_ends_the_token_too(acme):
    """An answer carrying a ``user:`` state delta takes the locking append path."""
    called = _call(acme)
    token = _mint(acme, ["memory_search"]).json()
    call = called["function_calls"][0]
    appended = acme.client().post(
        f"{BASE}/sessions/s1/events",
        {
            "event": {
                "author": "user",
                "actions": {"state_delta": {"user:last_tool": "lookup_booking"}},
                "content": {
                    "role": "user",
                    "parts": [
                        {
                            "function_response": {
                                "id": call["id"],
                                "name": call["name"],
                                "response": {"ok": 1},
                            }
                        }
                    ],
                },
            }
        },
        format="json",
    )
    assert appended.status_code == 201, appended.content
    assert ToolToken.objects.get(prefix=token["prefix"]).revoked_reason == "answered"
    assert _as(token["token"]).get("/api/v1/apps/acme/tool-token").status_code == 401


def test_a_token_minted_while_the_answer_is_being_appended_is_refused_or_ended(acme):
    """Minting takes the session row that appends lock, so a mint racing an answer's append
    either sees the answer (409) or is ended by it: it never outlives the answer."""
    import threading

    from django.db import connections, transaction

    from sessions_app import services

    called = _call(acme)
    call = called["function_calls"][0]
    appending = threading.Event()
    minted: dict = {}

    def append_and_hold():
        try:
            with transaction.atomic():
                services.append_events(
                    acme.app,
                    "alice",
                    "s1",
                    [
                        {
                            "author": "user",
                            "content": {
                                "role": "user",
                                "parts": [
                                    {
                                        "function_response": {
                                            "id": call["id"],
                                            "name": call["name"],
                                            "response": {"ok": 1},
                                        }
                                    }
                                ],
                            },
                        }
                    ],
                )
                appending.set()
                threading.Event().wait(0.5)  # hold the session row while the mint runs
        finally:
            connections.close_all()

    holder = threading.Thread(target=append_and_hold)
    holder.start()
    assert appending.wait(10)
    minted["answer"] = _mint(acme, ["memory_search"])
    holder.join(10)
    answer = minted["answer"]
    assert answer.status_code == 409, answer.content
    assert answer.json()["error"]["code"] == "function_call_answered"
    assert not ToolToken.objects.filter(revoked_at__isnull=True).exists()


def test_tokens_minted_before_the_rule_are_ended_by_the_migration(acme):
    import importlib

    from django.db import connection

    migration = importlib.import_module("sessions_app.migrations.0008_end_answered_tool_tokens")
    called = _call(acme)
    open_one = _mint(acme, ["memory_search"]).json()
    _answer(acme, called["function_calls"][0])
    # As a token of the old rule was: its answer stored, its row still open.
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE sessions_app_tooltoken DISABLE TRIGGER tooltoken_end_is_final")
        try:
            ToolToken.objects.update(revoked_at=None, revoked_reason="")
        finally:
            cursor.execute(
                "ALTER TABLE sessions_app_tooltoken ENABLE TRIGGER tooltoken_end_is_final"
            )
        cursor.execute(migration.END_OPEN_TOKENS)
    assert ToolToken.objects.get(prefix=open_one["prefix"]).revoked_reason == "answered"


@pytest.mark.parametrize(
    "change",
    [
        {"revoked_at": None, "revoked_reason": ""},
        {"expires_at": timezone.now() + timedelta(hours=2)},
        {"capabilities": ["identity", "memory_search", "memory_add"]},
        {"token_hash": "0" * 64},
    ],
    ids=["revive", "extend", "widen", "rekey"],
)
def test_the_database_refuses_to_revive_extend_or_widen_a_token(acme, change):
    from django.db import IntegrityError, transaction

    _call(acme)
    token = _mint(acme, ["memory_search"]).json()
    acme.client().delete(f"{BASE}/sessions/s1/invocations/inv-1/tool-tokens/{token['prefix']}")
    with pytest.raises(IntegrityError), transaction.atomic():
        ToolToken.objects.filter(prefix=token["prefix"]).update(**change)
    assert _as(token["token"]).get("/api/v1/apps/acme/tool-token").status_code == 401


def test_the_database_refuses_to_revive_a_revoked_api_key(acme):
    from django.db import IntegrityError, transaction

    from ctxadmin.models import ApiKey
    from ctxadmin.services import revoke_api_keys

    key = ApiKey.objects.get(app=acme.app)
    revoke_api_keys(ApiKey.objects.filter(pk=key.pk))
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiKey.objects.filter(pk=key.pk).update(revoked_at=None)
    assert acme.client().get("/api/v1/apps/acme/key").status_code == 401

"""A tool or user token that stopped working says so, as a 401 ``token_ended`` naming the
kind of token and why it stopped (expired, revoked, or its invocation ended); the token
itself is never echoed, and a wrong secret still learns nothing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app.models import ToolToken
from tests.conftest import make_tenant
from tests.ctxadmin.test_api_base import assert_envelope
from tests.service.leaks.mcp_flows import mcp_post
from tests.sessions_app.test_tool_tokens import BASE, _answer, _as, _call, _mint

pytestmark = pytest.mark.django_db(transaction=True)

IDENTITY = "/api/v1/apps/acme/tool-token"


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    from memory.tasks import drain_outbox
    from sessions_app.tasks import run_compaction

    for task in (drain_outbox, run_compaction):
        monkeypatch.setattr(task, "delay_on_commit", lambda *a, **k: None)


@pytest.fixture
def acme():
    tenant = make_tenant("acme")
    answer = tenant.client().post(f"{BASE}/sessions", {"session_id": "s1"}, format="json")
    assert answer.status_code == 201, answer.content
    return tenant


def _refused(token: dict, reason: str) -> dict:
    answer = _as(token["token"]).get(IDENTITY)
    error = assert_envelope(answer, 401, "token_ended")
    assert error["details"]["reason"] == reason
    assert token["token"] not in answer.content.decode()
    assert token["token"].split("_")[-1] not in answer.content.decode()
    assert answer["WWW-Authenticate"].startswith("Bearer")
    return error


def test_an_expired_tool_token_says_it_expired_and_when(acme):
    _call(acme)
    token = _mint(acme, ["memory_search"]).json()
    ended = timezone.now() - timedelta(seconds=5)
    ToolToken.objects.filter(prefix=token["prefix"]).update(expires_at=ended)
    error = _refused(token, "expired")
    stamp = ended.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert error["message"] == f"This tool token expired at {stamp}; ask the app for a new one."
    assert error["details"] == {"credential": "tool_token", "reason": "expired", "ended_at": stamp}


def test_a_revoked_tool_token_says_it_was_revoked(acme):
    _call(acme)
    token = _mint(acme, ["memory_search"]).json()
    gone = acme.client().delete(
        f"{BASE}/sessions/s1/invocations/inv-1/tool-tokens/{token['prefix']}"
    )
    assert gone.status_code == 204
    error = _refused(token, "revoked")
    assert error["message"].startswith("This tool token was revoked at ")


def test_an_answered_tool_token_says_its_invocation_ended(acme):
    called = _call(acme)
    token = _mint(acme, ["memory_search"]).json()
    _answer(acme, called["function_calls"][0])
    error = _refused(token, "answered")
    assert error["message"].startswith("This tool token no longer works: its invocation ended")
    assert "function response" in error["message"]


def test_a_purged_call_tool_token_says_its_invocation_ended(acme):
    called = _call(acme)
    token = _mint(acme, ["memory_search"]).json()
    _answer(acme, called["function_calls"][0])
    ToolToken.objects.filter(prefix=token["prefix"]).update(revoked_reason="purged")
    error = _refused(token, "purged")
    assert "compaction purged its function call" in error["message"]


def test_a_tool_token_ends_when_its_invocation_is_rewound(acme):
    """ADK's rewind undoes its invocation and every later one: their calls' tokens end with
    the append that stores the rewind; an earlier invocation's tokens keep working."""
    _call(acme, "inv-0")
    earlier = _mint(acme, ["memory_search"], invocation_id="inv-0").json()
    _call(acme, "inv-1")
    _call(acme, "inv-2")
    rewound = [_mint(acme, ["memory_search"], invocation_id=i).json() for i in ("inv-1", "inv-2")]
    rewind = {
        "author": "user",
        "invocation_id": "inv-3",
        "actions": {"rewind_before_invocation_id": "inv-1"},
    }
    stored = acme.client().post(f"{BASE}/sessions/s1/events", {"event": rewind}, format="json")
    assert stored.status_code == 201, stored.content
    for token in rewound:
        error = _refused(token, "rewound")
        assert "when the session was rewound before its call" in error["message"]
    assert _as(earlier["token"]).get(IDENTITY).status_code == 200


def test_a_user_token_says_it_is_a_user_token(acme):
    minted = acme.client().post(
        f"{BASE}/tokens", {"capabilities": ["memory_search"]}, format="json"
    )
    assert minted.status_code == 201, minted.content
    token = minted.json()
    assert _as(token["token"]).get(IDENTITY).status_code == 200
    acme.client().delete(f"{BASE}/tokens/{token['prefix']}")
    error = _refused(token, "revoked")
    assert error["message"].startswith("This user token was revoked at ")
    assert error["details"]["credential"] == "user_token"


def test_a_wrong_secret_for_an_ended_token_learns_nothing(acme):
    _call(acme)
    token = _mint(acme, ["memory_search"]).json()
    ToolToken.objects.filter(prefix=token["prefix"]).update(
        expires_at=timezone.now() - timedelta(seconds=5)
    )
    forged = token["token"][:-4] + ("AAAA" if not token["token"].endswith("AAAA") else "BBBB")
    answer = _as(forged).get(IDENTITY)
    error = assert_envelope(answer, 401, "authentication_failed")
    assert error["message"] == "Invalid API key."


def test_mcp_says_the_same_for_an_ended_token(acme):
    minted = acme.client().post(
        f"{BASE}/tokens", {"capabilities": ["memory_search"], "ttl_ms": 1000}, format="json"
    )
    token = minted.json()
    ToolToken.objects.filter(prefix=token["prefix"]).update(
        expires_at=timezone.now() - timedelta(seconds=5)
    )
    status, body = mcp_post(token["token"], {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert status == 401
    error = json.loads(body)["error"]
    assert error["code"] == "token_ended" and error["details"]["reason"] == "expired"
    assert error["message"].startswith("This user token expired at ")
    assert token["token"].encode() not in body

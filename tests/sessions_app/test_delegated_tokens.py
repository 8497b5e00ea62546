"""Delegated tokens stay within their minter: a key hands out only capabilities whose scope it
holds, the tokens it minted end when it is revoked or rotated (401 ``token_ended``, reason
``minter_revoked``; a mint in flight is ended too), and the app lists its user tokens of every
user and revokes those one key minted."""

from __future__ import annotations

import pytest
from django.db import transaction

from ctxadmin.models import ApiKey
from ctxadmin.services import create_api_key, revoke_api_keys
from sessions_app import user_tokens
from sessions_app.models import ToolToken
from tests.concurrency_helpers import waits_for_the_holder
from tests.conftest import make_tenant
from tests.ctxadmin.test_api_base import assert_envelope
from tests.sessions_app.test_tool_tokens import _as, _call

pytestmark = pytest.mark.django_db(transaction=True)

APP = "/api/v1/apps/acme"
IDENTITY = f"{APP}/tool-token"


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    from memory.tasks import drain_outbox
    from sessions_app.tasks import run_compaction

    for task in (drain_outbox, run_compaction):
        monkeypatch.setattr(task, "delay_on_commit", lambda *a, **k: None)


@pytest.fixture
def acme():
    tenant = make_tenant("acme")
    answer = tenant.client().post(
        f"{APP}/users/alice/sessions", {"session_id": "s1"}, format="json"
    )
    assert answer.status_code == 201, answer.content
    return tenant


def _key(tenant, *scopes: str, name: str = "minter") -> tuple[ApiKey, str]:
    return create_api_key(tenant.app, scopes, name=name)


def _mint(tenant, raw: str, capabilities: list[str], user: str = "alice"):
    return tenant.client(raw).post(
        f"{APP}/users/{user}/tokens", {"capabilities": capabilities}, format="json"
    )


def _ended(token: str) -> dict:
    error = assert_envelope(_as(token).get(IDENTITY), 401, "token_ended")
    return error


def test_a_delegate_only_key_mints_no_capability_whose_scope_it_lacks(acme):
    _row, delegate = _key(acme, "delegate")
    for capability, scope in (("memory_add", "memory"), ("session_read", "sessions")):
        refused = _mint(acme, delegate, ["identity", capability])
        error = assert_envelope(refused, 403, "capability_beyond_minter")
        assert error["details"] == {
            "field": "capabilities",
            "capability": capability,
            "scope": scope,
        }
        assert f"'{capability}'" in error["message"] and f"'{scope}'" in error["message"]
    assert not ToolToken.objects.exists()
    assert _mint(acme, delegate, ["identity"]).status_code == 201
    _row, with_memory = _key(acme, "delegate", "memory", name="memory minter")
    assert _mint(acme, with_memory, ["memory_search", "memory_add"]).status_code == 201
    assert_envelope(_mint(acme, with_memory, ["state_read"]), 403, "capability_beyond_minter")


def test_a_sessions_only_key_mints_no_memory_tool_token(acme):
    _call(acme)
    _row, sessions = _key(acme, "sessions")
    url = f"{APP}/users/alice/sessions/s1/invocations/inv-1/tool-tokens"
    body = {"tool_name": "lookup_booking", "capabilities": ["memory_search"]}
    refused = acme.client(sessions).post(url, body, format="json")
    assert_envelope(refused, 403, "capability_beyond_minter")
    body["capabilities"] = ["state_read"]
    minted = acme.client(sessions).post(url, body, format="json")
    assert minted.status_code == 201, minted.content
    assert ToolToken.objects.get().created_by_key == _row.prefix


@pytest.mark.parametrize("how", ["revoke", "rotate", "revoke_api_keys"])
def test_tokens_end_with_the_key_that_minted_them(acme, how):
    row, minter = _key(acme, "delegate", "memory", "sessions", "admin")
    _other_row, other = _key(acme, "delegate", "memory", name="other")
    mine = _mint(acme, minter, ["memory_search"]).json()
    _call(acme)
    tool = acme.client(minter).post(
        f"{APP}/users/alice/sessions/s1/invocations/inv-1/tool-tokens",
        {"tool_name": "lookup_booking", "capabilities": ["memory_search"]},
        format="json",
    )
    assert tool.status_code == 201, tool.content
    theirs = _mint(acme, other, ["memory_search"]).json()
    if how == "revoke":
        assert acme.client().delete(f"{APP}/keys/{row.prefix}").status_code == 204
    elif how == "rotate":
        assert acme.client().post(f"{APP}/keys/{row.prefix}/rotate").status_code == 201
    else:  # the console's action and the management command
        assert revoke_api_keys(ApiKey.objects.filter(pk=row.pk)) == 1
    for token in (mine, tool.json()):
        error = _ended(token["token"])
        assert error["details"]["reason"] == "minter_revoked"
        assert "the API key that minted it was revoked at" in error["message"]
    assert _as(theirs["token"]).get(IDENTITY).status_code == 200
    listed = acme.client().get(f"{APP}/users/alice/tokens/{mine['prefix']}").json()
    assert (listed["state"], listed["revoked_reason"]) == ("revoked", "minter_revoked")


def test_a_mint_in_flight_when_its_key_is_revoked_is_ended_with_it(acme):
    row, _raw = _key(acme, "delegate", "memory")
    (token, _raw), revoked = waits_for_the_holder(
        lambda: user_tokens.mint(acme.app, "alice", {"capabilities": ["memory_search"]}, row),
        lambda: revoke_api_keys(ApiKey.objects.filter(pk=row.pk)),
    )
    assert revoked == 1
    assert ToolToken.objects.get(pk=token.pk).revoked_reason == "minter_revoked"
    # A mint that starts after the revocation is refused, though its key authenticated.
    with transaction.atomic(), pytest.raises(Exception) as refused:
        user_tokens.mint(acme.app, "alice", {"capabilities": ["memory_search"]}, row)
    assert getattr(refused.value, "code", None) == "authentication_failed"


def test_the_app_lists_its_user_tokens_by_user_minter_and_state(acme):
    globex = make_tenant("globex")
    assert (
        globex.client()
        .post(
            "/api/v1/apps/globex/users/alice/tokens", {"capabilities": ["identity"]}, format="json"
        )
        .status_code
        == 201
    )
    first, one = _key(acme, "delegate", "memory", name="one")
    second, two = _key(acme, "delegate", "memory", name="two")
    a = _mint(acme, one, ["memory_search"], user="alice").json()
    b = _mint(acme, one, ["memory_search"], user="bob").json()
    c = _mint(acme, two, ["memory_search"], user="alice").json()
    acme.client().delete(f"{APP}/users/alice/tokens/{c['prefix']}")
    _call(acme)  # a tool token is not a user token: not listed
    acme.client().post(
        f"{APP}/users/alice/sessions/s1/invocations/inv-1/tool-tokens",
        {"tool_name": "lookup_booking", "capabilities": ["state_read"]},
        format="json",
    )
    api = acme.client(one)

    def listed(query: str = "") -> list[str]:
        answer = api.get(f"{APP}/user-tokens{query}")
        assert answer.status_code == 200, answer.content
        return [token["prefix"] for token in answer.json()["results"]]

    assert listed() == [c["prefix"], b["prefix"], a["prefix"]]
    assert listed("?user_id=alice") == [c["prefix"], a["prefix"]]
    assert listed(f"?minted_by={first.prefix}") == [b["prefix"], a["prefix"]]
    assert listed(f"?minted_by={second.prefix}&state=revoked") == [c["prefix"]]
    assert listed("?state=active&user_id=bob") == [b["prefix"]]
    assert listed("?state=expired") == []
    page = api.get(f"{APP}/user-tokens?limit=2").json()
    assert [t["prefix"] for t in page["results"]] == [c["prefix"], b["prefix"]]
    rest = api.get(page["next"]).json()
    assert [t["prefix"] for t in rest["results"]] == [a["prefix"]]
    assert all("token" not in t for t in page["results"] + rest["results"])
    for query, parameter, code in (
        ("?state=dead", "state", "invalid_parameter"),
        ("?minted_by=ABC", "minted_by", "invalid_parameter"),
        ("?user_id=..", "user_id", "invalid_parameter"),
    ):
        error = assert_envelope(api.get(f"{APP}/user-tokens{query}"), 400, code)
        assert error["details"]["parameter"] == parameter
    unknown = assert_envelope(api.get(f"{APP}/user-tokens?colour=red"), 400, "unknown_parameter")
    assert unknown["details"]["unknown"] == ["colour"]
    # Another app's list is another app's: 404 for its name with our key.
    assert_envelope(api.get("/api/v1/apps/globex/user-tokens"), 404, "not_found")


def test_revoke_by_minter_ends_that_keys_open_user_tokens_of_this_app_only(acme):
    globex = make_tenant("globex")
    first, one = _key(acme, "delegate", "memory", name="one")
    _second, two = _key(acme, "delegate", "memory", name="two")
    mine = [_mint(acme, one, ["memory_search"], user=u).json() for u in ("alice", "bob")]
    theirs = _mint(acme, two, ["memory_search"]).json()
    foreign = (
        globex.client()
        .post(
            "/api/v1/apps/globex/users/alice/tokens", {"capabilities": ["identity"]}, format="json"
        )
        .json()
    )
    foreign_key = globex.app.api_keys.get().prefix
    api = acme.client(two)
    answer = api.post(f"{APP}/user-tokens/revoke", {"minted_by": first.prefix}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"revoked": 2}
    for token in mine:
        assert _ended(token["token"])["details"]["reason"] == "revoked"
    assert _as(theirs["token"]).get(IDENTITY).status_code == 200
    again = api.post(f"{APP}/user-tokens/revoke", {"minted_by": first.prefix}, format="json")
    assert again.json() == {"revoked": 0}
    other_app = api.post(f"{APP}/user-tokens/revoke", {"minted_by": foreign_key}, format="json")
    assert other_app.json() == {"revoked": 0}
    assert _as(foreign["token"]).get("/api/v1/apps/globex/tool-token").status_code == 200
    for body, field in (
        ({}, "minted_by"),
        ({"minted_by": "short"}, "minted_by"),
        ({"minted_by": 5}, "minted_by"),
        ({"minted_by": first.prefix, "user_id": "alice"}, "user_id"),
    ):
        answer = api.post(f"{APP}/user-tokens/revoke", body, format="json")
        error = assert_envelope(answer, 400, "validation_error")
        assert error["details"]["field"] == field

"""``GET /api/v1/whoami``: a credential learns its own app and rights, so a client needs only
its key; it never says anything of another app, nor the secret."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from ctxadmin.services import create_api_key
from sessions_app import user_tokens
from tests.conftest import make_tenant

pytestmark = pytest.mark.django_db

URL = "/api/v1/whoami"


def _as(credential: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
    return client


def test_an_api_key_learns_its_app_and_scopes(owner):
    _row, key = create_api_key(owner.app, ["memory", "sessions"], name="narrow")
    answer = _as(key).get(URL)
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body == {
        "app": "acme",
        "credential": "api_key",
        "prefix": _row.prefix,
        "scopes": ["memory", "sessions"],
        "capabilities": [],
        "user_id": None,
        "session_id": None,
    }
    assert key not in answer.content.decode()


def test_a_user_token_learns_its_app_user_session_and_capabilities(owner):
    created = owner.client().post(
        "/api/v1/apps/acme/users/alice/sessions", {"session_id": "s1"}, format="json"
    )
    assert created.status_code == 201
    token, raw = user_tokens.mint(
        owner.app,
        "alice",
        {"capabilities": ["memory_search"], "session_id": "s1"},
        owner.app.api_keys.first(),
    )
    body = _as(raw).get(URL).json()
    assert body["app"] == "acme" and body["credential"] == "user_token"
    assert body["prefix"] == token.prefix
    assert body["capabilities"] == ["identity", "memory_search"] and body["scopes"] == []
    assert (body["user_id"], body["session_id"]) == ("alice", "s1")


def test_two_apps_each_learn_only_their_own():
    acme, globex = make_tenant("acme"), make_tenant("globex")
    assert _as(acme.key).get(URL).json()["app"] == "acme"
    assert _as(globex.key).get(URL).json()["app"] == "globex"


def test_no_credential_is_401_and_parameters_are_refused(owner):
    assert APIClient().get(URL).status_code == 401
    refused = _as(owner.key).get(URL + "?app=globex")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "unknown_parameter"
    assert _as(owner.key).post(URL, {}, format="json").status_code == 405

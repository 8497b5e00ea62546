"""API keys through the API (admin scope): create one with chosen scopes, rotate one (a new
secret, the same scopes and name, the old key revoked), revoke one."""

from __future__ import annotations

import pytest

from ctxadmin.models import ApiKey
from tests.ctxadmin.test_api_base import assert_envelope

pytestmark = pytest.mark.django_db

KEYS = "/api/v1/apps/acme/keys"


def test_a_created_key_is_shown_once_and_works_with_its_scopes(owner):
    made = owner.client().post(KEYS, {"scopes": ["memory"], "name": "indexer"}, format="json")
    assert made.status_code == 201, made.content
    assert made["Cache-Control"] == "no-store"
    body = made.json()
    assert body["scopes"] == ["memory"] and body["name"] == "indexer" and body["state"] == "active"
    secret = body["key"]
    assert secret.startswith(f"ctx_{body['prefix']}_")
    new = owner.client(secret)
    assert new.get("/api/v1/apps/acme/users/u/memories").status_code == 200
    assert new.get("/api/v1/apps/acme/users/u/sessions").status_code == 403
    listed = owner.client().get(f"{KEYS}/{body['prefix']}")
    assert listed.status_code == 200 and "key" not in listed.json()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scopes": ["root"]}, "scopes[0]"),
        ({"scopes": []}, "scopes"),
        ({}, "scopes"),
        ({"scopes": ["memory"], "colour": "red"}, "colour"),
        ({"scopes": ["memory"], "name": "x" * 101}, "name"),
    ],
)
def test_a_bad_create_is_refused_and_makes_nothing(owner, body, field):
    error = assert_envelope(owner.client().post(KEYS, body, format="json"), 400, "validation_error")
    assert error["details"]["field"] == field
    assert ApiKey.objects.count() == 1


def test_rotation_replaces_the_key_and_revokes_the_old_one(owner):
    made = owner.client().post(KEYS, {"scopes": ["sessions"], "name": "agent"}, format="json")
    old = made.json()
    rotated = owner.client().post(f"{KEYS}/{old['prefix']}/rotate")
    assert rotated.status_code == 201, rotated.content
    assert rotated["Cache-Control"] == "no-store"
    new = rotated.json()
    assert new["prefix"] != old["prefix"]
    assert (new["scopes"], new["name"]) == (["sessions"], "agent")
    assert owner.client(new["key"]).get("/api/v1/apps/acme/users/u/sessions").status_code == 200
    assert owner.client(old["key"]).get("/api/v1/apps/acme/users/u/sessions").status_code == 401
    again = owner.client().post(f"{KEYS}/{old['prefix']}/rotate")
    assert_envelope(again, 400, "validation_error")
    assert owner.client().delete(f"{KEYS}/{new['prefix']}").status_code == 204
    assert owner.client(new["key"]).get("/api/v1/apps/acme/users/u/sessions").status_code == 401


def test_keys_need_the_admin_scope_and_stay_in_their_app(owner, outsider):
    limited = owner.client().post(KEYS, {"scopes": ["memory"]}, format="json").json()["key"]
    refused = owner.client(limited).post(KEYS, {"scopes": ["admin"]}, format="json")
    assert_envelope(refused, 403, "permission_denied")
    foreign = owner.client().get(KEYS).json()["results"][0]["prefix"]
    assert_envelope(outsider.client().post(f"{KEYS}/{foreign}/rotate"), 404, "not_found")
    globex = "/api/v1/apps/globex/keys"
    theirs = outsider.client().get(globex).json()["results"][0]["prefix"]
    assert_envelope(
        owner.client().post(f"/api/v1/apps/acme/keys/{theirs}/rotate"), 404, "not_found"
    )

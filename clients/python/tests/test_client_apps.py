"""The app, its keys, the prefix-cache registry, and the typed errors of auth and scope."""

from __future__ import annotations

import pytest
from ctxadmin_client import (
    AuthenticationError,
    Client,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)

pytestmark = pytest.mark.e2e


def test_the_app_and_its_keys(client, app):
    summary = client.get_app(app.name)
    assert summary["app"] == app.name
    assert client.update_app(app.name, display_name="Client tests")["display_name"] == (
        "Client tests"
    )
    mine = client.get_key(app.name)
    assert app.key.startswith(mine["prefix"]) or mine["prefix"] in app.key
    listed = list(client.list_keys(app.name, limit=1))
    assert mine["prefix"] in [k["prefix"] for k in listed]
    assert client.get_api_key(app.name, mine["prefix"])["scopes"] == mine["scopes"]


def test_a_key_names_its_own_app(client, app):
    me = client.whoami()
    assert me["app"] == app.name and me["credential"] == "api_key"
    assert sorted(me["scopes"]) == sorted(app.scopes)


def test_the_apps_user_tokens_are_listed_and_revoked_by_minter(app):
    with Client(app.base_url, app.key) as admin:
        minter = admin.create_api_key(app.name, ["delegate", "memory"], name="minter")
    with Client(app.base_url, minter["key"]) as delegate:
        made = [
            delegate.mint_user_token(app.name, user, capabilities=["memory_search"])
            for user in ("u-tok-1", "u-tok-2")
        ]
        with pytest.raises(PermissionDeniedError) as refused:
            delegate.mint_user_token(app.name, "u-tok-1", capabilities=["session_read"])
        assert refused.value.code == "capability_beyond_minter"
        listed = list(
            delegate.list_app_user_tokens(app.name, minted_by=minter["prefix"], state="active")
        )
        assert sorted(t["prefix"] for t in listed) == sorted(t["prefix"] for t in made)
        assert delegate.revoke_user_tokens_minted_by(app.name, minter["prefix"]) == {"revoked": 2}
        assert (
            list(delegate.list_app_user_tokens(app.name, user_id="u-tok-1", state="active")) == []
        )


def test_keys_are_created_and_rotated_through_the_api(app):
    with Client(app.base_url, app.key) as admin:
        made = admin.create_api_key(app.name, ["sessions"], name="worker")
        assert made["scopes"] == ["sessions"] and made["key"].startswith("ctx_")
        rotated = admin.rotate_api_key(app.name, made["prefix"])
        assert rotated["name"] == "worker" and rotated["prefix"] != made["prefix"]
    with Client(app.base_url, rotated["key"]) as fresh, Client(app.base_url, made["key"]) as old:
        assert fresh.get_key(app.name)["prefix"] == rotated["prefix"]
        with pytest.raises(AuthenticationError):
            old.get_key(app.name)
    with Client(app.base_url, app.key) as admin, pytest.raises(ValidationError):
        admin.create_api_key(app.name, ["root"])


def test_a_revoked_key_is_an_authentication_error(app, make_key):
    spare = make_key(app.name, ["sessions"])
    with Client(app.base_url, app.key) as admin, Client(app.base_url, spare) as victim:
        prefix = victim.get_key(app.name)["prefix"]
        assert admin.revoke_api_key(app.name, prefix) is None
        with pytest.raises(AuthenticationError) as refused:
            victim.get_key(app.name)
        assert refused.value.status == 401


def test_scope_tenancy_and_authentication_errors(app, make_app, make_key):
    other = make_app()
    narrow = make_key(app.name, ["memory"])
    with Client(app.base_url, narrow) as memory_only:
        with pytest.raises(PermissionDeniedError) as denied:
            memory_only.create_session(app.name, "u-1")
        assert denied.value.status == 403 and denied.value.code
    with Client(app.base_url, other.key) as outsider:
        with pytest.raises(NotFoundError):
            outsider.get_key(app.name)
    with Client(app.base_url, "ctx_not_a_real_key") as stranger:
        with pytest.raises(AuthenticationError) as unknown:
            stranger.get_key(app.name)
        assert unknown.value.code in ("authentication_failed", "not_authenticated")


SCOPE = {"provider": "fake", "user_id": "cache-user", "model": "fake-model"}
PREFIX = {
    "system_instruction": "You are a careful travel agent. " * 200,
    "contents": [{"role": "user", "parts": [{"text": "hello"}]}],
}


def test_a_cache_is_acquired_read_and_invalidated(client, app):
    policy = {"min_prefix_tokens": 1}
    scope = {**SCOPE, "policy": policy}
    first = client.acquire_cache(app.name, scope=scope, prefix=PREFIX, ttl_ms=60000)
    assert first["status"] in ("created", "hit"), first
    second = client.acquire_cache(app.name, scope=scope, prefix=PREFIX, ttl_ms=60000)
    assert second["status"] == "hit"
    status = client.cache_scope_status(app.name, first["scope_fingerprint"])
    assert status["scope_fingerprint"] == first["scope_fingerprint"] and status["entries"] >= 1

    invalidated = client.invalidate_cache(app.name, scope_fingerprint=first["scope_fingerprint"])
    assert invalidated["generation"] > first["generation"]

    with pytest.raises(ValidationError) as refused:
        client.acquire_cache(app.name, scope=scope, prefix=PREFIX, ttl_ms=1)
    assert refused.value.status == 400

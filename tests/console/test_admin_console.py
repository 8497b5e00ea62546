from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from ctxadmin.keys import hash_key
from ctxadmin.models import ApiKey


@pytest.fixture
def operator(db, client):
    user = get_user_model().objects.create_superuser("op", password="op-pass-123456")
    client.force_login(user)
    return client


def test_login_page(client, db):
    response = client.get("/admin/login/")
    assert response.status_code == 200
    assert b"ctxadmin" in response.content
    assert client.get("/admin/").status_code == 302


def test_a_new_key_is_shown_once_and_stored_hashed(operator, owner):
    response = operator.post(
        "/admin/ctxadmin/apikey/add/",
        {"app": owner.app.pk, "name": "ci", "scopes": ["sessions", "memory"]},
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    secret = (
        re.search(rb'id="api-key-secret"[^>]*>(ctx_[^<]+)<', response.content).group(1).decode()
    )
    key = ApiKey.objects.get(name="ci")
    assert key.key_hash == hash_key(secret)
    assert key.scopes == ["memory", "sessions"]
    # The secret appears on no other page.
    for page in ("/admin/ctxadmin/apikey/", f"/admin/ctxadmin/apikey/{key.pk}/change/"):
        shown = operator.get(page)
        assert shown.status_code == 200
        assert secret.encode() not in shown.content
        assert key.prefix.encode() in shown.content
    # And it works.
    assert owner.client(secret).get(f"/api/v1/apps/{owner.app.name}/key").status_code == 200


def test_revoke_action(operator, owner):
    key = owner.app.api_keys.get()
    response = operator.post(
        "/admin/ctxadmin/apikey/",
        {"action": "revoke", "_selected_action": [key.pk]},
        follow=True,
    )
    assert b"Revoked 1 API key(s)." in response.content
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert owner.client().get(f"/api/v1/apps/{owner.app.name}/key").status_code == 401


def test_apps_list(operator, owner, outsider):
    response = operator.get("/admin/ctxadmin/app/")
    assert response.status_code == 200
    assert b"acme" in response.content and b"globex" in response.content


def test_session_pages_show_numbers_not_content(operator, owner):
    client = owner.client()
    client.post(
        "/api/v1/apps/acme/users/alice/sessions",
        {"session_id": "s1", "state": {"k": "state-secret-words"}},
        format="json",
    )
    event = {
        "author": "user",
        "content": {"role": "user", "parts": [{"text": "conversation-secret-words"}]},
    }
    client.post("/api/v1/apps/acme/users/alice/sessions/s1/events", {"event": event}, format="json")
    from sessions_app.models import Session

    session = Session.objects.get()
    for page in (
        "/admin/sessions_app/session/",
        f"/admin/sessions_app/session/{session.pk}/change/",
    ):
        shown = operator.get(page)
        assert shown.status_code == 200
        assert b"s1" in shown.content
        assert b"conversation-secret-words" not in shown.content
        assert b"state-secret-words" not in shown.content

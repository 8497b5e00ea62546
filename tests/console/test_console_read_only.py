"""No console page deletes: not the bulk action, not a Delete button, not even for a
superuser. Destructive work goes through the services (the API's delete, the console's own
service-backed actions such as revoke, erase and cancel)."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import RequestFactory

from sessions_app.models import Session
from tests.sessions_helpers import sessions_url

SESSIONS = "/admin/sessions_app/session/"


@pytest.fixture
def superuser(db, client):
    user = get_user_model().objects.create_superuser("root", password="root-pass-123456")
    client.force_login(user)
    client.user = user
    return client


def test_no_model_page_offers_a_delete(superuser):
    request = RequestFactory().get("/admin/")
    request.user = superuser.user
    bulk = [
        model._meta.label
        for model, model_admin in admin.site._registry.items()
        if "delete_selected" in model_admin.get_actions(request)
    ]
    assert bulk == []
    # Operator accounts and groups are the console's own; everything else is the service's.
    deletable = [
        model._meta.label
        for model, model_admin in admin.site._registry.items()
        if model._meta.app_label != "auth" and model_admin.has_delete_permission(request)
    ]
    assert deletable == []


def test_an_empty_session_is_not_deleted_from_the_console(superuser, owner):
    api = owner.client()
    assert api.post(sessions_url("acme"), {"session_id": "empty"}, format="json").status_code == 201
    session = Session.objects.get(session_id="empty")
    listed = superuser.get(SESSIONS)
    assert listed.status_code == 200
    assert b"delete_selected" not in listed.content
    page = superuser.get(f"{SESSIONS}{session.pk}/change/")
    assert page.status_code == 200
    assert b"deletelink" not in page.content
    assert superuser.get(f"{SESSIONS}{session.pk}/delete/").status_code == 403
    posted = superuser.post(f"{SESSIONS}{session.pk}/delete/", {"post": "yes"})
    assert posted.status_code == 403
    bulk = superuser.post(SESSIONS, {"action": "delete_selected", "_selected_action": [session.pk]})
    assert bulk.status_code == 403
    assert Session.objects.filter(pk=session.pk).exists()

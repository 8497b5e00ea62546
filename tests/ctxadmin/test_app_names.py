"""App names: every name Google ADK gives an app (its own rule, and the identifiers it derives
from Python packages) is accepted end to end — created by the service and the command, then
named in API URLs with the app's key; anything else is refused, when created and in a URL
(``invalid_path_parameter``); names are unique ignoring case, and a URL names the app exactly
as it was created."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from ctxadmin.api.paths import path_segment_error
from ctxadmin.models import SCOPES, App
from ctxadmin.services import create_api_key, create_app

ADK_NAMES = ["my_app", "test_app", "MyAgent", "_private", "a-b_c", "A", "x" * 63, "agent_2"]
# Each with how it travels in a URL; a slash or an empty segment cannot reach the view at all.
BAD_IN_URL = {
    "space": ("my app", "my%20app"),
    "dot": ("my.app", "my.app"),
    "non-ascii": ("caf\u00e9", "caf%C3%A9"),
    "64 characters": ("a" * 64, "a" * 64),
}
BAD_NAMES = [name for name, _wire in BAD_IN_URL.values()] + ["a/b", "", "a\nb", "..", "a:b"]

# The rule ``google.adk.apps.app.validate_app_name`` applies (as of google-adk 2.13), and the
# identifiers its agent loader turns into app names (a package's directory name).
ADK_APP_NAME = r"\A[a-zA-Z][a-zA-Z0-9_-]{0,62}\Z"
IDENTIFIER = r"\A[A-Za-z_][A-Za-z0-9_]{0,62}\Z"


def command(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def key_for(app: App) -> APIClient:
    _key, raw = create_api_key(app, SCOPES, name="owner")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@given(st.from_regex(ADK_APP_NAME) | st.from_regex(IDENTIFIER))
def test_every_name_adk_produces_passes_the_rule(name):
    assert path_segment_error("app", name) is None


@pytest.mark.parametrize("name", BAD_NAMES)
def test_the_rule_refuses_what_a_url_would_have_to_escape(name):
    assert path_segment_error("app", name) == "app must be 1-63 characters from A-Z a-z 0-9 _ -"


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["my_app", "test_app", "MyAgent", "_private", "a-b_c"])
def test_an_adk_name_works_end_to_end(name):
    assert command("create_app", name).strip() == f"created app {name}"
    api = key_for(App.objects.get(name=name))
    base = f"/api/v1/apps/{name}"
    assert api.get(f"{base}/").json()["app"] == name
    created = api.post(f"{base}/users/u1/sessions", {"session_id": "s1"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["app"] == name
    appended = api.post(
        f"{base}/users/u1/sessions/s1/events",
        {"event": {"author": "user", "content": {"role": "user", "parts": [{"text": "hi"}]}}},
        format="json",
    )
    assert appended.status_code == 201, appended.content
    shown = api.get(f"{base}/users/u1/sessions/s1")
    assert shown.status_code == 200 and shown.json()["app"] == name
    assert len(shown.json()["events"]) == 1
    for listing in (f"{base}/users/u1/sessions", f"{base}/sessions"):
        listed = api.get(listing).json()["results"]
        assert [(row["user_id"], row["session_id"]) for row in listed] == [("u1", "s1")]


@pytest.mark.django_db
@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_name_is_refused_by_the_service_and_the_command(name):
    said = "An app name is 1-63 characters from A-Z a-z 0-9 _ -." if name else "cannot be blank"
    with pytest.raises(ValidationError) as refused:
        create_app(name)
    assert said in refused.value.message_dict["name"][0]
    with pytest.raises(CommandError, match=f"name: .*{re.escape(said)}"):
        command("create_app", name)
    assert not App.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(BAD_IN_URL))
def test_a_bad_name_in_a_url_is_an_invalid_path_parameter(case):
    api = key_for(create_app("my_app"))
    _name, wire = BAD_IN_URL[case]
    for path in (f"/api/v1/apps/{wire}/", f"/api/v1/apps/{wire}/users/u1/sessions"):
        answer = api.get(path)
        assert answer.status_code == 400, (path, answer.content)
        error = answer.json()["error"]
        assert error["code"] == "invalid_path_parameter"
        assert error["details"] == {"parameter": "app"}


@pytest.mark.django_db
def test_names_are_unique_ignoring_case():
    create_app("My_App")
    for twin in ("my_app", "MY_APP", "My_App"):
        with pytest.raises(ValidationError, match="unique ignoring case"):
            create_app(twin)
        with pytest.raises(CommandError, match="already exists"):
            command("create_app", twin)
    # The database holds the rule whatever the code path (a script, the console, a race).
    with pytest.raises(IntegrityError), transaction.atomic():
        App.objects.create(name="mY_aPP")
    assert list(App.objects.values_list("name", flat=True)) == ["My_App"]


@pytest.mark.django_db
def test_a_url_names_the_app_exactly_as_created():
    api = key_for(create_app("My_App"))
    assert api.get("/api/v1/apps/My_App/").status_code == 200
    for spelling in ("my_app", "MY_APP"):
        answer = api.get(f"/api/v1/apps/{spelling}/")
        assert answer.status_code == 404, answer.content
        assert answer.json()["error"]["code"] == "not_found"


@pytest.mark.django_db
def test_the_console_creates_adk_names_and_refuses_a_case_twin(admin_client):
    added = admin_client.post("/admin/ctxadmin/app/add/", {"name": "My_App", "display_name": ""})
    assert added.status_code == 302, added.content[:500]
    twin = admin_client.post("/admin/ctxadmin/app/add/", {"name": "my_app", "display_name": ""})
    assert twin.status_code == 200
    assert b"unique ignoring case" in twin.content
    bad = admin_client.post("/admin/ctxadmin/app/add/", {"name": "my.app", "display_name": ""})
    assert bad.status_code == 200
    assert b"1-63 characters from A-Z a-z 0-9 _ -" in bad.content
    assert list(App.objects.values_list("name", flat=True)) == ["My_App"]

"""Events stored before key names were read as words are pruned again by migration 0012,
from their stored fields, as an append prunes them today; untouched rows stay as they are.
Those stored before the names added since (``pw``, ``tls_key``, ``contraseña``, …) are
pruned of them by migration 0017."""

from __future__ import annotations

import importlib
import json

import pytest
from django.apps import apps

from sessions_app.models import Event
from tests.conftest import make_tenant
from tests.sessions_helpers import sessions_url

pytestmark = pytest.mark.django_db

migration = importlib.import_module("sessions_app.migrations.0012_reprune_context_json")


def test_old_context_json_is_pruned_again_and_the_rest_is_left_alone():
    api = make_tenant("acme").client()
    api.post(sessions_url("acme"), {"session_id": "s"}, format="json")
    call = {"id": "c1", "name": "deploy", "args": {"github_token": "ghp-canary", "region": "eu"}}
    for event in (
        {
            "event_id": "e1",
            "author": "agent",
            "content": {"role": "model", "parts": [{"function_call": call}]},
        },
        {
            "event_id": "e2",
            "author": "user",
            "content": {"role": "user", "parts": [{"text": "plain words"}]},
        },
    ):
        appended = api.post(f"{sessions_url('acme')}/s/events", {"event": event}, format="json")
        assert appended.status_code == 201, appended.content
    pruned = Event.objects.get(event_id="e1")
    assert "github_token" not in pruned.context_json
    # As the earlier rule stored it: the suffix rule kept ``github_token``.
    old = json.loads(pruned.context_json)
    old["content"]["parts"][0]["function_call"]["args"]["github_token"] = "ghp-canary"
    old_text = json.dumps(old, separators=(",", ":"), sort_keys=True)
    Event.objects.filter(pk=pruned.pk).update(context_json=old_text, context_bytes=len(old_text))
    untouched = Event.objects.get(event_id="e2")

    migration.reprune(apps, None)

    again = Event.objects.get(event_id="e1")
    assert again.context_json == pruned.context_json
    assert again.context_bytes == pruned.context_bytes == len(pruned.context_json.encode())
    assert "ghp-canary" not in again.context_json and '"region":"eu"' in again.context_json
    after = Event.objects.get(event_id="e2")
    assert (after.context_json, after.context_bytes) == (
        untouched.context_json,
        untouched.context_bytes,
    )


names = importlib.import_module("sessions_app.migrations.0017_reprune_context_json_names")


def test_context_json_stored_before_the_new_names_is_pruned_of_them():
    api = make_tenant("acme").client()
    api.post(sessions_url("acme"), {"session_id": "s"}, format="json")
    args = {"pw": "pw-canary", "tls_key": "tls-canary", "contraseña": "es-canary", "city": "Rome"}
    event = {
        "event_id": "e1",
        "author": "agent",
        "content": {
            "role": "model",
            "parts": [{"function_call": {"id": "c1", "name": "login", "args": args}}],
        },
    }
    appended = api.post(f"{sessions_url('acme')}/s/events", {"event": event}, format="json")
    assert appended.status_code == 201, appended.content
    pruned = Event.objects.get(event_id="e1")
    assert "canary" not in pruned.context_json and "Rome" in pruned.context_json
    # As the earlier rules stored it: none of these names was pruned.
    old = json.loads(pruned.context_json)
    old["content"]["parts"][0]["function_call"]["args"] = args
    old_text = json.dumps(old, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    Event.objects.filter(pk=pruned.pk).update(context_json=old_text, context_bytes=len(old_text))

    names.reprune(apps, None)

    again = Event.objects.get(event_id="e1")
    assert again.context_json == pruned.context_json
    assert again.context_bytes == pruned.context_bytes == len(pruned.context_json.encode())

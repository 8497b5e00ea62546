"""The compaction pages of the operator console: ids, ranges and numbers, never content;
machine-owned rows cannot be added, edited or deleted there."""

from __future__ import annotations

import json

import pytest
from django.contrib import admin
from django.test import RequestFactory

from sessions_app.models import AppCompactionPolicy, Checkpoint, CompactionState
from tests.conftest import make_operator
from tests.sessions_helpers import sessions_url, text

SESSION = f"{sessions_url('acme')}/s"
# Words only the conversation (and so the summary of it) holds.
DISTINCTIVE = "zanzibar-quokka-manifest"
CHECKPOINTS = "/admin/sessions_app/checkpoint/"


@pytest.fixture
def operator(db, client):
    # Every permission but ctxadmin.view_content: the pages must show no content.
    user = make_operator()
    client.force_login(user)
    client.user = user
    return client


@pytest.fixture
def checkpoint(owner) -> Checkpoint:
    """An active checkpoint of ``acme/alice/s`` whose summary quotes ``DISTINCTIVE``."""
    api = owner.client()
    assert api.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    policy = {"token_threshold": 10, "retain_recent_exchanges": 1}
    assert api.put(f"{SESSION}/compaction-policy", policy, format="json").status_code == 200
    for turn in range(1, 5):
        events = [
            text("user", f"please file the {DISTINCTIVE} number {turn}", event_id=f"u{turn}"),
            text("agent", f"filed item {turn}", event_id=f"m{turn}"),
        ]
        result = api.post(f"{SESSION}/events", {"events": events}, format="json")
        assert result.status_code == 201, result.content
    done = api.post(f"{SESSION}/compactions", {}, format="json")
    assert done.status_code == 201, done.content
    row = Checkpoint.objects.get(compaction_id=done.json()["compaction_id"])
    assert row.status == "active"
    # The test means something: the content is stored on the checkpoint.
    assert DISTINCTIVE in json.dumps(row.summary) and DISTINCTIVE in row.items_json
    return row


def test_checkpoint_pages_show_ids_and_numbers_not_the_summary(operator, checkpoint):
    for page in (CHECKPOINTS, f"{CHECKPOINTS}{checkpoint.pk}/change/"):
        shown = operator.get(page)
        assert shown.status_code == 200, page
        assert str(checkpoint.pk).encode() in shown.content
        assert b"acme / alice / s" in shown.content  # the app's name, the user, the session
        assert DISTINCTIVE.encode() not in shown.content
    filtered = operator.get(f"{CHECKPOINTS}?status=active&origin=manual&representation=summary")
    assert filtered.status_code == 200
    assert str(checkpoint.pk).encode() in filtered.content


def test_checkpoints_cannot_be_added_edited_or_deleted(operator, checkpoint):
    model_admin = admin.site._registry[Checkpoint]
    request = RequestFactory().get(CHECKPOINTS)
    request.user = operator.user
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request, checkpoint)
    assert not model_admin.has_delete_permission(request, checkpoint)
    assert model_admin.has_view_permission(request, checkpoint)
    assert "delete_selected" not in model_admin.get_actions(request)
    assert operator.get(f"{CHECKPOINTS}add/").status_code == 403
    assert operator.get(f"{CHECKPOINTS}{checkpoint.pk}/delete/").status_code == 403
    assert operator.post(f"{CHECKPOINTS}{checkpoint.pk}/delete/", {"post": "yes"}).status_code == (
        403
    )
    listed = operator.post(
        CHECKPOINTS, {"action": "delete_selected", "_selected_action": [checkpoint.pk]}
    )
    assert listed.status_code == 403
    change = operator.post(f"{CHECKPOINTS}{checkpoint.pk}/change/", {"status": "failed"})
    assert change.status_code == 403
    checkpoint.refresh_from_db()
    assert checkpoint.status == "active"
    assert Checkpoint.objects.filter(pk=checkpoint.pk).exists()


def test_compaction_state_and_app_policy_pages(operator, checkpoint):
    state = CompactionState.objects.create(
        session=checkpoint.session, checks=3, last_skip_reason="below_trigger"
    )
    AppCompactionPolicy.objects.create(
        app=checkpoint.session.app, policy={"automatic": True, "token_threshold": 4321}
    )
    policy = AppCompactionPolicy.objects.get()
    for page, expected in (
        ("/admin/sessions_app/compactionstate/", b"below_trigger"),
        (f"/admin/sessions_app/compactionstate/{state.pk}/change/", b"below_trigger"),
        ("/admin/sessions_app/appcompactionpolicy/", b"acme"),
        (f"/admin/sessions_app/appcompactionpolicy/{policy.pk}/change/", b"4321"),
    ):
        shown = operator.get(page)
        assert shown.status_code == 200, page
        assert expected in shown.content
        assert DISTINCTIVE.encode() not in shown.content
    for model in (CompactionState, AppCompactionPolicy):
        model_admin = admin.site._registry[model]
        request = RequestFactory().get("/admin/")
        request.user = operator.user
        assert not model_admin.has_add_permission(request)
        assert not model_admin.has_delete_permission(request)
        assert not model_admin.has_change_permission(request)

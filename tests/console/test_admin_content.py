"""The console never shows conversation content to a staff user without
``ctxadmin.view_content`` — on any list or detail page — and a permitted user's content view
is audit-logged; the operator groups exist with their permissions."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.urls import reverse

from caching.adapters import fake_adapter
from ctxadmin.models import AuditLog
from memory.models import MemoryEntry
from sessions_app.artifacts.models import ArtifactVersion
from sessions_app.models import Checkpoint, Event, ToolToken
from tests.cache_helpers import acquire, body, scope
from tests.conftest import make_tenant

pytestmark = pytest.mark.django_db(transaction=True)

SEEDED = "zebra-quartz-console"
SECRET = "sk-live-SEEDEDSECRET42"
BASE = "/api/v1/apps/acme/users/alice"


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    from caching.tasks import cleanup
    from memory.tasks import drain_outbox
    from sessions_app.tasks import run_compaction

    for task in (cleanup, drain_outbox, run_compaction):
        monkeypatch.setattr(task, "delay_on_commit", lambda *a, **k: None)
    fake_adapter().reset()


@pytest.fixture
def seeded():
    """Every kind of row the console lists, several carrying the seeded text."""
    tenant = make_tenant("acme")
    api = tenant.client()
    api.post(f"{BASE}/sessions", {"session_id": "s1", "state": {"note": SEEDED}}, format="json")
    for turn in range(6):
        events = [
            {
                "author": "user",
                "content": {"role": "user", "parts": [{"text": f"{SEEDED} question {turn}"}]},
                "custom_metadata": {"tag": SEEDED},
            },
            {
                "author": "agent",
                "content": {"role": "model", "parts": [{"text": f"{SEEDED} answer {turn}"}]},
            },
        ]
        appended = api.post(f"{BASE}/sessions/s1/events", {"events": events}, format="json")
        assert appended.status_code == 201, appended.content
    api.put(f"{BASE}/sessions/s1/compaction-policy", {"retain_recent_exchanges": 1}, format="json")
    compaction = api.post(f"{BASE}/sessions/s1/compactions", {}, format="json")
    assert compaction.status_code == 201, compaction.content
    api.post(
        f"{BASE}/memories",
        {"content": f"{SEEDED} memory", "metadata": {"topic": SEEDED}},
        format="json",
    )
    admitted = api.post(f"{BASE}/memories/ingestions", {"session_id": "s1"}, format="json")
    assert admitted.status_code == 202, admitted.content
    api.post(
        f"{BASE}/sessions/s1/artifacts/report.txt",
        {"data_base64": "emVicmEtcXVhcnR6LWNvbnNvbGU=", "mime_type": "text/plain"},
        format="json",
    )
    # A mime type's parameters and a token's label are the client's text.
    saved = api.post(
        f"{BASE}/sessions/s1/artifacts/notes.txt",
        {"data_base64": "eA==", "mime_type": f"text/plain; name={SEEDED}.txt"},
        format="json",
    )
    assert saved.status_code == 201, saved.content
    minted = api.post(
        f"{BASE}/tokens", {"capabilities": ["identity"], "label": f"{SEEDED} run"}, format="json"
    )
    assert minted.status_code == 201, minted.content
    api.post(
        f"{BASE}/sessions/s1/invocations",
        {
            "invocation_id": "inv-1",
            "input": {"role": "user", "parts": [{"text": f"{SEEDED} invoke"}]},
            "agent": {"provider": "fake", "model": "fake-1"},
            "cache": "off",
        },
        format="json",
    )
    outcome = acquire(tenant.app, body(scope("alice")))
    from caching import registry

    resource = registry.resolve(tenant.app, outcome.lease).resource_name
    return tenant, resource


BANNER = "Your view was written to the audit log"


def _staff(*codenames: str):
    user = get_user_model().objects.create_user("viewer", password="viewer-pass-123", is_staff=True)
    wanted = Permission.objects.filter(codename__in=codenames)
    user.user_permissions.add(*wanted)
    return get_user_model().objects.get(pk=user.pk)


def _every_page(client) -> dict[str, str]:
    """Every registered model's list page and the detail page of its newest row."""
    pages = {}
    for model, model_admin in admin.site._registry.items():
        name = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        listing = client.get(reverse(f"{name}_changelist"))
        pages[f"{model._meta.label} list"] = listing
        row = model_admin.get_queryset(_request(client)).order_by("-pk").first()
        if row is not None:
            detail = client.get(reverse(f"{name}_change", args=[row.pk]))
            pages[f"{model._meta.label} detail"] = detail
    return pages


def _request(client):
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.get(username="viewer")
    return request


def test_a_staff_user_without_view_content_sees_no_content_anywhere(seeded, client):
    _tenant, resource = seeded
    everything = Permission.objects.filter(codename__startswith="view_").exclude(
        codename="view_content"
    )
    viewer = _staff()
    viewer.user_permissions.add(*everything)
    client.force_login(viewer)
    pages = _every_page(client)
    assert len(pages) > 30
    for name, response in pages.items():
        assert response.status_code == 200, name
        html = response.content.decode()
        for secret in (SEEDED, SECRET, resource, resource.split("/")[-1]):
            assert secret not in html, f"{secret!r} on {name}"
    assert AuditLog.objects.count() == 0
    assert not any(BANNER in response.content.decode() for response in pages.values())


def test_a_content_viewer_sees_content_on_detail_pages_only_and_it_is_audit_logged(seeded, client):
    viewer = _staff(
        "view_event",
        "view_checkpoint",
        "view_memoryentry",
        "view_tooltoken",
        "view_artifactversion",
        "view_content",
        "view_auditlog",
    )
    client.force_login(viewer)
    listing = client.get(reverse("admin:sessions_app_event_changelist"))
    assert listing.status_code == 200
    assert SEEDED not in listing.content.decode()
    assert AuditLog.objects.count() == 0
    event = Event.objects.filter(content__isnull=False).order_by("seq").first()
    detail = client.get(reverse("admin:sessions_app_event_change", args=[event.pk]))
    assert SEEDED in detail.content.decode()
    # The page says so: content shown, and the view written to the audit log.
    assert BANNER in detail.content.decode()
    assert BANNER not in listing.content.decode()
    checkpoint = Checkpoint.objects.get(status="active")
    summary = client.get(reverse("admin:sessions_app_checkpoint_change", args=[checkpoint.pk]))
    assert SEEDED in summary.content.decode()
    entry = MemoryEntry.objects.filter(content__contains="memory").first()
    memory = client.get(reverse("admin:memory_memoryentry_change", args=[entry.pk]))
    assert f"{SEEDED} memory" in memory.content.decode()
    tokens = client.get(reverse("admin:sessions_app_tooltoken_changelist")).content.decode()
    assert SEEDED not in tokens and "user token" in tokens
    token = ToolToken.objects.get(label__startswith=SEEDED)
    shown = client.get(reverse("admin:sessions_app_tooltoken_change", args=[token.pk]))
    assert f"{SEEDED} run" in shown.content.decode()
    versions = client.get(reverse("admin:artifacts_artifactversion_changelist")).content.decode()
    assert SEEDED not in versions and "text/plain" in versions
    version = ArtifactVersion.objects.get(mime_type__contains=SEEDED)
    typed = client.get(reverse("admin:artifacts_artifactversion_change", args=[version.pk]))
    assert f"name={SEEDED}.txt" in typed.content.decode()
    logged = list(
        AuditLog.objects.order_by("created_at").values_list(
            "username", "action", "object_type", "object_id"
        )
    )
    assert logged == [
        ("viewer", "view_content", "sessions_app.event", str(event.pk)),
        ("viewer", "view_content", "sessions_app.checkpoint", str(checkpoint.pk)),
        ("viewer", "view_content", "memory.memoryentry", str(entry.pk)),
        ("viewer", "view_content", "sessions_app.tooltoken", str(token.pk)),
        ("viewer", "view_content", "artifacts.artifactversion", str(version.pk)),
    ]
    audit = client.get(reverse("admin:ctxadmin_auditlog_changelist"))
    assert audit.status_code == 200 and "sessions_app.checkpoint" in audit.content.decode()


@pytest.mark.django_db(serialized_rollback=True)
def test_the_operator_groups_hold_their_permissions():
    def codenames(name):
        return set(Group.objects.get(name=name).permissions.values_list("codename", flat=True))

    assert "view_content" not in codenames("diagnostics viewer")
    assert {"view_cacheentry", "view_outboxjob", "view_event"} <= codenames("diagnostics viewer")
    assert codenames("cache operator") == {
        "view_cachescope",
        "view_cacheentry",
        "invalidate_cachescope",
    }
    assert {"erase_memoryentry", "view_erasurereceipt"} <= codenames("erasure operator")
    assert {"view_content", "view_auditlog"} <= codenames("content viewer")


def test_the_erasure_action_erases_with_a_receipt(seeded, client):
    from memory.models import ErasureReceipt

    operator = _staff("view_memoryentry", "erase_memoryentry")
    client.force_login(operator)
    entry = MemoryEntry.objects.filter(content__contains="memory").first()
    answer = client.post(
        reverse("admin:memory_memoryentry_changelist"),
        {"action": "erase_entries", "_selected_action": [entry.pk]},
        follow=True,
    )
    assert "1 entries erased; 0 refused." in answer.content.decode()
    assert not MemoryEntry.objects.filter(pk=entry.pk).exists()
    assert ErasureReceipt.objects.filter(kind="entry", erased_by="console").exists()

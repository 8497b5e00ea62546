"""The console for each operator group of the groups migration, and for a staff user in
none: every registered model's list, detail, history, add, change and delete page, and
every admin action on a row of every model. What the group's permissions allow answers
200 and acts through the services; everything else answers 403 and changes nothing."""

from __future__ import annotations

from importlib import import_module

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse

from caching.models import CacheScope
from memory.models import ErasureReceipt, MemoryEntry, OutboxJob
from tests.console.test_admin_content import quiet, seeded  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)

GROUPS = import_module("ctxadmin.migrations.0003_operator_groups").GROUPS
NO_GROUP = "staff in no group"

# The actions each group may run, by model: the permissions the migration grants them.
ALLOWED_ACTIONS = {
    "cache operator": {
        ("caching", "cachescope"): {"invalidate_scopes"},
        ("caching", "cacheentry"): {"invalidate_scopes"},
    },
    "erasure operator": {
        ("memory", "memoryentry"): {"erase_entries"},
        ("memory", "outboxjob"): {"retry_now", "cancel_jobs"},
    },
}


def viewable(group: str) -> set[tuple[str, str]]:
    """The models whose pages the group may read: those it holds ``view_<model>`` of."""
    return {
        (app, codename.removeprefix("view_"))
        for app, codename in GROUPS.get(group, [])
        if codename.startswith("view_") and codename != "view_content"
    }


@pytest.fixture(autouse=True)
def groups(db):
    """The groups as the migration makes them (a transactional test's database is flushed
    of them: ``test_admin_content`` checks the migrated ones)."""
    for name, wanted in GROUPS.items():
        group, _created = Group.objects.get_or_create(name=name)
        group.permissions.set(
            [
                Permission.objects.get(content_type__app_label=app, codename=codename)
                for app, codename in wanted
            ]
        )


def operator(group: str) -> Client:
    user = get_user_model().objects.create_user(
        group.replace(" ", "-"), password="op-pass-123456", is_staff=True
    )
    if group != NO_GROUP:
        user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return client


def registered():
    """(app label, model name, admin, a row's pk) for every registered model with a row."""
    found = []
    for model, model_admin in admin.site._registry.items():
        row = model._default_manager.order_by("pk").first()
        found.append((model._meta.app_label, model._meta.model_name, model_admin, row and row.pk))
    return found


def snapshot() -> dict[str, list]:
    """Every row of every registered model, as values (what a forbidden call must leave)."""
    return {
        model._meta.label: sorted(map(repr, model._default_manager.values_list()))
        for model in admin.site._registry
        if model._meta.label != "ctxadmin.AuditLog"  # a content viewer's reads are logged
    }


def actions_of(model_admin) -> set[str]:
    # Django's bulk delete is off site-wide; posted anyway, it must still be refused.
    names = {"delete_selected"} | {name for name, _func in admin.site.actions}
    for action in model_admin.actions or ():
        names.add(action if isinstance(action, str) else action.__name__)
    return names


@pytest.mark.parametrize("group", [*GROUPS, NO_GROUP])
def test_each_group_reads_what_it_may_and_nothing_else(seeded, group):  # noqa: F811
    client = operator(group)
    allowed = viewable(group)
    models = registered()
    assert len(models) > 20
    for app, model, _model_admin, pk in models:
        name = f"admin:{app}_{model}"
        expected = 200 if (app, model) in allowed else 403
        pages = [reverse(f"{name}_changelist")]
        if pk is not None:
            pages += [reverse(f"{name}_change", args=[pk]), reverse(f"{name}_history", args=[pk])]
        for page in pages:
            assert client.get(page).status_code == expected, (group, page)
        # No group adds, edits or deletes anything, on any model.
        assert client.get(reverse(f"{name}_add")).status_code == 403, (group, model)
        if pk is not None:
            before = snapshot()
            assert client.post(reverse(f"{name}_change", args=[pk]), {}).status_code == 403
            delete = reverse(f"{name}_delete", args=[pk])
            assert client.get(delete).status_code == 403, (group, model)
            assert client.post(delete, {"post": "yes"}).status_code == 403, (group, model)
            assert snapshot() == before, (group, model)
    index = client.get("/admin/")
    assert index.status_code == 200
    for page in ("/admin/dashboard/", "/admin/dashboard/data.json"):
        assert client.get(page).status_code == 200, (group, page)


@pytest.mark.parametrize("group", [*GROUPS, NO_GROUP])
def test_each_group_is_refused_every_action_it_may_not_run(seeded, group):  # noqa: F811
    client = operator(group)
    allowed = ALLOWED_ACTIONS.get(group, {})
    tried: list[str] = []
    for app, model, model_admin, pk in registered():
        if pk is None:
            continue
        changelist = reverse(f"admin:{app}_{model}_changelist")
        for action in sorted(actions_of(model_admin) - allowed.get((app, model), set())):
            before = snapshot()
            answer = client.post(changelist, {"action": action, "_selected_action": [pk]})
            assert answer.status_code == 403, (group, model, action, answer.status_code)
            assert snapshot() == before, (group, model, action)
            tried.append(action)
    assert len(tried) >= 15 and {"delete_selected", "revoke"} <= set(tried)


def test_the_cache_operator_invalidates_through_the_registry(seeded):  # noqa: F811
    client = operator("cache operator")
    scope = CacheScope.objects.get()
    for model, pk in (("cachescope", scope.pk), ("cacheentry", scope.entries.get().pk)):
        answer = client.post(
            reverse(f"admin:caching_{model}_changelist"),
            {"action": "invalidate_scopes", "_selected_action": [pk]},
            follow=True,
        )
        assert answer.status_code == 200
        assert "1 scope(s) invalidated" in answer.content.decode()
    scope.refresh_from_db()
    assert scope.generation == 3 and scope.invalidated_at is not None
    assert set(scope.entries.values_list("state", flat=True)) == {"deleting"}


def test_the_erasure_operator_erases_and_operates_the_outbox_through_the_services(
    seeded,  # noqa: F811
):
    client = operator("erasure operator")
    entry = MemoryEntry.objects.order_by("created_at").first()
    erased = client.post(
        reverse("admin:memory_memoryentry_changelist"),
        {"action": "erase_entries", "_selected_action": [entry.pk]},
        follow=True,
    )
    assert "1 entries erased; 0 refused." in erased.content.decode()
    assert not MemoryEntry.objects.filter(pk=entry.pk).exists()
    assert ErasureReceipt.objects.filter(kind="entry", erased_by="console").count() == 1
    job = OutboxJob.objects.get()
    jobs = reverse("admin:memory_outboxjob_changelist")
    due = client.post(jobs, {"action": "retry_now", "_selected_action": [job.pk]}, follow=True)
    assert "1 waiting job(s) made due now." in due.content.decode()
    cancelled = client.post(
        jobs, {"action": "cancel_jobs", "_selected_action": [job.pk]}, follow=True
    )
    assert "1 active job(s) cancelled." in cancelled.content.decode()
    job.refresh_from_db()
    assert job.phase == "cancelled" and job.payload == []

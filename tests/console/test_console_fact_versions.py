"""Facts over time in the console: the memory pages say whether an entry is a version of a
key, live or closed, and how many versions its key has — counts, never the key or the text
without ``ctxadmin.view_content``; the dashboard counts keyed entries and closed versions."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from memory.models import MemoryEntry
from memory.tasks import flag_near_duplicates
from tests.conftest import make_tenant

pytestmark = pytest.mark.django_db

WORD = "quokkaflight"  # in the key and the text: content either way
URL = "/api/v1/apps/acme/users/alice/memories"


def _staff(username: str, *codenames: str):
    user = get_user_model().objects.create_user(username, password="pw-0123456789", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return get_user_model().objects.get(pk=user.pk)


@pytest.fixture
def versions():
    api = make_tenant("acme").client()
    key = f"travel.{WORD}"
    old = api.post(
        URL,
        {"content": f"{WORD} aisle", "key": key, "valid_from": "2026-01-01T00:00:00Z"},
        format="json",
    ).json()
    new = api.post(
        URL,
        {"content": f"{WORD} window", "key": key, "valid_from": "2026-06-01T00:00:00Z"},
        format="json",
    ).json()
    plain = api.post(URL, {"content": "no key here"}, format="json").json()
    return {"old": old["id"], "new": new["id"], "plain": plain["id"]}


def test_the_list_says_live_or_closed_and_filters_by_it_without_the_key(versions, client):
    client.force_login(_staff("op", "view_memoryentry"))
    changelist = reverse("admin:memory_memoryentry_changelist")
    page = client.get(changelist).content.decode()
    assert WORD not in page
    assert ">live<" in page and ">closed<" in page
    closed = client.get(f"{changelist}?version=closed").content.decode()
    assert versions["old"] in closed and versions["new"] not in closed
    unkeyed = client.get(f"{changelist}?version=none").content.decode()
    assert versions["plain"] in unkeyed and versions["old"] not in unkeyed


def test_the_detail_page_counts_the_versions_and_shows_the_key_to_content_viewers(versions, client):
    change = reverse("admin:memory_memoryentry_change", args=[versions["old"]])
    client.force_login(_staff("op", "view_memoryentry"))
    page = client.get(change).content.decode()
    assert WORD not in page
    assert re.search(r"versions of its key.*?<div class=\"readonly\">2</div>", page, re.S | re.I)
    assert versions["new"] in page  # its successor, by id
    client.force_login(_staff("viewer", "view_memoryentry", "view_content"))
    shown = client.get(change).content.decode()
    assert f"travel.{WORD}" in shown and f"{WORD} aisle" in shown


def test_the_dashboard_counts_keyed_entries_and_closed_versions(versions, client):
    client.force_login(get_user_model().objects.create_superuser("su", password="su-pw-123456"))
    data = client.get("/admin/dashboard/data.json").json()["data"]
    assert data["memory"]["keyed"] == 2 and data["memory"]["closed_versions"] == 1
    assert data["memory"]["entries"] == MemoryEntry.objects.count() == 3
    page = client.get("/admin/dashboard/").content.decode()
    assert re.search(r'data-figure="memory_keyed">2<', page)
    assert re.search(r'data-figure="memory_closed_versions">1<', page)
    assert WORD not in page and WORD not in str(data)


def test_near_duplicates_are_flagged_by_id_and_filtered(client):
    api = make_tenant("acme").client()
    text = f"Alice books {WORD} window seats on long flights"
    first = api.post(URL, {"content": text}, format="json").json()
    near = api.post(URL, {"content": text + " too"}, format="json").json()
    assert flag_near_duplicates(near["id"]) == 1  # the task an add publishes
    client.force_login(_staff("op", "view_memoryentry"))
    changelist = reverse("admin:memory_memoryentry_changelist")
    flagged = client.get(f"{changelist}?near_duplicate=yes").content.decode()
    assert near["id"] in flagged and first["id"] not in flagged and WORD not in flagged
    page = client.get(reverse("admin:memory_memoryentry_change", args=[near["id"]]))
    detail = page.content.decode()
    assert first["id"] in detail and WORD not in detail

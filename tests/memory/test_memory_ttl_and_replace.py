"""A memory's own time to live: ``ttl_seconds`` on add, bounded by the app's policy, and
``POST .../memories/touch``, which restarts it; expired entries stay out of every read.
And ``replace``: an add that rewrites the entry holding its idempotency key in place."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta

import pytest
from django.db import connections
from django.utils import timezone

from memory import tasks
from memory.inputs import MAX_TOUCH_IDS, MAX_TTL_SECONDS
from memory.models import MemoryEntry
from tests.conftest import make_tenant


def url(app: str = "acme", user: str = "alice") -> str:
    return f"/api/v1/apps/{app}/users/{user}/memories"


def add(client, status=201, app="acme", user="alice", **body):
    result = client.post(url(app, user), body, format="json")
    assert result.status_code == status, result.content
    return result.json()


def touch(client, ids, status=200, app="acme", user="alice"):
    result = client.post(f"{url(app, user)}/touch", {"ids": ids}, format="json")
    assert result.status_code == status, result.content
    return result.json()


def put_policy(client, **policy):
    result = client.put("/api/v1/apps/acme/memory-policy", policy, format="json")
    assert result.status_code == 200, result.content


def expiry(entry_id) -> datetime | None:
    return MemoryEntry.objects.get(id=entry_id).expires_at


def refused(result, field):
    assert result.status_code == 400, result.content
    assert result.json()["error"]["code"] == "validation_error"
    assert result.json()["error"]["details"]["field"] == field


@pytest.fixture
def api(owner):
    return owner.client()


@pytest.mark.django_db
class TestOwnTtl:
    def test_an_entrys_ttl_is_stamped_and_kept_for_touches(self, api):
        entry = add(api, content="Alice is in Lisbon", ttl_seconds=600)
        expires = datetime.fromisoformat(entry["expires_at"])
        assert abs(expires - (timezone.now() + timedelta(seconds=600))) < timedelta(minutes=1)
        assert MemoryEntry.objects.get(id=entry["id"]).ttl_seconds == 600
        plain = add(api, content="Alice lives in Lisbon")
        assert plain["expires_at"] is None

    @pytest.mark.parametrize("value", [0, -1, 1.5, "60", True, MAX_TTL_SECONDS + 1])
    def test_a_bad_ttl_is_refused_and_nothing_is_written(self, api, value):
        result = api.post(url(), {"content": "x", "ttl_seconds": value}, format="json")
        refused(result, "ttl_seconds")
        assert not MemoryEntry.objects.exists()

    def test_the_policy_bounds_it(self, api):
        put_policy(api, default_ttl_seconds=3600)
        refused(
            api.post(url(), {"content": "x", "ttl_seconds": 3601}, format="json"), "ttl_seconds"
        )
        assert add(api, content="short", ttl_seconds=60)["expires_at"] is not None
        put_policy(api, retention_days=1)
        result = api.post(url(), {"content": "x", "ttl_seconds": 86399}, format="json")
        refused(result, "ttl_seconds")
        assert "retention_days" in result.json()["error"]["message"]
        assert add(api, content="kept a day", ttl_seconds=86400)["retain_until"] is not None
        assert MemoryEntry.objects.count() == 2

    def test_a_policy_ttl_is_refreshable_too(self, api):
        put_policy(api, default_ttl_seconds=3600)
        entry = add(api, content="from the policy")
        assert MemoryEntry.objects.get(id=entry["id"]).ttl_seconds == 3600


@pytest.mark.django_db
class TestTouch:
    def test_a_touch_restarts_the_ttl_of_live_entries_that_have_one(self, api):
        timed = add(api, content="timed", ttl_seconds=600)["id"]
        plain = add(api, content="plain")["id"]
        expired = add(api, content="expired", ttl_seconds=600)["id"]
        past = timezone.now() - timedelta(seconds=1)
        MemoryEntry.objects.filter(id=expired).update(expires_at=past)
        MemoryEntry.objects.filter(id=timed).update(
            expires_at=timezone.now() + timedelta(seconds=5)
        )
        answer = touch(api, [timed, plain, expired, str(uuid.uuid4())])
        assert [row["id"] for row in answer["memories"]] == [timed]
        refreshed = expiry(timed)
        assert datetime.fromisoformat(answer["memories"][0]["expires_at"]) == refreshed
        assert refreshed > timezone.now() + timedelta(seconds=500)
        assert expiry(plain) is None and expiry(expired) == past  # an expired entry stays so
        assert api.get(f"{url()}/{expired}").status_code == 404
        assert tasks.purge_expired() == 1

    def test_another_scope_is_not_touched(self, api):
        other = make_tenant("other")
        theirs = add(other.client(), app="other", content="theirs", ttl_seconds=60)["id"]
        bobs = add(api, user="bob", content="bob's", ttl_seconds=60)["id"]
        before = (expiry(theirs), expiry(bobs))
        assert touch(api, [theirs, bobs])["memories"] == []
        assert (expiry(theirs), expiry(bobs)) == before

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({}, "ids"),
            ({"ids": []}, "ids"),
            ({"ids": "x"}, "ids"),
            ({"ids": ["not-a-uuid"]}, "ids.0"),
            ({"ids": [str(uuid.uuid4()), 3]}, "ids.1"),
            ({"ids": [str(uuid.uuid4())] * (MAX_TOUCH_IDS + 1)}, "ids"),
            ({"ids": [str(uuid.uuid4())], "ttl_seconds": 5}, "ttl_seconds"),
        ],
    )
    def test_what_a_touch_refuses(self, api, body, field):
        result = api.post(f"{url()}/touch", body, format="json")
        assert result.status_code == 400, result.content
        assert result.json()["error"]["details"]["field"] == field


@pytest.mark.django_db
class TestReplace:
    def test_replace_rewrites_the_entry_holding_the_key_in_place(self, api):
        first = add(api, content="Alice likes tea", idempotency_key="k1", metadata={"n": 1})
        second = add(
            api,
            status=200,
            content="Alice likes coffee",
            idempotency_key="k1",
            replace=True,
            metadata={"n": 2},
            ttl_seconds=600,
        )
        assert second["id"] == first["id"] and second["content"] == "Alice likes coffee"
        assert second["metadata"] == {"n": 2} and second["expires_at"] is not None
        assert second["sha256"] != first["sha256"] and second["embedding_model"]
        assert MemoryEntry.objects.count() == 1
        hits = api.post(f"{url()}/search", {"query": "coffee"}, format="json").json()["hits"]
        assert [hit["id"] for hit in hits] == [first["id"]]
        assert api.post(f"{url()}/search", {"query": "tea"}, format="json").json()["hits"] == []
        fresh = add(api, content="Bob", idempotency_key="k2", replace=True)
        assert fresh["id"] != first["id"] and MemoryEntry.objects.count() == 2

    def test_an_expired_entry_is_replaced_and_lives_again(self, api):
        old = add(api, content="old", idempotency_key="k1")
        MemoryEntry.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        new = add(api, status=200, content="new", idempotency_key="k1", replace=True)
        assert new["id"] == old["id"] and new["expires_at"] is None
        assert api.get(f"{url()}/{old['id']}").json()["content"] == "new"

    def test_replace_is_refused_as_erasure_is(self, api):
        add(api, content="held", idempotency_key="k1")
        assert api.put(f"{url()}/legal-hold").status_code == 200
        held = api.post(
            url(), {"content": "x", "idempotency_key": "k1", "replace": True}, format="json"
        )
        assert held.status_code == 409 and held.json()["error"]["code"] == "legal_hold"
        add(api, content="a new key is no erasure", idempotency_key="k9", replace=True)
        assert api.delete(f"{url()}/legal-hold").status_code == 204
        put_policy(api, retention_days=1)
        add(api, content="retained", idempotency_key="k2")
        kept = api.post(
            url(), {"content": "x", "idempotency_key": "k2", "replace": True}, format="json"
        )
        assert kept.status_code == 409 and kept.json()["error"]["code"] == "memory_retained"
        assert kept.json()["error"]["details"]["retain_until"]
        assert set(MemoryEntry.objects.values_list("content", flat=True)) == {
            "held",
            "a new key is no erasure",
            "retained",
        }

    @pytest.mark.parametrize(
        ("body", "field"),
        [({"replace": True}, "replace"), ({"replace": "yes", "idempotency_key": "k"}, "replace")],
    )
    def test_what_replace_refuses(self, api, body, field):
        refused(api.post(url(), {"content": "x", **body}, format="json"), field)
        assert not MemoryEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_replaces_of_one_key_leave_one_entry():
    tenant = make_tenant("acme")
    barrier = threading.Barrier(12)
    statuses: list[int] = []

    def send(index: int) -> None:
        try:
            client = tenant.client()
            barrier.wait()
            body = {"content": f"value {index}", "idempotency_key": "k1", "replace": True}
            statuses.append(client.post(url(), body, format="json").status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses.count(201) == 1 and statuses.count(200) == 11
    assert MemoryEntry.objects.count() == 1
    survivor = MemoryEntry.objects.get()
    assert survivor.content.startswith("value ") and survivor.idempotency_key == "k1"

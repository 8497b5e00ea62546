"""``POST .../memories/batch``: a bounded list of adds in one transaction, each checked and
applied as one add is (idempotency keys, ``replace``, TTLs, the policy); all land or none
does. And ``GET /apps/{app}/memory-users``: who holds memories, by id."""

from __future__ import annotations

import pytest

from memory.inputs import MAX_BATCH_MEMORIES
from memory.models import MemoryEntry


def url(user: str = "alice", app: str = "acme") -> str:
    return f"/api/v1/apps/{app}/users/{user}/memories"


def batch(client, memories, user="alice", app="acme"):
    return client.post(f"{url(user, app)}/batch", {"memories": memories}, format="json")


@pytest.fixture
def api(owner):
    return owner.client()


@pytest.mark.django_db
class TestBatch:
    def test_every_add_lands_in_order_with_its_entry(self, api):
        result = batch(
            api,
            [
                {"content": "Alice likes tea", "metadata": {"n": 1}, "idempotency_key": "b"},
                {"content": "Alice likes jazz", "ttl_seconds": 600},
                {"content": "Alice lives in Porto", "idempotency_key": "a"},
            ],
        )
        assert result.status_code == 200, result.content
        answered = result.json()["memories"]
        assert [a["memory"]["content"] for a in answered] == [
            "Alice likes tea",
            "Alice likes jazz",
            "Alice lives in Porto",
        ]
        assert all(a["created"] for a in answered)
        assert answered[0]["memory"]["metadata"] == {"n": 1}
        assert answered[1]["memory"]["expires_at"] is not None
        assert MemoryEntry.objects.filter(user_id="alice").count() == 3
        hits = api.post(f"{url()}/search", {"query": "jazz"}, format="json").json()["hits"]
        assert [hit["id"] for hit in hits] == [answered[1]["memory"]["id"]]

    def test_keys_and_replace_as_single_adds(self, api):
        first = api.post(url(), {"content": "old", "idempotency_key": "k1"}, format="json").json()
        result = batch(
            api,
            [
                {"content": "old", "idempotency_key": "k1"},  # the same: that entry
                {"content": "new", "idempotency_key": "k2", "replace": True},
                {"content": "newer", "idempotency_key": "k2", "replace": True},  # later wins
            ],
        ).json()["memories"]
        assert result[0] == {"memory": first, "created": False}
        assert result[1]["created"] and not result[2]["created"]
        assert result[1]["memory"]["id"] == result[2]["memory"]["id"]
        kept = MemoryEntry.objects.get(idempotency_key="k2")
        assert kept.content == "newer"
        assert MemoryEntry.objects.count() == 2

    @pytest.mark.parametrize(
        ("bad", "status", "code", "field"),
        [
            ({"content": ""}, 400, "validation_error", "memories.1.content"),
            ({"content": "x", "color": "red"}, 400, "validation_error", "memories.1.color"),
            ({"content": "x", "replace": True}, 400, "validation_error", "memories.1.replace"),
            (
                {"content": "my api_key=sk-live-abcdefghijklmnopqrstuvwx"},
                422,
                "sensitive_memory_content",
                None,
            ),
            ({"content": "other", "idempotency_key": "k1"}, 409, "idempotency_conflict", None),
        ],
    )
    def test_one_refused_add_writes_nothing(self, api, bad, status, code, field):
        api.post(url(), {"content": "kept", "idempotency_key": "k1"}, format="json")
        result = batch(api, [{"content": "Alice likes tea"}, bad, {"content": "later"}])
        assert result.status_code == status, result.content
        error = result.json()["error"]
        assert error["code"] == code and error["details"]["index"] == 1
        if field:
            assert error["details"]["field"] == field
        assert list(MemoryEntry.objects.values_list("content", flat=True)) == ["kept"]

    def test_a_held_entry_refuses_the_whole_batch(self, api):
        api.post(url(), {"content": "held", "idempotency_key": "k1"}, format="json")
        assert api.put(f"{url()}/legal-hold").status_code == 200
        result = batch(
            api,
            [
                {"content": "fresh", "idempotency_key": "k0"},
                {"content": "x", "idempotency_key": "k1", "replace": True},
            ],
        )
        assert result.status_code == 409 and result.json()["error"]["code"] == "legal_hold"
        assert result.json()["error"]["details"]["index"] == 1
        assert list(MemoryEntry.objects.values_list("content", flat=True)) == ["held"]

    @pytest.mark.parametrize(
        "body",
        [
            {},
            {"memories": []},
            {"memories": [{"content": "x"}] * (MAX_BATCH_MEMORIES + 1)},
            {"memories": {"content": "x"}},
            {"memories": [{"content": "x"}], "extra": 1},
        ],
    )
    def test_what_a_batch_refuses(self, api, body):
        result = api.post(f"{url()}/batch", body, format="json")
        assert result.status_code == 400, result.content
        assert not MemoryEntry.objects.exists()

    def test_the_largest_batch_lands(self, api):
        memories = [{"content": f"note {i}", "idempotency_key": f"k{i}"} for i in range(100)]
        assert len(memories) == MAX_BATCH_MEMORIES
        assert batch(api, memories).status_code == 200
        assert MemoryEntry.objects.count() == MAX_BATCH_MEMORIES

    def test_another_tenant_sees_nothing(self, api, outsider):
        batch(api, [{"content": "Alice likes tea"}])
        theirs = outsider.client()
        assert batch(theirs, [{"content": "x"}], app="acme").status_code == 404
        assert theirs.get("/api/v1/apps/globex/memory-users").json()["results"] == []


@pytest.mark.django_db
def test_memory_users_lists_who_holds_memories(api):
    for user in ("carol", "alice", "bob"):
        batch(api, [{"content": f"{user} likes tea"}], user=user)
    assert api.delete(url("bob"), {"confirm": "erase user bob"}, format="json").status_code == 200
    first = api.get("/api/v1/apps/acme/memory-users?limit=1").json()
    assert first["results"] == [{"user_id": "alice"}]
    second = api.get(first["next"]).json()
    assert second["results"] == [{"user_id": "carol"}] and second["next"] is None

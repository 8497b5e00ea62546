"""A memory key's history and rollback over the API: the chain of versions with who wrote
them, the bound on versions kept, rollback as a new version, what a token needs, and
tenancy."""

from __future__ import annotations

import pytest
from django.test import override_settings

from memory.models import MemoryEntry
from tests.sessions_app.test_tool_tokens import _as

BASE = "/api/v1/apps/acme/users/alice/memories"


def add(client, status=201, base=BASE, **body):
    result = client.post(base, body, format="json")
    assert result.status_code == status, result.content
    return result.json()


def history(client, memory_id, status=200, base=BASE):
    result = client.get(f"{base}/{memory_id}/history")
    assert result.status_code == status, result.content
    return result.json()


def rollback(client, memory_id, status=201, base=BASE, **body):
    result = client.post(f"{base}/{memory_id}/rollback", body or None, format="json")
    assert result.status_code == status, result.content
    return result.json()


@pytest.fixture
def api(owner):
    return owner.client()


def seats(api) -> list[dict]:
    return [
        add(api, content=f"seat {name}", key="preference.seat", valid_from=f"2026-0{n}-01T00:00Z")
        for n, name in ((1, "aisle"), (3, "window"), (2, "middle"))
    ]


@pytest.mark.django_db
class TestHistory:
    def test_the_chain_of_versions_oldest_valid_first_with_who_wrote_them(self, api, owner):
        aisle, window, middle = seats(api)
        add(api, content="meal vegetarian", key="preference.meal")
        for version in (aisle, window, middle):
            got = history(api, version["id"])["versions"]
            assert [v["content"] for v in got] == ["seat aisle", "seat middle", "seat window"]
        first, second, third = history(api, window["id"])["versions"]
        assert first["superseded_by"] == second["id"] and second["superseded_by"] == third["id"]
        assert first["valid_to"] == second["valid_from"] and third["valid_to"] is None
        prefix = owner.app.api_keys.get().prefix
        assert first["written_by"] == {"key_prefix": prefix, "job_id": None, "event_id": None}

    def test_an_unkeyed_memory_is_its_own_history(self, api):
        lone = add(api, content="likes tea", provenance={"event_id": "e7"})
        (version,) = history(api, lone["id"])["versions"]
        assert version["id"] == lone["id"] and version["written_by"]["event_id"] == "e7"

    def test_another_users_or_apps_memory_is_a_404(self, api, outsider):
        (aisle, *_rest) = seats(api)
        history(api, aisle["id"], 404, base="/api/v1/apps/acme/users/bob/memories")
        history(
            outsider.client(), aisle["id"], 404, base="/api/v1/apps/globex/users/alice/memories"
        )
        rollback(api, aisle["id"], 404, base="/api/v1/apps/acme/users/bob/memories")
        unknown = "00000000-0000-4000-8000-000000000009"
        assert history(api, unknown, 404)["error"]["code"] == "not_found"
        assert history(api, "not-a-uuid", 400)["error"]["code"] == "invalid_path_parameter"

    @override_settings(CTXADMIN_MEMORY_HISTORY_MAX_VERSIONS=3)
    def test_history_is_bounded_the_oldest_closed_versions_go(self, api):
        for n in range(1, 6):
            add(api, content=f"seat {n}", key="preference.seat", valid_from=f"2026-0{n}-01T00:00Z")
        add(api, content="seat 0", key="preference.seat", valid_from="2025-12-01T00:00Z")
        kept = MemoryEntry.objects.filter(key="preference.seat").order_by("valid_from")
        assert [row.content for row in kept] == ["seat 3", "seat 4", "seat 5"]
        live = kept.get(valid_to__isnull=True)
        assert [v["content"] for v in history(api, live.id)["versions"]] == [
            "seat 3",
            "seat 4",
            "seat 5",
        ]

    @override_settings(CTXADMIN_MEMORY_HISTORY_MAX_BYTES=250)
    def test_history_is_bounded_in_bytes_the_live_version_whatever_its_size(self, api):
        for n in range(1, 5):  # 100 bytes each: the newest two fit in 250, a third does not
            add(api, content=f"{n}" * 100, key="preference.seat", valid_from=f"2026-0{n}-01T00:00Z")
        kept = MemoryEntry.objects.filter(key="preference.seat").order_by("valid_from")
        assert [row.content[0] for row in kept] == ["3", "4"]
        add(api, content="5" * 400, key="preference.seat")  # alone past the bound: kept
        assert [row.content[0] for row in kept.all()] == ["5"]

    def test_the_bound_keeps_what_a_retention_period_keeps(self, api, owner):
        policy = api.put("/api/v1/apps/acme/memory-policy", {"retention_days": 30}, format="json")
        assert policy.status_code == 200, policy.content
        with override_settings(CTXADMIN_MEMORY_HISTORY_MAX_VERSIONS=2):
            for n in range(1, 5):
                add(api, content=f"seat {n}", key="preference.seat")
        assert MemoryEntry.objects.filter(key="preference.seat").count() == 4


@pytest.mark.django_db
class TestRollback:
    def test_a_closed_version_comes_back_as_a_new_version_valid_from_now(self, api):
        aisle, window, _middle = seats(api)
        restored = rollback(api, aisle["id"])
        assert restored["content"] == "seat aisle" and restored["key"] == "preference.seat"
        assert restored["id"] not in {aisle["id"], window["id"]}
        assert restored["supersedes"] == window["id"] and restored["valid_to"] is None
        assert restored["valid_from"] > window["valid_from"]
        closed = api.get(f"{BASE}/{window['id']}").json()
        assert closed["valid_to"] == restored["valid_from"]
        search = api.post(f"{BASE}/search", {"query": "seat", "mode": "lexical"}, format="json")
        assert [hit["content"] for hit in search.json()["hits"]] == ["seat aisle"]
        assert len(history(api, aisle["id"])["versions"]) == 4

    def test_rolling_back_the_live_version_is_a_409(self, api):
        _aisle, window, _middle = seats(api)
        refused = rollback(api, window["id"], 409)
        assert refused["error"]["code"] == "memory_version_live"

    def test_an_unkeyed_memory_has_nothing_to_roll_back(self, api):
        lone = add(api, content="likes tea")
        assert rollback(api, lone["id"], 409)["error"]["code"] == "memory_not_keyed"

    def test_a_rollback_takes_no_body(self, api):
        aisle, *_rest = seats(api)
        refused = rollback(api, aisle["id"], 400, content="other")
        assert refused["error"]["details"]["field"] == "body"
        assert MemoryEntry.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_token_needs_memory_add_and_memory_delete_to_roll_back(monkeypatch):
    from memory.tasks import drain_outbox
    from tests.conftest import make_tenant

    monkeypatch.setattr(drain_outbox, "delay_on_commit", lambda *a, **k: None)
    owner = make_tenant("acme")
    api = owner.client()
    aisle, *_rest = seats(api)

    def token(capabilities):
        minted = api.post(
            "/api/v1/apps/acme/users/alice/tokens", {"capabilities": capabilities}, format="json"
        )
        assert minted.status_code == 201, minted.content
        return _as(minted.json()["token"])

    adder = token(["memory_add", "memory_search"])
    assert history(adder, aisle["id"])["versions"]
    refused = rollback(adder, aisle["id"], 403)
    assert refused["error"]["details"] == {"needed": "memory_delete"}
    restored = rollback(token(["memory_add", "memory_delete"]), aisle["id"])
    assert restored["content"] == "seat aisle"
    assert history(token(["memory_add"]), aisle["id"], 403)


@pytest.mark.django_db
def test_an_ingested_memory_names_its_job_and_source_event(api, monkeypatch):
    from memory.outbox import worker
    from memory.tasks import drain_outbox
    from tests.outbox_helpers import admit, session_with_events

    monkeypatch.setattr(drain_outbox, "delay_on_commit", lambda *a, **k: None)
    session_with_events(api, "acme", "alice", "s1", 1)
    admitted = admit(api, "acme", "alice", "s1").json()
    worker.drain()
    (entry,) = api.get(BASE).json()["results"]
    (version,) = history(api, entry["id"])["versions"]
    assert version["written_by"] == {
        "key_prefix": None,
        "job_id": admitted["job_id"],
        "event_id": entry["provenance"]["event_id"],
    }
    assert version["written_by"]["event_id"]

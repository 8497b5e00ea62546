"""Memories with a key over the API: supersession, idempotence, refusals, tenancy, the two
clocks on search and list (scripted histories with out-of-order arrival), concurrent adds
of one key, deletion and erasure of versions, and the migration's backfill."""

from __future__ import annotations

import json
import threading
from urllib.parse import quote

import pytest
from django.db import connection, connections

from memory.models import MemoryEntry
from tests.concurrency_helpers import waits_for_the_holder
from tests.conftest import make_tenant


def url(app: str = "acme", user: str = "alice") -> str:
    return f"/api/v1/apps/{app}/users/{user}/memories"


def add(client, status=201, app="acme", user="alice", **body):
    result = client.post(url(app, user), body, format="json")
    assert result.status_code == status, result.content
    return result.json()


def get(client, memory_id, app="acme", user="alice"):
    result = client.get(f"{url(app, user)}/{memory_id}")
    assert result.status_code == 200, result.content
    return result.json()


def listed(client, user="alice", **params) -> list[str]:
    query = "&".join(f"{name}={quote(value)}" for name, value in params.items())
    result = client.get(f"{url(user=user)}?{query}")
    assert result.status_code == 200, result.content
    return [entry["content"] for entry in result.json()["results"]]


def found(client, query="seat", user="alice", **body) -> list[str]:
    result = client.post(
        f"{url(user=user)}/search", {"query": query, "mode": "lexical", **body}, format="json"
    )
    assert result.status_code == 200, result.content
    return [hit["content"] for hit in result.json()["hits"]]


@pytest.fixture
def api(owner):
    return owner.client()


@pytest.mark.django_db
class TestSupersession:
    def test_a_new_version_closes_the_live_one_and_links_it(self, api):
        old = add(api, content="seat: aisle", key="preference.seat")
        assert old["key"] == "preference.seat" and old["supersedes"] is None
        assert old["valid_to"] is None and old["superseded_by"] is None
        assert old["recorded_at"] and old["valid_from"] and old["retired_at"] is None
        new = add(api, content="seat: window", key="preference.seat")
        assert new["supersedes"] == old["id"] and new["valid_to"] is None
        closed = get(api, old["id"])
        assert closed["content"] == "seat: aisle"  # kept, not overwritten
        assert closed["valid_to"] == new["valid_from"]
        assert closed["superseded_by"] == new["id"]
        assert closed["retired_at"] is not None
        assert MemoryEntry.objects.count() == 2
        assert found(api) == ["seat: window"]
        assert listed(api) == ["seat: window"]

    def test_the_key_is_case_folded(self, api):
        old = add(api, content="seat: aisle", key="Preference.SEAT")
        assert old["key"] == "preference.seat"
        assert add(api, content="seat: window", key="preference.seat")["supersedes"] == old["id"]

    def test_the_same_content_is_the_live_version(self, api):
        first = add(api, content="seat: aisle", key="preference.seat")
        again = add(api, status=200, content="seat: aisle", key="preference.seat")
        assert again == first
        assert MemoryEntry.objects.count() == 1

    def test_only_memories_sharing_a_key_supersede_each_other(self, api):
        unkeyed = add(api, content="seat: aisle")
        seat = add(api, content="seat: aisle", key="preference.seat")
        meal = add(api, content="meal: vegetarian", key="preference.meal")
        assert seat["supersedes"] is None and meal["supersedes"] is None
        for entry in (unkeyed, seat, meal):
            assert get(api, entry["id"])["valid_to"] is None
        # Unkeyed, the same text again is the same memory: no versions, no second entry.
        again = add(api, status=200, content="seat: aisle")
        assert again["id"] == unkeyed["id"] and again["supersedes"] is None

    def test_another_users_or_apps_key_is_not_touched(self, api, outsider):
        mine = add(api, content="seat: aisle", key="preference.seat")
        bobs = add(api, user="bob", content="seat: window", key="preference.seat")
        theirs = add(outsider.client(), app="globex", content="seat: middle", key="preference.seat")
        assert bobs["supersedes"] is None and theirs["supersedes"] is None
        assert get(api, mine["id"])["valid_to"] is None
        # Another user's memory is a 404, version or not.
        assert api.get(f"{url(user='bob')}/{mine['id']}").status_code == 404
        assert outsider.client().get(f"{url('globex')}/{mine['id']}").status_code == 404

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"content": "x", "key": "preference seat"}, "key"),
            ({"content": "x", "key": "a..b"}, "key"),
            ({"content": "x", "key": "k" * 129}, "key"),
            ({"content": "x", "key": 3}, "key"),
            ({"content": "x", "key": "a", "idempotency_key": "i1", "replace": True}, "replace"),
            ({"content": "x", "valid_from": "2026-01-01T00:00:00"}, "valid_from"),
            ({"content": "x", "valid_from": "soon"}, "valid_from"),
        ],
    )
    def test_bad_input_is_a_400_and_nothing_is_stored(self, api, body, field):
        refused = add(api, status=400, **body)
        assert refused["error"]["details"]["field"] == field
        assert MemoryEntry.objects.count() == 0

    def test_a_refused_new_version_leaves_the_live_one_open(self, api):
        live = add(api, content="seat: aisle", key="preference.seat")
        add(
            api,
            status=422,
            content="seat: api_key=sk-live-0123456789abcdef0123456789abcd",
            key="preference.seat",
        )
        add(api, status=400, content="seat: window", key="preference.seat", erasure_epoch=3)
        assert get(api, live["id"])["valid_to"] is None

    def test_a_version_is_never_replaced_in_place(self, api):
        version = add(api, content="seat aisle", key="preference.seat", idempotency_key="i1")
        refused = add(api, status=409, content="seat window", idempotency_key="i1", replace=True)
        assert refused["error"]["code"] == "memory_keyed"
        assert get(api, version["id"])["content"] == "seat aisle"

    def test_deleting_a_successor_unlinks_its_predecessor(self, api):
        old = add(api, content="seat: aisle", key="preference.seat")
        new = add(api, content="seat: window", key="preference.seat")
        assert api.delete(f"{url()}/{new['id']}").status_code == 204
        kept = get(api, old["id"])
        assert kept["superseded_by"] is None and kept["valid_to"] is not None
        # The next version opens the key again.
        assert add(api, content="seat: middle", key="preference.seat")["valid_to"] is None

    def test_erasing_the_user_erases_every_version(self, api):
        for content in ("seat: aisle", "seat: window", "seat: middle"):
            add(api, content=content, key="preference.seat")
        add(api, user="bob", content="seat: aisle", key="preference.seat")
        erased = api.delete(url(), {"confirm": "erase user alice"}, format="json")
        assert erased.status_code == 200, erased.content
        assert list(MemoryEntry.objects.values_list("user_id", flat=True)) == ["bob"]


def script(api) -> dict[str, dict]:
    """A scripted history of ``preference.seat``, recorded out of order:
    aisle from Jan 1, window from Mar 1, then (recorded last) middle from Feb 1."""
    aisle = add(api, content="seat aisle", key="preference.seat", valid_from="2026-01-01T00:00:00Z")
    window = add(
        api, content="seat window", key="preference.seat", valid_from="2026-03-01T00:00:00Z"
    )
    middle = add(
        api, content="seat middle", key="preference.seat", valid_from="2026-02-01T00:00:00Z"
    )
    return {"aisle": aisle, "window": window, "middle": middle}


@pytest.mark.django_db
def test_the_same_content_with_other_metadata_or_ttl_is_a_new_version(api):
    first = add(api, content="seat: aisle", key="preference.seat")
    again = add(api, 200, content="seat: aisle", key="preference.seat")
    assert again["id"] == first["id"]
    labelled = add(api, content="seat: aisle", key="preference.seat", metadata={"src": "form"})
    assert labelled["supersedes"] == first["id"]
    timed = add(
        api,
        content="seat: aisle",
        key="preference.seat",
        metadata={"src": "form"},
        ttl_seconds=3600,
    )
    assert timed["supersedes"] == labelled["id"] and timed["expires_at"] is not None
    same = add(
        api,
        200,
        content="seat: aisle",
        key="preference.seat",
        metadata={"src": "form"},
        ttl_seconds=3600,
    )
    assert same["id"] == timed["id"]


@pytest.mark.django_db
class TestTwoClocks:
    def test_an_older_fact_added_later_takes_its_place_in_the_history(self, api):
        versions = script(api)
        aisle, window, middle = (versions[n] for n in ("aisle", "window", "middle"))
        assert window["supersedes"] == aisle["id"]
        # It cut aisle short, not window: window stays the live version.
        assert middle["supersedes"] == aisle["id"]
        assert middle["valid_to"] == window["valid_from"]
        assert middle["superseded_by"] == window["id"]
        assert get(api, window["id"])["valid_to"] is None
        closed = get(api, aisle["id"])
        assert closed["valid_to"] == middle["valid_from"]
        assert closed["superseded_by"] == middle["id"]

    @pytest.mark.parametrize(
        ("as_of", "expected"),
        [
            ("2025-12-31T23:59:59Z", []),
            ("2026-01-01T00:00:00Z", ["seat aisle"]),
            ("2026-01-31T23:59:59Z", ["seat aisle"]),
            ("2026-02-01T00:00:00Z", ["seat middle"]),
            ("2026-02-15T12:00:00+02:00", ["seat middle"]),
            ("2026-03-01T00:00:00Z", ["seat window"]),
            ("2030-01-01T00:00:00Z", ["seat window"]),
        ],
    )
    def test_as_of_each_instant_is_exactly_the_version_valid_then(self, api, as_of, expected):
        script(api)
        assert found(api, as_of=as_of) == expected
        assert listed(api, as_of=as_of) == expected

    def test_the_default_is_what_is_valid_now_as_known_now(self, api):
        script(api)
        assert found(api) == ["seat window"]
        assert listed(api) == ["seat window"]

    def test_valid_from_defaults_to_the_source_event_time(self, api):
        entry = add(
            api,
            content="seat aisle",
            key="preference.seat",
            provenance={"timestamp": "2026-05-01T10:00:00Z"},
        )
        assert entry["valid_from"].startswith("2026-05-01T10:00:00")
        assert entry["recorded_at"] > entry["valid_from"]

    def test_a_source_time_after_the_add_time_is_the_add_time(self, api):
        for key in ("preference.seat", None):
            entry = add(
                api,
                content=f"seat aisle {key}",
                key=key,
                provenance={"timestamp": "2099-01-01T00:00:00Z"},
            )
            assert entry["valid_from"] == entry["recorded_at"]
            assert entry["provenance"]["timestamp"].startswith("2099-01-01")
        assert len(found(api)) == 2

    def test_unkeyed_memories_answer_as_today(self, api):
        add(api, content="seat aisle")
        add(api, content="seat window", valid_from="2026-03-01T00:00:00Z")
        assert sorted(found(api)) == ["seat aisle", "seat window"]
        assert found(api, as_of="2026-02-01T00:00:00Z") == []

    @pytest.mark.parametrize("name", ["as_of", "known_at"])
    def test_bad_instants_are_400s_naming_them(self, api, name):
        result = api.post(f"{url()}/search", {"query": "seat", name: "last week"}, format="json")
        assert result.status_code == 400
        assert result.json()["error"]["details"]["field"] == name
        result = api.get(f"{url()}?{name}=2026-01-01")
        assert result.status_code == 400
        assert result.json()["error"]["details"]["field"] == name


@pytest.mark.django_db(transaction=True)
def test_known_at_before_a_version_was_recorded_does_not_see_it():
    """Each add its own transaction (so its own record time). A version an older fact cut
    short keeps, for readers known before the cut, the end it had."""
    api = make_tenant("acme").client()
    versions = script(api)
    before_middle = versions["window"]["recorded_at"]
    before_window = versions["aisle"]["recorded_at"]
    feb = "2026-02-15T00:00:00Z"
    # Known before middle was recorded, middle is not seen, and aisle still ended where it
    # did then (its earlier end, kept when middle cut it short): aisle was valid in February.
    assert found(api, as_of=feb, known_at=before_middle) == ["seat aisle"]
    assert listed(api, as_of=feb, known_at=before_middle) == ["seat aisle"]
    assert found(api, as_of="2026-04-01T00:00:00Z", known_at=before_middle) == ["seat window"]
    assert found(api, as_of=feb) == ["seat middle"]
    # Known before window was recorded: aisle was open, even in April.
    april = "2026-04-01T00:00:00Z"
    assert found(api, as_of=april, known_at=before_window) == ["seat aisle"]
    assert listed(api, as_of=april, known_at=before_window) == ["seat aisle"]
    assert found(api, known_at="2025-01-01T00:00:00Z") == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_adds_of_one_key_leave_one_live_version():
    client = make_tenant("acme").client()
    barrier = threading.Barrier(2)
    answers = []

    def send(content):
        try:
            barrier.wait(5)
            answers.append(
                client.post(url(), {"content": content, "key": "preference.seat"}, format="json")
            )
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(c,)) for c in ("seat aisle", "seat window")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(answer.status_code for answer in answers) == [201, 201]
    rows = MemoryEntry.objects.filter(key="preference.seat")
    assert rows.count() == 2
    assert rows.filter(valid_to__isnull=True).count() == 1
    first, second = sorted(rows, key=lambda row: row.recorded_at)
    assert first.superseded_by_id == second.id


@pytest.mark.django_db(transaction=True)
def test_an_add_of_a_key_waits_for_one_in_flight():
    from memory import entries
    from memory.inputs import NewMemory

    tenant = make_tenant("acme")

    def new(content):
        return NewMemory(content, {}, None, "", "", "", None, "async", key="preference.seat")

    held, then = waits_for_the_holder(
        lambda: entries.add_memory(tenant.app, "alice", new("seat aisle")),
        lambda: entries.add_memory(tenant.app, "alice", new("seat window")),
    )
    assert then[0]["supersedes"] == held[0]["id"]


@pytest.mark.django_db(transaction=True)
def test_the_migration_backfills_existing_entries():
    from django.core.management import call_command

    tenant = make_tenant("acme")
    call_command("migrate", "memory", "0016", verbosity=0)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO memory_memoryentry (id, app_id, user_id, content, content_sha256, "
                "metadata, search, content_bytes, source_timestamp, created_at) VALUES "
                "(gen_random_uuid(), %s, 'alice', 'said', '', '{}', to_tsvector('said'), 4, "
                "'2026-01-02T03:04:05Z', '2026-02-01T00:00:00Z'), "
                "(gen_random_uuid(), %s, 'alice', 'added', '', '{}', to_tsvector('added'), 5, "
                "NULL, '2026-02-03T00:00:00Z')",
                [tenant.app.pk, tenant.app.pk],
            )
    finally:
        call_command("migrate", verbosity=0)
    rows = {row.content: row for row in MemoryEntry.objects.all()}
    assert rows["said"].valid_from.isoformat() == "2026-01-02T03:04:05+00:00"
    assert rows["said"].recorded_at.isoformat() == "2026-02-01T00:00:00+00:00"
    assert rows["added"].valid_from == rows["added"].recorded_at == rows["added"].created_at
    assert all(row.valid_to is None and row.key is None for row in rows.values())


@pytest.mark.django_db(transaction=True)  # the MCP request closes its connection after it
def test_the_mcp_memories_resource_lists_the_current_version_only(owner):
    from runner.mcp.caller import Caller
    from runner.mcp.server import read_resource_sync

    client = owner.client()
    add(client, content="prefers the aisle", key="preference.seat")
    newer = add(client, content="prefers the window", key="preference.seat")
    caller = Caller(owner.app, "test", "apikey", frozenset({"memory"}))
    read = json.loads(read_resource_sync(caller, "ctxadmin://users/alice/memories"))
    assert [m["id"] for m in read["memories"]] == [newer["id"]]

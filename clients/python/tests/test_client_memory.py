"""Long-term memory, its governance and the ingestion outbox through both clients."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from ctxadmin_client import ConflictError, NotFoundError, ValidationError

pytestmark = pytest.mark.e2e


def test_a_memory_is_added_found_and_deleted(client, app, user):
    added = client.add_memory(
        app.name,
        user,
        "Alice prefers window seats on long flights",
        metadata={"topic": "travel"},
        idempotency_key="pref-1",
    )
    again = client.add_memory(
        app.name, user, "Alice prefers window seats on long flights", idempotency_key="pref-1"
    )
    assert again["id"] == added["id"]
    client.add_memory(app.name, user, "Bob likes green tea in the morning")

    assert client.get_memory(app.name, user, added["id"])["content"].startswith("Alice prefers")
    found = client.search_memory(app.name, user, "window seats", mode="lexical", limit=5)
    assert [hit["id"] for hit in found["hits"]][:1] == [added["id"]]
    assert found["hits"][0]["metadata"] == {"topic": "travel"}
    none_left = client.search_memory(app.name, user, "window seats", mode="lexical", min_score=1e6)
    assert none_left["hits"] == []

    assert client.delete_memory(app.name, user, added["id"]) is None
    with pytest.raises(NotFoundError):
        client.get_memory(app.name, user, added["id"])


def test_a_users_memories_are_listed_newest_first_and_filtered(client, app, user):
    made = [
        client.add_memory(app.name, user, f"note number {n}", metadata={"even": n % 2 == 0})["id"]
        for n in range(5)
    ]
    listed = [entry["id"] for entry in client.list_memories(app.name, user, limit=2)]
    assert listed == list(reversed(made))
    even = client.list_memories(app.name, user, filter={"even": True})
    assert [entry["content"] for entry in even] == [
        "note number 4",
        "note number 2",
        "note number 0",
    ]
    with pytest.raises(ValidationError):
        list(client.list_memories(app.name, user, filter={"even": {"$regex": "x"}}))


def test_a_credential_in_memory_content_is_refused(client, app, user):
    with pytest.raises(ValidationError) as refused:
        client.add_memory(app.name, user, "my password is hunter2-very-secret")
    assert refused.value.status == 422


def test_session_events_become_memories_and_are_erased(client, app, user):
    sid = client.create_session(app.name, user)["session_id"]
    events = [
        {
            "event_id": "m-1",
            "author": "user",
            "content": {"role": "user", "parts": [{"text": "I live in Lyon near the river"}]},
        }
    ]
    client.append_events(app.name, user, sid, events)
    result = client.add_events_to_memory(app.name, user, events, session_id=sid)
    assert result["added"] == 1 and len(result["memory_ids"]) == 1

    receipt = client.erase_session_memories(app.name, user, sid)
    assert receipt["kind"] and receipt["counts"]
    with pytest.raises(NotFoundError):
        client.get_memory(app.name, user, result["memory_ids"][0])

    epoch = client.get_erasure_epoch(app.name, user)["erasure_epoch"]
    client.add_memory(app.name, user, "Something to forget about tulips")
    erased = client.erase_user_memories(app.name, user)
    assert erased["erasure_epoch"] == epoch + 1
    assert client.get_erasure_epoch(app.name, user)["erasure_epoch"] == epoch + 1
    assert client.search_memory(app.name, user, "tulips", mode="lexical")["hits"] == []


def test_an_ingestion_job_is_admitted_read_and_ended(client, app, user):
    sid = client.create_session(app.name, user)["session_id"]
    client.append_events(
        app.name,
        user,
        sid,
        [
            {
                "event_id": "o-1",
                "author": "user",
                "content": {"role": "user", "parts": [{"text": "My cat is called Pixel"}]},
            }
        ],
    )
    admitted = client.ingest_session(app.name, user, sid)
    job_id = admitted["job_id"]
    assert client.get_job(app.name, job_id)["job_id"] == job_id
    try:
        cancelled = client.cancel_job(app.name, job_id)
    except ConflictError as ended:  # a worker finished it first
        assert ended.code == "outbox_job_ended"
        assert client.get_job(app.name, job_id)["phase"] in ("completed", "failed")
    else:
        assert cancelled["phase"] == "cancelled"
    stats = client.outbox_stats(app.name)
    assert set(stats) >= {"by_phase", "active"}


def test_consent_legal_hold_and_policy(client, app, user):
    assert client.set_consent(app.name, user, granted=True)["granted"] is True
    assert client.get_consent(app.name, user)["granted"] is True

    assert client.place_legal_hold(app.name, user)["legal_hold"] is True
    assert client.get_legal_hold(app.name, user)["legal_hold"] is True
    assert client.release_legal_hold(app.name, user) is None
    assert client.get_legal_hold(app.name, user)["legal_hold"] is False

    policy = client.set_memory_policy(app.name, retention_days=30)
    assert policy["retention_days"] == 30
    assert client.get_memory_policy(app.name)["retention_days"] == 30
    client.set_memory_policy(app.name)


def test_versions_of_a_fact_over_time_history_and_rollback(client, app, user):
    aisle = client.add_memory(
        app.name, user, "seat aisle", key="preference.seat", valid_from="2026-01-01T00:00:00Z"
    )
    window = client.add_memory(
        app.name,
        user,
        "seat window",
        key="preference.seat",
        valid_from=datetime(2026, 3, 1, tzinfo=UTC),
    )
    assert window["supersedes"] == aisle["id"]
    assert client.add_memory(app.name, user, "seat window", key="preference.seat") == window
    now = client.search_memory(app.name, user, "seat", mode="lexical")
    assert [hit["content"] for hit in now["hits"]] == ["seat window"]
    february = client.search_memory(
        app.name, user, "seat", mode="lexical", as_of=datetime(2026, 2, 1, tzinfo=UTC)
    )
    assert [hit["content"] for hit in february["hits"]] == ["seat aisle"]
    before = [
        entry["content"]
        for entry in client.list_memories(app.name, user, known_at=aisle["recorded_at"])
    ]
    assert before == ["seat aisle"]
    versions = client.memory_history(app.name, user, window["id"])["versions"]
    assert [v["id"] for v in versions] == [aisle["id"], window["id"]]
    restored = client.rollback_memory(app.name, user, aisle["id"])
    assert restored["content"] == "seat aisle" and restored["supersedes"] == window["id"]
    with pytest.raises(ConflictError):
        client.rollback_memory(app.name, user, restored["id"])


def test_a_users_profile_holds_the_live_version_of_each_key_under_its_prefixes(client, app, user):
    client.add_memory(app.name, user, "seat aisle", key="preference.seat")
    window = client.add_memory(app.name, user, "seat window", key="preference.seat")
    meal = client.add_memory(app.name, user, "meal vegetarian", key="preference.meal")
    client.add_memory(app.name, user, "city Lisbon", key="home.city")
    profile = client.profile(app.name, user, ["preference", "work"], max_bytes=4096)
    assert [(f["key"], f["memory_id"]) for f in profile["fields"]] == [
        ("preference.meal", meal["id"]),
        ("preference.seat", window["id"]),
    ]
    assert profile["prefixes"] == ["preference", "work"] and "seat aisle" not in profile["text"]
    assert client.profile(app.name, user, ["preference", "work"])["sha256"] == profile["sha256"]
    cut = client.profile(app.name, user, ["preference", "home"], max_fields=1)
    assert [f["key"] for f in cut["fields"]] == ["home.city"] and cut["truncated"]
    with pytest.raises(ValidationError):
        client.profile(app.name, user, ["Not..a.key"])

"""The content-free diagnostics API (``/dev/v1/``): context, lifecycle, cache invalidation,
memory search and erasure, the outbox; who may call it; and that nothing it answers carries
event text, state values, memory text, prefixes, resource names or credentials."""

from __future__ import annotations

import pytest

from caching import registry
from caching.models import CacheEntry, CacheScope
from memory.models import ErasureReceipt, MemoryEntry
from sessions_app.models import Checkpoint, Session
from tests.console.diagnostics_helpers import (
    CONTEXT,
    HEX64,
    INVALIDATE,
    LIFECYCLE,
    MARK,
    MEMORY,
    MODEL,
    SID,
    USER,
    assert_clean,
    cache_unchanged,
    confirmation,
    seed_cache,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("quiet_tasks")]

# ----------------------------------------------------------------------------- context


def test_context_reports_counts_bytes_checkpoint_and_fingerprint(world):
    client = world.owner.client()
    response = client.get(CONTEXT)
    assert response.status_code == 200, response.content
    body = response.json()
    session = Session.objects.get(session_id=SID)
    active = Checkpoint.objects.get(status="active")
    assert {body["app"], body["user_id"], body["session_id"]} == {"acme", USER, SID}
    assert body["session_revision"] == session.revision
    assert body["last_seq"] == session.last_seq
    events = body["events"]
    assert events["stored"] == session.event_count
    assert events["hidden_by_compaction"] > 0
    assert events["checkpoints"] == 1
    assert events["selected"] > 0
    assert events["dropped"] == sum(events["dropped_by_reason"].values()) == 0
    assert set(events["dropped_by_reason"]) == {"filter", "budget", "window"}
    assert body["bytes"]["history"] > 0 and body["bytes"]["total"] > body["bytes"]["history"]
    assert body["tokens"]["history"] == -(-body["bytes"]["history"] // 4)
    assert (body["truncated"], body["compressed"]) == (False, True)
    assert body["checkpoint"]["checkpoint_id"] == str(active.compaction_id) == world.checkpoint_id
    assert (body["checkpoint"]["first_seq"], body["checkpoint"]["last_seq"]) == (
        active.first_seq,
        active.last_seq,
    )
    assert HEX64.match(body["context_fingerprint"])
    assert body["policy"] == {
        "max_bytes": 1048576,
        "max_tokens": None,
        "max_input_events": None,
        "bytes_per_token": 4,
        "overflow": "truncate",
    }
    assert body["timings"]["build_ms"] >= 0 and body["timings"]["total_ms"] >= 0
    # Deterministic, and read-only: nothing was compacted or written.
    again = client.get(CONTEXT).json()
    assert again["context_fingerprint"] == body["context_fingerprint"]
    assert Checkpoint.objects.count() == 1
    assert Session.objects.get(session_id=SID).revision == session.revision
    assert_clean(world, response.content)


def test_a_byte_cap_truncates_and_counts_what_it_dropped(world):
    full = world.owner.client().get(CONTEXT).json()
    capped = world.owner.client().get(f"{CONTEXT}?max_bytes=300&bytes_per_token=2").json()
    assert capped["truncated"] is True
    assert capped["events"]["dropped_by_reason"]["budget"] > 0
    assert capped["events"]["selected"] < full["events"]["selected"]
    assert capped["bytes"]["history"] <= 300
    assert capped["tokens"]["history"] == -(-capped["bytes"]["history"] // 2)
    assert capped["context_fingerprint"] != full["context_fingerprint"]
    windowed = world.owner.client().get(f"{CONTEXT}?max_input_events=2").json()
    assert windowed["events"]["dropped_by_reason"]["window"] > 0


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("colour=red", "unknown_parameter"),
        ("max_bytes=0", "invalid_parameter"),
        ("max_bytes=-5", "invalid_parameter"),
        ("max_bytes=abc", "invalid_parameter"),
        ("max_bytes=99999999999", "invalid_parameter"),
        ("max_bytes=10&max_bytes=20", "invalid_parameter"),
        ("bytes_per_token=17", "invalid_parameter"),
        ("max_input_events=1000001", "invalid_parameter"),
        ("model=x", "unknown_parameter"),
    ],
)
def test_context_query_parameters_are_bounded(world, query, code):
    response = world.owner.client().get(f"{CONTEXT}?{query}")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == code


def test_a_missing_session_is_404(world):
    for url in (f"/dev/v1/context/acme/{USER}/nope", f"/dev/v1/context/acme/bob/{SID}/lifecycle"):
        response = world.owner.client().get(url)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


# ----------------------------------------------------------------------------- lifecycle


def test_lifecycle_reports_the_checkpoint_and_the_cache_scope(world):
    response = world.owner.client().get(f"{LIFECYCLE}?model={MODEL}")
    assert response.status_code == 200, response.content
    body = response.json()
    active = Checkpoint.objects.get(status="active")
    assert (body["app"], body["user_id"], body["session_id"], body["model"]) == (
        "acme",
        USER,
        SID,
        MODEL,
    )
    checkpoint = body["checkpoint"]
    assert checkpoint["checkpoint_id"] == world.checkpoint_id
    assert checkpoint["trigger"] == active.trigger
    assert checkpoint["source_fingerprint"] == active.source_fingerprint
    assert HEX64.match(checkpoint["source_fingerprint"])
    assert checkpoint["events_covered"] == len(active.source_event_ids) > 0
    assert checkpoint["tokens_before"] > checkpoint["tokens_after"] > 0
    assert body["compactions_in_flight"] == 0
    cache = body["cache"]
    assert cache["scope_fingerprint"] == world.scope_fingerprint
    assert HEX64.match(cache["scope_fingerprint"])
    assert (cache["scopes_total"], cache["entries"], cache["in_flight"], cache["waiters"]) == (
        1,
        1,
        0,
        0,
    )
    (only,) = cache["scopes"]
    assert only["scope_fingerprint"] == world.scope_fingerprint
    assert (only["provider"], only["generation"], only["entries"]) == ("fake", 1, 1)
    assert "policy" not in only and "live_entries" not in only
    assert_clean(world, response.content)


def test_lifecycle_adds_up_every_scope_of_the_model_and_names_the_newest(world):
    # Another policy of the same (app, user, model) is another scope; another user's is not.
    from tests.cache_helpers import acquire, body, scope

    newer = acquire(world.owner.app, body(scope(USER, model=MODEL, min_prefix_tokens=50)))
    seed_cache(world.owner, user="bob")
    cache = world.owner.client().get(f"{LIFECYCLE}?model=models/{MODEL}").json()["cache"]
    assert cache["scopes_total"] == 2 and cache["entries"] == 2
    assert cache["scope_fingerprint"] == newer.scope_fingerprint
    assert {s["scope_fingerprint"] for s in cache["scopes"]} == {
        newer.scope_fingerprint,
        world.scope_fingerprint,
    }


def test_lifecycle_without_a_model_or_with_an_unknown_one(world):
    plain = world.owner.client().get(LIFECYCLE).json()
    assert plain["cache"] is None and plain["model"] is None
    assert plain["checkpoint"]["checkpoint_id"] == world.checkpoint_id
    other = world.owner.client().get(f"{LIFECYCLE}?model=other-model").json()["cache"]
    assert (other["scopes_total"], other["scope_fingerprint"], other["scopes"]) == (0, None, [])
    for query in ("model=", "model=bad%20model", "model=a&model=b", "max_bytes=1"):
        response = world.owner.client().get(f"{LIFECYCLE}?{query}")
        assert response.status_code == 400, (query, response.content)


# ----------------------------------------------------------------------------- invalidate


def test_invalidate_with_the_exact_confirmation(world):
    response = world.owner.client().post(INVALIDATE, confirmation(world), format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["scope_fingerprint"] == world.scope_fingerprint
    assert (body["generation"], body["entries_invalidated"], body["creates_in_flight"]) == (
        2,
        1,
        0,
    )
    assert (body["app"], body["user_id"], body["session_id"], body["model"]) == (
        "acme",
        USER,
        SID,
        MODEL,
    )
    assert CacheScope.objects.get(fingerprint=world.scope_fingerprint).generation == 2
    assert set(CacheEntry.objects.values_list("state", flat=True)) == {"deleting"}
    with pytest.raises(registry.LeaseError):
        registry.resolve(world.owner.app, world.lease)
    assert_clean(world, response.content)
    lifecycle = world.owner.client().get(f"{LIFECYCLE}?model={MODEL}").json()["cache"]
    assert (lifecycle["entries"], lifecycle["scopes"][0]["generation"]) == (0, 2)


@pytest.mark.parametrize(
    "changes",
    [
        {"scope_fingerprint": "0" * 64},
        {"app_name": "globex"},
        {"user_id": "bob"},
        {"session_id": "s-2"},
        {"model": "gemini-2.5-pro"},
    ],
)
def test_a_mismatched_confirmation_is_409_and_changes_nothing(world, changes):
    response = world.owner.client().post(INVALIDATE, confirmation(world, **changes), format="json")
    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "confirmation_mismatch"
    assert error["details"]["field"] in changes
    cache_unchanged(world, 1)


def test_another_users_scope_is_a_mismatch_too(world):
    bobs = seed_cache(world.owner, user="bob")
    body = confirmation(world, scope_fingerprint=bobs.scope_fingerprint)
    response = world.owner.client().post(INVALIDATE, body, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["details"]["field"] == "scope_fingerprint"
    cache_unchanged(world, 1)
    assert CacheScope.objects.get(fingerprint=bobs.scope_fingerprint).generation == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("extra", "note"),
        ("missing", "model"),
        ({"scope_fingerprint": "A" * 64}, "scope_fingerprint"),
        ({"scope_fingerprint": "0" * 63}, "scope_fingerprint"),
        ({"user_id": ""}, "user_id"),
        ({"model": "m" * 129}, "model"),
        ({"session_id": 7}, "session_id"),
        ("list", "body"),
    ],
)
def test_a_malformed_confirmation_is_400_and_changes_nothing(world, body, field):
    if body == "extra":
        data = {**confirmation(world), "note": "x"}
    elif body == "missing":
        data = {k: v for k, v in confirmation(world).items() if k != "model"}
    elif body == "list":
        data = [confirmation(world)]
    else:
        data = confirmation(world, **body)
    response = world.owner.client().post(INVALIDATE, data, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["details"]["field"]) == ("validation_error", field)
    cache_unchanged(world, 1)


def test_invalidate_of_a_missing_session_is_404_and_changes_nothing(world):
    url = f"/dev/v1/context/acme/{USER}/s-2/cache/invalidate"
    data = confirmation(world, session_id="s-2")
    assert world.owner.client().post(url, data, format="json").status_code == 404
    cache_unchanged(world, 1)


# ----------------------------------------------------------------------------- memory


def test_memory_search_projects_ids_scores_times_and_sizes(world):
    from tests.console.diagnostics_helpers import seed_memories

    seed_memories(world.owner.client(), "acme", user="bob")  # the same text, another user
    response = world.owner.client().post(
        f"{MEMORY}/search", {"query": f"{MARK} hikes", "mode": "lexical"}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["app"], body["user_id"], body["mode"], body["limit"]) == (
        "acme",
        USER,
        "lexical",
        10,
    )
    assert body["count"] == len(body["hits"]) >= 1
    assert {hit["id"] for hit in body["hits"]} <= set(world.memory_ids)
    for hit in body["hits"]:
        assert set(hit) == {
            "id",
            "app",
            "user_id",
            "score",
            "score_type",
            "content_bytes",
            "metadata_bytes",
            "source_timestamp",
            "created_at",
        }
        assert (hit["app"], hit["user_id"]) == ("acme", USER)
        entry = MemoryEntry.objects.get(pk=hit["id"])
        assert (entry.app.name, entry.user_id) == ("acme", USER)
        assert hit["content_bytes"] == len(entry.content.encode()) > 0
        assert hit["score"] > 0 and hit["score_type"] == "bm25"
    hybrid = world.owner.client().post(f"{MEMORY}/search", {"query": MARK}, format="json")
    assert {hit["id"] for hit in hybrid.json()["hits"]} == set(world.memory_ids)
    assert_clean(world, response.content, hybrid.content)


def test_a_hit_outside_the_scope_is_never_reported(world, monkeypatch):
    from memory import search as memory_services
    from tests.console.diagnostics_helpers import seed_memories

    bobs = seed_memories(world.owner.client(), "acme", user="bob")
    search = memory_services.search

    def leaky(app, user_id, request):
        hits = search(app, user_id, request)
        foreign = {**hits[0], "id": bobs[0]}
        return [foreign, *hits]

    monkeypatch.setattr(memory_services, "search", leaky)
    response = world.owner.client().post(f"{MEMORY}/search", {"query": MARK}, format="json")
    assert response.status_code == 200, response.content
    ids = [hit["id"] for hit in response.json()["hits"]]
    assert bobs[0] not in ids and set(ids) == set(world.memory_ids)


@pytest.mark.parametrize(
    "data",
    [{}, {"query": ""}, {"query": MARK, "limit": 101}, {"query": MARK, "colour": "red"}, []],
)
def test_memory_search_input_is_strict(world, data):
    response = world.owner.client().post(f"{MEMORY}/search", data, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "validation_error"


def test_memory_erase_needs_the_exact_confirmation_then_returns_the_receipt(world):
    client = world.owner.client()
    for data in ({}, {"confirm": "erase user bob"}, {"confirm": f"erase user {USER}", "x": 1}):
        response = client.post(f"{MEMORY}/erase", data, format="json")
        assert response.status_code == 400, response.content
    assert MemoryEntry.objects.filter(user_id=USER).count() == 2
    response = client.post(f"{MEMORY}/erase", {"confirm": f"erase user {USER}"}, format="json")
    assert response.status_code == 200, response.content
    receipt = response.json()
    assert receipt["kind"] == "user" and receipt["counts"]["entries"] == 2
    assert receipt["counts"]["queued_work"] == 1  # the pending ingestion job
    assert receipt["erased_by"] == world.owner.app.api_keys.get().prefix
    assert ErasureReceipt.objects.get().erasure_epoch == receipt["erasure_epoch"]
    assert not MemoryEntry.objects.filter(user_id=USER).exists()
    assert USER not in response.content.decode()
    again = client.post(f"{MEMORY}/erase", {"confirm": f"erase user {USER}"}, format="json")
    assert again.status_code == 200 and again.json()["counts"]["entries"] == 0


# ----------------------------------------------------------------------------- outbox


def test_outbox_stats_and_job(world):
    client = world.owner.client()
    stats = client.get("/dev/v1/outbox/acme/stats")
    assert stats.status_code == 200, stats.content
    body = stats.json()
    assert body["app"] == "acme"
    assert body["by_phase"]["pending"] == 1 and body["active"] == 1
    assert body["active_bytes"] > 0
    assert {"oldest_due_age_seconds", "expired_leases"} <= set(body)
    job = client.get(f"/dev/v1/outbox/acme/jobs/{world.job_id}")
    assert job.status_code == 200, job.content
    detail = job.json()
    assert (detail["app"], detail["job_id"], detail["phase"]) == ("acme", world.job_id, "pending")
    assert detail["session_id"] == SID and detail["events"] > 0
    assert_clean(world, stats.content, job.content)
    for missing in ("00000000-0000-4000-8000-000000000009", "not-a-uuid"):
        response = client.get(f"/dev/v1/outbox/acme/jobs/{missing}")
        assert response.status_code == 404
    assert client.get("/dev/v1/outbox/acme/stats?x=1").status_code == 400

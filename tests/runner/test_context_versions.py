"""The context builder resolves versions: the memory slot shows the version of each key
valid at the request's as_of (as known at known_at), with its key, since when and what it
replaced; unkeyed contradictions grouped newest first; the profile placed first, counted,
and the same bytes across builds."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from ctxadmin.canonical import canonical_size
from memory.models import MemoryEntry
from tests.sessions_helpers import sessions_url

pytestmark = pytest.mark.django_db
SESSION = f"{sessions_url('acme')}/s"
MEMORIES = "/api/v1/apps/acme/users/alice/memories"
CURRENT = {"role": "user", "parts": [{"text": "Which seat should I book?"}]}


@pytest.fixture
def api(owner):
    client = owner.client()
    assert client.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    return client


def add(api, content, key=None, **extra):
    body = {"content": content, **({"key": key} if key else {}), **extra}
    result = api.post(MEMORIES, body, format="json")
    assert result.status_code == 201, result.content
    return result.json()


def build(api, status=200, **body):
    result = api.post(f"{SESSION}/context", {"current_input": CURRENT, **body}, format="json")
    assert result.status_code == status, result.content
    return result.json()


def blocks(body) -> list[tuple[str, str]]:
    """The packed slot's blocks: (the tag's attributes, the body)."""
    if not body["envelope"]["memory"]:
        return []
    [item] = body["envelope"]["memory"]
    text = item["content"]["parts"][0]["text"]
    return re.findall(r"<memory n=\"\d+\"([^>]*)>\n(.*?)\n</memory>", text, re.DOTALL)


def seats(api):
    aisle = add(api, "aisle seat please", "preference.seat", valid_from="2026-01-01T00:00:00Z")
    window = add(api, "window seat please", "preference.seat", valid_from="2026-06-01T00:00:00Z")
    return aisle, window


def test_the_slot_shows_the_live_version_with_its_key_since_and_before(api):
    seats(api)
    [(attributes, text)] = blocks(build(api, memory={"query": "seat", "mode": "lexical"}))
    assert text == "window seat please"
    assert ' key="preference.seat" since="2026-06-01" before="aisle seat please"' in attributes


def test_as_of_shows_the_version_valid_then(api):
    seats(api)
    memory = {"query": "seat", "mode": "lexical", "as_of": "2026-03-01T00:00:00Z"}
    [(attributes, text)] = blocks(build(api, memory=memory))
    assert text == "aisle seat please"
    assert 'since="2026-01-01"' in attributes and "before=" not in attributes
    early = {**memory, "as_of": "2025-01-01T00:00:00Z"}
    assert blocks(build(api, memory=early)) == []


# Record time is the transaction's: each add commits on its own.
@pytest.mark.django_db(transaction=True)
def test_known_at_before_a_version_was_recorded_does_not_show_it(api):
    aisle, _window = seats(api)
    memory = {"query": "seat", "mode": "lexical", "known_at": aisle["recorded_at"]}
    [(_attributes, text)] = blocks(build(api, memory=memory))
    assert text == "aisle seat please"


def test_one_version_per_key_even_when_the_search_sees_two(api):
    # A version whose closing the reader does not know yet reads as open beside the next
    # one: the slot still states one value for the key, the latest valid.
    aisle, _window = seats(api)
    MemoryEntry.objects.filter(id=aisle["id"]).update(retired_at=timezone.now() + timedelta(days=1))
    memory = {"query": "seat", "mode": "lexical", "as_of": "2026-07-01T00:00:00Z"}
    searched = api.post(f"{MEMORIES}/search", memory, format="json").json()["hits"]
    assert len(searched) == 2
    [(_attributes, text)] = blocks(build(api, memory=memory))
    assert text == "window seat please"


def test_the_added_attributes_count_against_the_slot_budget(api):
    seats(api)
    body = build(api, memory={"query": "seat", "mode": "lexical", "max_total_bytes": 4096})
    [item] = body["envelope"]["memory"]
    assert 'key="preference.seat"' in item["content"]["parts"][0]["text"]
    assert body["accounting"]["bytes"]["memory"] == canonical_size(body["envelope"]["memory"])


def test_unkeyed_contradictions_are_grouped_newest_first_with_dates(api):
    add(api, "Alice lives in Porto now", valid_from="2025-02-01T00:00:00Z")
    add(api, "Alice lives in Lisbon now", valid_from="2026-03-01T00:00:00Z")
    found = blocks(build(api, memory={"query": "Alice lives", "mode": "lexical"}))
    assert [text for _a, text in found] == ["Alice lives in Lisbon now", "Alice lives in Porto now"]
    assert 'group="1" since="2026-03-01"' in found[0][0]
    assert 'group="1" since="2025-02-01"' in found[1][0]


def test_the_profile_is_placed_counted_and_the_same_bytes_across_builds(api):
    seats(api)
    add(api, "vegetarian", "preference.meal")
    request = {"profile": {"prefixes": ["preference"]}, "memory": {"query": "seat"}}
    first, second = build(api, **request), build(api, **request)
    [item] = first["envelope"]["profile"]
    assert first["envelope"]["profile"] == second["envelope"]["profile"]
    text = item["content"]["parts"][0]["text"]
    assert 'key="preference.meal"' in text and "window seat please" in text
    assert "aisle" not in text and len(item["memory_ids"]) == 2
    summary = first["accounting"]["profile"]
    assert summary["fields"] == 2 and summary["sha256"] == second["accounting"]["profile"]["sha256"]
    assert summary["bytes"] == len(text.encode())
    profile_bytes = first["accounting"]["bytes"]["profile"]
    assert profile_bytes == canonical_size(first["envelope"]["profile"]) + len('"profile":,')
    assert first["accounting"]["bytes"]["total"] >= canonical_size(first["envelope"])


def test_a_profile_request_is_validated_whole(api):
    error = build(api, 400, profile={"prefixes": ["ok"], "extra": 1})["error"]
    assert error["details"]["field"] == "profile.extra"
    error = build(api, 400, profile={"prefixes": ["Bad..key"]})["error"]
    assert error["details"]["field"] == "profile.prefixes.0"
    error = build(api, 400, profile={"prefixes": ["a"], "max_bytes": 0})["error"]
    assert error["details"]["field"] == "profile.max_bytes"
    error = build(api, 400, profile={"prefixes": ["a"], "max_fields": None})["error"]
    assert error["details"]["field"] == "profile.max_fields"
    assert (
        build(api, 400, memory={"query": "x", "as_of": "yesterday"})["error"]["details"]["field"]
        == "memory.as_of"
    )


def test_a_profile_needs_the_memory_scope(owner, api):
    from ctxadmin.services import create_api_key

    _key, raw = create_api_key(owner.app, ["sessions"], name="sessions only")
    refused = owner.client(raw).post(
        f"{SESSION}/context",
        {"current_input": CURRENT, "profile": {"prefixes": ["preference"]}},
        format="json",
    )
    assert refused.status_code == 403, refused.content


def test_an_invocation_sends_the_profile_first(api, monkeypatch, settings):
    from runner import fake_model

    settings.CTXADMIN_FAKE_MODEL_DELAY_MS = 0
    sent: list[list[dict]] = []
    real = fake_model.generate

    def recording(**kwargs):
        sent.append(kwargs["contents"])
        return real(**kwargs)

    monkeypatch.setattr(fake_model, "generate", recording)
    seats(api)
    answer = api.post(
        f"{SESSION}/invocations",
        {
            "invocation_id": "inv-1",
            "input": CURRENT,
            "agent": {"provider": "fake", "model": "fake-1"},
            "cache": "off",
            "profile": {"prefixes": ["preference"]},
        },
        format="json",
    )
    assert answer.status_code == 201, answer.content
    [contents] = sent
    assert 'key="preference.seat"' in contents[0]["parts"][0]["text"]
    assert contents[-1] == CURRENT


def test_the_predecessors_of_all_hits_are_read_in_one_query(api, owner, django_assert_num_queries):
    from memory import slot

    hits = []
    for name in ("seat", "meal", "city"):
        add(api, f"old {name}", f"preference.{name}", valid_from="2026-01-01T00:00:00Z")
        hits.append(add(api, f"new {name}", f"preference.{name}"))
    with django_assert_num_queries(1):
        annotated = slot.with_versions(owner.app, "alice", hits)
    assert [hit["before"] for hit in annotated] == ["old seat", "old meal", "old city"]
    assert [hit["key"] for hit in annotated] == [
        "preference.seat",
        "preference.meal",
        "preference.city",
    ]

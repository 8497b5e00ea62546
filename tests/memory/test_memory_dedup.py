"""No duplicates, in layers: the same normalised text in a scope is one memory (over REST, in
a batch, concurrently, through ingestion), a near-duplicate is flagged by an explicit add and
merged by ingestion, and turns that carry no fact are never stored."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connections

from memory.dedup import sweep_near_duplicates
from memory.fillers import carries_no_fact
from memory.models import MemoryEntry, NearCheck
from memory.outbox import worker
from memory.similarity import near_duplicates, normalised
from tests.conftest import make_tenant
from tests.sessions_helpers import sessions_url, text

BASE = "/api/v1/apps/acme/users/alice/memories"
WINDOW = "Alice prefers window seats on long flights"


def add(client, status=201, base=BASE, **body):
    result = client.post(base, body, format="json")
    assert result.status_code == status, result.content
    return result.json()


@pytest.fixture
def api(owner):
    return owner.client()


class TestTheRules:
    def test_normalised_text_folds_case_width_spaces_and_sentence_ends(self):
        assert normalised("  Alice  prefers\tWINDOW seats. ") == "alice prefers window seats"
        assert normalised("Ｃａｆé!") == normalised("café")  # NFKC: full-width letters
        assert normalised("seat: aisle") != normalised("seat: window")

    @pytest.mark.parametrize(
        ("a", "b", "near"),
        [
            (WINDOW, WINDOW + " too", True),  # one word more in eight
            (WINDOW, "Alice prefers window seats on short flights", False),  # 6 of 8 shared
            ("We took tram 12 up the hill", "We took tram 28 up the hill", False),  # numbers
            ("I like it", "I like it a lot", False),  # three words are never near anything
            ("Prefers window seats on flights", "prefers  WINDOW seats on flights!", True),
        ],
    )
    def test_near_duplicates(self, a, b, near):
        assert near_duplicates(a, b) is near

    @pytest.mark.parametrize(
        "filler",
        [
            "Thanks!",
            "OK, got it.",
            "Sounds good, see you",
            "Noted (42 characters, 3 contents).",
            "haha",
            ";)",
            "Great, thank you so much!",
        ],
    )
    def test_turns_that_carry_no_fact(self, filler):
        assert carries_no_fact(filler)

    @pytest.mark.parametrize(
        "fact",
        [
            "Thanks, I fly on Friday",
            "No, my seat is 14C",
            "Yes, I love it",
            "Done: search answered.",
            "ok 3",
            "sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709",
            "パスワードは8文字以上にしてください。",
        ],
    )
    def test_turns_that_carry_one(self, fact):
        assert not carries_no_fact(fact)


@pytest.mark.django_db
class TestTheSameText:
    def test_the_same_normalised_text_is_the_existing_memory(self, api):
        first = add(api, content="Alice prefers window seats.", metadata={"topic": "travel"})
        again = add(api, 200, content="  alice prefers WINDOW seats ", idempotency_key="k2")
        assert again["id"] == first["id"] and again["metadata"] == {"topic": "travel"}
        assert add(api, content="Alice prefers aisle seats")["id"] != first["id"]
        assert MemoryEntry.objects.count() == 2

    def test_a_key_makes_another_fact_and_another_scope_another_memory(self, api, outsider):
        unkeyed = add(api, content="seat: aisle")
        keyed = add(api, content="seat: aisle", key="preference.seat")
        bob = add(api, base="/api/v1/apps/acme/users/bob/memories", content="seat: aisle")
        theirs = add(
            outsider.client(),
            base="/api/v1/apps/globex/users/alice/memories",
            content="seat: aisle",
        )
        assert len({unkeyed["id"], keyed["id"], bob["id"], theirs["id"]}) == 4
        # A keyed add repeating its live version (normalised) is that version.
        assert add(api, 200, content="Seat: aisle.", key="preference.seat")["id"] == keyed["id"]

    def test_an_expired_memory_does_not_hold_its_text(self, api):
        first = add(api, content="Alice prefers window seats", ttl_seconds=60)
        MemoryEntry.objects.filter(pk=first["id"]).update(expires_at="2000-01-01T00:00Z")
        assert add(api, content="Alice prefers window seats")["id"] != first["id"]

    def test_a_batch_holding_one_text_twice_stores_it_once(self, api):
        batch = {"memories": [{"content": "likes green tea"}, {"content": "Likes green tea."}]}
        result = api.post(f"{BASE}/batch", batch, format="json")
        assert result.status_code == 200, result.content
        first, second = result.json()["memories"]
        assert first["created"] and not second["created"]
        assert first["memory"]["id"] == second["memory"]["id"]
        assert MemoryEntry.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_adds_of_one_text_make_one_memory():
    tenant = make_tenant("acme")
    barrier = threading.Barrier(6)
    answers: list[int] = []

    def one(n: int) -> None:
        try:
            barrier.wait()
            result = tenant.client().post(
                BASE, {"content": "Alice prefers window seats" + " " * n}, format="json"
            )
            answers.append(result.status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [200] * 5 + [201]
    assert MemoryEntry.objects.count() == 1


def flagged(api, entry: dict) -> str | None:
    """The entry's flag once the beat's sweep has run (here, called in place)."""
    sweep_near_duplicates()
    return api.get(f"{BASE}/{entry['id']}").json()["near_duplicate_of"]


@pytest.mark.django_db
class TestNearDuplicates:
    def test_an_explicit_add_is_stored_and_flagged_once_it_commits(
        self, api, django_capture_on_commit_callbacks
    ):
        first = add(api, content=WINDOW)
        assert flagged(api, first) is None  # nothing before it
        with django_capture_on_commit_callbacks() as published:
            near = add(api, content=WINDOW + " too")
        assert published == []  # no task per add: queued in its own transaction
        assert list(NearCheck.objects.values_list("entry_id", flat=True)) == [uuid.UUID(near["id"])]
        assert near["near_duplicate_of"] is None  # the answer does not wait for it
        assert flagged(api, near) == first["id"]
        # Other numbers, or too few words, are not near anything.
        assert flagged(api, add(api, content="We took tram 12 up the hill")) is None
        assert flagged(api, add(api, content="We took tram 28 up the hill")) is None
        assert not NearCheck.objects.exists()  # the sweep took every queued add
        # The flag goes with the memory it names.
        assert api.delete(f"{BASE}/{first['id']}").status_code == 204
        assert api.get(f"{BASE}/{near['id']}").json()["near_duplicate_of"] is None
        # An add erased before the sweep leaves its queued id, which the sweep drops.
        gone = add(api, content="The museum opens at nine on Sundays")
        assert api.delete(f"{BASE}/{gone['id']}").status_code == 204
        assert sweep_near_duplicates() == (1, 0) and not NearCheck.objects.exists()

    def test_any_embedder_any_embed_mode(self, api):
        first = add(api, content=WINDOW, embed="async")
        assert flagged(api, add(api, content=WINDOW + " too", embed="async")) == first["id"]
        assert add(api, 200, content=WINDOW.upper(), embed="async")["id"] == first["id"]

    def test_the_lexical_prefix_finds_a_near_duplicate_among_many(self, api):
        # Many memories share the common words; the rare ones lead to the near-duplicate.
        for n in range(30):
            add(api, content=f"Alice prefers window seats on flight number {n}")
        target = add(api, content="Alice prefers window seats on long Lisbon flights")
        near = add(api, content="Alice prefers window seats on long Lisbon flights today")
        assert flagged(api, near) == target["id"]

    def test_keyed_versions_are_never_flagged(self, api):
        add(api, content=WINDOW)
        keyed = add(api, content=WINDOW + " too", key="preference.seat")
        assert flagged(api, keyed) is None


def _conversation() -> list[dict]:
    return [
        text("user", "I adopted a cat named Miso last spring"),
        text("agent", "Thanks!"),
        text("user", "Miso is two years old and loves tuna"),
        text("agent", "Noted (38 characters, 3 contents)."),
        text("user", "Miso is two years old and really loves tuna"),  # near: merged
        text("user", "I adopted a cat named Miso last spring."),  # the same text
        text("agent", "OK, got it."),
    ]


def _ingest_through_the_outbox(api, session_id: str) -> dict:
    assert (
        api.post(sessions_url("acme"), {"session_id": session_id}, format="json").status_code == 201
    )
    for event in _conversation():
        result = api.post(
            f"{sessions_url('acme')}/{session_id}/events", {"event": event}, format="json"
        )
        assert result.status_code == 201, result.content
    admitted = api.post(f"{BASE}/ingestions", {"session_id": session_id}, format="json")
    assert admitted.status_code == 202, admitted.content
    assert worker.drain() == {"completed": 1}
    return api.get(f"/api/v1/apps/acme/outbox/jobs/{admitted.json()['job_id']}").json()


@pytest.mark.django_db
class TestIngestion:
    def test_the_outbox_skips_filler_and_merges_near_duplicates(self, api):
        job = _ingest_through_the_outbox(api, "s1")
        assert (job["added"], job["duplicates"]) == (2, 1)
        assert job["skipped_by_reason"] == {"no_fact": 3, "near_duplicate": 1}
        stored = sorted(MemoryEntry.objects.values_list("content", flat=True))
        assert stored == [
            "I adopted a cat named Miso last spring",
            "Miso is two years old and loves tuna",
        ]

    def test_the_same_conversation_three_times_is_one_set_of_memories(self, api):
        for session_id in ("s1", "s2", "s3"):
            job = _ingest_through_the_outbox(api, session_id)
        assert (job["added"], job["duplicates"]) == (0, 3)
        assert MemoryEntry.objects.count() == 2

    def test_the_synchronous_path_applies_the_same_rules(self, api):
        events = [{**event, "event_id": f"e{n}"} for n, event in enumerate(_conversation())]
        result = api.post(f"{BASE}/events", {"events": events}, format="json")
        assert result.status_code == 200, result.content
        body = result.json()
        assert (body["added"], body["duplicates"]) == (2, 1)
        assert body["skipped_by_reason"] == {"no_fact": 3, "near_duplicate": 1}

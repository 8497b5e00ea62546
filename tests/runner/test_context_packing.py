"""The memory slot packed into the request budget: what history leaves, best hit first, no
text twice, one preamble, the budget never exceeded and the current input always kept."""

from __future__ import annotations

import json

import pytest

from memory.render import PREAMBLE
from tests.sessions_helpers import sessions_url, text

pytestmark = pytest.mark.django_db
SESSION = f"{sessions_url('acme')}/s"
MEMORIES = "/api/v1/apps/acme/users/alice/memories"
CURRENT = {"role": "user", "parts": [{"text": "What did we plan for the Lisbon trip?"}]}


@pytest.fixture
def api(owner):
    client = owner.client()
    assert client.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    return client


def turns(count: int, offset: int = 0) -> list[dict]:
    return [
        text(
            "user" if n % 2 == 0 else "agent",
            f"Turn {n}: the Lisbon trip plan mentions tram 28 and pastel de nata, note {n}. "
            + "x" * 80,
            event_id=f"e{n}",
        )
        for n in range(offset, offset + count)
    ]


def seed(api, events: list[dict]) -> None:
    result = api.post(f"{SESSION}/events", {"events": events}, format="json")
    assert result.status_code == 201, result.content


def remember(api, events: list[dict]) -> None:
    result = api.post(f"{MEMORIES}/events", {"session_id": "s", "events": events}, format="json")
    assert result.status_code == 200, result.content


def build(api, budget: int | None, memory: dict | None = None, overflow: str = "truncate"):
    body: dict = {"current_input": CURRENT, "policy": {"overflow": overflow}}
    if budget is not None:
        body["policy"]["budgets"] = {"max_request_bytes": budget}
    if memory is not None:
        body["memory"] = {"query": "Lisbon trip plan tram", "limit": 50, **memory}
    result = api.post(f"{SESSION}/context", body, format="json")
    assert result.status_code == 200, result.content
    return result.json()


def history_texts(body: dict) -> list[str]:
    return [item["content"]["parts"][0]["text"] for item in body["envelope"]["history"]]


def memory_texts(body: dict) -> list[str]:
    return [item["content"]["parts"][0]["text"] for item in body["envelope"]["memory"]]


@pytest.mark.parametrize("budget", [900, 1500, 3000, 6000, 12000])
def test_packing_fills_the_budget_and_never_exceeds_it_or_drops_the_input(api, budget):
    events = turns(60)
    seed(api, events)
    remember(api, events[:30])  # the older half is memory too
    body = build(api, budget, memory={})
    accounting = body["accounting"]
    assert accounting["bytes"]["total"] <= budget
    assert body["envelope"]["current_input"] == CURRENT
    slot = body["envelope"]["memory"]
    measured = len(json.dumps(slot, separators=(",", ":"), sort_keys=True).encode())
    assert accounting["bytes"]["memory"] == (measured if slot else 0)
    if budget >= 1500:
        assert accounting["memory_hits"] >= 1 and body["envelope"]["history"]
        # Filled: what is left is less than one more history item or memory hit.
        assert budget - accounting["bytes"]["total"] < 400


def test_a_hit_whose_text_the_history_holds_is_not_sent_twice(api):
    events = turns(12)
    seed(api, events)
    remember(api, events)  # every turn is also a memory
    body = build(api, 20000, memory={})
    history = "\n".join(history_texts(body))
    assert len(body["envelope"]["history"]) == 12
    assert body["envelope"]["memory"] == []  # all of it is in the history already
    partial = build(api, 2500, memory={})
    kept = "\n".join(history_texts(partial))
    assert partial["envelope"]["memory"] and partial["envelope"]["history"]
    for block in memory_texts(partial):
        recalled = block.split(">\n", 1)[1].rsplit("\n</memory>", 1)[0]
        assert recalled not in kept
    assert history  # the full build held every turn


def test_one_preamble_for_the_whole_slot(api):
    remember(api, turns(6))
    body = build(api, 8000, memory={})
    texts = memory_texts(body)
    assert len(texts) == 6
    assert texts[0].startswith(PREAMBLE)
    assert all(PREAMBLE not in t for t in texts[1:])
    assert all(t.count("<memory ") == 1 and t.endswith("</memory>") for t in texts)


def test_an_explicit_byte_cap_is_kept(api):
    remember(api, turns(10))
    body = build(api, 20000, memory={"max_total_bytes": 700})
    assert 1 <= body["accounting"]["memory_hits"] < 10
    assert body["accounting"]["bytes"]["memory"] <= 700


def test_without_truncate_history_comes_whole_and_memory_fills_the_rest(api):
    events = turns(8)
    seed(api, events)
    remember(api, turns(20, offset=100))
    body = build(api, 6000, memory={}, overflow="error")
    assert len(body["envelope"]["history"]) == 8
    assert 1 <= body["accounting"]["memory_hits"] < 20
    assert body["accounting"]["bytes"]["total"] <= 6000

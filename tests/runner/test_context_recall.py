"""Recall from a session's own compacted history: under ``audit`` retention the events a
checkpoint hides are searched for the current input, and the best restored as exact, cited
excerpts after the summary, within the budget, never twice, never under ``purge``."""

from __future__ import annotations

import json
import re

import pytest

from sessions_app.context.recall import PREAMBLE
from sessions_app.models import Event
from tests.sessions_helpers import sessions_url, text

pytestmark = pytest.mark.django_db
SESSION = f"{sessions_url('acme')}/s"
MEMORIES = "/api/v1/apps/acme/users/alice/memories"
CURRENT = {"role": "user", "parts": [{"text": "Which tram did we plan to ride in Lisbon?"}]}
TOPICS = [
    "We should ride tram 28 through Alfama when we are in Lisbon.",
    "My sister adopted a grey cat called Pepper last spring.",
    "The quarterly report is due on the fourth of June.",
    "I started learning the cello, two lessons a week.",
    "For Lisbon we booked the pastel de nata workshop in Belem.",
    "The garden needs new tomato stakes before the rain.",
]


@pytest.fixture
def api(owner):
    client = owner.client()
    assert client.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    return client


def seed(api, retention: str = "audit", compacted: bool = True, tail: str | None = None):
    policy = {"token_threshold": 10, "retain_recent_exchanges": 1, "retention": retention}
    result = api.put(f"{SESSION}/compaction-policy", policy, format="json")
    assert result.status_code == 200, result.content
    events = []
    for n, words in enumerate(TOPICS * 3):
        events.append(text("user", f"{words} (note {n})", event_id=f"u{n}"))
        events.append(text("agent", f"Noted, item {n}. " + "y" * 60, event_id=f"m{n}"))
    if tail is not None:
        events.append(text("user", tail, event_id="tail-u"))
        events.append(text("agent", "Noted.", event_id="tail-m"))
    result = api.post(f"{SESSION}/events", {"events": events}, format="json")
    assert result.status_code == 201, result.content
    if compacted:
        result = api.post(f"{SESSION}/compactions", {}, format="json")
        assert result.status_code == 201, result.content
    return events


def build(api, budget: int, memory: dict | None = None) -> dict:
    body: dict = {
        "current_input": CURRENT,
        "policy": {"overflow": "truncate", "budgets": {"max_request_bytes": budget}},
    }
    if memory is not None:
        body["memory"] = {"query": "Lisbon tram", "limit": 50, **memory}
    result = api.post(f"{SESSION}/context", body, format="json")
    assert result.status_code == 200, result.content
    return result.json()


def excerpts(body: dict) -> list[dict]:
    return [i for i in body["envelope"]["history"] if i.get("author") == "ctxadmin.recall"]


def cited(item: dict) -> dict[str, str]:
    """Each excerpt's text by the event id it cites."""
    text_ = item["content"]["parts"][0]["text"]
    assert text_.startswith(PREAMBLE) and text_.count(PREAMBLE) == 1
    blocks = re.split(r"\n\[event (\S+) by \S+ at \S+\]\n", text_[len(PREAMBLE) :])
    assert blocks[0] == ""
    return dict(zip(blocks[1::2], blocks[2::2], strict=True))


def test_restored_excerpts_are_exact_cited_and_follow_the_summary(api):
    seed(api)
    body = build(api, 8192)
    history = body["envelope"]["history"]
    [item] = excerpts(body)
    assert item["content"]["role"] == "user"
    summary = next(n for n, i in enumerate(history) if "checkpoint_id" in i)
    assert history[summary + 1] is item or history[summary + 1] == item
    restored = cited(item)
    assert list(restored) == item["recalled_event_ids"]
    assert body["accounting"]["events"]["recalled"] == len(restored)
    stored = {
        e.event_id: e.content["parts"][0]["text"]
        for e in Event.objects.filter(event_id__in=list(restored))
    }
    assert restored == stored  # byte-equal to what the session stored
    # Every tram turn is there: restored, or already in the summary (an extractive summary
    # keeps some sentences as said).
    held = json.dumps(history[summary])
    for n in (0, 6, 12):
        assert f"u{n}" in restored or f"{TOPICS[0]} (note {n})" in held
    assert "u0" not in restored or TOPICS[0] not in held
    assert all("Lisbon" in words or "tram" in words for words in restored.values())


@pytest.mark.parametrize("budget", [1200, 1600, 2048, 3000, 4096, 8192])
def test_excerpts_never_exceed_the_budget_nor_drop_the_input(api, budget):
    seed(api)
    body = build(api, budget)
    accounting = body["accounting"]
    assert accounting["bytes"]["total"] <= budget
    assert body["envelope"]["current_input"] == CURRENT
    history = body["envelope"]["history"]
    measured = sum(
        len(json.dumps(i, separators=(",", ":"), sort_keys=True).encode()) for i in history
    )
    assert accounting["bytes"]["history"] == measured
    envelope = json.dumps(body["envelope"], separators=(",", ":"), sort_keys=True).encode()
    assert len(envelope) <= accounting["bytes"]["total"]
    if budget >= 4096:
        assert excerpts(body)


def test_no_excerpt_repeats_the_selected_history(api):
    seed(api, tail=f"{TOPICS[0]} (note 0)")  # the kept tail says what u0 said
    body = build(api, 8192)
    [item] = excerpts(body)
    restored = cited(item)
    assert restored and "u0" not in restored
    others = "\n".join(
        i["content"]["parts"][0]["text"] for i in body["envelope"]["history"] if i is not item
    )
    assert all(words not in others for words in restored.values())


def test_no_excerpt_repeats_the_memory_slot(api):
    events = seed(api)
    remember = {"session_id": "s", "events": events[8:10]}  # u4 and m4 are memories too
    result = api.post(f"{MEMORIES}/events", remember, format="json")
    assert result.status_code == 200, result.content
    body = build(api, 8192, memory={})
    slot = body["envelope"]["memory"][0]["content"]["parts"][0]["text"]
    assert TOPICS[4] in slot
    restored = cited(excerpts(body)[0])
    assert restored and "u4" not in restored
    assert all(words not in slot for words in restored.values())


def test_nothing_is_restored_under_purge(api):
    seed(api, retention="purge")
    body = build(api, 8192)
    assert any("checkpoint_id" in i for i in body["envelope"]["history"])
    assert excerpts(body) == [] and body["accounting"]["events"]["recalled"] == 0


def test_nothing_is_restored_without_a_checkpoint(api):
    seed(api, compacted=False)
    body = build(api, 2048)  # truncated: older turns are out, but not hidden by a checkpoint
    assert body["accounting"]["truncated"]
    assert excerpts(body) == [] and body["accounting"]["events"]["recalled"] == 0


def test_a_models_thoughts_are_never_restored_nor_summarised_as_said(api):
    thinking = {
        "author": "agent",
        "event_id": "thinking",
        "content": {
            "role": "model",
            "parts": [
                {
                    "text": "Private reasoning: the Lisbon tram plan is a secret tram plan.",
                    "thought": True,
                },
                {"text": "Lisbon tram 28 it is."},
            ],
        },
    }
    seed(api, tail=None)
    # One more compacted exchange whose answer carries a thought beside what was said.
    extra = [text("user", "Lisbon tram question again", event_id="again"), thinking]
    assert api.post(f"{SESSION}/events", {"events": extra}, format="json").status_code == 201
    filler = [text("user", f"filler {n} " + "z" * 60, event_id=f"f{n}") for n in range(12)]
    assert api.post(f"{SESSION}/events", {"events": filler}, format="json").status_code == 201
    assert api.post(f"{SESSION}/compactions", {}, format="json").status_code == 201
    body = build(api, 8192)
    restored = {k: v for item in excerpts(body) for k, v in cited(item).items()}
    history = json.dumps(body["envelope"]["history"])
    # What the model said is kept (in the summary, or restored as said), its thought is not.
    assert "Lisbon tram 28 it is." in history
    assert restored.get("thinking", "Lisbon tram 28 it is.") == "Lisbon tram 28 it is."
    assert "Private reasoning" not in history


def test_an_event_holding_a_credential_is_never_restored(api):
    secret = "Tr4m-" + "Lisboa" + "-77x"
    said = f"For the Lisbon tram pass my password is {secret} so book tram 28."
    seed(api, tail=None)
    extra = [
        text("user", said, event_id="credential"),
        text("agent", f"Lisbon tram noted. The account key is sk_live_{'L1sb0nTram28' * 3}"),
    ]
    assert api.post(f"{SESSION}/events", {"events": extra}, format="json").status_code == 201
    filler = [text("user", f"filler {n} " + "z" * 60, event_id=f"f{n}") for n in range(12)]
    assert api.post(f"{SESSION}/events", {"events": filler}, format="json").status_code == 201
    assert api.post(f"{SESSION}/compactions", {}, format="json").status_code == 201
    body = build(api, 8192)
    restored = {k: v for item in excerpts(body) for k, v in cited(item).items()}
    assert restored, "the other Lisbon turns are still restored"
    assert "credential" not in restored
    history = json.dumps(body["envelope"]["history"])
    assert secret not in history and "L1sb0nTram28" not in history

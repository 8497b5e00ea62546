"""The rule-based extractor keeps what a user states about themselves, and nothing said as a
question, a hypothetical or a joke, nor anything the agent says; its answers are operations
the proposal check accepts, updating a candidate that holds the key."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ctxadmin.credentials import looks_like_secret
from memory.proposals import Candidate, Limits, check
from memory.rule_extractor import propose

AT = datetime(2026, 6, 1, 12, tzinfo=UTC)


def said(text: str, role: str = "user", event_id: str = "e1") -> dict:
    return {"event_id": event_id, "role": role, "text": text, "timestamp": AT}


def facts(text: str) -> list[tuple]:
    return [
        (operation.get("key"), operation["content"])
        for operation in propose([said(text)], [])["operations"]
    ]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("My name is Alice.", [("identity.name", "Name: Alice")]),
        ("I moved to Lisbon last year!", [("identity.home", "Lives in Lisbon")]),
        (
            "I live in Porto and I love tram rides.",
            [("identity.home", "Lives in Porto"), (None, "Loves tram rides")],
        ),
        ("I work as a nurse.", [("identity.work", "Works as a nurse")]),
        ("I'm 34 years old", [("identity.age", "Is 34 years old")]),
        (
            "My favourite colour is green",
            [("preference.favourite_colour", "Favourite colour: green")],
        ),
        ("I'm vegetarian.", [("preference.diet", "Is vegetarian")]),
        ("I am allergic to peanuts", [("health.allergy", "Allergic to peanuts")]),
        ("I prefer window seats", [(None, "Prefers window seats")]),
        ("I don't like early flights.", [(None, "Dislikes early flights")]),
        (
            "I'm flying to Berlin tomorrow.",
            [(None, "Is flying to Berlin tomorrow (on 2026-06-02)")],
        ),
        (
            "I'll call my mother next month.",
            [(None, "Plans to call my mother next month (in 2026-07)")],
        ),
    ],
)
def test_what_a_user_states_about_themselves(text, found):
    assert facts(text) == found


@pytest.mark.parametrize(
    "text",
    [
        "Do you like trains?",
        "If I moved to Paris, I would love it.",
        "Imagine I lived in Rome.",
        "Just kidding, I live on Mars lol",
        "Thanks!",
        "The weather is nice.",
    ],
)
def test_questions_hypotheticals_jokes_and_small_talk_are_not_facts(text):
    assert facts(text) == []


def test_the_agent_s_turns_are_not_the_user_s_facts():
    assert propose([said("My name is Bot.", role="model")], []) == {"operations": []}


def test_a_candidate_holding_the_key_is_updated_or_left_as_it_is():
    candidates = [
        Candidate(1, "m-1", "Lives in Porto", "identity.home"),
        Candidate(2, "m-2", "Name: Alice", "identity.name"),
    ]
    turns = [
        said("I moved to Lisbon in May.", event_id="e1"),
        said("My name is Alice!", event_id="e2"),
        said("My favourite city is Lisbon. My favourite city is Porto", event_id="e3"),
    ]
    answer = propose(turns, candidates)
    update, noop, favourite = check(
        answer, candidates, {"e1", "e2", "e3"}, Limits(32768, looks_like_secret)
    )
    assert (update.op, update.candidate.memory_id, update.content) == (
        "update",
        "m-1",
        "Lives in Lisbon",
    )
    assert update.key == "identity.home" and update.source_event_ids == ("e1",)
    assert noop.op == "noop"
    # Two statements of one key in a batch: the later is kept.
    assert (favourite.op, favourite.content) == ("add", "Favourite city: Porto")

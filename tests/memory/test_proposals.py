"""An extractor's proposed operations are checked whole: a good answer becomes typed
operations over the numbered candidates; any fault refuses all of it, naming what and
where, never the text."""

from __future__ import annotations

import pytest

from ctxadmin.credentials import looks_like_secret
from memory.proposals import (
    MAX_OPERATIONS,
    Candidate,
    Limits,
    ProposalError,
    check,
)

CANDIDATES = [
    Candidate(1, "m-1", "Prefers aisle seats", "preference.seat"),
    Candidate(2, "m-2", "Lives in Porto", None),
]
EVENTS = {"e1", "e2"}
LIMITS = Limits(max_content_bytes=200, looks_like_secret=looks_like_secret)


def op(kind: str, **fields):
    base = {"op": kind, "reason": "the user said so"}
    if kind != "noop":
        base["source_event_ids"] = ["e1"]
    return {**base, **fields}


def refused(answer) -> ProposalError:
    with pytest.raises(ProposalError) as error:
        check(answer, CANDIDATES, EVENTS, LIMITS)
    return error.value


def test_a_good_answer_becomes_operations_over_the_candidates():
    answer = {
        "operations": [
            op("update", candidate=1, content="Prefers window seats"),
            op("retire", candidate=2, source_event_ids=["e2", "e2"]),
            op("add", content="Lives in Lisbon", key="Identity.Home"),
            op("noop"),
        ]
    }
    update, retire, add, noop = check(answer, CANDIDATES, EVENTS, LIMITS)
    assert (update.op, update.candidate.memory_id, update.key) == (
        "update",
        "m-1",
        "preference.seat",
    )
    assert retire.candidate.memory_id == "m-2" and retire.source_event_ids == ("e2",)
    assert add.key == "identity.home" and add.candidate is None
    assert noop.op == "noop" and noop.source_event_ids == ()
    assert check({"operations": []}, CANDIDATES, EVENTS, LIMITS) == []


@pytest.mark.parametrize(
    ("answer", "code", "path"),
    [
        ([], "answer_invalid", "$"),
        ({"operations": [], "note": "x"}, "answer_invalid", "$"),
        ({"operations": "add"}, "operations_invalid", "operations"),
        ({"operations": [op("noop")] * (MAX_OPERATIONS + 1)}, "operations_invalid", "operations"),
        ({"operations": [{"op": "delete", "candidate": 1}]}, "operation_invalid", "operations[0]"),
        ({"operations": [op("add", content="x", extra=1)]}, "operation_fields", "operations[0]"),
        ({"operations": [op("retire")]}, "operation_fields", "operations[0]"),
        ({"operations": [op("add", content="   ")]}, "content_invalid", "operations[0].content"),
        (
            {"operations": [op("add", content="x" * 201)]},
            "content_invalid",
            "operations[0].content",
        ),
        ({"operations": [op("add", content="a\x00b")]}, "content_invalid", "operations[0].content"),
        (
            {"operations": [op("add", content="my api_key=sk-live-0123456789abcdefghijklmn")]},
            "content_sensitive",
            "operations[0].content",
        ),
        ({"operations": [op("add", content="x", key="a..b")]}, "key_invalid", "operations[0].key"),
        (
            {"operations": [op("retire", candidate=3)]},
            "candidate_unknown",
            "operations[0].candidate",
        ),
        (
            {"operations": [op("retire", candidate=True)]},
            "candidate_unknown",
            "operations[0].candidate",
        ),
        (
            {"operations": [op("retire", candidate="1")]},
            "candidate_unknown",
            "operations[0].candidate",
        ),
        ({"operations": [op("noop", reason="")]}, "reason_invalid", "operations[0].reason"),
        ({"operations": [op("noop", reason="r" * 301)]}, "reason_invalid", "operations[0].reason"),
        (
            {"operations": [op("add", content="x", source_event_ids=["e9"])]},
            "sources_invalid",
            "operations[0].source_event_ids",
        ),
        (
            {"operations": [op("add", content="x", source_event_ids=[])]},
            "sources_invalid",
            "operations[0].source_event_ids",
        ),
        (
            {"operations": [op("update", candidate=1, content="x", key="preference.meal")]},
            "key_changed",
            "operations[0].key",
        ),
        (
            {"operations": [op("retire", candidate=2), op("update", candidate=2, content="x")]},
            "candidate_twice",
            "operations[1].candidate",
        ),
        (
            {
                "operations": [
                    op("update", candidate=1, content="Prefers window seats"),
                    op("add", content="Prefers the aisle", key="preference.seat"),
                ]
            },
            "key_twice",
            "operations[1].key",
        ),
    ],
)
def test_a_fault_refuses_the_whole_answer(answer, code, path):
    error = refused(answer)
    assert (error.code, error.path) == (code, path)
    assert "sk-live" not in str(error)


def test_an_unkeyed_candidate_may_gain_a_key_and_a_retired_key_be_added_again():
    answer = {
        "operations": [
            op("update", candidate=2, content="Lives in Lisbon", key="identity.home"),
            op("retire", candidate=1),
            op("add", content="Prefers window seats", key="preference.seat"),
        ]
    }
    update, _retire, add = check(answer, CANDIDATES, EVENTS, LIMITS)
    assert update.key == "identity.home" and add.key == "preference.seat"

"""A context request that names only ``memory.query`` gets the best configuration measured
(bench/BENCHMARKS.md, evidence in context): hybrid search, the slot packed into what the
budget leaves, the best hits with their neighbours, and a ``limit`` that follows the budget,
as many hits as the slot could hold up to the search's maximum."""

from __future__ import annotations

import pytest
from django.conf import settings

from memory.inputs import MAX_SEARCH_LIMIT
from memory.render import MIN_PACKED_HIT_BYTES
from runner.inputs import default_limit, parse_context_request, parse_invocation_request
from sessions_app.context import envelope as env
from tests.runner.test_context_packing import MEMORIES, SESSION, recalled
from tests.sessions_helpers import sessions_url, text

QUESTION = {"role": "user", "parts": [{"text": "Which tram did we take in Lisbon?"}]}
# The benchmark's tuned request.
TUNED = {"mode": "hybrid", "limit": 100}


def request(budget_tokens: int, memory: dict) -> dict:
    return {
        "current_input": QUESTION,
        "policy": {"budgets": {"max_request_tokens": budget_tokens}, "overflow": "truncate"},
        "memory": {"query": "Which tram did we take in Lisbon?", **memory},
    }


def slot_room(parsed) -> int:
    """What the request budget leaves the slot before any history: the builder's room."""
    parts = env.fixed_parts(
        instructions=None, generation_config=None, tools=None, memory=[], current_input=QUESTION
    )
    limit = parsed.policy.request_byte_limit(settings.CTXADMIN_MAX_CONTEXT_BYTES)
    return limit - sum(env.fixed_sizes(parts).values())


@pytest.mark.parametrize("budget", [2048, 4096, 8192, 32000])
def test_the_query_alone_is_the_tuned_request_at_the_benchmark_s_budgets(budget):
    defaults = parse_context_request(request(budget, {}))
    tuned = parse_context_request(request(budget, TUNED))
    room = slot_room(defaults)
    assert defaults.memory.search_in(room) == tuned.memory.search_in(room)
    assert defaults.memory.search_in(room).mode == "hybrid"
    assert defaults.memory.search_in(room).limit == MAX_SEARCH_LIMIT
    for name in ("max_hit_bytes", "max_total_bytes", "on_error"):
        assert getattr(defaults.memory, name) == getattr(tuned.memory, name), name
    assert defaults.memory.max_total_bytes is None  # packed


def test_an_invocation_s_empty_memory_retrieval_takes_the_same_defaults():
    def invocation(memory: dict):
        return parse_invocation_request(
            {
                "invocation_id": "i1",
                "input": QUESTION,
                "agent": {"provider": "fake", "model": "fake-1"},
                "context_policy": {"budgets": {"max_request_tokens": 4096}},
                "memory_retrieval": memory,
            }
        ).context

    defaults, tuned = invocation({}), invocation(TUNED)
    room = slot_room(defaults)
    assert defaults.memory.search_in(room) == tuned.memory.search_in(room)
    assert defaults.memory.search_in(room).query == QUESTION["parts"][0]["text"]


def test_without_a_budget_the_limit_is_the_most():
    body = {"current_input": QUESTION, "memory": {"query": "tram"}}
    parsed = parse_context_request(body)
    assert parsed.memory.search_in(slot_room(parsed)).limit == MAX_SEARCH_LIMIT


def test_the_default_limit_follows_what_the_slot_could_hold():
    assert default_limit(0) == 1
    assert default_limit(MIN_PACKED_HIT_BYTES * 7 + MIN_PACKED_HIT_BYTES - 1) == 7
    assert default_limit(MIN_PACKED_HIT_BYTES * 40) == 40
    assert default_limit(10**9) == MAX_SEARCH_LIMIT
    parsed = parse_context_request(request(256, {}))
    small = parsed.memory.search_in(slot_room(parsed))
    assert small.limit == slot_room(parsed) // MIN_PACKED_HIT_BYTES < MAX_SEARCH_LIMIT


def test_a_limit_the_caller_gives_is_kept():
    parsed = parse_context_request(request(256, {"limit": 90}))
    assert parsed.memory.search_in(10).limit == 90
    capped = parse_context_request(request(8192, {"max_total_bytes": 700}))
    assert capped.memory.search_in(700).limit == 700 // MIN_PACKED_HIT_BYTES


@pytest.mark.django_db
class TestTheDefaultRequestPacksAsTheTunedOne:
    @pytest.fixture
    def api(self, owner):
        client = owner.client()
        created = client.post(sessions_url("acme"), {"session_id": "s"}, format="json")
        assert created.status_code == 201
        # 150 memories that all answer the question: more than any limit.
        events = [
            text(
                "user" if n % 2 == 0 else "tour",  # names of one length, too
                # One length for all (three-digit numbers): whichever of the tied memories
                # come, they pack alike.
                f"In Lisbon we took tram {n:03d} up the hill, stop {n:03d}.",
                event_id=f"t{n}",
                timestamp=f"2023-05-08T10:{n // 60:02d}:{n % 60:02d}Z",
            )
            for n in range(150)
        ]
        # Without a session: no hit has neighbours, so whichever of the tied memories rank
        # first (their order among equals is the database's), each packs alike.
        body = {"events": events}
        assert client.post(f"{MEMORIES}/events", body, format="json").status_code == 200
        return client

    @pytest.mark.parametrize("budget", [300, 700, 2048, 4096])
    def test_as_many_hits_as_the_tuned_request(self, api, budget):
        """(The memories tie on their scores, so which of them come may differ.)"""
        packed = []
        for memory in ({}, TUNED):
            result = api.post(f"{SESSION}/context", request(budget, memory), format="json")
            assert result.status_code == 200, result.content
            accounting = result.json()["accounting"]
            assert accounting["tokens"]["total"] <= budget
            assert accounting["memory_hits"] == len(recalled(result.json()))
            packed.append(accounting["memory_hits"])
        assert packed[0] == packed[1]
        # More than the five hits (with their neighbours) the old default asked for.
        if budget >= 2048:
            assert packed[0] > 20

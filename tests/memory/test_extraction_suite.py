"""The extraction evaluation runs offline in every test run: the rules extractor's figures
hold, a perfect scripted model scores 1.0, and malformed, truncated and hostile answers
change nothing (no operation applied, no wrong retirement)."""

from __future__ import annotations

import pytest

from bench import extraction_suite as suite


@pytest.fixture(scope="module")
def conversations():
    return suite.conversations()


def test_the_suite_covers_every_category_with_at_least_fifty_conversations(conversations):
    assert len(conversations) >= 50
    assert {c.category for c in conversations} == {
        "preference_change",
        "stated_once",
        "correction",
        "not_a_fact",
        "two_users",
        "dates",
        "beyond_rules",
    }
    assert len({c.name for c in conversations}) == len(conversations)


def test_the_rules_extractor_retires_nothing_wrongly_and_mixes_no_users(conversations):
    figures = suite.evaluate(suite.rules, conversations).figures()
    assert figures["wrong_retirements"] == 0
    assert figures["duplicates"] == 0 and figures["mixed"] == 0
    assert figures["refused_answers"] == 0  # its answers always pass the check
    # What bench/BENCHMARKS.md publishes (a rule change that loses some shows here).
    assert figures["precision"] >= 0.98 and figures["recall"] >= 0.93


def test_the_gold_s_own_answers_score_one(conversations):
    figures = suite.evaluate(suite.scripted(suite.gold_answers(conversations)), conversations)
    assert figures.figures()["precision"] == 1.0 and figures.figures()["recall"] == 1.0


def test_hostile_answers_are_refused_whole_and_change_nothing(conversations):
    score = suite.evaluate(suite.scripted(suite.hostile_answers(conversations)), conversations)
    assert score.refused == sum(len(c.sessions) for c in conversations)
    assert score.predicted == 0 and score.wrong_retirements == 0 and score.duplicates == 0


def test_a_model_retiring_what_the_gold_keeps_is_counted(conversations):
    # The scorer itself: a replay that retires the first memory of every second session.
    chosen = [c for c in conversations if c.category == "preference_change"]
    answers = {}
    for conv in chosen:
        first = conv.sessions[1].turns[0]["event_id"]
        answers[conv.name] = [
            suite.gold_answers([conv])[conv.name][0],
            {
                "operations": [
                    {"op": "retire", "candidate": 1, "reason": "x", "source_event_ids": [first]}
                ]
            },
        ]
    score = suite.evaluate(suite.scripted(answers), chosen)
    assert score.wrong_retirements == len(chosen)


def test_the_bench_asks_a_named_openai_compatible_endpoint_as_the_service_would(monkeypatch):
    import json

    from bench import extraction_bench
    from ctxadmin.testing.fake_providers import FakeProvider

    conversations = suite.conversations()
    replies = [
        json.dumps(answer)
        for conv in conversations
        for answer in suite.gold_answers(conversations)[conv.name]
    ]
    with FakeProvider("openai_compatible", api_key=None) as fake:
        fake.script(*(fake.success(reply, input_tokens=100, output_tokens=10) for reply in replies))
        monkeypatch.setenv("CTXADMIN_EVAL_OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("CTXADMIN_EVAL_OPENAI_MODEL", "eval-model")
        results = extraction_bench.measure()
        assert fake.problems == []
        first = fake.requests[0].json
    assert first["model"] == "eval-model" and first["temperature"] == 0.0
    assert first["messages"][0]["content"].startswith("You maintain the long-term memory")
    model = results["model"]
    assert model["score"].figures()["precision"] == 1.0
    assert model["score"].figures()["recall"] == 1.0
    assert model["usage"] == {
        "input_tokens": 100 * len(replies),
        "output_tokens": 10 * len(replies),
    }
    section = extraction_bench.report(results, "stamp")
    assert "`eval-model` (`extract.v1`)" in section and "skipped" not in section
    per_thousand = round(110 * len(replies) * 1000 / results["events"])
    assert f"({per_thousand:,} tokens per 1,000 events;" in section
